/* kernels/x86/amx_bf16.c: weight-only Q4 prefill (4w) on AMX-BF16 tiles, the avx512+amx variant's
 * Q4 matmul. Everything else of that variant, and the rows this file does not take, is
 * avx512_vbmi.c's.
 *
 * Exact products, not the twin's sums. An f32 activation is exactly the sum of three bf16 values
 * (split_x: its significand's top 8 bits, the next 8, the last 8), a Q4 value (-8..7, or 0..15 with
 * mins) is exact in bf16, and the product of a bf16 part and a value has at most 12 significant bits:
 * exact in f32. So three tdpbf16ps per group (one per part of x, the same weight tile) multiply every
 * activation by every weight exactly, as the FMA chains do. What differs is how the tile adds them:
 * its order and roundings are its own, which no C twin reproduces, so these rows' results differ
 * from kern_matmul_ref's (and from one token per call) in their last bits, within a bound tested
 * against the twin (test_kernels; docs/DESIGN.md, "AMX-BF16 for weight-only 4-bit"). kern_matmul_exact
 * says which calls take this path. */
#include "avx2.h"

#include "../kern_impl.h"

#define AB_ROWS 16   /* rows per A tile */
#define AB_CHUNK 64  /* rows whose split activations are kept at a time */
#define AB_BLOCK 256 /* k values of a panel widened to bf16 at a time (8 KiB) */

/* Whether this file takes the call's rows in multiples of 16: groups of whole 32-value tiles that fit a
 * block, and a k of whole groups. Mins (Q4_1, Q4_K) go to the FMA tiles: their sums of x per group
 * would need a fourth product. */
int kern_amx_q4_takes(const kern_mat *w, int n, int k) {
    return n >= AB_ROWS && !w->mins && w->group % 32 == 0 && w->group <= AB_BLOCK && k % w->group == 0;
}

/* x[rows, k] (row stride k) split into three bf16 planes, parts[p][r * k + kk] for p = 0, 1, 2: the
 * top 8 bits of the significand (truncated), then the next 8 of what is left, then the rest, which has
 * at most 8 bits left: the three sum to x exactly (for |x| above about 2^-110; below, the last part
 * would be an f32 subnormal, and the tile flushes those to zero anyway). */
static void split_x(uint16_t *parts, const float *x, int rows, int k) {
    size_t n = (size_t)rows * (size_t)k; /* a multiple of 16: k is one of 32 */
    const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
    for (size_t i = 0; i < n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), top));
        __m512 r1 = _mm512_sub_ps(v, hi);
        __m512 mid = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(r1), top));
        __m512 lo = _mm512_sub_ps(r1, mid);
        _mm256_storeu_si256((__m256i *)(void *)(parts + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(hi), 16)));
        _mm256_storeu_si256((__m256i *)(void *)(parts + n + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(mid), 16)));
        _mm256_storeu_si256((__m256i *)(void *)(parts + 2 * n + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(lo), 16)));
    }
}

/* Steps kb .. kb+len-1 (len a multiple of 32) of a Q4 panel as AMX-BF16 B tiles: row s of dst (64
 * bytes) holds pair step s, for each output j = 0..15 the values (j, kb + 2s) and (j, kb + 2s + 1) as
 * bf16, the stored nibble less off (8, or 0 with mins: exact). */
static void widen_bf16(uint16_t *dst, const uint8_t *q, int panel, int k, int kb, int len, float off) {
    uint16_t table[32];
    for (int u = 0; u < 32; u++) table[u] = kern_f32_to_bf16(u < 16 ? (float)u - off : 0.0f);
    __m512i tab = _mm512_loadu_si512(table);
    const __m128i low = _mm_set1_epi8(0x0F);
    const uint8_t *src = q + ((size_t)panel * (size_t)k + (size_t)kb) * 8; /* two steps: 16 bytes */
    for (int s = 0; s < len / 2; s++) {
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + (size_t)s * 16));
        __m128i t = _mm_unpacklo_epi8(b, _mm_srli_si128(b, 8)); /* byte j of both steps side by side */
        __m128i lo = _mm_and_si128(t, low), hi = _mm_and_si128(_mm_srli_epi16(t, 4), low); /* rows 0..7, 8..15 */
        __m512i idx = _mm512_cvtepu8_epi16(_mm256_set_m128i(hi, lo));
        _mm512_storeu_si512(dst + (size_t)s * 32, _mm512_permutexvar_epi16(idx, tab));
    }
}

/* Tiles 0 and 4: C, 16 rows x 16 f32; 1 and 5: B, 16 pair steps x 16 outputs; 2, 3 and 6, 7: A, 16
 * rows x 32 bf16 (two per set, so a part's load does not wait on the product before it). */
static void ab_config(void) {
    uint8_t c[64] __attribute__((aligned(64)));
    memset(c, 0, sizeof c);
    c[0] = 1;
    for (int t = 0; t < 8; t++) c[16 + 2 * t] = 64, c[48 + t] = AB_ROWS;
    __asm__ volatile("" : : "r"(c) : "memory"); /* amx.c's amx_config: ldtilecfg reads all 64 bytes */
    _tile_loadconfig(c);
}

/* Group G's products into tile C of the set (C, B, A, A2): each 32-value tile of the group times the
 * three parts of x. A macro: tile numbers are instruction immediates. */
#define AB_PRODUCTS(G, C, B, A, A2)                                                                                    \
    do {                                                                                                               \
        _tile_zero(C);                                                                                                 \
        for (int c = 0; c < group; c += 32) {                                                                          \
            size_t kk = (size_t)(G) * (size_t)group + (size_t)c;                                                       \
            _tile_loadd(B, wb + (kk - (size_t)kb) * 16, 64);                                                           \
            _tile_loadd(A, xp + kk, stride);                                                                           \
            _tile_dpbf16ps(C, A, B);                                                                                   \
            _tile_loadd(A2, xp + plane + kk, stride);                                                                  \
            _tile_dpbf16ps(C, A2, B);                                                                                  \
            _tile_loadd(A, xp + 2 * plane + kk, stride);                                                               \
            _tile_dpbf16ps(C, A, B);                                                                                   \
        }                                                                                                              \
    } while (0)

/* Group g's 16 x 16 sums (as stored) times its scales, added to the rows' outputs a[] by one FMA each. */
static INLINE void ab_join(const float *sums, const qscales *sc, int panel, int g, __m512 *a) {
    __m512 s = scales16_z(sc, panel, g);
    _Pragma("GCC unroll 16") for (int r = 0; r < AB_ROWS; r++) a[r] = _mm512_fmadd_ps(_mm512_load_ps(sums + r * 16), s, a[r]);
}

/* Sixteen rows (xp: their first part, row stride k; the other parts plane values on) over groups
 * g0 .. g1-1 of a block widened in wb from step kb, as a pipeline on the two sets of tiles (amx.c's
 * amx_tile_groups): group g + 1's products are issued before group g's sums are stored and joined. */
static void ab_tile_groups(float *y, int ldy, const uint16_t *xp, size_t plane, int k, const uint16_t *wb, int kb,
                           const qscales *sc, int group, int panel, int g0, int g1, int cols) {
    size_t stride = (size_t)k * 2;
    __mmask16 cm = cols_mask(cols);
    float sums[AB_ROWS * 16] __attribute__((aligned(64)));
    __m512 a[AB_ROWS];
    _Pragma("GCC unroll 16") for (int r = 0; r < AB_ROWS; r++)
        a[r] = g0 ? _mm512_maskz_loadu_ps(cm, y + (size_t)r * ldy) : _mm512_setzero_ps();
    AB_PRODUCTS(g0, 0, 1, 2, 3);
    for (int g = g0; g < g1; g += 2) { /* g's products are on set 0 */
        if (g + 1 < g1) AB_PRODUCTS(g + 1, 4, 5, 6, 7);
        _tile_stored(0, sums, 64);
        ab_join(sums, sc, panel, g, a);
        if (g + 1 == g1) break;
        if (g + 2 < g1) AB_PRODUCTS(g + 2, 0, 1, 2, 3);
        _tile_stored(4, sums, 64);
        ab_join(sums, sc, panel, g + 1, a);
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < AB_ROWS; r++) _mm512_mask_storeu_ps(y + (size_t)r * ldy, cm, a[r]);
}
#undef AB_PRODUCTS

/* y[r, ob..oe) for the rows in multiples of 16 on the tiles (kern_amx_q4_takes), the rest, and every
 * call it does not take, by avx512_vbmi.c's Q4 matmul. The split activations of AB_CHUNK rows live in
 * this thread's grown scratch (6 bytes per value: 1.2 MiB at k = 3072). */
void kern_amx_matmul_q4(float *y, int ldy, const float *x, const kern_mat *m, int n, int d, int k, int ob, int oe) {
    int tiled = kern_amx_q4_takes(m, n, k) ? n / AB_ROWS * AB_ROWS : 0;
    uint16_t *parts = NULL;
    uint16_t wb[AB_BLOCK * KERN_PANEL] __attribute__((aligned(64))); /* one panel's block, 8 KiB */
    if (tiled && !(parts = kern_scratch_grown((size_t)AB_CHUNK * (size_t)k * 3 * sizeof *parts))) tiled = 0;
    int n_groups = kern_q_groups(k, m->group), group = m->group, per = tiled ? AB_BLOCK / group : 1;
    qscales sc = qscales_of(m, 0, n_groups);
    float off = kern_q4_offset(m);
    if (tiled) ab_config();
    for (int c0 = 0; c0 < tiled; c0 += AB_CHUNK) {
        int cn = tiled - c0 < AB_CHUNK ? tiled - c0 : AB_CHUNK;
        size_t plane = (size_t)cn * (size_t)k;
        split_x(parts, x + (size_t)c0 * k, cn, k);
        for (int p0 = ob; p0 < oe; p0 += KERN_PANEL) {
            int panel = p0 / KERN_PANEL, cols = oe - p0 < KERN_PANEL ? oe - p0 : KERN_PANEL;
            for (int g0 = 0; g0 < n_groups; g0 += per) {
                int g1 = g0 + per < n_groups ? g0 + per : n_groups, kb = g0 * group;
                widen_bf16(wb, (const uint8_t *)m->w, panel, k, kb, (g1 - g0) * group, off);
                for (int r = 0; r < cn; r += AB_ROWS)
                    ab_tile_groups(y + (size_t)(c0 + r) * ldy + p0, ldy, parts + (size_t)r * k, plane, k, wb, kb, &sc,
                                   group, panel, g0, g1, cols);
            }
        }
    }
    if (tiled) _tile_release();
    if (tiled < n) kern_avx512_vbmi_matmul_q4(y + (size_t)tiled * ldy, ldy, x + (size_t)tiled * k, m, n - tiled, d, k, ob, oe);
}
