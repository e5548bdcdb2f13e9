/* kernels/x86/avx2_float.c: matmul with f32 activations, AVX2 + FMA + F16C: f32, f16 and bf16
 * weights widened in registers, and weight-only Q8/Q4 widened step by step. Decode (one row) streams
 * four panels at once (gemv4); prefill tiles rows x one panel. Equal to kern_matmul_ref bit for bit. */
#include "avx2.h"

/* One template, three weight types:
 *   tile:  R rows (1..6) x one panel (16 outputs): 2R accumulators; per kk two weight loads,
 *          R broadcasts, 2R FMAs. Prefill. x has row stride ldx; with acc the chains continue
 *          from the values in y (a later block of kk: the same chain as one pass).
 *   gemv4: one row x four panels (64 outputs): 8 accumulators, so eight independent FMA chains
 *          hide the latency while the weights stream from memory. Decode. No software prefetch:
 *          the hardware prefetchers keep up with four streams of whole lines, and requests of its
 *          own made it slower (DESIGN.md, "Decode's prefetch"). */
#define DEFINE_MATMUL(T)                                                                               \
    static INLINE void tile_##T(float *y, int ldy, const float *x, int ldx, int k, const void *w, size_t off, \
                                     int R, int cols, int acc) {                                       \
        __m256 a0[6], a1[6];                                                                           \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                          \
            a0[r] = acc ? load_cols(y + (size_t)r * ldy, cols) : _mm256_setzero_ps();                  \
            a1[r] = acc && cols > 8 ? load_cols(y + (size_t)r * ldy + 8, cols - 8) : _mm256_setzero_ps(); \
        }                                                                                              \
        for (int kk = 0; kk < k; kk++) {                                                               \
            __m256 w0 = load8_##T(w, off + (size_t)kk * 16), w1 = load8_##T(w, off + (size_t)kk * 16 + 8); \
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                      \
                __m256 xb = _mm256_broadcast_ss(x + (size_t)r * ldx + kk);                             \
                a0[r] = _mm256_fmadd_ps(xb, w0, a0[r]);                                                \
                a1[r] = _mm256_fmadd_ps(xb, w1, a1[r]);                                                \
            }                                                                                          \
        }                                                                                              \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) store_cols(y + (size_t)r * ldy, a0[r], a1[r], cols); \
    }                                                                                                  \
    /* All n rows of x against one panel (or a block of it), six rows at a time. */                   \
    static void tiles_##T(float *y, int ldy, const float *x, int ldx, int n, int k, const void *w, size_t off, \
                               int cols, int acc) {                                                    \
        int r = 0;                                                                                     \
        for (; r + 6 <= n; r += 6) tile_##T(y + (size_t)r * ldy, ldy, x + (size_t)r * ldx, ldx, k, w, off, 6, cols, acc); \
        y += (size_t)r * ldy, x += (size_t)r * ldx;                                                    \
        switch (n - r) { /* the tail, with the row count known to the compiler */                     \
        case 5: tile_##T(y, ldy, x, ldx, k, w, off, 5, cols, acc); break;                              \
        case 4: tile_##T(y, ldy, x, ldx, k, w, off, 4, cols, acc); break;                              \
        case 3: tile_##T(y, ldy, x, ldx, k, w, off, 3, cols, acc); break;                              \
        case 2: tile_##T(y, ldy, x, ldx, k, w, off, 2, cols, acc); break;                              \
        case 1: tile_##T(y, ldy, x, ldx, k, w, off, 1, cols, acc); break;                              \
        }                                                                                              \
    }                                                                                                  \
    static void gemv4_##T(float *y, const float *x, int k, const void *w, size_t off, size_t stride) { \
        __m256 a[8];                                                                                   \
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();                \
        for (int kk = 0; kk < k; kk++) {                                                               \
            __m256 xb = _mm256_broadcast_ss(x + kk);                                                   \
            size_t o = off + (size_t)kk * 16;                                                          \
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {                                      \
                a[2 * p] = _mm256_fmadd_ps(xb, load8_##T(w, o + p * stride), a[2 * p]);                \
                a[2 * p + 1] = _mm256_fmadd_ps(xb, load8_##T(w, o + p * stride + 8), a[2 * p + 1]);    \
            }                                                                                          \
        }                                                                                              \
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) store_cols(y + 16 * p, a[2 * p], a[2 * p + 1], KERN_PANEL); \
    }                                                                                                  \
    void kern_avx2_matmul_##T(float *y, int ldy, const float *x, const kern_mat *m, int n, int d, int k, int ob, \
                                int oe) {                                                              \
        (void)d;                                                                                       \
        const void *w = m->w;                                                                          \
        size_t stride = (size_t)k * KERN_PANEL; /* one panel */                                        \
        int p0 = ob;                                                                                   \
        if (n == 1)                                                                                    \
            for (; p0 + 4 * KERN_PANEL <= oe; p0 += 4 * KERN_PANEL)                                    \
                gemv4_##T(y + p0, x, k, w, (size_t)(p0 / KERN_PANEL) * stride, stride);                \
        for (; p0 < oe; p0 += KERN_PANEL) {                                                            \
            int cols = oe - p0 < KERN_PANEL ? oe - p0 : KERN_PANEL;                                    \
            tiles_##T(y + p0, ldy, x, k, n, k, w, (size_t)(p0 / KERN_PANEL) * stride, cols, 0);        \
        }                                                                                              \
    }


DEFINE_MATMUL(f32)
DEFINE_MATMUL(f16)
DEFINE_MATMUL(bf16)

/* Quantized matrices: a step (one kk of one panel) widens 16 stored values to f32, exactly. The
 * values of a group are summed unscaled in one FMA chain, and the group's sum then joins the
 * output with one more FMA by its rows' scales (kern_matmul_ref spells the order out). Q4 sums x
 * times the stored nibble (value + 8, two instructions fewer per step) and takes 8 times the
 * group's sum of x off once per group. */
static INLINE void q8_step(const int8_t *q, __m256 *w0, __m256 *w1) {
    __m128i v = _mm_loadu_si128((const __m128i *)q);
    *w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    *w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
}
/* A Q4 step's byte j holds row j in its low nibble and row j + 8 in its high nibble. Rows 0..7 come
 * out as their nibble (a mask, not a shift: the shift competes with the conversions and FMAs for the
 * same two ports), rows 8..15 as the whole byte, 16 times their nibble + row j's (no mask at all),
 * and at the group's end q4_fix_pair takes the low sums off the high ones and scales those by 1/16,
 * as the twin does. Whole bytes on one side and a plain nibble on the other let a 16-entry permute
 * (AVX-512's vpermps, which reads an index's low 4 bits) stand for the mask and the conversion. */
static INLINE void q4_step(const uint8_t *q, __m256 *w0, __m256 *w1) {
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q));
    *w0 = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x0F)));
    *w1 = _mm256_cvtepi32_ps(v);
}

/* Q4's correction of a group's sums of x times the low nibbles (rows 0..7, *lo) and times the whole
 * bytes (rows 8..15, *hi) into each row's sum of x times its value, less off (8, or 0 with mins: the
 * nibble is the value) times xs, the group's sum of x (q4_xsum): low = low - off * xs, high =
 * (bytes - low) / 16 - off * xs in one FMA (off * xs is exact). */
static INLINE void q4_fix_pair(__m256 *lo, __m256 *hi, float xs, float off) {
    __m256 c = _mm256_set1_ps(-off * xs);
    *hi = _mm256_fmadd_ps(_mm256_sub_ps(*hi, *lo), _mm256_set1_ps(0.0625f), c);
    *lo = _mm256_add_ps(*lo, c);
}
/* y + the group's mins times its sum of x, for a matrix with mins (after the scale's FMA). */
static INLINE void q_add_mins(const qmat *m, int panel, int g, float xs, __m256 *y0, __m256 *y1) {
    __m256 m0, m1, x = _mm256_set1_ps(xs);
    scales16(&m->mn, panel, g, &m0, &m1);
    *y0 = _mm256_fmadd_ps(m0, x, *y0);
    *y1 = _mm256_fmadd_ps(m1, x, *y1);
}

static INLINE void q_step(int type, const qmat *m, int panel, int kk, __m256 *w0, __m256 *w1) {
    const uint8_t *q = m->q + ((size_t)panel * m->k + kk) * m->step_bytes;
    if (type == KERN_Q8) q8_step((const int8_t *)q, w0, w1);
    else q4_step(q, w0, w1);
}

/* One row x four panels, widening in registers (decode). xsum: the sums of x per group (Q4, mins),
 * or NULL to compute them here. */
static INLINE void q_gemv4(int type, float *y, const float *x, const qmat *m, int panel, const float *xsum) {
    __m256 a[8]; /* the group's sums; the element's sums live in y (in registers too, GCC spilled) */
    size_t pstride = (size_t)m->k * m->step_bytes;
    for (int g = 0; g < m->n_groups; g++) {
        int b = g * m->group, e = group_end_at(g, m->group, m->k);
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
        for (int kk = b; kk < e; kk++) {
            __m256 xb = _mm256_broadcast_ss(x + kk);
            if (!(kk & 3)) /* Q8: a line per four steps (Q4: half a line) */
                _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
                    prefetch_weights(m->q + (size_t)(panel + p) * pstride + (size_t)kk * m->step_bytes, (size_t)kk * m->step_bytes, pstride);
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
                __m256 w0, w1;
                q_step(type, m, panel + p, kk, &w0, &w1);
                a[2 * p] = _mm256_fmadd_ps(xb, w0, a[2 * p]);
                a[2 * p + 1] = _mm256_fmadd_ps(xb, w1, a[2 * p + 1]);
            }
        }
        float xs = !q_need_xsum(type, m) ? 0.0f : xsum ? xsum[g] : q4_xsum(x, b, e);
        if (type == KERN_Q4)
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) q4_fix_pair(&a[2 * p], &a[2 * p + 1], xs, m->q4_off);
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            __m256 s0, s1;
            scales16(&m->sc, panel + p, g, &s0, &s1);
            float *yp = y + 16 * p;
            __m256 y0 = g ? _mm256_loadu_ps(yp) : _mm256_setzero_ps(), y1 = g ? _mm256_loadu_ps(yp + 8) : _mm256_setzero_ps();
            y0 = _mm256_fmadd_ps(a[2 * p], s0, y0);
            y1 = _mm256_fmadd_ps(a[2 * p + 1], s1, y1);
            if (m->mn.v) q_add_mins(m, panel + p, g, xs, &y0, &y1);
            _mm256_storeu_ps(yp, y0);
            _mm256_storeu_ps(yp + 8, y1);
        }
    }
}

/* R rows (1..TG_ROWS) x one panel over whole groups g0 .. g1-1 widened in blk (from step kb): each
 * group's sums in registers, 2R FMA chains, joined after the group to the rows' sums over groups in
 * `sum` on the stack (a load and a store per group and row, against the group's 2 x group FMAs).
 * Kept in registers too, those sums had left room for three rows, whose six chains cannot cover the
 * FMA latency: on a Zen 3 five rows ran 1.15-1.2x faster (six rows were no faster than five). The
 * float operations and their order are unchanged. Groups up to Q_BLOCK. */
#define TG_ROWS 5
static INLINE void tile_groups(int type, float *y, int ldy, const float *x, int ldx, const float *blk, int kb,
                                    const qmat *m, int panel, int g0, int g1, int R, int cols, const float *xsum) {
    float sum[TG_ROWS * KERN_PANEL] __attribute__((aligned(32)));
    __m256 p0[TG_ROWS], p1[TG_ROWS];
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        _mm256_store_ps(sum + r * KERN_PANEL, g0 ? load_cols(y + (size_t)r * ldy, cols) : _mm256_setzero_ps());
        _mm256_store_ps(sum + r * KERN_PANEL + 8, g0 && cols > 8 ? load_cols(y + (size_t)r * ldy + 8, cols - 8) : _mm256_setzero_ps());
    }
    for (int g = g0; g < g1; g++) {
        int b = g * m->group, e = group_end_at(g, m->group, m->k);
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) p0[r] = p1[r] = _mm256_setzero_ps();
        for (int kk = b; kk < e; kk++) {
            const float *w = blk + (size_t)(kk - kb) * KERN_PANEL;
            __m256 w0 = _mm256_load_ps(w), w1 = _mm256_load_ps(w + 8);
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
                __m256 xb = _mm256_broadcast_ss(x + (size_t)r * ldx + kk);
                p0[r] = _mm256_fmadd_ps(xb, w0, p0[r]);
                p1[r] = _mm256_fmadd_ps(xb, w1, p1[r]);
            }
        }
        __m256 s0, s1;
        scales16(&m->sc, panel, g, &s0, &s1);
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
            float xs = 0.0f; /* xsum: [R][n_groups], the rows' sums of x per group */
            if (q_need_xsum(type, m)) xs = xsum ? xsum[(size_t)r * m->n_groups + g] : q4_xsum(x + (size_t)r * ldx, b, e);
            if (type == KERN_Q4) q4_fix_pair(&p0[r], &p1[r], xs, m->q4_off);
            __m256 a0 = _mm256_fmadd_ps(p0[r], s0, _mm256_load_ps(sum + r * KERN_PANEL));
            __m256 a1 = _mm256_fmadd_ps(p1[r], s1, _mm256_load_ps(sum + r * KERN_PANEL + 8));
            if (m->mn.v) q_add_mins(m, panel, g, xs, &a0, &a1);
            _mm256_store_ps(sum + r * KERN_PANEL, a0);
            _mm256_store_ps(sum + r * KERN_PANEL + 8, a1);
        }
    }
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)
        store_cols(y + (size_t)r * ldy, _mm256_load_ps(sum + r * KERN_PANEL), _mm256_load_ps(sum + r * KERN_PANEL + 8), cols);
}

/* Steps kb .. kb + len - 1 of a panel widened: rows 0..7 of step kk to lo + 16 kk, rows 8..15 to
 * hi + 16 kk (hi = lo + 8: the panel's 16 rows in order). */
static INLINE void widen_steps(int type, const qmat *m, int panel, int kb, int len, float *lo, float *hi) {
    for (int kk = 0; kk < len; kk++) {
        __m256 w0, w1;
        q_step(type, m, panel, kb + kk, &w0, &w1);
        _mm256_store_ps(lo + kk * KERN_PANEL, w0);
        _mm256_store_ps(hi + kk * KERN_PANEL, w1);
    }
}

/* The per-row, per-group sums of x (Q4, mins) for a chunk of rows: [rows][n_groups] (32 KiB on the stack). */
#define Q_XSUM 8192

/* q4_xsum of every group of rows x[0..n) (row stride k) into out[n][n_groups]. A group's sum is one
 * chain of dependent adds; eight rows' chains run in the lanes of one register, fed eight steps at a
 * time by an 8 x 8 transpose of the rows' next eight values, so each lane adds its row's values in
 * order from 0, exactly q4_xsum, where one group at a time waits on one chain. */
static void q4_xsums(const float *x, int n, int k, int group, int n_groups, float *out) {
    int r0 = 0;
    for (; r0 + 8 <= n; r0 += 8) {
        const float *xr = x + (size_t)r0 * k;
        for (int g = 0; g < n_groups; g++) {
            int kk = g * group, e = group_end_at(g, group, k);
            __m256 acc = _mm256_setzero_ps();
            for (; kk + 8 <= e; kk += 8) {
                __m256 v[8], t[8], u[8];
                _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) v[r] = _mm256_loadu_ps(xr + (size_t)r * k + kk);
                _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                    t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
                    t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
                }
                _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) { /* rows 0..3, then 4..7 */
                    u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
                    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
                    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
                    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
                }
                /* value kk + c of the eight rows: c < 4 from the low halves, then the high ones */
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(u[c], u[c + 4], 0x20));
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(u[c], u[c + 4], 0x31));
            }
            float a[8];
            _mm256_storeu_ps(a, acc);
            for (int r = 0; r < 8; r++) {
                float xs = a[r];
                for (int q = kk; q < e; q++) xs += xr[(size_t)r * k + q];
                out[(size_t)(r0 + r) * n_groups + g] = xs;
            }
        }
    }
    for (int r = r0; r < n; r++)
        for (int g = 0; g < n_groups; g++)
            out[(size_t)r * n_groups + g] = q4_xsum(x + (size_t)r * k, g * group, group_end_at(g, group, k));
}

static INLINE void matmul_q(int type, const kern_q_hooks *hooks, float *y, int ldy, const float *x, const kern_mat *km,
                            int n, int k, int ob, int oe) {
    kern_q_tiles_fn tiles = hooks ? hooks->tiles : NULL;
    kern_q_long_fn long_tiles = hooks ? hooks->long_tiles : NULL;
    int n_groups = kern_q_groups(k, km->group);
    qmat m = {km->w, qscales_of(km, 0, n_groups), qscales_of(km, 1, n_groups), k, n_groups, km->group,
              type == KERN_Q8 ? 16 : 8, kern_q4_offset(km)};
    int p_begin = ob;
    /* the blocks in this thread's scratch (99 KiB: more than some threads' stacks hold) */
    struct q_scratch {
        float blk[2 * Q_BLOCK * KERN_PANEL], part[Q_ROWS * KERN_PANEL], xsum[Q_XSUM];
    } *sc = kern_scratch();
    _Static_assert(sizeof(struct q_scratch) <= KERN_SCRATCH_BYTES, "the scratch holds matmul_q's blocks");
    if (!sc) { /* no memory for it: the twin, the same results */
        kern_matmul_ref(y, ldy, x, km, n, oe, k, ob, oe);
        return;
    }
    float *blk = sc->blk, *part = sc->part, *xsum = sc->xsum;
    if (n == 1) { /* the sums of x once for every panel, not once per four: the row's whole groups
                   * as the rows of q4_xsums (eight chains at a time), a shorter last one alone */
        int pre = q_need_xsum(type, &m) && n_groups <= Q_XSUM, whole = k / m.group;
        if (pre) q4_xsums(x, whole, m.group, m.group, 1, xsum);
        for (int g = whole; pre && g < n_groups; g++) xsum[g] = q4_xsum(x, g * m.group, group_end_at(g, m.group, k));
        for (; p_begin + 4 * KERN_PANEL <= oe; p_begin += 4 * KERN_PANEL)
            if (hooks && hooks->gemv4) hooks->gemv4(type, y + p_begin, x, &m, p_begin / KERN_PANEL, pre ? xsum : NULL);
            else q_gemv4(type, y + p_begin, x, &m, p_begin / KERN_PANEL, pre ? xsum : NULL);
    }
    /* rows in chunks whose sums of x fit xsum, computed once for every panel */
    int chunk = n_groups <= Q_XSUM ? Q_XSUM / n_groups : 1;
    for (int c0 = 0; c0 < n && p_begin < oe; c0 += chunk) {
        int cn = n - c0 < chunk ? n - c0 : chunk;
        const float *xc = x + (size_t)c0 * k;
        float *yc = y + (size_t)c0 * ldy;
        if (q_need_xsum(type, &m) && n_groups <= Q_XSUM) q4_xsums(xc, cn, k, m.group, n_groups, xsum);
        for (int p0 = p_begin, np = 1; p0 < oe; p0 += np * KERN_PANEL) {
            /* a variant's tiles take two panels at a time (cols up to 32), the AVX2 ones one */
            np = tiles && m.group <= Q_BLOCK && oe - p0 > KERN_PANEL ? 2 : 1;
            int cols = oe - p0 < np * KERN_PANEL ? oe - p0 : np * KERN_PANEL, panel = p0 / KERN_PANEL;
            if (m.group <= Q_BLOCK) { /* small groups: blocks of whole groups, sums kept in registers */
                int per = Q_BLOCK / m.group;
                for (int g0 = 0; g0 < n_groups; g0 += per) {
                    int g1 = g0 + per < n_groups ? g0 + per : n_groups, kb = g0 * m.group;
                    int len = (g1 * m.group < k ? g1 * m.group : k) - kb;
                    int paired = type == KERN_Q4 && np == 2; /* kern_q_tiles_fn's layouts */
                    for (int i = 0; i < np; i++) {
                        float *lo = paired ? blk + (size_t)i * 8 : blk + (size_t)i * Q_BLOCK * KERN_PANEL;
                        widen_steps(type, &m, panel + i, kb, len, lo, paired ? lo + (size_t)Q_BLOCK * KERN_PANEL : lo + 8);
                        /* the panel's next block (or the next panel's first, within this call's range)
                         * streams in while the tiles run: the hardware prefetcher stops while nothing
                         * reads the weights */
                        if (kb + len == k && panel + i + 1 >= (oe + KERN_PANEL - 1) / KERN_PANEL) continue;
                        const char *next = (const char *)m.q + ((size_t)(panel + i) * k + (size_t)(kb + len)) * m.step_bytes;
                        for (size_t off = 0; off < (size_t)len * m.step_bytes; off += 64) _mm_prefetch(next + off, _MM_HINT_T1);
                    }
                    if (tiles) {
                        tiles(type, yc + p0, ldy, xc, k, blk, kb, &m, panel, g0, g1, cn, cols, n_groups <= Q_XSUM ? xsum : NULL);
                        continue;
                    }
                    int r = 0;
#define Q_TILE(R) tile_groups(type, yc + (size_t)r * ldy + p0, ldy, xc + (size_t)r * k, k, blk, kb, &m, panel, g0, g1, R, cols, \
                              n_groups <= Q_XSUM ? xsum + (size_t)r * n_groups : NULL)
                    for (; r + TG_ROWS <= cn; r += TG_ROWS) Q_TILE(TG_ROWS);
                    switch (cn - r) { /* the tail, with the row count known to the compiler */
                    case 5: Q_TILE(5); break;
                    case 4: Q_TILE(4); break;
                    case 3: Q_TILE(3); break;
                    case 2: Q_TILE(2); break;
                    case 1: Q_TILE(1); break;
                    }
#undef Q_TILE
                }
                continue;
            }
            /* long groups (one per row for 8w): a group's sums through the six-row tiles, block by block */
            for (int r0 = 0; r0 < cn; r0 += Q_ROWS) {
                int rows = cn - r0 < Q_ROWS ? cn - r0 : Q_ROWS;
                float *yr = yc + (size_t)r0 * ldy + p0;
                for (int g = 0; g < n_groups; g++) {
                    int b = g * m.group, e = group_end_at(g, m.group, k);
                    for (int kb = b; kb < e; kb += Q_BLOCK) {
                        int len = e - kb < Q_BLOCK ? e - kb : Q_BLOCK;
                        widen_steps(type, &m, panel, kb, len, blk, blk + 8);
                        if (long_tiles) long_tiles(part, xc + (size_t)r0 * k + kb, k, rows, len, blk, kb > b);
                        else tiles_f32(part, KERN_PANEL, xc + (size_t)r0 * k + kb, k, rows, len, blk, 0, KERN_PANEL, kb > b);
                    }
                    __m256 s0, s1;
                    scales16(&m.sc, panel, g, &s0, &s1);
                    for (int r = 0; r < rows; r++) {
                        float *yo = yr + (size_t)r * ldy;
                        __m256 y0 = g ? load_cols(yo, cols) : _mm256_setzero_ps();
                        __m256 y1 = g && cols > 8 ? load_cols(yo + 8, cols - 8) : _mm256_setzero_ps();
                        __m256 q0 = _mm256_load_ps(part + r * KERN_PANEL), q1 = _mm256_load_ps(part + r * KERN_PANEL + 8);
                        float xs = !q_need_xsum(type, &m) ? 0.0f
                                 : n_groups <= Q_XSUM ? xsum[(size_t)(r0 + r) * n_groups + g] : q4_xsum(xc + (size_t)(r0 + r) * k, b, e);
                        if (type == KERN_Q4) q4_fix_pair(&q0, &q1, xs, m.q4_off);
                        y0 = _mm256_fmadd_ps(q0, s0, y0);
                        y1 = _mm256_fmadd_ps(q1, s1, y1);
                        if (m.mn.v) q_add_mins(&m, panel, g, xs, &y0, &y1);
                        store_cols(yo, y0, y1, cols);
                    }
                }
            }
        }
    }
}
void kern_avx2_matmul_q(int type, const kern_q_hooks *hooks, float *y, int ldy, const float *x, const kern_mat *m, int n,
                        int k, int ob, int oe) {
    if (type == KERN_Q8) matmul_q(KERN_Q8, hooks, y, ldy, x, m, n, k, ob, oe);
    else matmul_q(KERN_Q4, hooks, y, ldy, x, m, n, k, ob, oe);
}
void kern_avx2_matmul_q8(float *y, int ldy, const float *x, const kern_mat *m, int n, int d, int k, int ob, int oe) {
    (void)d;
    matmul_q(KERN_Q8, NULL, y, ldy, x, m, n, k, ob, oe);
}
void kern_avx2_matmul_q4(float *y, int ldy, const float *x, const kern_mat *m, int n, int d, int k, int ob, int oe) {
    (void)d;
    matmul_q(KERN_Q4, NULL, y, ldy, x, m, n, k, ob, oe);
}

