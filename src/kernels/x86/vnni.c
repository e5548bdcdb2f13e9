/* kernels/x86/vnni.c: the integer-dot GEMM's blocks by vpdpbusd (AVX-VNNI, VEX-encoded on 256-bit
 * registers); the loop over blocks and the decode GEMV are avx2_int.c's. avx512_vnni.c compiles this
 * file again with VNNI_ZMM (AVX512-VNNI): v_dots on zmm registers, blocks of whole groups by
 * z_tile_groups, and decode by z_gemv. avx2_quads.c compiles it with V_MADDUBS for AVX2 without VNNI:
 * the same quad steps, I4 only, each vpdpbusd spelled as vpmaddubsw and vpmaddwd. */
#include "avx2_int.h"


/* ---- I8 and I4 by vpdpbusd (AVX-VNNI, where the CPU has it): four values along k of a row times
 * four int8 inputs summed into int32 by one instruction, no int16 stage. A block's pair steps are
 * regrouped two by two into quad steps of 64 bytes (rows 0..7's quads, then rows 8..15's), each
 * weight as an unsigned byte: I8's value + 128, I4's stored nibble (value + 8). The offset comes off
 * per group as 128 (I8) or 8 (I4) times the input's sum over the group, so the int32 sums are the
 * twin's exactly (int32 wraps, but the final sum fits). A group with an odd number of pairs ends
 * with a half quad, its other half zero. */

/* Pair step st of panel wp as unsigned bytes (the weights plus i_unit's offset), or with sgn as the
 * signed weights themselves (AMX's tdpbssd): rows 0..7's pairs in the low lane, 8..15's in the high. */
static INLINE __m256i v_pair(int type, const uint8_t *wp, int st, int sgn) {
    if (type == KERN_I4) {
        __m256i b = i4_bytes(wp + (size_t)st * 16);
        return sgn ? _mm256_sub_epi8(b, _mm256_set1_epi8(8)) : b;
    }
    __m256i w = _mm256_loadu_si256((const __m256i *)(wp + (size_t)st * 32));
    return sgn ? w : _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80));
}

/* Pair steps b .. e-1 of panel wp as quad steps at dst (64 bytes each), signed with sgn (v_pair). */
static INLINE void v_quads(int type, const uint8_t *wp, int b, int e, uint8_t *dst, int sgn) {
    for (int st = b; st < e; st += 2, dst += 64) {
        /* the panel's next block is read after this one's tiles: ask for it early (2 KiB ahead) */
        _mm_prefetch((const char *)wp + (size_t)st * (type == KERN_I4 ? 16 : 32) + 2048, _MM_HINT_T0);
        __m256i a = v_pair(type, wp, st, sgn), c = st + 1 < e ? v_pair(type, wp, st + 1, sgn) : _mm256_setzero_si256();
        __m256i lo = _mm256_unpacklo_epi16(a, c), hi = _mm256_unpackhi_epi16(a, c); /* rows 0-3|8-11, 4-7|12-15 */
        _mm256_store_si256((__m256i *)dst, _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_store_si256((__m256i *)(dst + 32), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
}

#ifdef VNNI_ZMM
/* As the ymm v_dots below with the EVEX vpdpbusd on zmm registers (AVX512-VNNI): a quad step's 64 bytes are one
 * register, rows 0..7 in its low half and 8..15 in its high half, so one instruction serves the 16
 * rows where the ymm form needs two. Each row's pair of ymm sums joins into one zmm for the loop. */
static INLINE void v_dots(const uint8_t *wq, const uint16_t *xb, size_t half, int b, int e, int R, __m256i *d0,
                          __m256i *d1) {
    __m512i d[6];
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) d[r] = _mm512_inserti64x4(_mm512_castsi256_si512(d0[r]), d1[r], 1);
    int st = b;
    for (; st + 2 <= e; st += 2, wq += 64) {
        __m512i w = _mm512_loadu_si512(wq);
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
            int32_t quad;
            memcpy(&quad, xb + (size_t)r * half + (size_t)st, sizeof quad);
            d[r] = _mm512_dpbusd_epi32(d[r], w, _mm512_set1_epi32(quad));
        }
    }
    if (st < e) { /* a half quad: the pair in the low half, zero weights in the high */
        __m512i w = _mm512_loadu_si512(wq);
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)
            d[r] = _mm512_dpbusd_epi32(d[r], w, _mm512_set1_epi32(xb[(size_t)r * half + (size_t)st]));
    }
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        d0[r] = _mm512_castsi512_si256(d[r]);
        d1[r] = _mm512_extracti64x4_epi64(d[r], 1);
    }
}
#elif defined(V_MADDUBS)
/* As the vpdpbusd v_dots below, for I4 on AVX2 without VNNI: vpmaddubsw multiplies a quad's nibbles
 * (0..15, unsigned) by the four input bytes (signed) and sums each pair in int16 (at most 2 * 15 *
 * 128 = 3,840), up to eight quad steps add in int16 (30,720 < 32,767), then vpmaddwd by ones sums
 * each row's two pairs into its int32 lane: what vpdpbusd gives. One broadcast of four input bytes
 * serves 64 products; the pair-step tiles of avx2_int.c broadcast two bytes for 32. I8's unsigned
 * bytes (value + 128) would overflow int16 here: I8 keeps avx2_int.c's tiles. */
static INLINE void v_dots(const uint8_t *wq, const uint16_t *xb, size_t half, int b, int e, int R, __m256i *d0,
                          __m256i *d1) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int st = b; st < e;) {
        int end = st + 16 < e ? st + 16 : e; /* eight quad steps (16 pair steps) in int16 */
        __m256i h0[6], h1[6];
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) h0[r] = h1[r] = _mm256_setzero_si256();
        for (; st + 2 <= end; st += 2, wq += 64) {
            __m256i w0 = _mm256_load_si256((const __m256i *)wq), w1 = _mm256_load_si256((const __m256i *)(wq + 32));
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
                int32_t quad;
                memcpy(&quad, xb + (size_t)r * half + (size_t)st, sizeof quad);
                __m256i xv = _mm256_set1_epi32(quad);
                h0[r] = _mm256_add_epi16(h0[r], _mm256_maddubs_epi16(w0, xv));
                h1[r] = _mm256_add_epi16(h1[r], _mm256_maddubs_epi16(w1, xv));
            }
        }
        if (st < end) { /* a half quad (the group's last pair): its high half zero */
            __m256i w0 = _mm256_load_si256((const __m256i *)wq), w1 = _mm256_load_si256((const __m256i *)(wq + 32));
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
                __m256i xv = _mm256_set1_epi32(xb[(size_t)r * half + (size_t)st]);
                h0[r] = _mm256_add_epi16(h0[r], _mm256_maddubs_epi16(w0, xv));
                h1[r] = _mm256_add_epi16(h1[r], _mm256_maddubs_epi16(w1, xv));
            }
            st++, wq += 64;
        }
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
            d0[r] = _mm256_add_epi32(d0[r], _mm256_madd_epi16(h0[r], ones));
            d1[r] = _mm256_add_epi32(d1[r], _mm256_madd_epi16(h1[r], ones));
        }
    }
}
#else
/* R rows' int32 sums (d0: rows 0..7 of the panel, d1: 8..15) over pair steps b .. e-1 of one group,
 * whose quads start at wq; xb is row 0's input bytes, half the pairs per row. */
static INLINE void v_dots(const uint8_t *wq, const uint16_t *xb, size_t half, int b, int e, int R, __m256i *d0,
                               __m256i *d1) {
    int st = b;
    for (; st + 2 <= e; st += 2, wq += 64) {
        __m256i w0 = _mm256_load_si256((const __m256i *)wq), w1 = _mm256_load_si256((const __m256i *)(wq + 32));
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
            int32_t quad;
            memcpy(&quad, xb + (size_t)r * half + (size_t)st, sizeof quad);
            __m256i xv = _mm256_set1_epi32(quad);
            d0[r] = _mm256_dpbusd_avx_epi32(d0[r], w0, xv);
            d1[r] = _mm256_dpbusd_avx_epi32(d1[r], w1, xv);
        }
    }
    if (st < e) { /* a half quad: the pair in the low half, zero weights in the high */
        __m256i w0 = _mm256_load_si256((const __m256i *)wq), w1 = _mm256_load_si256((const __m256i *)(wq + 32));
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
            __m256i xv = _mm256_set1_epi32(xb[(size_t)r * half + (size_t)st]);
            d0[r] = _mm256_dpbusd_avx_epi32(d0[r], w0, xv);
            d1[r] = _mm256_dpbusd_avx_epi32(d1[r], w1, xv);
        }
    }
}
#endif

/* As i_tile, over the quad steps in blk (v_quads) of one long group g. */
static INLINE void v_tile(int type, float *y, int ldy, const kern_qx *x, int r0, const uint8_t *blk, int sb, int se,
                               const imat *m, int panel, int g, int R, int cols, int32_t *carry, int cont) {
    int ge = group_end_at(g, m->group, m->k) / 2;
    __m256i d0[6], d1[6];
    carry_load(carry, cont, R, d0, d1);
    v_dots(blk, x->bytes + (size_t)r0 * m->half, (size_t)m->half, sb, se, R, d0, d1);
    if (se < ge) carry_store(carry, R, d0, d1); /* the group goes on in the next block */
    else group_end(i_unit(type, m, 1), y, ldy, x, r0, m, panel, g, R, cols, d0, d1);
}

/* As v_tile for blocks of whole groups (g0 .. g1-1, none cut by the block), R rows (1..3): the rows'
 * float sums stay in registers from group to group (4R accumulators with the int32 ones: 15 registers
 * at three rows) instead of going through y after every group, which cost as much as a group of 32
 * values' vpdpbusd. With the table m->goff the int32 sums start at minus each row's offset (one
 * broadcast from memory) instead of having it worked out from the prefix sums after the group, which
 * took a quarter of V_MADDUBS's tile time. The float operations and their order are v_tile's. */
static INLINE void v_tile_groups(int type, float *y, int ldy, const kern_qx *x, int r0, const uint8_t *blk,
                                      int slot, const imat *m, int panel, int g0, int g1, int R, int cols) {
    const uint16_t *xb = x->bytes + (size_t)r0 * m->half;
    __m256 a0[3], a1[3];
    sums_load(y, ldy, g0, R, cols, a0, a1);
    for (int g = g0; g < g1; g++) {
        int b = g * m->group / 2, e = group_end_at(g, m->group, m->k) / 2;
        __m256i d0[3], d1[3];
        if (m->goff) /* the sums start at minus the offset (int32 sums in any order are the same) */
            _Pragma("GCC unroll 3") for (int r = 0; r < R; r++)
                d0[r] = d1[r] = _mm256_set1_epi32(-m->goff[(size_t)(r0 + r) * (size_t)m->n_groups + (size_t)g]);
        else _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) d0[r] = d1[r] = _mm256_setzero_si256();
        v_dots(blk + (size_t)(g - g0) * (size_t)slot * 64, xb, (size_t)m->half, b, e, R, d0, d1);
        if (!m->goff) i_offset(i_unit(type, m, 1), x, r0, m, b, e, R, d0, d1);
        _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) {
            i_join(m, panel, g, x, r0 + r, d0[r], d1[r], &a0[r], &a1[r]);
            i_join_min(m, panel, g, x, r0 + r, m->mn.v ? i_xsum(x, m, r0 + r, b, e) : 0, &a0[r], &a1[r]);
        }
    }
    sums_store(y, ldy, x, r0, g1 == m->n_groups, R, cols, a0, a1);
}

#ifdef VNNI_ZMM
/* As v_tile_groups with every step on zmm registers, R rows (1..Z_ROWS): a row's 16 int32 sums and
 * its 16 float sums are one register each, so a tile of eight rows holds 16 accumulators and one quad
 * of weights serves eight vpdpbusd, each input quad a broadcast from memory. A row's int32 sums start
 * at minus its offset (m->goff) rather than subtracting it after: int32 sums in any order are the
 * same. The group's scales are loaded once for the tile, a partial panel is read and written through
 * a mask, and zp says whether any row has a zero point (static activations). The float operations
 * are v_tile_groups' in the same order: the same results. */
#define Z_ROWS 8
/* acc + the products of w's bytes with the four bytes at q broadcast (vpdpbusd with an embedded
 * broadcast). In assembly because GCC 12 copies the intrinsic's accumulator out and back around
 * every instruction (two register moves per vpdpbusd, a third of the loop's instructions). */
static INLINE __m512i dpbusd_bcast(__m512i acc, __m512i w, const void *q) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)q));
    return acc;
}
/* The end of group g for R rows whose int32 sums d[] are complete (the offset taken off): the
 * static zero points' term, the scale and, with mins, the mins times the rows' input sums over the
 * group (the table m->xsum: the zmm and AMX tiles run only with the tables), into the float sums
 * a[], in the twin's order. */
static INLINE void z_join(const kern_qx *x, int r0, const imat *m, int panel, int g, int R, int zp,
                          __m512i *d, __m512 *a) {
    __m512 s = scales16_z(&m->sc, panel, g);
    if (zp) {
        size_t si = ((size_t)panel * m->n_groups + (size_t)g) * KERN_PANEL;
        __m512i ws = _mm512_cvttps_epi32(_mm512_loadu_ps(m->wsum + si));
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)
            d[r] = _mm512_sub_epi32(d[r], _mm512_mullo_epi32(_mm512_set1_epi32(x->zero[r0 + r]), ws));
    }
    if (x->group) { /* each row's input scale of the group times the weights' scales */
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(d[r]), _mm512_mul_ps(s, _mm512_set1_ps(kern_qx_scale(x, m->group, r0 + r, g))), a[r]);
    } else _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r]), s, a[r]);
    if (m->mn.v) { /* + the mins times the rows' input sums over the group, as the twin */
        __m512 mn = scales16_z(&m->mn, panel, g);
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {
            __m512 mr = x->group ? _mm512_mul_ps(mn, _mm512_set1_ps(kern_qx_scale(x, m->group, r0 + r, g))) : mn;
            a[r] = _mm512_fmadd_ps(mr, _mm512_set1_ps(m->xsum[(size_t)(r0 + r) * m->n_groups + g]), a[r]);
        }
    }
}

/* The float sums of R rows to y (columns cm), times each row's input scale after the last group. */
static INLINE void z_store(float *y, int ldy, const kern_qx *x, int r0, int last, int R, __mmask16 cm, const __m512 *a) {
    _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)
        _mm512_mask_storeu_ps(y + (size_t)r * ldy, cm, last ? _mm512_mul_ps(a[r], _mm512_set1_ps(i_row_scale(x, r0 + r))) : a[r]);
}

static INLINE void z_tile_groups(float *y, int ldy, const kern_qx *x, int r0, const uint8_t *blk, int slot,
                                 const imat *m, int panel, int g0, int g1, int R, int cols, int zp) {
    const uint16_t *xb = x->bytes + (size_t)r0 * m->half, *xr[Z_ROWS]; /* each row's input bytes */
    const int32_t *goff = m->goff + (size_t)r0 * m->n_groups;
    size_t half = (size_t)m->half, ng = (size_t)m->n_groups;
    __mmask16 cm = cols >= KERN_PANEL ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1); /* cols >= 1 */
    __m512 a[Z_ROWS];
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) xr[r] = xb + (size_t)r * half;
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
        a[r] = g0 ? _mm512_maskz_loadu_ps(cm, y + (size_t)r * ldy) : _mm512_setzero_ps();
    for (int g = g0; g < g1; g++) {
        int e = group_end_at(g, m->group, m->k) / 2, st = g * m->group / 2;
        const uint8_t *wq = blk + (size_t)(g - g0) * (size_t)slot * 64;
        __m512i d[Z_ROWS];
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) d[r] = _mm512_set1_epi32(-goff[(size_t)r * ng + (size_t)g]);
        __m512i d2[Z_ROWS];
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) d2[r] = _mm512_setzero_si512();
        for (; st + 4 <= e; st += 4, wq += 128) {
            __m512i w = _mm512_loadu_si512(wq), w2 = _mm512_loadu_si512(wq + 64);
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
                d[r] = dpbusd_bcast(d[r], w, xr[r] + st);
                d2[r] = dpbusd_bcast(d2[r], w2, xr[r] + st + 2);
            }
        }
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) d[r] = _mm512_add_epi32(d[r], d2[r]);
        for (; st + 2 <= e; st += 2, wq += 64) {
            __m512i w = _mm512_loadu_si512(wq);
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) d[r] = dpbusd_bcast(d[r], w, xr[r] + st);
        }
        if (st < e) { /* a half quad: the pair in the low half of each row's quad, zero weights in the high */
            __m512i w = _mm512_loadu_si512(wq);
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
                d[r] = _mm512_dpbusd_epi32(d[r], w, _mm512_set1_epi32(xb[(size_t)r * half + (size_t)st]));
        }
        z_join(x, r0, m, panel, g, R, zp, d, a);
    }
    z_store(y, ldy, x, r0, g1 == m->n_groups, R, cm, a);
}

#ifdef VNNI_AMX
/* ---- AMX-INT8 (where the CPU has it and Linux grants the tile state: dispatch.c): sixteen rows of a
 * block of whole groups per tile. The quad steps v_quads writes are AMX's B layout as they stand (a
 * row of 64 bytes: four k values of each of 16 outputs, in order), and a row's input bytes are A's,
 * read in place with the row stride. tdpbssd (signed inputs, the weights written signed in the block,
 * amx_signed) or, for weights without an offset, tdpbsud sums a 16 x 16 tile of exact int32 dot
 * products over up to 64 k values; stored, each row's sums are z_tile_groups' int32 sums, and the
 * float operations after are z_join's: the same results. Groups must be whole quads and either fit
 * one tile (at most 64 values) or be made of whole tiles (amx_fits); anything else and the last rows
 * (fewer than 16) run z_tile_groups. Long groups (per channel) carry their tile's sums from block to
 * block (amx_tile_long). */
#define AMX_ROWS 16
static int amx_fits(const imat *m) {
    return m->k % m->group == 0 && m->group % 4 == 0 && (m->group <= 64 || m->group % 64 == 0);
}

/* Tiles 0: C, 16 rows x 16 int32; 1: A, 16 rows x kc input bytes; 2: B, kc / 4 quads x 64 bytes;
 * 3, 4, 5: a second C, A and B (amx_tile_groups' other set). Loaded by the thread that runs the
 * block (the configuration is per thread), released after it. */
static void amx_config(int kc) {
    /* bytes 0: palette 1; 16 + 2t: tile t's bytes per row (16 bits); 48 + t: its rows; the rest 0 */
    uint8_t c[64] __attribute__((aligned(64)));
    memset(c, 0, sizeof c);
    c[0] = 1;
    for (int t = 0; t < 6; t += 3) {
        c[16 + 2 * t] = 64, c[48 + t] = AMX_ROWS;
        c[18 + 2 * t] = (uint8_t)kc, c[49 + t] = AMX_ROWS;
        c[20 + 2 * t] = 64, c[50 + t] = (uint8_t)(kc / 4);
    }
    /* GCC 12 does not see ldtilecfg read all 64 bytes: it dropped part of the zeroing of a struct,
     * and the reserved bytes it left made ldtilecfg fault. */
    __asm__ volatile("" : : "r"(c) : "memory");
    _tile_loadconfig(c);
}

/* The weights' offset (i_unit's: 128 for I8, 8 for I4 without mins) put back on a block's quad bytes
 * that v_quads wrote signed, in place, for the zmm tiles of the last rows (vpdpbusd's weights are
 * unsigned). */
static void amx_unsign(uint8_t *blk, size_t bytes, int unit) {
    __m512i u = _mm512_set1_epi8((char)unit);
    for (size_t i = 0; i < bytes; i += 64) _mm512_storeu_si512(blk + i, _mm512_add_epi8(_mm512_loadu_si512(blk + i), u));
}

/* One tile product A x B into tile C: signed weights (the offset off the block) or unsigned (no
 * offset). A macro: tile numbers are instruction immediates. */
#define AMX_DOT(C, A, B, sgn)                                                                                          \
    do {                                                                                                               \
        if (sgn) _tile_dpbssd(C, A, B);                                                                                \
        else _tile_dpbsud(C, A, B);                                                                                    \
    } while (0)

/* Group g's int32 sums as the tile stored them (sums: 16 rows x 16; no offset in them: amx_signed),
 * joined into the rows' float sums a[] (z_join). */
static INLINE void amx_join(const int32_t *sums, const kern_qx *x, int r0, const imat *m, int panel, int g, int zp,
                            __m512 *a) {
    __m512i d[AMX_ROWS];
    _Pragma("GCC unroll 16") for (int r = 0; r < AMX_ROWS; r++) d[r] = _mm512_load_si512(sums + r * 16);
    z_join(x, r0, m, panel, g, AMX_ROWS, zp, d, a);
}

/* Group G's products (of block blk, from g0) into tile C of the set (C, A, B): tiles 0-2 or 3-5,
 * each set its own code (AMX_DOT). */
#define AMX_PRODUCTS(G, C, A, B)                                                                                       \
    do {                                                                                                               \
        const uint8_t *wq = blk + (size_t)((G) - g0) * (size_t)slot * 64;                                              \
        _tile_zero(C);                                                                                                 \
        for (int c = 0; c < m->group; c += kc) {                                                                       \
            _tile_loadd(A, xb + (size_t)(G) * m->group + c, stride);                                                   \
            _tile_loadd(B, wq + (size_t)c / 4 * 64, 64);                                                               \
            AMX_DOT(C, A, B, sgn);                                                                                     \
        }                                                                                                              \
    } while (0)

/* Sixteen rows over groups g0 .. g1-1 as a pipeline on the two sets of tiles: group g + 1's products
 * are issued before group g's sums are stored and joined, so the tile unit works on the next group
 * while the vector unit joins this one (tiles are not renamed: on one set, each group's loads waited
 * for the last group's store). The joins stay in group order: the same bits. */
static void amx_tile_groups(float *y, int ldy, const kern_qx *x, int r0, const uint8_t *blk, int slot,
                            const imat *m, int panel, int g0, int g1, int cols, int zp, int sgn) {
    const uint8_t *xb = (const uint8_t *)(x->bytes + (size_t)r0 * m->half); /* row r's k-th byte: xb[r * 2 half + k] */
    size_t stride = (size_t)m->half * 2;
    int kc = m->group < 64 ? m->group : 64;
    __mmask16 cm = cols_mask(cols);
    int32_t sums[AMX_ROWS * 16] __attribute__((aligned(64)));
    __m512 a[AMX_ROWS];
    _Pragma("GCC unroll 16") for (int r = 0; r < AMX_ROWS; r++)
        a[r] = g0 ? _mm512_maskz_loadu_ps(cm, y + (size_t)r * ldy) : _mm512_setzero_ps();
    AMX_PRODUCTS(g0, 0, 1, 2);
    for (int g = g0; g < g1; g += 2) { /* g's products are on set 0 */
        if (g + 1 < g1) AMX_PRODUCTS(g + 1, 3, 4, 5);
        _tile_stored(0, sums, 64);
        amx_join(sums, x, r0, m, panel, g, zp, a);
        if (g + 1 == g1) break;
        if (g + 2 < g1) AMX_PRODUCTS(g + 2, 0, 1, 2);
        _tile_stored(3, sums, 64);
        amx_join(sums, x, r0, m, panel, g + 1, zp, a);
    }
    z_store(y, ldy, x, r0, g1 == m->n_groups, AMX_ROWS, cm, a);
}
#undef AMX_PRODUCTS

/* A long group (longer than a block: per channel) on tiles needs every block to be whole tiles of
 * 64 values: the group's length a multiple of 64 (blocks hold 512 values). */
static int amx_long_fits(const imat *m) {
    return m->k % 64 == 0 && (m->group % 64 == 0 || m->group >= m->k);
}

/* As v_tile for sixteen rows on a tile: the int32 sums of pair steps sb .. se-1 of long group g go
 * on from carry (the same 16 x 16 int32 layout as carry_store's) and back to it, or at the group's
 * end are finished as amx_tile_groups finishes a group. */
static void amx_tile_long(float *y, int ldy, const kern_qx *x, int r0, const uint8_t *blk, int sb, int se,
                          const imat *m, int panel, int g, int cols, int32_t *carry, int cont, int zp, int sgn) {
    const uint8_t *xb = (const uint8_t *)(x->bytes + (size_t)r0 * m->half);
    size_t stride = (size_t)m->half * 2;
    if (cont) _tile_loadd(0, carry, 64);
    else _tile_zero(0);
    for (int c = 2 * sb; c < 2 * se; c += 64) {
        _tile_loadd(1, xb + c, stride);
        _tile_loadd(2, blk + (size_t)(c - 2 * sb) / 4 * 64, 64);
        AMX_DOT(0, 1, 2, sgn);
    }
    if (se < group_end_at(g, m->group, m->k) / 2) { /* the group goes on in the next block */
        _tile_stored(0, carry, 64);
        return;
    }
    int32_t sums[AMX_ROWS * 16] __attribute__((aligned(64)));
    _tile_stored(0, sums, 64);
    __mmask16 cm = cols_mask(cols);
    __m512 a[AMX_ROWS];
    _Pragma("GCC unroll 16") for (int r = 0; r < AMX_ROWS; r++)
        a[r] = g ? _mm512_maskz_loadu_ps(cm, y + (size_t)r * ldy) : _mm512_setzero_ps();
    amx_join(sums, x, r0, m, panel, g, zp, a);
    z_store(y, ldy, x, r0, g == m->n_groups - 1, AMX_ROWS, cm, a);
}

/* Whether v_block writes its quads signed: where sixteen rows or more of a block run on tiles and the
 * weights carry an offset. tdpbssd then multiplies the signed weights themselves, so the tiles' sums
 * come out as z_tile_groups' with the offset term already off, exactly, and no row's join subtracts
 * it (a quarter of that float work per group). Writing them so costs one byte subtraction in
 * v_quads; only a block whose last rows fall to the zmm tiles pays a pass to put the offset back. */
static int amx_signed(int type, const imat *m, int rows) {
    if (!m->goff || rows < AMX_ROWS || !i_unit(type, m, 1)) return 0;
    return m->group / 2 <= I_BLOCK ? amx_fits(m) : amx_long_fits(m);
}
#endif
#endif

/* One block of matmul_i by vpdpbusd: the pair steps sb .. se-1 of groups g0 .. g1-1 regrouped into
 * quads in blk (at most I_BLOCK / 2 quads of 64 bytes, plus one half quad per odd group: it fits the
 * int16 block's 16 KiB), then rows r0 .. r0+rows-1: three at a time over whole groups, six over a
 * long group. y points at the panel's column. */
static void v_block(int type, float *y, int ldy, const kern_qx *x, const uint8_t *wp, uint8_t *blk, int sb,
                         int se, const imat *m, int panel, int g0, int g1, int r0, int rows, int cols,
                         int32_t *carry, int cont) {
    int slot = (m->group / 2 + 1) / 2; /* quads per whole group */
    int sgn = 0;
#ifdef VNNI_AMX
    sgn = amx_signed(type, m, rows);
#endif
    for (int g = g0; g < g1; g++) {
        int gb = g * m->group / 2, ge = group_end_at(g, m->group, m->k) / 2;
        v_quads(type, wp, gb > sb ? gb : sb, ge < se ? ge : se, blk + (size_t)(g - g0) * (size_t)slot * 64, sgn);
    }
    int r = r0, end = r0 + rows;
    if (m->group / 2 <= I_BLOCK) { /* whole groups: float sums in registers, three rows at a time */
#ifdef VNNI_ZMM
        if (m->goff) { /* eight rows at a time on zmm */
#define Z_GROUPS(R, ZP) z_tile_groups(y + (size_t)r * ldy, ldy, x, r, blk, slot, m, panel, g0, g1, R, cols, ZP)
            int zp = 0;
            for (int i = r0; i < end; i++) zp |= x->zero[i];
#ifdef VNNI_AMX
            if (end - r >= AMX_ROWS && amx_fits(m)) {
                amx_config(m->group < 64 ? m->group : 64);
                for (; r + AMX_ROWS <= end; r += AMX_ROWS)
                    amx_tile_groups(y + (size_t)r * ldy, ldy, x, r, blk, slot, m, panel, g0, g1, cols, zp, sgn);
                _tile_release();
                if (sgn && r < end) amx_unsign(blk, (size_t)(g1 - g0) * (size_t)slot * 64, i_unit(type, m, 1));
            }
#endif
            for (; r + Z_ROWS <= end; r += Z_ROWS)
                if (zp) Z_GROUPS(Z_ROWS, 1);
                else Z_GROUPS(Z_ROWS, 0);
            switch (end - r) { /* the tail, with the row count known to the compiler */
            case 7: Z_GROUPS(7, zp); break;
            case 6: Z_GROUPS(6, zp); break;
            case 5: Z_GROUPS(5, zp); break;
            case 4: Z_GROUPS(4, zp); break;
            case 3: Z_GROUPS(3, zp); break;
            case 2: Z_GROUPS(2, zp); break;
            case 1: Z_GROUPS(1, zp); break;
            }
#undef Z_GROUPS
            return;
        }
#endif
#define V_GROUPS(R) v_tile_groups(type, y + (size_t)r * ldy, ldy, x, r, blk, slot, m, panel, g0, g1, R, cols)
        for (; r + 3 <= end; r += 3) V_GROUPS(3);
        if (end - r == 2) V_GROUPS(2);
        else if (end - r == 1) V_GROUPS(1);
#undef V_GROUPS
        return;
    }
#ifdef VNNI_AMX
    if (m->goff && end - r >= AMX_ROWS && amx_long_fits(m)) {
        int zp = 0;
        for (int i = r0; i < end; i++) zp |= x->zero[i];
        amx_config(64);
        for (; r + AMX_ROWS <= end; r += AMX_ROWS)
            amx_tile_long(y + (size_t)r * ldy, ldy, x, r, blk, sb, se, m, panel, g0, cols, carry + (r - r0) * 16, cont,
                          zp, sgn);
        _tile_release();
        if (sgn && r < end) amx_unsign(blk, (size_t)(se - sb) * 32, i_unit(type, m, 1)); /* (se - sb) / 2 quads */
    }
#endif
#define V_TILE(R) v_tile(type, y + (size_t)r * ldy, ldy, x, r, blk, sb, se, m, panel, g0, R, cols, carry + (r - r0) * 16, cont)
    for (; r + 6 <= end; r += 6) V_TILE(6);
    switch (end - r) { /* the tail, with the row count known to the compiler */
    case 5: V_TILE(5); break;
    case 4: V_TILE(4); break;
    case 3: V_TILE(3); break;
    case 2: V_TILE(2); break;
    case 1: V_TILE(1); break;
    }
#undef V_TILE
}


#ifdef VNNI_ZMM
/* ---- Decode (one row) by vpdpbusd on zmm: a quad step's 64 weight bytes formed in registers from
 * the two pair steps it spans (vpermq puts the bytes a 128-bit lane needs into it, vpshufb orders
 * them: row r's quad is its pair of step st, then of st + 1), no repacking through memory. The
 * lanes of the int32 sums are the panel's rows in order; the offsets, the int32 sums and the float
 * operations are the twin's. */

/* acc + w's bytes times x's, each 32-bit lane a dot of four (vpdpbusd; assembly, as dpbusd_bcast). */
static INLINE __m512i dpbusd_reg(__m512i acc, __m512i w, __m512i x) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
}

/* The quad step of pair steps st and st + 1 of panel wp as unsigned bytes (I8: value + 128; I4: the
 * stored nibble); half: st alone (its pair's inputs are the quad's low half, the high half's zero). */
static INLINE __m512i z_quad(int type, const uint8_t *wp, int st, int half) {
    const __m512i order = _mm512_set4_epi32(0x0F0E0706, 0x0D0C0504, 0x0B0A0302, 0x09080100); /* r's pair, then r's next */
    if (type == KERN_I4) { /* qwords: s0 rows 0-3, s0 rows 4-7, s1 rows 0-3, s1 rows 4-7 (nibbles: rows 8-15 high) */
        const uint8_t *p = wp + (size_t)st * 16;
        __m512i src = half ? _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)p))
                           : _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p));
        __m512i v = _mm512_shuffle_epi8(_mm512_permutexvar_epi64(_mm512_set_epi64(3, 1, 2, 0, 3, 1, 2, 0), src), order);
        return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0)), _mm512_set1_epi8(0x0F));
    }
    const uint8_t *p = wp + (size_t)st * 32; /* qwords 0-3: s0 (rows 0-3, 4-7, 8-11, 12-15), 4-7: s1 */
    __m512i src = half ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)p)) : _mm512_loadu_si512(p);
    __m512i v = _mm512_shuffle_epi8(_mm512_permutexvar_epi64(_mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0), src), order);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}

/* y[o] for the P panels (1..4) from panel p0 on: P streams of weights at a time, as i8_gemv4, two
 * int32 chains per panel; the last panel's cols outputs through a mask. */
static INLINE void z_gemv(int type, float *y, const kern_qx *x, const imat *m, int p0, int P, int cols) {
    const uint16_t *xb = x->bytes;
    int unit = i_unit(type, m, 1);
    size_t bytes = type == KERN_I8 ? 32 : 16, pstride = (size_t)m->half * bytes; /* one panel */
    const uint8_t *wp[4];
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int p = 0; p < P; p++) wp[p] = m->w + (size_t)(p0 + p) * pstride, acc[p] = _mm512_setzero_ps();
    for (int g = 0; g < m->n_groups; g++) {
        int b = g * m->group / 2, e = group_end_at(g, m->group, m->k) / 2, st = b;
        __m512i d[4], d2[4];
        _Pragma("GCC unroll 4") for (int p = 0; p < P; p++)
            d[p] = _mm512_set1_epi32(-group_offset(unit, x->psum, b, e)), d2[p] = _mm512_setzero_si512();
        for (; st + 4 <= e; st += 4) {
            int32_t q0, q1;
            memcpy(&q0, xb + st, sizeof q0);
            memcpy(&q1, xb + st + 2, sizeof q1);
            __m512i x0 = _mm512_set1_epi32(q0), x1 = _mm512_set1_epi32(q1);
            _Pragma("GCC unroll 4") for (int p = 0; p < P; p++) {
                _Pragma("GCC unroll 2") for (size_t l = 0; l < 4 * bytes; l += 64) /* I8: two lines, I4: one */
                    prefetch_weights(wp[p] + (size_t)st * bytes + l, (size_t)st * bytes + l, pstride);
                d[p] = dpbusd_reg(d[p], z_quad(type, wp[p], st, 0), x0);
                d2[p] = dpbusd_reg(d2[p], z_quad(type, wp[p], st + 2, 0), x1);
            }
        }
        if (st + 2 <= e) {
            int32_t q0;
            memcpy(&q0, xb + st, sizeof q0);
            _Pragma("GCC unroll 4") for (int p = 0; p < P; p++) d[p] = dpbusd_reg(d[p], z_quad(type, wp[p], st, 0), _mm512_set1_epi32(q0));
            st += 2;
        }
        if (st < e) /* a half quad: the pair's inputs in the low half, zero in the high */
            _Pragma("GCC unroll 4") for (int p = 0; p < P; p++)
                d[p] = dpbusd_reg(d[p], z_quad(type, wp[p], st, 1), _mm512_set1_epi32(xb[st]));
        _Pragma("GCC unroll 4") for (int p = 0; p < P; p++) {
            __m512 sc = scales16_z(&m->sc, p0 + p, g);
            __m512i t = _mm512_add_epi32(d[p], d2[p]);
            if (x->zero[0]) {
                size_t si = ((size_t)(p0 + p) * m->n_groups + (size_t)g) * KERN_PANEL;
                t = _mm512_sub_epi32(t, _mm512_mullo_epi32(_mm512_set1_epi32(x->zero[0]), _mm512_cvttps_epi32(_mm512_loadu_ps(m->wsum + si))));
            }
            __m512 xg = _mm512_set1_ps(x->group ? kern_qx_scale(x, m->group, 0, g) : 1.0f);
            if (x->group) sc = _mm512_mul_ps(sc, xg);
            acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), sc, acc[p]);
            if (m->mn.v) {
                __m512 mn = scales16_z(&m->mn, p0 + p, g);
                if (x->group) mn = _mm512_mul_ps(mn, xg);
                acc[p] = _mm512_fmadd_ps(mn, _mm512_set1_ps((float)i_xsum(x, m, 0, b, e)), acc[p]);
            }
        }
    }
    __m512 xs = _mm512_set1_ps(i_row_scale(x, 0));
    _Pragma("GCC unroll 4") for (int p = 0; p < P; p++) {
        _mm512_mask_storeu_ps(y + (size_t)p * KERN_PANEL, cols_mask(p < P - 1 ? KERN_PANEL : cols), _mm512_mul_ps(acc[p], xs));
    }
}

#ifdef VNNI_AMX
void kern_amx_matmul_i(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int ob, int oe) {
#else
void kern_avx512_vnni_matmul_i(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int ob, int oe) {
#endif
    (void)d;
    if (n == 1) {
        imat m = imat_of(w, k, NULL, NULL);
        for (int p0 = ob; p0 < oe; p0 += 4 * KERN_PANEL) {
            int rest = oe - p0, P = (rest + KERN_PANEL - 1) / KERN_PANEL, cols = rest - (P - 1) * KERN_PANEL;
            if (P > 4) P = 4, cols = KERN_PANEL;
#define Z_GEMV(P) (w->type == KERN_I8 ? z_gemv(KERN_I8, y + p0, x, &m, p0 / KERN_PANEL, P, cols) : z_gemv(KERN_I4, y + p0, x, &m, p0 / KERN_PANEL, P, cols))
            switch (P) {
            case 4: Z_GEMV(4); break;
            case 3: Z_GEMV(3); break;
            case 2: Z_GEMV(2); break;
            default: Z_GEMV(1); break;
            }
#undef Z_GEMV
        }
        return;
    }
#ifdef VNNI_AMX
    /* the rows that run on tiles (v_block: sixteen at a time from row 0, whole groups or long ones
     * alike, where the groups fit them) read no offsets (amx_signed; or none to read, with mins) */
    _Static_assert(Q_ROWS % AMX_ROWS == 0, "long groups' blocks of rows start on a tile");
    imat m = imat_of(w, k, NULL, NULL);
    int tiled = (m.group / 2 <= I_BLOCK ? amx_fits(&m) : amx_long_fits(&m)) ? n - n % AMX_ROWS : 0;
    kern_int_matmul_offsets(v_block, y, ldy, x, w, n, k, ob, oe, tiled);
#else
    kern_int_matmul_offsets(v_block, y, ldy, x, w, n, k, ob, oe, 0);
#endif
}
#elif defined(V_MADDUBS)
void kern_avx2_i4_matmul(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int k, int ob, int oe) {
    kern_int_matmul_offsets(v_block, y, ldy, x, w, n, k, ob, oe, 0);
}
#else
void kern_vnni_matmul_i(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int ob, int oe) {
    (void)d;
    kern_int_matmul_offsets(v_block, y, ldy, x, w, n, k, ob, oe, 0); /* decode keeps the AVX2 GEMV (its tail panels: v_block) */
}
#endif
