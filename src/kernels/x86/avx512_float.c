/* kernels/x86/avx512_float.c: prefill's matmul with f32 activations, AVX-512F: a 16-row panel is
 * one zmm register. f32, f16 or bf16 weights: tiles of up to 6 rows x 4 panels (24 accumulators)
 * over blocks widened to f32 in L1, or x 2 panels widening in registers below 16 rows; every output
 * is one FMA chain over k in order, as in the AVX2 kernel and the twin. Weight-only Q8
 * and Q4: avx2_float.c's blocks widened to f32, multiplied here by tiles of up to 6 rows x 2 panels
 * (whole groups) or 12 rows (long groups, as 8w's one per row) with the same float operations in the
 * same order, and their decode by a GEMV on zmm (zq_gemv4; with VBMI, avx512_vbmi.c compiles this
 * part again with zq4_steps8). Both equal the twin bit for bit; decode
 * with f32, f16 or bf16 weights goes to the AVX2 GEMVs. */
#include "avx2.h"

#ifndef ZQ_VBMI /* avx512_vbmi.c compiles the weight-only Q8/Q4 part again, with VBMI's decode steps */
static INLINE __m512 load16_f32(const void *w, size_t i) { return _mm512_loadu_ps((const float *)w + i); }
static INLINE __m512 load16_f16(const void *w, size_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)w + i)));
}
static INLINE __m512 load16_bf16(const void *w, size_t i) {
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)w + i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

#define WIDEN_STEPS 128 /* steps per block of four widened panels (32 KiB of f32, in L1) */
#define WIDEN_ROWS 16   /* below this many rows the tiles widen in registers */

/* tile: R rows (1..6) x P panels (1..4): R*P accumulators, from zero or (acc) from y; per kk P weight
 * loads, R broadcasts (m[p]: panel p's columns). */
#define DEFINE_TILES(T, PMAX)                                                                                     \
    static INLINE void tile_##T(float *y, int ldy, const float *x, int ldx, int k, const void *w, size_t off,     \
                                size_t stride, int R, int P, const __mmask16 *m, int acc) {                       \
        __m512 a[6][4], wv[4];                                                                                    \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)                                                       \
            _Pragma("GCC unroll 4") for (int p = 0; p < P; p++)                                                   \
                a[r][p] = acc ? _mm512_maskz_loadu_ps(m[p], y + (size_t)r * ldy + 16 * p) : _mm512_setzero_ps();  \
        for (int kk = 0; kk < k; kk++) {                                                                          \
            _Pragma("GCC unroll 4") for (int p = 0; p < P; p++)                                                   \
                wv[p] = load16_##T(w, off + (size_t)p * stride + (size_t)kk * 16);                                \
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                                 \
                __m512 xb = _mm512_set1_ps(x[(size_t)r * ldx + kk]);                                              \
                _Pragma("GCC unroll 4") for (int p = 0; p < P; p++) a[r][p] = _mm512_fmadd_ps(xb, wv[p], a[r][p]); \
            }                                                                                                     \
        }                                                                                                         \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)                                                       \
            _Pragma("GCC unroll 4") for (int p = 0; p < P; p++)                                                   \
                _mm512_mask_storeu_ps(y + (size_t)r * ldy + 16 * p, m[p], a[r][p]);                               \
    }                                                                                                             \
    /* All n rows (stride ldx) over k steps against P panels (1..PMAX), six rows at a time, the row and           \
     * panel counts known to the compiler in every call. */                                                       \
    static void tiles_##T(float *y, int ldy, const float *x, int ldx, int n, int k, const void *w, size_t off,    \
                          size_t stride, int P, const __mmask16 *m, int acc) {                                    \
        int r = 0;                                                                                                \
        for (; r < n; r += 6) {                                                                                   \
            float *yr = y + (size_t)r * ldy;                                                                      \
            const float *xr = x + (size_t)r * ldx;                                                                \
            switch ((n - r < 6 ? n - r : 6) * 4 + P - 1) {                                                        \
            TILE_CASES(T, PMAX, 6) TILE_CASES(T, PMAX, 5) TILE_CASES(T, PMAX, 4)                                  \
            TILE_CASES(T, PMAX, 3) TILE_CASES(T, PMAX, 2) TILE_CASES(T, PMAX, 1)                                  \
            }                                                                                                     \
        }                                                                                                         \
    }                                                                                                             \
    /* the steps [kb, kb + len) of P panels widened to f32: blk[P][steps][16] */                                  \
    static __attribute__((unused)) void widen_##T(float *blk, int steps, const void *w, size_t off, size_t stride, \
                                                  int P, int kb, int len) {                                       \
        for (int p = 0; p < P; p++)                                                                               \
            for (int kk = 0; kk < len; kk++)                                                                      \
                _mm512_store_ps(blk + ((size_t)p * steps + (size_t)kk) * KERN_PANEL,                              \
                                load16_##T(w, off + (size_t)p * stride + (size_t)(kb + kk) * KERN_PANEL));        \
    }
/* the cases of R rows and 1..PMAX panels (a case for more panels than PMAX is left out) */
#define TILE_CASE(T, PMAX, R, P)                                                                                  \
    case R * 4 + P - 1:                                                                                           \
        if (P <= PMAX) tile_##T(yr, ldy, xr, ldx, k, w, off, stride, R, P, m, acc);                               \
        break;
#define TILE_CASES(T, PMAX, R)                                                                                    \
    TILE_CASE(T, PMAX, R, 1) TILE_CASE(T, PMAX, R, 2) TILE_CASE(T, PMAX, R, 3) TILE_CASE(T, PMAX, R, 4)

DEFINE_TILES(f32, 4)
DEFINE_TILES(f16, 2)
DEFINE_TILES(bf16, 2)

/* Prefill from WIDEN_ROWS rows on: up to four panels at a time (24 accumulators: four weight loads
 * and six broadcasts per 24 FMAs, where two panels took two and six per 12), in blocks of
 * 4 * WIDEN_STEPS / P steps of the P panels (32 KiB of f32, which stay in L1 while the tiles run every
 * row over them; whole panels, k deep, came from L2 and ran the tiles a tenth slower). f16 and bf16
 * are widened to f32 once per block (blk); f32 is read where it is (widen NULL). Each output's sum
 * is carried in y from block to block (stored and loaded as the f32 it is, so every output is still
 * one FMA chain over k in order). Widening in the tiles instead converts every weight once per six
 * rows: one conversion per six FMAs, which a 512-bit conversion on 256-bit pipes (Zen 4) makes cost
 * about a seventh.
 * The weights of the next block (the next panels' first after the last) are fetched into L2 a few
 * lines per tile while the tiles run: read when its turn came, a block's first touch of memory
 * stalled the widening (an eighth of f16 prefill's time on an Intel Xeon). es: bytes per weight. */
static void blocked(void (*widen)(float *, int, const void *, size_t, size_t, int, int, int), size_t es, float *blk,
                    float *y, int ldy, const float *x, int n, int k, const void *w, size_t off, size_t stride, int P,
                    const __mmask16 *m) {
    const int tiles = (n + 5) / 6, steps = 4 * WIDEN_STEPS / P;
    for (int kb = 0; kb < k; kb += steps) {
        int len = k - kb < steps ? k - kb : steps;
        size_t next = kb + len < k ? off + (size_t)(kb + len) * KERN_PANEL : off + (size_t)P * stride;
        int next_len = kb + len < k ? (k - kb - len < steps ? k - kb - len : steps) : steps;
        size_t lines = (size_t)next_len * KERN_PANEL * es / 64, per_tile = (lines + tiles - 1) / tiles;
        if (widen) widen(blk, steps, w, off, stride, P, kb, len);
        const float *wb = widen ? blk : w;
        size_t wo = widen ? 0 : off + (size_t)kb * KERN_PANEL, ws = widen ? (size_t)steps * KERN_PANEL : stride;
        size_t line = 0;
        for (int r = 0; r < n; r += 6) {
            int rows = n - r < 12 ? n - r : 6; /* the last tile takes the tail's rows */
            tiles_f32(y + (size_t)r * ldy, ldy, x + (size_t)r * k + kb, k, rows, len, wb, wo, ws, P, m, kb > 0);
            for (size_t e = line + per_tile; line < e && line < lines; line++)
                for (int p = 0; p < P; p++)
                    _mm_prefetch((const char *)w + (next + (size_t)p * stride) * es + line * 64, _MM_HINT_T1);
            if (rows > 6) break;
        }
    }
}

_Static_assert(4 * WIDEN_STEPS * KERN_PANEL * sizeof(float) <= KERN_SCRATCH_BYTES, "the scratch holds a block");

#define X_BLOCK_BYTES (512 * 1024)
/* Rows per block of x: every panel runs over one block of rows before the next block, so the block
 * (at most X_BLOCK_BYTES, a quarter of a 2 MiB L2) is read from L2 by every panel, not from L3.
 * Blocks of equal size, multiples of six rows (a tile). */
static int x_rows_per_block(int n, int k) {
    size_t bytes = (size_t)n * k * sizeof(float);
    int blocks = (int)((bytes + X_BLOCK_BYTES - 1) / X_BLOCK_BYTES), rb = (n + blocks - 1) / blocks;
    return (rb + 5) / 6 * 6;
}

#define DEFINE_MATMUL(T, WIDEN, ES)                                                                                   \
    void kern_avx512_matmul_##T(float *y, int ldy, const float *x, const kern_mat *m, int n, int d, int k, int ob,  \
                                int oe) {                                                                         \
        (void)d;                                                                                                  \
        const void *w = m->w;                                                                                     \
        size_t stride = (size_t)k * KERN_PANEL; /* one panel */                                                   \
        if (n == 1) { /* decode: the AVX2 GEMV, which streams the weights faster than a 512-bit one did */        \
            kern_avx2_matmul_##T(y, ldy, x, m, n, d, k, ob, oe);                                                  \
            return;                                                                                               \
        }                                                                                                         \
        /* the widened blocks (32 KiB) in this thread's scratch, not on its stack; without it, in the tiles */   \
        float *blk = WIDEN && n >= WIDEN_ROWS ? kern_scratch() : NULL;                                            \
        int wide = n >= WIDEN_ROWS && (blk || !WIDEN); /* four panels at a time over blocks */                   \
        int rb = x_rows_per_block(n, k);                                                                          \
        for (int r0 = 0; r0 < n; r0 += rb) {                                                                      \
            int nr = n - r0 < rb ? n - r0 : rb;                                                                   \
            const float *xr = x + (size_t)r0 * k;                                                                 \
            float *yr = y + (size_t)r0 * ldy;                                                                     \
            for (int p0 = ob; p0 < oe;) {                                                                         \
                int left = oe - p0, most = wide ? 4 : 2, P = (left + KERN_PANEL - 1) / KERN_PANEL;               \
                P = P < most ? P : most;                                                                          \
                __mmask16 mk[4];                                                                                  \
                for (int p = 0; p < 4; p++) mk[p] = cols_mask(left - p * KERN_PANEL);                            \
                size_t off = (size_t)(p0 / KERN_PANEL) * stride;                                                  \
                if (wide) blocked(WIDEN ? widen_##T : NULL, ES, blk, yr + p0, ldy, xr, nr, k, w, off, stride, P, mk); \
                else tiles_##T(yr + p0, ldy, xr, k, nr, k, w, off, stride, P, mk, 0);                             \
                p0 += P * KERN_PANEL;                                                                             \
            }                                                                                                     \
        }                                                                                                         \
    }

DEFINE_MATMUL(f32, 0, 4)
DEFINE_MATMUL(f16, 1, 2)
DEFINE_MATMUL(bf16, 1, 2)
#endif

/* Q4's correction of a group's sums (avx2_float.c's q4_fix_pair on one register): rows 8..15 summed
 * x times whole bytes, less rows 0..7's sums (their nibbles), then one FMA: rows 0..7 times 1, rows
 * 8..15 times 1/16, each less off (8, or 0 with mins) times the group's sum of x. */
static INLINE __m512 q4_fix16(__m512 p, float xs, float off) {
    __m512 swapped = _mm512_shuffle_f32x4(p, p, _MM_SHUFFLE(1, 0, 3, 2)); /* rows 0..7's sums under rows 8..15's */
    __m512 t = _mm512_mask_sub_ps(p, (__mmask16)0xFF00, p, swapped);
    __m512 times = _mm512_mask_blend_ps((__mmask16)0xFF00, _mm512_set1_ps(1.0f), _mm512_set1_ps(0.0625f));
    return _mm512_fmadd_ps(t, times, _mm512_set1_ps(-off * xs));
}

/* (a, b) -> (a's low half, b's low half), (a's high half, b's high half): two panels' 16 rows each
 * to rows 0..7 of both and rows 8..15 of both, and back. */
static INLINE void pair_halves(__m512 *a, __m512 *b) {
    __m512 first = *a;
    *a = _mm512_shuffle_f32x4(first, *b, _MM_SHUFFLE(1, 0, 1, 0));
    *b = _mm512_shuffle_f32x4(first, *b, _MM_SHUFFLE(3, 2, 3, 2));
}

/* R rows (1..6) x P panels (1..2) over whole groups g0 .. g1-1 widened in blk: a row's group sums and
 * its output sums one register each per panel (24 accumulators at six rows and two panels), P weight
 * loads and R broadcasts per step for 2R FMAs. Every output takes the twin's operations in its order.
 * Q4 over two panels (`paired`): blk holds the panels paired (kern_q_tiles_fn), so p0 gets the
 * nibble sums of rows 0..7 of both panels and p1 the whole-byte sums of rows 8..15 of both, and
 * q4_fix16's operations run lane against lane: one subtract per two registers where a register per
 * panel needed a shuffle and a masked subtract each. The output sums are paired at the start and put
 * back in row order at the end (two shuffles per row each). */
static INLINE void zq_tile(int type, float *y, int ldy, const float *x, int ldx, const float *blk, int kb,
                           const qmat *m, int panel, int g0, int g1, int R, int P, __mmask16 cm0, __mmask16 cm1,
                           const float *xsum) {
    const int paired = type == KERN_Q4 && P > 1;
    __m512 a0[6], a1[6], p0[6], p1[6];
    const float *blk1 = blk + (size_t)Q_BLOCK * KERN_PANEL;
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        a0[r] = g0 ? _mm512_maskz_loadu_ps(cm0, y + (size_t)r * ldy) : _mm512_setzero_ps();
        a1[r] = g0 && P > 1 ? _mm512_maskz_loadu_ps(cm1, y + (size_t)r * ldy + KERN_PANEL) : _mm512_setzero_ps();
        if (paired) pair_halves(&a0[r], &a1[r]);
    }
    for (int g = g0; g < g1; g++) {
        int b = g * m->group, e = group_end_at(g, m->group, m->k);
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) p0[r] = p1[r] = _mm512_setzero_ps();
        for (int kk = b; kk < e; kk++) {
            __m512 w0 = _mm512_loadu_ps(blk + (size_t)(kk - kb) * KERN_PANEL); /* blk is 32-byte aligned */
            __m512 w1 = P > 1 ? _mm512_loadu_ps(blk1 + (size_t)(kk - kb) * KERN_PANEL) : w0;
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
                __m512 xb = _mm512_set1_ps(x[(size_t)r * ldx + kk]);
                p0[r] = _mm512_fmadd_ps(xb, w0, p0[r]);
                if (P > 1) p1[r] = _mm512_fmadd_ps(xb, w1, p1[r]);
            }
        }
        float xs[6] = {0}; /* the rows' sums of x over the group (Q4, mins) */
        if (q_need_xsum(type, m))
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)
                xs[r] = xsum ? xsum[(size_t)r * m->n_groups + g] : q4_xsum(x + (size_t)r * ldx, b, e);
        if (paired) /* q4_fix16 lane for lane: a row 0..7 times 1 (the add), a row 8..15 less its nibbles over 16 */
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
                __m512 c = _mm512_set1_ps(-m->q4_off * xs[r]);
                p1[r] = _mm512_fmadd_ps(_mm512_sub_ps(p1[r], p0[r]), _mm512_set1_ps(0.0625f), c);
                p0[r] = _mm512_add_ps(p0[r], c);
            }
        else if (type == KERN_Q4)
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
                p0[r] = q4_fix16(p0[r], xs[r], m->q4_off);
                if (P > 1) p1[r] = q4_fix16(p1[r], xs[r], m->q4_off);
            }
        __m512 s0 = scales16_z(&m->sc, panel, g);
        __m512 s1 = P > 1 ? scales16_z(&m->sc, panel + 1, g) : s0;
        if (paired) pair_halves(&s0, &s1);
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
            a0[r] = _mm512_fmadd_ps(p0[r], s0, a0[r]);
            if (P > 1) a1[r] = _mm512_fmadd_ps(p1[r], s1, a1[r]);
        }
        if (m->mn.v) { /* + the mins times the sums of x, as the twin */
            __m512 n0 = scales16_z(&m->mn, panel, g);
            __m512 n1 = P > 1 ? scales16_z(&m->mn, panel + 1, g) : n0;
            if (paired) pair_halves(&n0, &n1);
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
                a0[r] = _mm512_fmadd_ps(n0, _mm512_set1_ps(xs[r]), a0[r]);
                if (P > 1) a1[r] = _mm512_fmadd_ps(n1, _mm512_set1_ps(xs[r]), a1[r]);
            }
        }
    }
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        if (paired) pair_halves(&a0[r], &a1[r]); /* its own inverse: the panels' rows in order again */
        _mm512_mask_storeu_ps(y + (size_t)r * ldy, cm0, a0[r]);
        if (P > 1) _mm512_mask_storeu_ps(y + (size_t)r * ldy + KERN_PANEL, cm1, a1[r]);
    }
}

/* kern_q_tiles_fn: every row of the chunk, six at a time, over one or two panels. */
static void zq_tiles(int type, float *y, int ldy, const float *x, int ldx, const float *blk, int kb, const qmat *m,
                     int panel, int g0, int g1, int rows, int cols, const float *xsum) {
    __mmask16 cm0 = cols_mask(cols), cm1 = cols_mask(cols - KERN_PANEL);
    int r = 0, two = cols > KERN_PANEL;
#define ZQ(R, P) zq_tile(type, y + (size_t)r * ldy, ldy, x + (size_t)r * ldx, ldx, blk, kb, m, panel, g0, g1, R, P, cm0, \
                         cm1, xsum ? xsum + (size_t)r * m->n_groups : NULL)
    for (; r + 6 <= rows; r += 6)
        if (two) ZQ(6, 2);
        else ZQ(6, 1);
    switch ((rows - r) * 2 + two) { /* the tail, with the row and panel counts known to the compiler */
    case 11: ZQ(5, 2); break;
    case 10: ZQ(5, 1); break;
    case 9: ZQ(4, 2); break;
    case 8: ZQ(4, 1); break;
    case 7: ZQ(3, 2); break;
    case 6: ZQ(3, 1); break;
    case 5: ZQ(2, 2); break;
    case 4: ZQ(2, 1); break;
    case 3: ZQ(1, 2); break;
    case 2: ZQ(1, 1); break;
    }
#undef ZQ
}

/* R rows (1..12) of a long group's block: one accumulator per row, as avx2_float.c's tile_f32 chains. */
static INLINE void zl_tile(float *part, const float *x, int ldx, int R, int len, const float *blk, int acc) {
    __m512 a[12];
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) a[r] = acc ? _mm512_loadu_ps(part + (size_t)r * KERN_PANEL) : _mm512_setzero_ps();
    for (int kk = 0; kk < len; kk++) {
        __m512 w = _mm512_loadu_ps(blk + (size_t)kk * KERN_PANEL);
        _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[(size_t)r * ldx + kk]), w, a[r]);
    }
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) _mm512_storeu_ps(part + (size_t)r * KERN_PANEL, a[r]);
}

/* kern_q_long_fn: every row, twelve at a time. */
static void zl_tiles(float *part, const float *x, int ldx, int rows, int len, const float *blk, int acc) {
    int r = 0;
#define ZL(R) zl_tile(part + (size_t)r * KERN_PANEL, x + (size_t)r * ldx, ldx, R, len, blk, acc)
    for (; r + 12 <= rows; r += 12) ZL(12);
    switch (rows - r) { /* the tail, with the row count known to the compiler */
    case 11: ZL(11); break;
    case 10: ZL(10); break;
    case 9: ZL(9); break;
    case 8: ZL(8); break;
    case 7: ZL(7); break;
    case 6: ZL(6); break;
    case 5: ZL(5); break;
    case 4: ZL(4); break;
    case 3: ZL(3); break;
    case 2: ZL(2); break;
    case 1: ZL(1); break;
    }
#undef ZL
}

/* Decode: one row x four panels; each lane of a group's sums is one row's FMA chain over kk, and the
 * group's correction, scale and min are the AVX2 GEMV's in its order (bit for bit). Q8: a step's 16
 * int8 values widened in one register. Q4 (avx2_float.c's q4_step: rows 0..7 as their nibbles, rows
 * 8..15 as whole bytes) two panels per register: one widening of panel p's and p + 1's steps (8
 * bytes each) puts p's bytes in lanes 0..7 and p + 1's in lanes 8..15, so the whole bytes are rows
 * 8..15 of both panels and their low nibbles, one permute of the floats 0..15 away, rows 0..7 of
 * both: one widening, one permute and one conversion per 32 weights where one panel per register
 * took two widenings, two masks and two conversions. These, not the FMAs, bound this GEMV where a
 * 512-bit operation takes two 256-bit pipes (Zen 4). */
static INLINE void zq_gemv_step(int type, __m512 a[4], __m512 xb, const uint8_t *q, size_t pstride) {
    if (type == KERN_Q8) {
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            __m512 w = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + p * pstride))));
            a[p] = _mm512_fmadd_ps(xb, w, a[p]);
        }
        return;
    }
    /* a[i]: rows 0..7's nibbles (the permute reads an index's low 4 bits: no mask, no conversion),
     * a[2 + i]: rows 8..15's whole bytes */
    const __m512 nibble = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {
        const uint8_t *q0 = q + (size_t)(2 * i) * pstride;
        __m128i two = _mm_castpd_si128(
            _mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64((const __m128i *)q0)), (const double *)(const void *)(q0 + pstride)));
        __m512i v = _mm512_cvtepu8_epi32(two);
        a[i] = _mm512_fmadd_ps(xb, _mm512_permutexvar_ps(v, nibble), a[i]);
        a[2 + i] = _mm512_fmadd_ps(xb, _mm512_cvtepi32_ps(v), a[2 + i]);
    }
}

#ifdef ZQ_VBMI
/* Eight Q4 steps of four panels (avx512_vbmi.c): one 64-byte load per panel, then per step and pair
 * of panels one byte permute of two registers (vpermt2b, AVX512-VBMI) that puts panel p's 8 bytes in
 * the low bytes of lanes 0..7 and p + 1's in lanes 8..15, the rest zero: the register
 * zq_gemv_step's load-and-insert and widening build, in one shuffle instead of two, the same values
 * into the same FMAs in the same order. off: the steps' offset in their panels of pstride bytes. */
static INLINE void zq4_steps8(__m512 a[4], const float *x, const uint8_t *q, size_t off, size_t pstride) {
    const __m512 nibble = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* the index byte of lane j (its low byte): byte j of the first register, or 64 + byte j - 8 of the second */
    const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 64, 65, 66, 67, 68, 69, 70, 71);
    const __mmask64 low_bytes = 0x1111111111111111ull;
    __m512i s[4];
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
        prefetch_weights(q + p * pstride, off, pstride);
        s[p] = _mm512_loadu_si512((const void *)(q + p * pstride));
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
        __m512 xb = _mm512_set1_ps(x[i]);
        __m512i idx = _mm512_add_epi32(first, _mm512_set1_epi32(8 * i));
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            __m512i v = _mm512_maskz_permutex2var_epi8(low_bytes, s[2 * h], idx, s[2 * h + 1]);
            a[h] = _mm512_fmadd_ps(xb, _mm512_permutexvar_ps(v, nibble), a[h]);
            a[2 + h] = _mm512_fmadd_ps(xb, _mm512_cvtepi32_ps(v), a[2 + h]);
        }
    }
}
#endif

/* Q4's correction of the paired sums (q4_fix16's operations, lane for lane: a row 8..15 less its row
 * 0..7, which sits in the same lane of the other register), then each panel's 16 rows in order. */
static INLINE void zq4_unpair(__m512 a[4], float xs, float off) {
    __m512 c = _mm512_set1_ps(-off * xs), out[4];
    _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {
        __m512 lo = _mm512_add_ps(a[i], c);
        __m512 hi = _mm512_fmadd_ps(_mm512_sub_ps(a[2 + i], a[i]), _mm512_set1_ps(0.0625f), c);
        out[2 * i] = _mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
        out[2 * i + 1] = _mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
    }
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) a[p] = out[p];
}

/* One row x four panels of a type known where it is inlined (zq_gemv4): the step pointer advances by
 * a constant, and no test of the type is left in the loop. */
static INLINE void zq_gemv4_of(int type, float *y, const float *x, const qmat *m, int panel, const float *xsum) {
    __m512 acc[4], a[4];
    const size_t step = type == KERN_Q8 ? 16 : 8, pstride = (size_t)m->k * step;
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) acc[p] = _mm512_setzero_ps();
    for (int g = 0; g < m->n_groups; g++) {
        int b = g * m->group, e = group_end_at(g, m->group, m->k);
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) a[p] = _mm512_setzero_ps();
        prefetch_scales4(&m->sc, &m->mn, panel, g + Q_SCALES_AHEAD);
        const uint8_t *q = m->q + ((size_t)panel * m->k + (size_t)b) * step;
        int kk = b;
#ifdef ZQ_VBMI
        if (type == KERN_Q4)
            for (; kk + 8 <= e; kk += 8, q += 8 * step) zq4_steps8(a, x + kk, q, (size_t)kk * step, pstride);
#endif
        for (; kk + 4 <= e; kk += 4, q += 4 * step) { /* four steps per prefetch of each panel, no test */
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) prefetch_weights(q + p * pstride, (size_t)kk * step, pstride);
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) zq_gemv_step(type, a, _mm512_set1_ps(x[kk + i]), q + i * step, pstride);
        }
        for (; kk < e; kk++, q += step) zq_gemv_step(type, a, _mm512_set1_ps(x[kk]), q, pstride);
        float xs = !q_need_xsum(type, m) ? 0.0f : xsum ? xsum[g] : q4_xsum(x, b, e);
        if (type == KERN_Q4) zq4_unpair(a, xs, m->q4_off);
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            acc[p] = _mm512_fmadd_ps(a[p], scales16_z(&m->sc, panel + p, g), acc[p]);
            if (m->mn.v) acc[p] = _mm512_fmadd_ps(scales16_z(&m->mn, panel + p, g), _mm512_set1_ps(xs), acc[p]);
        }
    }
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) _mm512_storeu_ps(y + 16 * p, acc[p]);
}

/* kern_q_gemv_fn: the outputs' sums stay in registers from group to group. */
static void zq_gemv4(int type, float *y, const float *x, const qmat *m, int panel, const float *xsum) {
    if (type == KERN_Q8) zq_gemv4_of(KERN_Q8, y, x, m, panel, xsum);
    else zq_gemv4_of(KERN_Q4, y, x, m, panel, xsum);
}

static const kern_q_hooks zq_hooks = {zq_tiles, zl_tiles, zq_gemv4};

/* The Q4 entry point, named for the file that compiles it (avx512_vbmi.c: with VBMI's decode steps). */
#ifdef ZQ_VBMI
#define ZQ_MATMUL_Q4 kern_avx512_vbmi_matmul_q4
#else
#define ZQ_MATMUL_Q4 kern_avx512_matmul_q4
void kern_avx512_matmul_q8(float *y, int ldy, const float *x, const kern_mat *m, int n, int d, int k, int ob, int oe) {
    (void)d;
    kern_avx2_matmul_q(KERN_Q8, &zq_hooks, y, ldy, x, m, n, k, ob, oe);
}
#endif

void ZQ_MATMUL_Q4(float *y, int ldy, const float *x, const kern_mat *m, int n, int d, int k, int ob, int oe) {
    (void)d;
    kern_avx2_matmul_q(KERN_Q4, &zq_hooks, y, ldy, x, m, n, k, ob, oe);
}

#ifndef ZQ_VBMI
/* The FMA peak with 512-bit vectors: twelve independent chains cover the latency of two units. */
double kern_avx512_fma_peak(double seconds) {
    __m512 a[12], mul = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    double t0 = kern_seconds(), t;
    long iters = 0;
    do {
        for (int r = 0; r < 100000; r++) {
            _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], mul, c);
        }
        iters += 100000;
    } while ((t = kern_seconds() - t0) < seconds);
    float sink = 0;
    for (int i = 0; i < 12; i++) sink += _mm512_reduce_add_ps(a[i]);
    volatile float keep = sink;
    (void)keep;
    return (double)iters * 12 * 16 * 2 / t / 1e9;
}
#endif
