/* kernels/x86/avx2_int.c: integer dot products with int8 activations (I8, I4), AVX2: a pair step
 * of 16 rows widened to int16 and multiplied by vpmaddwd (I8), or I4's nibbles as bytes by
 * vpmaddubsw; decode streams four panels (i8_gemv4, i4_gemv4), prefill tiles rows x one panel over
 * blocks of I8 pair steps (I4's blocks are vnni.c's quad steps, for AVX2 in avx2_quads.c), the loop
 * over blocks serving every variant. Also the AVX2 activation quantizer. Equal to the twins bit for
 * bit. */
#include "avx2_int.h"

#include <math.h>
#include <stdlib.h>

/* ---- integer dot products (I8, I4): per pair step, 16 rows' pairs widened to two vectors of
 * int16; vpmaddwd with the input's pair gives each row's two products summed in int32. */

/* The 32 values of pair step `step` of a panel as int16: rows 0..7 in *lo, rows 8..15 in *hi. */
static INLINE void i_step(int type, const uint8_t *w, size_t step, __m256i *lo, __m256i *hi) {
    if (type == KERN_I8) {
        const __m128i *p = (const __m128i *)(w + step * 32);
        *lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(p));
        *hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(p + 1));
    } else {
        __m128i v = _mm_loadu_si128((const __m128i *)(w + step * 16)), m = _mm_set1_epi8(0x0F);
        __m256i eight = _mm256_set1_epi16(8);
        *lo = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(v, m)), eight);
        *hi = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), m)), eight);
    }
}



/* The decode GEMVs, I8 by vpmaddwd and I4 by vpmaddubsw, are out of line: inlined into matmul_i they
 * were left too few registers and reloaded pointers and constants from the stack in every step (on a
 * Zen 3, in cache: I4 1.12x, I8 1.15x faster out of line). */

/* One I8 row x four panels (decode): 8 int32 accumulators per group, the float terms in memory. */
static __attribute__((noinline)) void i8_gemv4(float *y, const kern_qx *x, const imat *m, int panel) {
    const int type = KERN_I8;
    const int32_t *xp = x->pairs;
    __m256 acc[8];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    size_t steps = (size_t)m->half, bytes = 32;
    for (int g = 0; g < m->n_groups; g++) {
        int b = g * m->group / 2, e = group_end_at(g, m->group, m->k) / 2;
        __m256i d[8];
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) d[i] = _mm256_setzero_si256();
        for (int st = b; st < e; st++) {
            __m256i xv = _mm256_set1_epi32(xp[st]);
            if (!(st & 1)) /* a line per two steps */
                _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
                    prefetch_weights(m->w + ((size_t)(panel + p) * steps + (size_t)st) * bytes, (size_t)st * bytes, steps * bytes);
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
                __m256i lo, hi;
                i_step(type, m->w, (size_t)(panel + p) * steps + (size_t)st, &lo, &hi);
                d[2 * p] = _mm256_add_epi32(d[2 * p], _mm256_madd_epi16(lo, xv));
                d[2 * p + 1] = _mm256_add_epi32(d[2 * p + 1], _mm256_madd_epi16(hi, xv));
            }
        }
        int32_t xs = m->mn.v ? i_xsum(x, m, 0, b, e) : 0;
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            i_join(m, panel + p, g, x, 0, d[2 * p], d[2 * p + 1], &acc[2 * p], &acc[2 * p + 1]);
            i_join_min(m, panel + p, g, x, 0, xs, &acc[2 * p], &acc[2 * p + 1]);
        }
    }
    __m256 s = _mm256_set1_ps(i_row_scale(x, 0));
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
        store_cols(y + 16 * p, _mm256_mul_ps(acc[2 * p], s), _mm256_mul_ps(acc[2 * p + 1], s), KERN_PANEL);
}

/* One I4 row x four panels (decode): as i8_gemv4, but two pair steps of a panel per 32-byte load:
 * lane 0 holds step s, lane 1 step s + 1, so one mask gives rows 0..7 of both steps and a shift and
 * a mask rows 8..15, each multiplied by vpmaddubsw against the two steps' x pairs (xv2, lane by lane).
 * Where i4_bytes broadcast one step to both lanes, this needs no broadcast and one shift per two
 * steps. Each int16 lane sums every other step of a block of I4_BLOCK (at most eight pairs'
 * products, 2 x 15 x 128 each: no overflow), and the block's two lanes are widened and added in
 * int32: integers, so the same sums as the twin in any order. An odd last step takes lane 0 alone
 * (lane 1 zero). */
#define I4_BLOCK 16
static INLINE void i4_two_steps(__m256i v, __m256i xv2, __m256i *lo, __m256i *hi) {
    const __m256i nib = _mm256_set1_epi8(0x0F);
    *lo = _mm256_add_epi16(*lo, _mm256_maddubs_epi16(_mm256_and_si256(v, nib), xv2));
    *hi = _mm256_add_epi16(*hi, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), nib), xv2));
}
/* 16 int16 sums (lane 0 and lane 1 of the same 8 rows) added into 8 int32 */
static INLINE __m256i i16_lanes_sum(__m256i a) {
    return _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(a)),
                            _mm256_cvtepi16_epi32(_mm256_extracti128_si256(a, 1)));
}
static __attribute__((noinline)) void i4_gemv4(float *y, const kern_qx *x, const imat *m, int panel) {
    __m256 acc[8];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    size_t steps = (size_t)m->half;
    const uint8_t *wp[4]; /* each panel's first pair step: 16 bytes a step */
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) wp[p] = m->w + (size_t)(panel + p) * steps * 16;
    /* xv2's lanes: lane 0 repeats the first pair of the two (bytes 0, 1), lane 1 the second (2, 3) */
    const __m256i spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                            2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    for (int g = 0; g < m->n_groups; g++) {
        int b = g * m->group / 2, e = group_end_at(g, m->group, m->k) / 2;
        __m256i d[8];
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) d[i] = _mm256_setzero_si256();
        for (int st = b; st < e; st += I4_BLOCK) {
            int end = st + I4_BLOCK < e ? st + I4_BLOCK : e;
            __m256i lo[4], hi[4];
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) lo[p] = hi[p] = _mm256_setzero_si256();
            int s2 = st;
            for (; s2 + 2 <= end; s2 += 2) {
                int32_t pair2;
                memcpy(&pair2, x->bytes + s2, sizeof pair2);
                __m256i xv2 = _mm256_shuffle_epi8(_mm256_set1_epi32(pair2), spread);
                if (!((s2 - b) & 3)) /* a line per four steps (from the group's start: b may be odd) */
                    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
                        prefetch_weights(wp[p] + (size_t)s2 * 16, (size_t)s2 * 16, steps * 16);
                _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
                    i4_two_steps(_mm256_loadu_si256((const __m256i *)(wp[p] + (size_t)s2 * 16)), xv2, &lo[p], &hi[p]);
            }
            if (s2 < end) { /* an odd last step */
                __m256i xv = _mm256_set1_epi16((short)x->bytes[s2]);
                _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
                    i4_two_steps(_mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(wp[p] + (size_t)s2 * 16))), xv,
                                 &lo[p], &hi[p]);
            }
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
                d[2 * p] = _mm256_add_epi32(d[2 * p], i16_lanes_sum(lo[p]));
                d[2 * p + 1] = _mm256_add_epi32(d[2 * p + 1], i16_lanes_sum(hi[p]));
            }
        }
        int32_t xs = i_xsum(x, m, 0, b, e);
        __m256i off = _mm256_set1_epi32(i_unit(KERN_I4, m, 0) * xs);
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            i_join(m, panel + p, g, x, 0, _mm256_sub_epi32(d[2 * p], off), _mm256_sub_epi32(d[2 * p + 1], off),
                   &acc[2 * p], &acc[2 * p + 1]);
            i_join_min(m, panel + p, g, x, 0, xs, &acc[2 * p], &acc[2 * p + 1]);
        }
    }
    __m256 s = _mm256_set1_ps(i_row_scale(x, 0));
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
        store_cols(y + 16 * p, _mm256_mul_ps(acc[2 * p], s), _mm256_mul_ps(acc[2 * p + 1], s), KERN_PANEL);
}

/* Adds to R rows' int32 sums (d0: rows 0..7 of the panel, d1: rows 8..15) the products of I8 pair
 * steps b .. e-1 held in blk from step sb as int16 pairs (i_step), by vpmaddwd. I4 runs vnni.c's quad
 * steps (avx2_quads.c). */
static INLINE void i_dots(const int16_t *blk, int sb, const kern_qx *x, int r0, const imat *m, int b, int e, int R,
                          __m256i *d0, __m256i *d1) {
    const int32_t *xp = x->pairs + (size_t)r0 * m->half;
    for (int st = b; st < e; st++) {
        const __m256i *w = (const __m256i *)(blk + (size_t)(st - sb) * 32);
        __m256i lo = _mm256_load_si256(w), hi = _mm256_load_si256(w + 1);
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
            __m256i xv = _mm256_set1_epi32(xp[(size_t)r * m->half + (size_t)st]);
            d0[r] = _mm256_add_epi32(d0[r], _mm256_madd_epi16(lo, xv));
            d1[r] = _mm256_add_epi32(d1[r], _mm256_madd_epi16(hi, xv));
        }
    }
}


/* R rows (1..5) x one panel over the I8 pair steps sb .. se-1 of one long group g (blk as i_dots
 * reads it); carry holds the rows' int32 sums between blocks (carry_load, carry_store); the group's
 * end as group_end (signed weights: no offset). */
static INLINE void i_tile(float *y, int ldy, const kern_qx *x, int r0, const int16_t *blk, int sb,
                               int se, const imat *m, int panel, int g, int R, int cols, int32_t *carry, int cont) {
    int ge = group_end_at(g, m->group, m->k) / 2;
    __m256i d0[6], d1[6];
    carry_load(carry, cont, R, d0, d1);
    i_dots(blk, sb, x, r0, m, sb, se, R, d0, d1);
    if (se < ge) carry_store(carry, R, d0, d1); /* the group goes on in the next block */
    else group_end(0, y, ldy, x, r0, m, panel, g, R, cols, d0, d1);
}

/* As i_tile for blocks of whole groups (g0 .. g1-1 from pair step sb, none cut by the block): the
 * rows' float sums stay in registers from group to group instead of going through y after every
 * group, which had cost about as much as a group's products. R rows: up to 3 (12 accumulators, two
 * weight vectors, one input). The same float operations in the same order as i_tile. */
static INLINE void i_tile_groups(float *y, int ldy, const kern_qx *x, int r0, const int16_t *blk, int sb,
                                      const imat *m, int panel, int g0, int g1, int R, int cols) {
    __m256 a0[3], a1[3];
    sums_load(y, ldy, g0, R, cols, a0, a1);
    for (int g = g0; g < g1; g++) {
        int b = g * m->group / 2, e = group_end_at(g, m->group, m->k) / 2;
        __m256i d0[3], d1[3];
        _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) d0[r] = d1[r] = _mm256_setzero_si256();
        i_dots(blk, sb, x, r0, m, b, e, R, d0, d1);
        _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) {
            i_join(m, panel, g, x, r0 + r, d0[r], d1[r], &a0[r], &a1[r]);
            i_join_min(m, panel, g, x, r0 + r, m->mn.v ? i_xsum(x, m, r0 + r, b, e) : 0, &a0[r], &a1[r]);
        }
    }
    sums_store(y, ldy, x, r0, g1 == m->n_groups, R, cols, a0, a1);
}

static INLINE void matmul_i(int type, kern_int_block_fn block, float *y, int ldy, const kern_qx *x, const kern_mat *km, int n,
                                 int k, int ob, int oe, const int32_t *goff, const float *xsum) {
    imat m = imat_of(km, k, goff, xsum);
    int n_groups = m.n_groups;
    size_t bytes = type == KERN_I8 ? 32 : 16;
    int p0 = ob;
    if (n == 1)
        for (; p0 + 4 * KERN_PANEL <= oe; p0 += 4 * KERN_PANEL) {
            if (type == KERN_I4) i4_gemv4(y + p0, x, &m, p0 / KERN_PANEL);
            else i8_gemv4(y + p0, x, &m, p0 / KERN_PANEL);
        }
    /* on a cache line: its quad steps are 64-byte rows, AMX's B tile rows and zmm loads */
    int16_t blk[I_BLOCK * 32] __attribute__((aligned(64)));
    int32_t carry[Q_ROWS * 16];
    int per = m.group / 2 <= I_BLOCK ? I_BLOCK / (m.group / 2) : 0; /* whole groups per block, or 0: long groups */
    for (; p0 < oe; p0 += KERN_PANEL) {
        int cols = oe - p0 < KERN_PANEL ? oe - p0 : KERN_PANEL, panel = p0 / KERN_PANEL;
        const uint8_t *wp = m.w + (size_t)panel * m.half * bytes;
        for (int r0 = 0; r0 < n; r0 += per ? n : Q_ROWS) { /* long groups: rows in blocks, sums carried */
            int rows = per ? n : (n - r0 < Q_ROWS ? n - r0 : Q_ROWS);
            for (int g0 = 0; g0 < n_groups; g0 += per ? per : 1) {
                int g1 = per ? (g0 + per < n_groups ? g0 + per : n_groups) : g0 + 1;
                int gs = g0 * m.group / 2, ge = (g1 * m.group < k ? g1 * m.group : k) / 2;
                for (int sb = gs; sb < ge; sb += I_BLOCK) {
                    int se = ge - sb < I_BLOCK ? ge : sb + I_BLOCK;
                    if (block) {
                        block(type, y + p0, ldy, x, wp, (uint8_t *)blk, sb, se, &m, panel, g0, g1, r0, rows, cols, carry, sb > gs);
                        continue;
                    }
                    for (int st = sb; st < se; st++) { /* I8 (I4 always comes with a block) */
                        __m256i lo, hi;
                        i_step(type, wp, (size_t)st, &lo, &hi);
                        _mm256_store_si256((__m256i *)(blk + (size_t)(st - sb) * 32), lo);
                        _mm256_store_si256((__m256i *)(blk + (size_t)(st - sb) * 32 + 16), hi);
                    }
                    int r = r0, end = r0 + rows, cont = sb > gs;
                    if (per) { /* whole groups: float sums in registers */
#define I_GROUPS(R) i_tile_groups(y + (size_t)r * ldy + p0, ldy, x, r, blk, sb, &m, panel, g0, g1, R, cols)
                        for (; r + 3 <= end; r += 3) I_GROUPS(3);
                        if (end - r == 2) I_GROUPS(2);
                        else if (end - r == 1) I_GROUPS(1);
#undef I_GROUPS
                        continue;
                    }
#define I_TILE(R) \
    i_tile(y + (size_t)r * ldy + p0, ldy, x, r, blk, sb, se, &m, panel, g0, R, cols, carry + (r - r0) * 16, cont)
                    for (; r + 5 <= end; r += 5) I_TILE(5);
                    switch (end - r) { /* the tail, with the row count known to the compiler */
                    case 4: I_TILE(4); break;
                    case 3: I_TILE(3); break;
                    case 2: I_TILE(2); break;
                    case 1: I_TILE(1); break;
                    }
#undef I_TILE
                }
            }
        }
    }
}

void kern_avx2_int_matmul(kern_int_block_fn block, float *y, int ldy, const kern_qx *x, const kern_mat *w, int n,
                          int k, int ob, int oe, const int32_t *goff, const float *xsum) {
    if (w->type == KERN_I8) matmul_i(KERN_I8, block, y, ldy, x, w, n, k, ob, oe, goff, xsum);
    else matmul_i(KERN_I4, block, y, ldy, x, w, n, k, ob, oe, goff, xsum);
}

void kern_int_matmul_offsets(kern_int_block_fn block, float *y, int ldy, const kern_qx *x, const kern_mat *w, int n,
                             int k, int ob, int oe, int first) {
    /* one row (decode) runs its GEMV; the few panels left over need no table. One allocation holds
     * both tables (int32 and float entries are the same size). */
    size_t cells = (size_t)n * (size_t)kern_q_groups(k, w->group);
    int32_t *goff = n > 1 ? malloc(cells * (w->mins ? 2 : 1) * sizeof *goff) : NULL;
    float *xsum = goff && w->mins ? (float *)(void *)(goff + cells) : NULL;
    if (goff) kern_group_offsets(goff, xsum, x, w, n, k, first);
    kern_avx2_int_matmul(block, y, ldy, x, w, n, k, ob, oe, goff, xsum);
    free(goff);
}

void kern_group_offsets(int32_t *goff, float *xsum, const kern_qx *x, const kern_mat *w, int n, int k, int first) {
    imat m = {.mn = {.v = w->mins}};
    int n_groups = kern_q_groups(k, w->group), half = k / 2, unit = i_unit(w->type, &m, 1);
    for (int r = xsum ? 0 : first; r < n; r++) {
        const int32_t *ps = x->psum + (size_t)r * (size_t)(half + 1);
        for (int g = 0; g < n_groups; g++) {
            int b = g * w->group / 2, e = group_end_at(g, w->group, k) / 2;
            if (r >= first) goff[(size_t)r * n_groups + g] = group_offset(unit, ps, b, e);
            if (xsum) xsum[(size_t)r * n_groups + g] = (float)(ps[e] - ps[b]);
        }
    }
}

void kern_avx2_matmul_i(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int ob, int oe) {
    (void)d;
    if (w->type == KERN_I4) kern_avx2_i4_matmul(y, ldy, x, w, n, k, ob, oe);
    else kern_avx2_int_matmul(NULL, y, ldy, x, w, n, k, ob, oe, NULL, NULL);
}

/* The activation quantizer in AVX2: the same values as the scalar one (roundf's halves away from
 * zero as truncation plus a step, NaN to the lowest value, max ignoring NaN). */
static inline float amax_avx2(const float *xr, int k) {
    __m256 m = _mm256_setzero_ps(), abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    int i = 0;
    for (; i + 8 <= k; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xr + i), abs), m); /* NaN: keeps m */
    /* the lanes' maximum in registers (m holds no NaN, and max is exact in any order) */
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float amax = _mm_cvtss_f32(h);
    for (; i < k; i++) amax = fabsf(xr[i]) > amax ? fabsf(xr[i]) : amax;
    return amax;
}

/* Eight values rounded as the scalar quantizer rounds them (roundf's halves away from zero as
 * truncation plus a step), shifted by the zero point and clamped, as int32. */
static INLINE __m256i q8_values(const float *xr, __m256 vi, __m256 vz, __m256 vlo) {
    const __m256 hi = _mm256_set1_ps(127.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)),
                 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 f = _mm256_mul_ps(_mm256_loadu_ps(xr), vi);
    __m256 t = _mm256_round_ps(f, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), d = _mm256_sub_ps(f, t);
    __m256 step = _mm256_and_ps(_mm256_cmp_ps(_mm256_and_ps(d, abs), half, _CMP_GE_OQ),
                                _mm256_or_ps(_mm256_and_ps(f, sign), one)); /* +-1 where |d| >= 0.5 */
    f = _mm256_add_ps(_mm256_add_ps(t, step), vz);
    return _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(f, vlo), hi)); /* max(NaN, lo) is lo */
}

/* Sixteen values at a time: the int16 pairs, the byte pairs and the prefix sums of pair sums (shifted
 * adds in each lane, then the low lane's total into the high one) stored straight from registers; the
 * running sum stays in a register (its last lane broadcast), not a scalar taken out of one, which
 * would put a lane extraction and a broadcast on the path from one step to the next. Integer sums,
 * so the same as the scalar ones. */
static inline int32_t values_avx2(int32_t *pr, uint16_t *pb, int32_t *ps, const float *xr, int len, float inv,
                                  int32_t zero, int32_t lo, int32_t start) {
    __m256 vi = _mm256_set1_ps(inv), vz = _mm256_set1_ps((float)zero), vlo = _mm256_set1_ps((float)lo);
    __m256i sum = _mm256_set1_epi32(start);
    int i = 0;
    for (; i + 16 <= len; i += 16) {
        __m256i q0 = q8_values(xr + i, vi, vz, vlo), q1 = q8_values(xr + i + 8, vi, vz, vlo);
        __m256i v16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8); /* 16 int16 in order */
        _mm256_storeu_si256((__m256i *)(pr + i / 2), v16);
        __m256i v8 = _mm256_permute4x64_epi64(_mm256_packs_epi16(v16, v16), 0xD8);
        _mm_storeu_si128((__m128i *)(pb + i / 2), _mm256_castsi256_si128(v8));
        __m256i s = _mm256_madd_epi16(v16, _mm256_set1_epi16(1)); /* the eight pair sums */
        s = _mm256_add_epi32(s, _mm256_slli_si256(s, 4));
        s = _mm256_add_epi32(s, _mm256_slli_si256(s, 8));
        __m256i low_total = _mm256_shuffle_epi32(s, 0xFF);
        s = _mm256_add_epi32(s, _mm256_permute2x128_si256(low_total, low_total, 0x08));
        s = _mm256_add_epi32(s, sum);
        _mm256_storeu_si256((__m256i *)(ps + i / 2 + 1), s);
        sum = _mm256_permutevar8x32_epi32(s, _mm256_set1_epi32(7));
    }
    return kern_values_ref(pr + i / 2, pb + i / 2, ps + i / 2, xr + i, len - i, inv, zero, lo,
                           _mm_cvtsi128_si32(_mm256_castsi256_si128(sum)));
}

/* F16C's conversions: the same roundings as kern_f32_to_f16's (to nearest, ties to even, subnormals
 * kept), in two instructions. */
static inline float f16_round_f16c(float s) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(s), _MM_FROUND_TO_NEAREST_INT)));
}

void kern_avx2_quantize_x(kern_qx *qx, const float *x, int n, int k, const float *stat) {
    kern_quantize_x_rows(qx, x, n, k, stat, amax_avx2, values_avx2, f16_round_f16c);
}
