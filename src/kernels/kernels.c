/* kernels: portable C reference twins and AVX2/FMA variants. */
#include "kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define KERN_X86 1
#include <immintrin.h>
#endif

/* ------------------------------------------------------------------ conversions */

size_t kern_wsize(int wtype) { return wtype == KERN_F32 ? 4 : 2; }

float kern_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: normalize */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3FF) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t kern_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xFF, man = x & 0x7FFFFF;
    if (exp == 0xFF) return (uint16_t)(sign | 0x7C00 | (man ? 0x200 : 0)); /* inf, NaN */
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7C00);                          /* overflow to inf */
    if (e <= 0) {                                                            /* subnormal or zero */
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000;
        int shift = 14 - e;
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = (uint32_t)e << 10 | man >> 13, rem = man & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* may carry into the exponent: correct */
    return (uint16_t)(sign | half);
}

float kern_bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t kern_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFF)) return (uint16_t)(x >> 16 | 0x40); /* quiet NaN */
    x += 0x7FFF + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static inline float wload(const void *w, int wtype, size_t i) {
    if (wtype == KERN_F32) return ((const float *)w)[i];
    uint16_t h = ((const uint16_t *)w)[i];
    return wtype == KERN_F16 ? kern_f16_to_f32(h) : kern_bf16_to_f32(h);
}

/* The stored value (o, kk) of a quantized matrix: int8, or the nibble less 8. */
static inline int qvalue(const kern_mat *m, int o, int kk, int k) {
    if (m->type == KERN_I8) return ((const int8_t *)m->w)[kern_pair_index(o, kk, k)];
    if (m->type == KERN_I4) {
        size_t i = kern_pair_index(o, kk, k), step = i / 32, v = i % 32;
        uint8_t b = ((const uint8_t *)m->w)[step * 16 + v % 16];
        return (v < 16 ? b & 0x0F : b >> 4) - 8;
    }
    size_t i = kern_packed_index(o, kk, k);
    if (m->type == KERN_Q8) return ((const int8_t *)m->w)[i];
    int j = o % KERN_PANEL;
    uint8_t b = ((const uint8_t *)m->w)[(i - (size_t)j) / 2 + (size_t)(j & 7)];
    return (j < 8 ? b & 0x0F : b >> 4) - 8;
}

int kern_qvalue(const kern_mat *m, int o, int kk, int k) { return qvalue(m, o, kk, k); }

int kern_q_group_fit(int k, int want, int even) {
    if (want > k) want = k;
    for (int g = want; g > 1; g--)
        if ((!even || g % 2 == 0) && kern_q_group_of(k, kern_q_groups(k, g)) == g) return g;
    return even ? 2 : 1;
}

/* The end (exclusive) of group g of a row of k values in groups of `group`: only the last is short. */
static inline int group_end_at(int g, int group, int k) { return g * group + group < k ? g * group + group : k; }

void kern_group_sums(float *wsum, const kern_mat *m, int d, int k) {
    int n_groups = kern_q_groups(k, m->group), rows = kern_packed_rows(d);
    for (int o = 0; o < rows; o++)
        for (int g = 0; g < n_groups; g++) {
            int b = g * m->group, e = group_end_at(g, m->group, k);
            int32_t sum = 0;
            for (int kk = b; kk < e; kk++) sum += qvalue(m, o, kk, k);
            wsum[kern_packed_index(o, g, n_groups)] = (float)sum;
        }
}

void kern_to_int_dot(void *dst, const void *q, int type, int d, int k) {
    int rows = kern_packed_rows(d);
    kern_mat src = {q, NULL, type, k, NULL, NULL, 0};
    if (type == KERN_Q8) {
        for (int o = 0; o < rows; o++)
            for (int kk = 0; kk < k; kk++) ((int8_t *)dst)[kern_pair_index(o, kk, k)] = (int8_t)qvalue(&src, o, kk, k);
        return;
    }
    uint8_t *b = dst;
    memset(b, 0, (size_t)rows * k / 2);
    for (int o = 0; o < rows; o++)
        for (int kk = 0; kk < k; kk++) {
            size_t i = kern_pair_index(o, kk, k), step = i / 32, v = i % 32;
            uint8_t u = (uint8_t)(qvalue(&src, o, kk, k) + 8);
            b[step * 16 + v % 16] |= v < 16 ? u : (uint8_t)(u << 4);
        }
}

/* One row's scale, zero point and lowest value (dynamic: symmetric over max|x|; static: stat). */
static float qx_params(const float *stat, float amax, int32_t *zero, int32_t *lo) {
    if (stat) return *zero = (int32_t)stat[1], *lo = -128, stat[0];
    return *zero = 0, *lo = -127, amax / 127.0f;
}

/* Stores len values (v, -128..127; len even) as pairs, byte pairs and prefix sums continuing ps[0]. */
static void qx_store(int32_t *pr, uint16_t *pb, int32_t *ps, const int32_t *v, int len) {
    for (int i = 0; i < len; i += 2) {
        pr[i / 2] = (int32_t)((uint32_t)(uint16_t)v[i] | (uint32_t)(uint16_t)v[i + 1] << 16);
        pb[i / 2] = (uint16_t)((uint8_t)v[i] | (uint16_t)((uint8_t)v[i + 1]) << 8);
        ps[i / 2 + 1] = ps[i / 2] + v[i] + v[i + 1];
    }
}

#define QX_CHUNK 256 /* values quantized at a time before they are stored (even) */

/* The row loop of both variants: `values` turns xr[0..len) into v with scale 1/inv and the zero. */
typedef void (*qx_values_fn)(int32_t *v, const float *xr, int len, float inv, int32_t zero, int32_t lo);
typedef float (*qx_amax_fn)(const float *xr, int k);

static void quantize_x_rows(kern_qx *qx, const float *x, int n, int k, const float *stat, qx_amax_fn amax_of,
                            qx_values_fn values) {
    int32_t v[QX_CHUNK];
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * k;
        int32_t zero, lo;
        float s = qx_params(stat, stat ? 0.0f : amax_of(xr, k), &zero, &lo), inv = s > 0.0f ? 1.0f / s : 0.0f;
        qx->scale[r] = s, qx->zero[r] = zero;
        int32_t *pr = qx->pairs + (size_t)r * (k / 2), *ps = qx->psum + (size_t)r * (k / 2 + 1);
        uint16_t *pb = qx->bytes + (size_t)r * (k / 2);
        ps[0] = 0;
        for (int c = 0; c < k; c += QX_CHUNK) {
            int len = k - c < QX_CHUNK ? k - c : QX_CHUNK;
            values(v, xr + c, len, inv, zero, lo);
            qx_store(pr + c / 2, pb + c / 2, ps + c / 2, v, len);
        }
    }
}

static float amax_ref(const float *xr, int k) {
    float amax = 0.0f;
    for (int i = 0; i < k; i++) amax = fabsf(xr[i]) > amax ? fabsf(xr[i]) : amax; /* NaN is skipped */
    return amax;
}

static void values_ref(int32_t *v, const float *xr, int len, float inv, int32_t zero, int32_t lo) {
    for (int i = 0; i < len; i++) {
        float f = roundf(xr[i] * inv) + (float)zero; /* NaN and huge values clamp below */
        v[i] = f >= 127.0f ? 127 : f > (float)lo ? (int32_t)f : lo;
    }
}

void kern_quantize_x_ref(kern_qx *qx, const float *x, int n, int k, const float *stat) {
    quantize_x_rows(qx, x, n, k, stat, amax_ref, values_ref);
}

float kern_mat_at(const kern_mat *m, int o, int kk, int k) {
    if (kern_is_quantized(m->type)) {
        int n_groups = kern_q_groups(k, m->group);
        return (float)qvalue(m, o, kk, k) * kern_scale_at(m, kern_packed_index(o, kk / m->group, n_groups));
    }
    return wload(m->w, m->type, kern_packed_index(o, kk, k));
}

void kern_packed_row(float *dst, const kern_mat *m, int row, int k) {
    for (int kk = 0; kk < k; kk++) dst[kk] = kern_mat_at(m, row, kk, k);
}

/* The value stored for x with scale 1/inv, clamped to the type's range. */
static inline float quant_value(int type, float x, float inv) {
    float v = roundf(x * inv);
    if (type == KERN_Q8) return v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
    return v > 7.0f ? 7.0f : v < -8.0f ? -8.0f : v;
}

float kern_scale_at(const kern_mat *m, size_t i) {
    return m->scale_type == KERN_F16 ? kern_f16_to_f32(((const uint16_t *)m->scales)[i]) : ((const float *)m->scales)[i];
}

/* s as an f16 scale stores it: rounded, a magnitude past f16's largest (65504) clamped to it. */
static float f16_scale(int scale_type, float s) {
    if (scale_type != KERN_F16) return s;
    float h = kern_f16_to_f32(kern_f32_to_f16(s));
    return isinf(h) ? copysignf(65504.0f, s) : h;
}

/* The scale for a group's n values: of the largest-magnitude scale s0 and the ones that clip its
 * top 1%, 2%, ... (to 20% for Q4, 5% for Q8), each as the scale type stores it, the one with the
 * least squared error. Clipping a few outliers buys finer steps for everything else: for int4
 * groups of 32 the error falls by a quarter (KL on stories260K: 0.125 -> 0.092). An f16 scale
 * below half f16's smallest step (3e-8) becomes 0, and its group's values 0. */
static float quant_scale(int scale_type, int type, const float *x, int n, float s0) {
    float best_s = f16_scale(scale_type, s0);
    if (best_s == 0.0f) return 0.0f;
    double best = INFINITY;
    for (int t = 0; t <= (type == KERN_Q8 ? 5 : 20); t++) {
        float s = f16_scale(scale_type, s0 * (1.0f - 0.01f * (float)t));
        if (s == 0.0f) break;
        float inv = 1.0f / s;
        double err = 0;
        for (int i = 0; i < n && err < best; i++) {
            double d = (double)x[i] - (double)(quant_value(type, x[i], inv) * s);
            err += d * d;
        }
        if (err < best) best = err, best_s = s;
    }
    return best_s;
}

int kern_quantize(void *q, void *scales, int scale_type, int type, const float *src, int d, int k, int group) {
    int n_groups = kern_q_groups(k, group), rows = kern_packed_rows(d);
    group = kern_q_group_of(k, n_groups);
    memset(q, 0, type == KERN_Q8 ? (size_t)rows * k : (size_t)rows * k / 2);
    memset(scales, 0, (size_t)rows * n_groups * kern_wsize(scale_type));
    if (type == KERN_Q4) /* zero is stored as 8 */
        for (int o = d; o < rows; o++)
            for (int kk = 0; kk < k; kk++) kern_q4_put(q, o, kk, k, 0);
    for (int o = 0; o < d; o++)
        for (int g = 0; g < n_groups; g++) {
            const float *x = src + (size_t)o * k;
            int b = g * group, e = group_end_at(g, group, k);
            float amax = 0.0f, vmax = 0.0f; /* largest magnitude, and the value that has it */
            for (int kk = b; kk < e; kk++)
                if (fabsf(x[kk]) > amax) amax = fabsf(x[kk]), vmax = x[kk];
            float s = quant_scale(scale_type, type, x + b, e - b, type == KERN_Q8 ? amax / 127.0f : vmax / -8.0f);
            float inv = s != 0.0f ? 1.0f / s : 0.0f;
            size_t si = kern_packed_index(o, g, n_groups);
            if (scale_type == KERN_F16) ((uint16_t *)scales)[si] = kern_f32_to_f16(s); /* exact: s is an f16 */
            else ((float *)scales)[si] = s;
            for (int kk = b; kk < e; kk++) {
                float v = quant_value(type, x[kk], inv);
                if (type == KERN_Q8) ((int8_t *)q)[kern_packed_index(o, kk, k)] = (int8_t)v;
                else kern_q4_put(q, o, kk, k, (int)v);
            }
        }
    return group;
}

/* ------------------------------------------------------------------ matmul */

void kern_matmul_ref(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int o_begin,
                     int o_end) {
    (void)d;
    int q = kern_is_quantized(w->type), group = q ? w->group : k, n_groups = q ? kern_q_groups(k, group) : 1;
    for (int r = 0; r < n; r++)
        for (int o = o_begin; o < o_end; o++) {
            const float *xr = x + (size_t)r * k;
            float acc = 0.0f;
            if (!q)
                for (int kk = 0; kk < k; kk++) acc = fmaf(xr[kk], kern_mat_at(w, o, kk, k), acc);
            for (int g = 0; q && g < n_groups; g++) { /* each group's sum of x * value, then times its scale */
                int b = g * group, e = group_end_at(g, group, k);
                float sum = 0.0f;
                if (w->type == KERN_Q4) { /* x * stored nibble (value + 8), less 8 times the sum of x. A high
                                           * nibble (rows 8..15 of a panel) as 16 times it, the sum times 1/16;
                                           * a low one as its whole byte (its nibble + 16 times row o + 8's), the
                                           * high nibble's sum taken off: the AVX2 kernels' order (q4_step) */
                    float xs = 0.0f, sh = 0.0f;
                    int high = o % KERN_PANEL >= 8;
                    for (int kk = b; kk < e; kk++) {
                        float h16 = 16.0f * (float)(qvalue(w, high ? o : o + 8, kk, k) + 8);
                        sum = fmaf(xr[kk], high ? h16 : (float)(qvalue(w, o, kk, k) + 8) + h16, sum);
                        if (!high) sh = fmaf(xr[kk], h16, sh);
                        xs += xr[kk];
                    }
                    sum = fmaf(-8.0f, xs, high ? sum * 0.0625f : sum - sh);
                } else {
                    for (int kk = b; kk < e; kk++) sum = fmaf(xr[kk], (float)qvalue(w, o, kk, k), sum);
                }
                acc = fmaf(sum, kern_scale_at(w, kern_packed_index(o, g, n_groups)), acc);
            }
            y[(size_t)r * ldy + o] = acc;
        }
}

/* The int16 pair (x[r, 2i], x[r, 2i+1]) out of its word. */
static inline int32_t pair_lo(int32_t w) { return (int16_t)(uint16_t)((uint32_t)w & 0xFFFF); }
static inline int32_t pair_hi(int32_t w) { return (int16_t)(uint16_t)((uint32_t)w >> 16); }

void kern_matmul_i_ref(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int o_begin,
                       int o_end) {
    (void)d;
    int n_groups = kern_q_groups(k, w->group);
    for (int r = 0; r < n; r++)
        for (int o = o_begin; o < o_end; o++) {
            const int32_t *xr = x->pairs + (size_t)r * (k / 2);
            float acc = 0.0f;
            for (int g = 0; g < n_groups; g++) {
                int b = g * w->group, e = group_end_at(g, w->group, k);
                int32_t dot = 0;
                for (int kk = b; kk < e; kk += 2)
                    dot += pair_lo(xr[kk / 2]) * qvalue(w, o, kk, k) + pair_hi(xr[kk / 2]) * qvalue(w, o, kk + 1, k);
                size_t si = kern_packed_index(o, g, n_groups);
                if (x->zero[r]) dot -= x->zero[r] * (int32_t)w->wsum[si];
                acc = fmaf((float)dot, kern_scale_at(w, si), acc);
            }
            y[(size_t)r * ldy + o] = acc * x->scale[r];
        }
}

/* Portable variant (no FMA hardware assumed): the same loop order as the AVX2 kernel for float
 * weights, 16 outputs at a time, with separate multiply and add; it agrees with the twin to
 * rounding, not bit for bit. Quantized weights take the twin itself. */
static void matmul_portable(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k,
                            int o_begin, int o_end) {
    if (kern_is_quantized(w->type)) {
        kern_matmul_ref(y, ldy, x, w, n, d, k, o_begin, o_end);
        return;
    }
    for (int p0 = o_begin; p0 < o_end; p0 += KERN_PANEL) {
        int cols = o_end - p0 < KERN_PANEL ? o_end - p0 : KERN_PANEL;
        for (int r = 0; r < n; r++) {
            float acc[KERN_PANEL] = {0};
            const float *xr = x + (size_t)r * k;
            for (int kk = 0; kk < k; kk++)
                for (int j = 0; j < KERN_PANEL; j++) acc[j] += xr[kk] * kern_mat_at(w, p0 + j, kk, k);
            for (int j = 0; j < cols; j++) y[(size_t)r * ldy + p0 + j] = acc[j];
        }
    }
}

#ifdef KERN_X86
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define INLINE __attribute__((always_inline)) inline

enum { sizeof_f32 = 4, sizeof_f16 = 2, sizeof_bf16 = 2 };

/* Eight weights widened to f32 in registers. */
AVX2 static INLINE __m256 load8_f32(const void *w, size_t i) { return _mm256_loadu_ps((const float *)w + i); }
AVX2 static INLINE __m256 load8_f16(const void *w, size_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
}
AVX2 static INLINE __m256 load8_bf16(const void *w, size_t i) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

AVX2 static INLINE void store_cols(float *y, __m256 a, __m256 b, int cols) {
    if (cols == KERN_PANEL) {
        _mm256_storeu_ps(y, a);
        _mm256_storeu_ps(y + 8, b);
        return;
    }
    float t[KERN_PANEL];
    _mm256_storeu_ps(t, a);
    _mm256_storeu_ps(t + 8, b);
    memcpy(y, t, (size_t)cols * sizeof *t);
}

AVX2 static INLINE __m256 load_cols(const float *y, int cols) {
    if (cols >= 8) return _mm256_loadu_ps(y);
    float t[8] = {0};
    memcpy(t, y, (size_t)cols * sizeof *t);
    return _mm256_loadu_ps(t);
}

/* One template, three weight types:
 *   tile:  R rows (1..6) x one panel (16 outputs): 2R accumulators; per kk two weight loads,
 *          R broadcasts, 2R FMAs. Prefill. x has row stride ldx; with acc the chains continue
 *          from the values in y (a later block of kk: the same chain as one pass).
 *   gemv4: one row x four panels (64 outputs): 8 accumulators, so eight independent FMA chains
 *          hide the latency while the weights stream from memory. Decode. */
#define DEFINE_MATMUL(T)                                                                               \
    AVX2 static INLINE void tile_##T(float *y, int ldy, const float *x, int ldx, int k, const void *w, size_t off, \
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
    AVX2 static void tiles_##T(float *y, int ldy, const float *x, int ldx, int n, int k, const void *w, size_t off, \
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
    AVX2 static void gemv4_##T(float *y, const float *x, int k, const void *w, size_t off, size_t stride) { \
        __m256 a[8];                                                                                   \
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();                \
        for (int kk = 0; kk < k; kk++) {                                                               \
            __m256 xb = _mm256_broadcast_ss(x + kk);                                                   \
            size_t o = off + (size_t)kk * 16;                                                          \
            if (!(kk & 1)) /* one cache line per stream every two steps, 1 KiB ahead */               \
                _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)                                    \
                    _mm_prefetch((const char *)w + (o + p * stride) * sizeof_##T + 1024, _MM_HINT_T0); \
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {                                      \
                a[2 * p] = _mm256_fmadd_ps(xb, load8_##T(w, o + p * stride), a[2 * p]);                \
                a[2 * p + 1] = _mm256_fmadd_ps(xb, load8_##T(w, o + p * stride + 8), a[2 * p + 1]);    \
            }                                                                                          \
        }                                                                                              \
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) store_cols(y + 16 * p, a[2 * p], a[2 * p + 1], KERN_PANEL); \
    }                                                                                                  \
    AVX2 static void matmul_##T(float *y, int ldy, const float *x, const kern_mat *m, int n, int d, int k, int ob, \
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
AVX2 static INLINE void q8_step(const int8_t *q, __m256 *w0, __m256 *w1) {
    __m128i v = _mm_loadu_si128((const __m128i *)q);
    *w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    *w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
}
/* A Q4 step's byte j holds row j in its low nibble and row j + 8 in its high nibble. Rows 8..15 come
 * out as 16 times their nibble (a mask, not a shift: the shift competes with the conversions and
 * FMAs for the same two ports), rows 0..7 as the whole byte, low nibble + 16 times the high one (no
 * mask at all: one instruction fewer per step, 1.1-1.2x faster decode), and at the group's end
 * q4_fix_pair takes the high sums off the low ones and scales the high ones back by 1/16, as the
 * twin does. */
AVX2 static INLINE void q4_step(const uint8_t *q, __m256 *w0, __m256 *w1) {
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q));
    *w0 = _mm256_cvtepi32_ps(v);
    *w1 = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0xF0)));
}

/* Q4's correction of a group's sums: sum - 8 * (x[b] + ... + x[e-1]), the sum of x in order. */
static inline float q4_xsum(const float *x, int b, int e) {
    float xs = 0.0f;
    for (int kk = b; kk < e; kk++) xs += x[kk];
    return xs;
}
AVX2 static INLINE __m256 q4_fix(__m256 sum, float xs) {
    return _mm256_fmadd_ps(_mm256_set1_ps(-8.0f), _mm256_set1_ps(xs), sum);
}
/* A group's sums of x times the whole bytes (rows 0..7, *lo) and times 16 high nibbles (rows 8..15,
 * *hi) into each row's sum of x times its value: low = bytes - high, high / 16, each less 8 xs. */
AVX2 static INLINE void q4_fix_pair(__m256 *lo, __m256 *hi, float xs) {
    *lo = q4_fix(_mm256_sub_ps(*lo, *hi), xs);
    *hi = q4_fix(_mm256_mul_ps(*hi, _mm256_set1_ps(0.0625f)), xs);
}

/* A quantized matrix's layout around its panels. */
typedef struct qmat {
    const uint8_t *q;
    const void *sc;
    int k, n_groups, group, sc16; /* sc16: the scales are f16 (else f32) */
    size_t step_bytes; /* 16 (Q8) or 8 (Q4) */
} qmat;

AVX2 static INLINE void q_step(int type, const qmat *m, int panel, int kk, __m256 *w0, __m256 *w1) {
    const uint8_t *q = m->q + ((size_t)panel * m->k + kk) * m->step_bytes;
    if (type == KERN_Q8) q8_step((const int8_t *)q, w0, w1);
    else q4_step(q, w0, w1);
}
/* The 16 rows' scales of group g of a panel as f32 (f16 widened exactly): rows 0..7 in *s0, 8..15 in *s1. */
AVX2 static INLINE void scales16(const void *sc, int sc16, int n_groups, int panel, int g, __m256 *s0, __m256 *s1) {
    size_t i = ((size_t)panel * n_groups + (size_t)g) * KERN_PANEL;
    if (sc16) {
        const __m128i *p = (const __m128i *)((const uint16_t *)sc + i);
        *s0 = _mm256_cvtph_ps(_mm_loadu_si128(p));
        *s1 = _mm256_cvtph_ps(_mm_loadu_si128(p + 1));
    } else {
        *s0 = _mm256_loadu_ps((const float *)sc + i);
        *s1 = _mm256_loadu_ps((const float *)sc + i + 8);
    }
}

/* One row x four panels, widening in registers (decode). xsum: Q4's sums of x per group, or NULL
 * to compute them here. */
AVX2 static INLINE void q_gemv4(int type, float *y, const float *x, const qmat *m, int panel, const float *xsum) {
    __m256 a[8]; /* the group's sums; the element's sums live in y (in registers too, GCC spilled) */
    size_t pstride = (size_t)m->k * m->step_bytes;
    for (int g = 0; g < m->n_groups; g++) {
        int b = g * m->group, e = group_end_at(g, m->group, m->k);
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
        for (int kk = b; kk < e; kk++) {
            __m256 xb = _mm256_broadcast_ss(x + kk);
            if (!(kk & 3))
                _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
                    _mm_prefetch((const char *)m->q + (size_t)(panel + p) * pstride + (size_t)kk * m->step_bytes + 768,
                                 _MM_HINT_T0);
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
                __m256 w0, w1;
                q_step(type, m, panel + p, kk, &w0, &w1);
                a[2 * p] = _mm256_fmadd_ps(xb, w0, a[2 * p]);
                a[2 * p + 1] = _mm256_fmadd_ps(xb, w1, a[2 * p + 1]);
            }
        }
        if (type == KERN_Q4) {
            float xs = xsum ? xsum[g] : q4_xsum(x, b, e);
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) q4_fix_pair(&a[2 * p], &a[2 * p + 1], xs);
        }
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            __m256 s0, s1;
            scales16(m->sc, m->sc16, m->n_groups, panel + p, g, &s0, &s1);
            float *yp = y + 16 * p;
            __m256 y0 = g ? _mm256_loadu_ps(yp) : _mm256_setzero_ps(), y1 = g ? _mm256_loadu_ps(yp + 8) : _mm256_setzero_ps();
            _mm256_storeu_ps(yp, _mm256_fmadd_ps(a[2 * p], s0, y0));
            _mm256_storeu_ps(yp + 8, _mm256_fmadd_ps(a[2 * p + 1], s1, y1));
        }
    }
}

/* Steps of a panel widened at a time for several rows (16 KiB of f32 on the stack), and the rows
 * whose group sums are kept at a time (3 KiB). */
#define Q_BLOCK 256
#define Q_ROWS 48

/* R rows (1..3) x one panel over whole groups g0 .. g1-1 widened in blk (from step kb): each group's
 * sums in registers, joined to the element in registers: 4R accumulators. Groups up to Q_BLOCK. */
AVX2 static INLINE void tile_groups(int type, float *y, int ldy, const float *x, int ldx, const float *blk, int kb,
                                    const qmat *m, int panel, int g0, int g1, int R, int cols, const float *xsum) {
    __m256 a0[3], a1[3], p0[3], p1[3];
    _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) {
        a0[r] = g0 ? load_cols(y + (size_t)r * ldy, cols) : _mm256_setzero_ps();
        a1[r] = g0 && cols > 8 ? load_cols(y + (size_t)r * ldy + 8, cols - 8) : _mm256_setzero_ps();
    }
    for (int g = g0; g < g1; g++) {
        int b = g * m->group, e = group_end_at(g, m->group, m->k);
        _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) p0[r] = p1[r] = _mm256_setzero_ps();
        for (int kk = b; kk < e; kk++) {
            const float *w = blk + (size_t)(kk - kb) * KERN_PANEL;
            __m256 w0 = _mm256_load_ps(w), w1 = _mm256_load_ps(w + 8);
            _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) {
                __m256 xb = _mm256_broadcast_ss(x + (size_t)r * ldx + kk);
                p0[r] = _mm256_fmadd_ps(xb, w0, p0[r]);
                p1[r] = _mm256_fmadd_ps(xb, w1, p1[r]);
            }
        }
        if (type == KERN_Q4) /* xsum: [R][n_groups], the rows' sums of x per group */
            _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) {
                float xs = xsum ? xsum[(size_t)r * m->n_groups + g] : q4_xsum(x + (size_t)r * ldx, b, e);
                q4_fix_pair(&p0[r], &p1[r], xs);
            }
        __m256 s0, s1;
        scales16(m->sc, m->sc16, m->n_groups, panel, g, &s0, &s1);
        _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) {
            a0[r] = _mm256_fmadd_ps(p0[r], s0, a0[r]);
            a1[r] = _mm256_fmadd_ps(p1[r], s1, a1[r]);
        }
    }
    _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) store_cols(y + (size_t)r * ldy, a0[r], a1[r], cols);
}

AVX2 static INLINE void widen_steps(int type, const qmat *m, int panel, int kb, int len, float *blk) {
    for (int kk = 0; kk < len; kk++) {
        __m256 w0, w1;
        q_step(type, m, panel, kb + kk, &w0, &w1);
        _mm256_store_ps(blk + kk * KERN_PANEL, w0);
        _mm256_store_ps(blk + kk * KERN_PANEL + 8, w1);
    }
}

/* Q4's per-row, per-group sums of x for a chunk of rows: [rows][n_groups] (32 KiB on the stack). */
#define Q_XSUM 8192

AVX2 static INLINE void matmul_q(int type, float *y, int ldy, const float *x, const kern_mat *km, int n, int k,
                                 int ob, int oe) {
    int n_groups = kern_q_groups(k, km->group);
    qmat m = {km->w, km->scales, k, n_groups, km->group, km->scale_type == KERN_F16, type == KERN_Q8 ? 16 : 8};
    int p_begin = ob;
    float blk[Q_BLOCK * KERN_PANEL] __attribute__((aligned(32))), part[Q_ROWS * KERN_PANEL] __attribute__((aligned(32)));
    float xsum[Q_XSUM];
    if (n == 1) { /* Q4's sums of x once for every panel (a scalar chain per group), not once per four */
        int pre = type == KERN_Q4 && n_groups <= Q_XSUM;
        for (int g = 0; pre && g < n_groups; g++) xsum[g] = q4_xsum(x, g * m.group, group_end_at(g, m.group, k));
        for (; p_begin + 4 * KERN_PANEL <= oe; p_begin += 4 * KERN_PANEL)
            q_gemv4(type, y + p_begin, x, &m, p_begin / KERN_PANEL, pre ? xsum : NULL);
    }
    /* rows in chunks whose Q4 sums of x fit xsum, computed once for every panel */
    int chunk = n_groups <= Q_XSUM ? Q_XSUM / n_groups : 1;
    for (int c0 = 0; c0 < n && p_begin < oe; c0 += chunk) {
        int cn = n - c0 < chunk ? n - c0 : chunk;
        const float *xc = x + (size_t)c0 * k;
        float *yc = y + (size_t)c0 * ldy;
        if (type == KERN_Q4 && n_groups <= Q_XSUM)
            for (int r = 0; r < cn; r++)
                for (int g = 0; g < n_groups; g++)
                    xsum[r * n_groups + g] = q4_xsum(xc + (size_t)r * k, g * m.group, group_end_at(g, m.group, k));
        for (int p0 = p_begin; p0 < oe; p0 += KERN_PANEL) {
            int cols = oe - p0 < KERN_PANEL ? oe - p0 : KERN_PANEL, panel = p0 / KERN_PANEL;
            if (m.group <= Q_BLOCK) { /* small groups: blocks of whole groups, sums kept in registers */
                int per = Q_BLOCK / m.group;
                for (int g0 = 0; g0 < n_groups; g0 += per) {
                    int g1 = g0 + per < n_groups ? g0 + per : n_groups, kb = g0 * m.group;
                    int len = (g1 * m.group < k ? g1 * m.group : k) - kb;
                    widen_steps(type, &m, panel, kb, len, blk);
                    int r = 0;
#define Q_TILE(R) tile_groups(type, yc + (size_t)r * ldy + p0, ldy, xc + (size_t)r * k, k, blk, kb, &m, panel, g0, g1, R, cols, \
                              n_groups <= Q_XSUM ? xsum + (size_t)r * n_groups : NULL)
                    for (; r + 3 <= cn; r += 3) Q_TILE(3);
                    if (cn - r == 2) Q_TILE(2);
                    else if (cn - r == 1) Q_TILE(1);
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
                        widen_steps(type, &m, panel, kb, len, blk);
                        tiles_f32(part, KERN_PANEL, xc + (size_t)r0 * k + kb, k, rows, len, blk, 0, KERN_PANEL, kb > b);
                    }
                    __m256 s0, s1;
                    scales16(m.sc, m.sc16, n_groups, panel, g, &s0, &s1);
                    for (int r = 0; r < rows; r++) {
                        float *yo = yr + (size_t)r * ldy;
                        __m256 y0 = g ? load_cols(yo, cols) : _mm256_setzero_ps();
                        __m256 y1 = g && cols > 8 ? load_cols(yo + 8, cols - 8) : _mm256_setzero_ps();
                        __m256 q0 = _mm256_load_ps(part + r * KERN_PANEL), q1 = _mm256_load_ps(part + r * KERN_PANEL + 8);
                        if (type == KERN_Q4) {
                            float xs = n_groups <= Q_XSUM ? xsum[(size_t)(r0 + r) * n_groups + g] : q4_xsum(xc + (size_t)(r0 + r) * k, b, e);
                            q4_fix_pair(&q0, &q1, xs);
                        }
                        y0 = _mm256_fmadd_ps(q0, s0, y0);
                        y1 = _mm256_fmadd_ps(q1, s1, y1);
                        store_cols(yo, y0, y1, cols);
                    }
                }
            }
        }
    }
}

/* ---- integer dot products (I8, I4): per pair step, 16 rows' pairs widened to two vectors of
 * int16; vpmaddwd with the input's pair gives each row's two products summed in int32. */

/* The 32 values of pair step `step` of a panel as int16: rows 0..7 in *lo, rows 8..15 in *hi. */
AVX2 static INLINE void i_step(int type, const uint8_t *w, size_t step, __m256i *lo, __m256i *hi) {
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

typedef struct imat {
    const uint8_t *w;
    const void *sc;
    const float *wsum;
    int k, half, n_groups, group, sc16; /* sc16: the scales are f16 (else f32) */
} imat;

/* The float terms of group g joined to acc: acc += (dot - zero * wsum) * scale, for 16 rows. */
AVX2 static INLINE void i_join(const imat *m, int panel, int g, int32_t zero, __m256i d0, __m256i d1, __m256 *a0,
                               __m256 *a1) {
    size_t si = ((size_t)panel * m->n_groups + (size_t)g) * KERN_PANEL;
    if (zero) {
        __m256i z = _mm256_set1_epi32(zero);
        d0 = _mm256_sub_epi32(d0, _mm256_mullo_epi32(z, _mm256_cvttps_epi32(_mm256_loadu_ps(m->wsum + si))));
        d1 = _mm256_sub_epi32(d1, _mm256_mullo_epi32(z, _mm256_cvttps_epi32(_mm256_loadu_ps(m->wsum + si + 8))));
    }
    __m256 s0, s1;
    scales16(m->sc, m->sc16, m->n_groups, panel, g, &s0, &s1);
    *a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), s0, *a0);
    *a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), s1, *a1);
}

/* One row x four panels (decode): 8 int32 accumulators per group, the float terms in memory. */
AVX2 static INLINE void i_gemv4(int type, float *y, const int32_t *xp, float xs, int32_t zero, const imat *m, int panel) {
    __m256 acc[8];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    size_t steps = (size_t)m->half, bytes = type == KERN_I8 ? 32 : 16;
    for (int g = 0; g < m->n_groups; g++) {
        int b = g * m->group / 2, e = group_end_at(g, m->group, m->k) / 2;
        __m256i d[8];
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) d[i] = _mm256_setzero_si256();
        for (int st = b; st < e; st++) {
            __m256i xv = _mm256_set1_epi32(xp[st]);
            if (!(st & 1))
                _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
                    _mm_prefetch((const char *)m->w + ((size_t)(panel + p) * steps + (size_t)st) * bytes + 1024, _MM_HINT_T0);
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
                __m256i lo, hi;
                i_step(type, m->w, (size_t)(panel + p) * steps + (size_t)st, &lo, &hi);
                d[2 * p] = _mm256_add_epi32(d[2 * p], _mm256_madd_epi16(lo, xv));
                d[2 * p + 1] = _mm256_add_epi32(d[2 * p + 1], _mm256_madd_epi16(hi, xv));
            }
        }
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) i_join(m, panel + p, g, zero, d[2 * p], d[2 * p + 1], &acc[2 * p], &acc[2 * p + 1]);
    }
    __m256 s = _mm256_set1_ps(xs);
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
        store_cols(y + 16 * p, _mm256_mul_ps(acc[2 * p], s), _mm256_mul_ps(acc[2 * p + 1], s), KERN_PANEL);
}

/* ---- I4 by vpmaddubsw: a pair step's 32 stored nibbles (value + 8, 0..15) as unsigned bytes times
 * the input's pair as signed bytes, each row's pair summed in int16 (at most 2 * 15 * 128 = 3,840),
 * eight steps added in int16 (30,720 < 32,767) before they widen to int32; the offset of 8 comes off
 * per group as 8 times the input's sum over the group (the prefix sums of kern_qx). */

/* The 32 nibbles of I4 pair step at w as bytes: rows 0..7's pairs in the low lane, 8..15's in the high. */
AVX2 static INLINE __m256i i4_bytes(const uint8_t *w) {
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)w));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}

AVX2 static INLINE void i4_gemv4(float *y, const kern_qx *x, const imat *m, int panel) {
    __m256 acc[8];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    size_t steps = (size_t)m->half;
    for (int g = 0; g < m->n_groups; g++) {
        int b = g * m->group / 2, e = group_end_at(g, m->group, m->k) / 2;
        __m256i d[8];
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) d[i] = _mm256_setzero_si256();
        for (int st = b; st < e; st += 8) {
            int end = st + 8 < e ? st + 8 : e;
            __m256i a[4];
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) a[p] = _mm256_setzero_si256();
            for (int s2 = st; s2 < end; s2++) {
                __m256i xv = _mm256_set1_epi16((short)x->bytes[s2]);
                if (!(s2 & 3))
                    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
                        _mm_prefetch((const char *)m->w + ((size_t)(panel + p) * steps + (size_t)s2) * 16 + 1024, _MM_HINT_T0);
                _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
                    a[p] = _mm256_add_epi16(a[p], _mm256_maddubs_epi16(i4_bytes(m->w + ((size_t)(panel + p) * steps + (size_t)s2) * 16), xv));
            }
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
                d[2 * p] = _mm256_add_epi32(d[2 * p], _mm256_cvtepi16_epi32(_mm256_castsi256_si128(a[p])));
                d[2 * p + 1] = _mm256_add_epi32(d[2 * p + 1], _mm256_cvtepi16_epi32(_mm256_extracti128_si256(a[p], 1)));
            }
        }
        __m256i off = _mm256_set1_epi32(8 * (x->psum[e] - x->psum[b]));
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
            i_join(m, panel + p, g, x->zero[0], _mm256_sub_epi32(d[2 * p], off), _mm256_sub_epi32(d[2 * p + 1], off),
                   &acc[2 * p], &acc[2 * p + 1]);
    }
    __m256 s = _mm256_set1_ps(x->scale[0]);
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
        store_cols(y + 16 * p, _mm256_mul_ps(acc[2 * p], s), _mm256_mul_ps(acc[2 * p + 1], s), KERN_PANEL);
}

/* The float sums of R rows of a panel's tile: from y, or zero before the first group (g0 = 0). */
AVX2 static INLINE void sums_load(const float *y, int ldy, int g0, int R, int cols, __m256 *a0, __m256 *a1) {
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        a0[r] = g0 ? load_cols(y + (size_t)r * ldy, cols) : _mm256_setzero_ps();
        a1[r] = g0 && cols > 8 ? load_cols(y + (size_t)r * ldy + 8, cols - 8) : _mm256_setzero_ps();
    }
}
/* ... and back to y, times the rows' input scales after the last group. */
AVX2 static INLINE void sums_store(float *y, int ldy, const kern_qx *x, int r0, int last, int R, int cols, __m256 *a0,
                                   __m256 *a1) {
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        if (last) {
            __m256 sc = _mm256_set1_ps(x->scale[r0 + r]);
            a0[r] = _mm256_mul_ps(a0[r], sc), a1[r] = _mm256_mul_ps(a1[r], sc);
        }
        store_cols(y + (size_t)r * ldy, a0[r], a1[r], cols);
    }
}

/* Adds to R rows' int32 sums (d0: rows 0..7 of the panel, d1: rows 8..15) the products of pair steps
 * b .. e-1 held in blk from step sb: I8 as int16 pairs (i_step) by vpmaddwd; I4 as bytes (i4_bytes)
 * by vpmaddubsw, eight steps in int16 and then widened (the offset of 8 is the caller's). */
AVX2 static INLINE void i_dots(int type, const int16_t *blk, int sb, const kern_qx *x, int r0, const imat *m, int b,
                               int e, int R, __m256i *d0, __m256i *d1) {
    if (type == KERN_I8) {
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
        return;
    }
    const uint16_t *xb = x->bytes + (size_t)r0 * m->half;
    const uint8_t *bytes = (const uint8_t *)blk;
    for (int st = b; st < e; st += 8) {
        int end = st + 8 < e ? st + 8 : e;
        __m256i h[6];
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) h[r] = _mm256_setzero_si256();
        for (int s2 = st; s2 < end; s2++) {
            __m256i w = _mm256_load_si256((const __m256i *)(bytes + (size_t)(s2 - sb) * 32));
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++)
                h[r] = _mm256_add_epi16(h[r], _mm256_maddubs_epi16(w, _mm256_set1_epi16((short)xb[(size_t)r * m->half + (size_t)s2])));
        }
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
            d0[r] = _mm256_add_epi32(d0[r], _mm256_cvtepi16_epi32(_mm256_castsi256_si128(h[r])));
            d1[r] = _mm256_add_epi32(d1[r], _mm256_cvtepi16_epi32(_mm256_extracti128_si256(h[r], 1)));
        }
    }
}

/* The weights' offset off R rows' sums of group pairs b .. e-1: unit times the input's sum over them
 * (its prefix sums). unit: 8 for I4's stored nibbles, 128 for I8 made unsigned (vpdpbusd), 0: none. */
AVX2 static INLINE void i_offset(int unit, const kern_qx *x, int r0, const imat *m, int b, int e, int R, __m256i *d0,
                                 __m256i *d1) {
    if (!unit) return;
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        const int32_t *ps = x->psum + (size_t)(r0 + r) * (m->half + 1);
        __m256i off = _mm256_set1_epi32((int32_t)((uint32_t)unit * (uint32_t)(ps[e] - ps[b])));
        d0[r] = _mm256_sub_epi32(d0[r], off), d1[r] = _mm256_sub_epi32(d1[r], off);
    }
}

/* A long group's int32 sums of R rows between blocks: carry [R][16], read when cont (else zero)... */
AVX2 static INLINE void carry_load(const int32_t *carry, int cont, int R, __m256i *d0, __m256i *d1) {
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        d0[r] = cont ? _mm256_loadu_si256((const __m256i *)(carry + r * 16)) : _mm256_setzero_si256();
        d1[r] = cont ? _mm256_loadu_si256((const __m256i *)(carry + r * 16 + 8)) : _mm256_setzero_si256();
    }
}
/* ... and written when the group goes on in the next block. */
AVX2 static INLINE void carry_store(int32_t *carry, int R, const __m256i *d0, const __m256i *d1) {
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        _mm256_storeu_si256((__m256i *)(carry + r * 16), d0[r]);
        _mm256_storeu_si256((__m256i *)(carry + r * 16 + 8), d1[r]);
    }
}

/* The end of group g for R rows: the offset off (unit, as i_offset), the group's terms joined to the
 * float sums kept in y (read back unless it is the first group), the rows' scales after the last. */
AVX2 static INLINE void group_end(int unit, float *y, int ldy, const kern_qx *x, int r0, const imat *m, int panel, int g,
                                  int R, int cols, __m256i *d0, __m256i *d1) {
    int gb = g * m->group / 2, ge = group_end_at(g, m->group, m->k) / 2;
    i_offset(unit, x, r0, m, gb, ge, R, d0, d1);
    __m256 a0[6], a1[6];
    sums_load(y, ldy, g, R, cols, a0, a1);
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) i_join(m, panel, g, x->zero[r0 + r], d0[r], d1[r], &a0[r], &a1[r]);
    sums_store(y, ldy, x, r0, g == m->n_groups - 1, R, cols, a0, a1);
}

/* R rows (1..5) x one panel over the pair steps sb .. se-1 of one long group g (blk as i_dots reads
 * it); carry holds the rows' int32 sums between blocks (carry_load, carry_store); the group's end
 * as group_end. */
AVX2 static INLINE void i_tile(int type, float *y, int ldy, const kern_qx *x, int r0, const int16_t *blk, int sb,
                               int se, const imat *m, int panel, int g, int R, int cols, int32_t *carry, int cont) {
    int ge = group_end_at(g, m->group, m->k) / 2;
    __m256i d0[6], d1[6];
    carry_load(carry, cont, R, d0, d1);
    i_dots(type, blk, sb, x, r0, m, sb, se, R, d0, d1);
    if (se < ge) carry_store(carry, R, d0, d1); /* the group goes on in the next block */
    else group_end(type == KERN_I4 ? 8 : 0, y, ldy, x, r0, m, panel, g, R, cols, d0, d1);
}

/* As i_tile for blocks of whole groups (g0 .. g1-1 from pair step sb, none cut by the block): the
 * rows' float sums stay in registers from group to group instead of going through y after every
 * group, which had cost about as much as a group's products. R rows: up to 3 for I8 (12 accumulators,
 * two weight vectors, one input), up to 2 for I4 (its int16 sums of eight steps take one more
 * register per row). The same float operations in the same order as i_tile. */
AVX2 static INLINE void i_tile_groups(int type, float *y, int ldy, const kern_qx *x, int r0, const int16_t *blk, int sb,
                                      const imat *m, int panel, int g0, int g1, int R, int cols) {
    __m256 a0[3], a1[3];
    sums_load(y, ldy, g0, R, cols, a0, a1);
    for (int g = g0; g < g1; g++) {
        int b = g * m->group / 2, e = group_end_at(g, m->group, m->k) / 2;
        __m256i d0[3], d1[3];
        _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) d0[r] = d1[r] = _mm256_setzero_si256();
        i_dots(type, blk, sb, x, r0, m, b, e, R, d0, d1);
        i_offset(type == KERN_I4 ? 8 : 0, x, r0, m, b, e, R, d0, d1);
        _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) i_join(m, panel, g, x->zero[r0 + r], d0[r], d1[r], &a0[r], &a1[r]);
    }
    sums_store(y, ldy, x, r0, g1 == m->n_groups, R, cols, a0, a1);
}

/* Pair steps of a panel widened to int16 at a time for several rows: 16 KiB on the stack; rows of
 * a long group's int32 sums carried between blocks: 3 KiB. */
#define I_BLOCK 256

/* ---- I8 and I4 by vpdpbusd (AVX-VNNI, where the CPU has it): four values along k of a row times
 * four int8 inputs summed into int32 by one instruction, no int16 stage. A block's pair steps are
 * regrouped two by two into quad steps of 64 bytes (rows 0..7's quads, then rows 8..15's), each
 * weight as an unsigned byte: I8's value + 128, I4's stored nibble (value + 8). The offset comes off
 * per group as 128 (I8) or 8 (I4) times the input's sum over the group, so the int32 sums are the
 * twin's exactly (int32 wraps, but the final sum fits). A group with an odd number of pairs ends
 * with a half quad, its other half zero. */

/* Pair step st of panel wp as unsigned bytes: rows 0..7's pairs in the low lane, 8..15's in the high. */
VNNI static INLINE __m256i v_pair(int type, const uint8_t *wp, int st) {
    if (type == KERN_I4) return i4_bytes(wp + (size_t)st * 16);
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(wp + (size_t)st * 32)), _mm256_set1_epi8((char)0x80));
}

/* Pair steps b .. e-1 of panel wp as quad steps at dst (64 bytes each). */
VNNI static INLINE void v_quads(int type, const uint8_t *wp, int b, int e, uint8_t *dst) {
    for (int st = b; st < e; st += 2, dst += 64) {
        __m256i a = v_pair(type, wp, st), c = st + 1 < e ? v_pair(type, wp, st + 1) : _mm256_setzero_si256();
        __m256i lo = _mm256_unpacklo_epi16(a, c), hi = _mm256_unpackhi_epi16(a, c); /* rows 0-3|8-11, 4-7|12-15 */
        _mm256_store_si256((__m256i *)dst, _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_store_si256((__m256i *)(dst + 32), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
}

/* R rows' int32 sums (d0: rows 0..7 of the panel, d1: 8..15) over pair steps b .. e-1 of one group,
 * whose quads start at wq; xb is row 0's input bytes, half the pairs per row. */
VNNI static INLINE void v_dots(const uint8_t *wq, const uint16_t *xb, size_t half, int b, int e, int R, __m256i *d0,
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

/* As i_tile, over the quad steps in blk (v_quads) of one long group g. */
VNNI static INLINE void v_tile(int type, float *y, int ldy, const kern_qx *x, int r0, const uint8_t *blk, int sb, int se,
                               const imat *m, int panel, int g, int R, int cols, int32_t *carry, int cont) {
    int ge = group_end_at(g, m->group, m->k) / 2;
    __m256i d0[6], d1[6];
    carry_load(carry, cont, R, d0, d1);
    v_dots(blk, x->bytes + (size_t)r0 * m->half, (size_t)m->half, sb, se, R, d0, d1);
    if (se < ge) carry_store(carry, R, d0, d1); /* the group goes on in the next block */
    else group_end(type == KERN_I8 ? 128 : 8, y, ldy, x, r0, m, panel, g, R, cols, d0, d1);
}

/* As v_tile for blocks of whole groups (g0 .. g1-1, none cut by the block), R rows (1..3): the rows'
 * float sums stay in registers from group to group (4R accumulators with the int32 ones: 15 registers
 * at three rows) instead of going through y after every group, which cost as much as a group of 32
 * values' vpdpbusd. The float operations and their order are v_tile's. */
VNNI static INLINE void v_tile_groups(int type, float *y, int ldy, const kern_qx *x, int r0, const uint8_t *blk,
                                      int slot, const imat *m, int panel, int g0, int g1, int R, int cols) {
    const uint16_t *xb = x->bytes + (size_t)r0 * m->half;
    __m256 a0[3], a1[3];
    sums_load(y, ldy, g0, R, cols, a0, a1);
    for (int g = g0; g < g1; g++) {
        int b = g * m->group / 2, e = group_end_at(g, m->group, m->k) / 2;
        __m256i d0[3], d1[3];
        _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) d0[r] = d1[r] = _mm256_setzero_si256();
        v_dots(blk + (size_t)(g - g0) * (size_t)slot * 64, xb, (size_t)m->half, b, e, R, d0, d1);
        i_offset(type == KERN_I8 ? 128 : 8, x, r0, m, b, e, R, d0, d1);
        _Pragma("GCC unroll 3") for (int r = 0; r < R; r++) i_join(m, panel, g, x->zero[r0 + r], d0[r], d1[r], &a0[r], &a1[r]);
    }
    sums_store(y, ldy, x, r0, g1 == m->n_groups, R, cols, a0, a1);
}

/* One block of matmul_i by vpdpbusd: the pair steps sb .. se-1 of groups g0 .. g1-1 regrouped into
 * quads in blk (at most I_BLOCK / 2 quads of 64 bytes, plus one half quad per odd group: it fits the
 * int16 block's 16 KiB), then rows r0 .. r0+rows-1: three at a time over whole groups, six over a
 * long group. y points at the panel's column. */
VNNI static void v_block(int type, float *y, int ldy, const kern_qx *x, const uint8_t *wp, uint8_t *blk, int sb,
                         int se, const imat *m, int panel, int g0, int g1, int r0, int rows, int cols,
                         int32_t *carry, int cont) {
    int slot = (m->group / 2 + 1) / 2; /* quads per whole group */
    for (int g = g0; g < g1; g++) {
        int gb = g * m->group / 2, ge = group_end_at(g, m->group, m->k) / 2;
        v_quads(type, wp, gb > sb ? gb : sb, ge < se ? ge : se, blk + (size_t)(g - g0) * (size_t)slot * 64);
    }
    int r = r0, end = r0 + rows;
    if (m->group / 2 <= I_BLOCK) { /* whole groups: float sums in registers, three rows at a time */
#define V_GROUPS(R) v_tile_groups(type, y + (size_t)r * ldy, ldy, x, r, blk, slot, m, panel, g0, g1, R, cols)
        for (; r + 3 <= end; r += 3) V_GROUPS(3);
        if (end - r == 2) V_GROUPS(2);
        else if (end - r == 1) V_GROUPS(1);
#undef V_GROUPS
        return;
    }
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

/* vnni: blocks by vpdpbusd (v_block) instead of the AVX2 tiles. */
AVX2 static INLINE void matmul_i(int type, int vnni, float *y, int ldy, const kern_qx *x, const kern_mat *km, int n,
                                 int k, int ob, int oe) {
    int n_groups = kern_q_groups(k, km->group);
    imat m = {km->w, km->scales, km->wsum, k, k / 2, n_groups, km->group, km->scale_type == KERN_F16};
    size_t bytes = type == KERN_I8 ? 32 : 16;
    int p0 = ob;
    if (n == 1)
        for (; p0 + 4 * KERN_PANEL <= oe; p0 += 4 * KERN_PANEL) {
            if (type == KERN_I4) i4_gemv4(y + p0, x, &m, p0 / KERN_PANEL);
            else i_gemv4(type, y + p0, x->pairs, x->scale[0], x->zero[0], &m, p0 / KERN_PANEL);
        }
    int16_t blk[I_BLOCK * 32] __attribute__((aligned(32)));
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
                    if (vnni) {
                        v_block(type, y + p0, ldy, x, wp, (uint8_t *)blk, sb, se, &m, panel, g0, g1, r0, rows, cols, carry, sb > gs);
                        continue;
                    }
                    for (int st = sb; st < se; st++) {
                        if (type == KERN_I4) { /* bytes for vpmaddubsw */
                            _mm256_store_si256((__m256i *)((uint8_t *)blk + (size_t)(st - sb) * 32), i4_bytes(wp + (size_t)st * 16));
                            continue;
                        }
                        __m256i lo, hi;
                        i_step(type, wp, (size_t)st, &lo, &hi);
                        _mm256_store_si256((__m256i *)(blk + (size_t)(st - sb) * 32), lo);
                        _mm256_store_si256((__m256i *)(blk + (size_t)(st - sb) * 32 + 16), hi);
                    }
                    int r = r0, end = r0 + rows, cont = sb > gs;
                    if (per) { /* whole groups: float sums in registers */
#define I_GROUPS(R) i_tile_groups(type, y + (size_t)r * ldy + p0, ldy, x, r, blk, sb, &m, panel, g0, g1, R, cols)
                        if (type == KERN_I8) {
                            for (; r + 3 <= end; r += 3) I_GROUPS(3);
                            if (end - r == 2) I_GROUPS(2);
                            else if (end - r == 1) I_GROUPS(1);
                        } else {
                            for (; r + 2 <= end; r += 2) I_GROUPS(2);
                            if (end - r == 1) I_GROUPS(1);
                        }
#undef I_GROUPS
                        continue;
                    }
#define I_TILE(R) \
    i_tile(type, y + (size_t)r * ldy + p0, ldy, x, r, blk, sb, se, &m, panel, g0, R, cols, carry + (r - r0) * 16, cont)
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

AVX2 static void matmul_i8(int vnni, float *y, int ldy, const kern_qx *x, const kern_mat *m, int n, int k, int ob, int oe) {
    matmul_i(KERN_I8, vnni, y, ldy, x, m, n, k, ob, oe);
}
AVX2 static void matmul_i4(int vnni, float *y, int ldy, const kern_qx *x, const kern_mat *m, int n, int k, int ob, int oe) {
    matmul_i(KERN_I4, vnni, y, ldy, x, m, n, k, ob, oe);
}

AVX2 static void matmul_q8(float *y, int ldy, const float *x, const kern_mat *m, int n, int d, int k, int ob, int oe) {
    (void)d;
    matmul_q(KERN_Q8, y, ldy, x, m, n, k, ob, oe);
}
AVX2 static void matmul_q4(float *y, int ldy, const float *x, const kern_mat *m, int n, int d, int k, int ob, int oe) {
    (void)d;
    matmul_q(KERN_Q4, y, ldy, x, m, n, k, ob, oe);
}
#endif

#ifdef KERN_X86
/* The activation quantizer in AVX2: the same values as the scalar one (roundf's halves away from
 * zero as truncation plus a step, NaN to the lowest value, max ignoring NaN). */
AVX2 static float amax_avx2(const float *xr, int k) {
    __m256 m = _mm256_setzero_ps(), abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    int i = 0;
    for (; i + 8 <= k; i += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xr + i), abs), m); /* NaN: keeps m */
    float t[8], amax = 0.0f;
    _mm256_storeu_ps(t, m);
    for (int j = 0; j < 8; j++) amax = t[j] > amax ? t[j] : amax;
    for (; i < k; i++) amax = fabsf(xr[i]) > amax ? fabsf(xr[i]) : amax;
    return amax;
}

AVX2 static void values_avx2(int32_t *v, const float *xr, int len, float inv, int32_t zero, int32_t lo) {
    __m256 vi = _mm256_set1_ps(inv), vz = _mm256_set1_ps((float)zero), vlo = _mm256_set1_ps((float)lo);
    __m256 hi = _mm256_set1_ps(127.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)), abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    int i = 0;
    for (; i + 8 <= len; i += 8) {
        __m256 f = _mm256_mul_ps(_mm256_loadu_ps(xr + i), vi);
        __m256 t = _mm256_round_ps(f, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), d = _mm256_sub_ps(f, t);
        __m256 step = _mm256_and_ps(_mm256_cmp_ps(_mm256_and_ps(d, abs), half, _CMP_GE_OQ),
                                    _mm256_or_ps(_mm256_and_ps(f, sign), one)); /* +-1 where |d| >= 0.5 */
        f = _mm256_add_ps(_mm256_add_ps(t, step), vz);
        f = _mm256_min_ps(_mm256_max_ps(f, vlo), hi); /* max(NaN, lo) is lo */
        _mm256_storeu_si256((__m256i *)(v + i), _mm256_cvttps_epi32(f));
    }
    values_ref(v + i, xr + i, len - i, inv, zero, lo);
}
#endif

typedef void (*matmul_fn)(float *, int, const float *, const kern_mat *, int, int, int, int, int);
static matmul_fn matmul_impl[5];
static int use_portable = 1, use_vnni = 0, limit = KERN_BEST;

void kern_quantize_x(kern_qx *qx, const float *x, int n, int k, const float *stat) {
#ifdef KERN_X86
    if (!use_portable) {
        quantize_x_rows(qx, x, n, k, stat, amax_avx2, values_avx2);
        return;
    }
#endif
    kern_quantize_x_ref(qx, x, n, k, stat);
}

#ifdef KERN_X86
#include <cpuid.h>
/* AVX2, FMA and F16C from CPUID, and the OS saving the YMM registers (XGETBV): the same answer with
 * GCC and clang (clang's __builtin_cpu_supports has no "f16c"). */
static int cpu_has_avx2_fma_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(fma && osxsave && avx && f16c)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6) != 6) return 0; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 5) & 1;
}

/* AVX-VNNI (the VEX vpdpbusd on ymm registers): CPUID leaf 7, subleaf 1, EAX bit 4. */
static int cpu_has_avx_vnni(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    return (a >> 4) & 1;
}
#endif

/* The cap from the environment: ETCH_KERNELS=avx2 (no VNNI) or portable; anything else: none. */
static int env_limit(void) {
    const char *e = getenv("ETCH_KERNELS");
    if (!e) return KERN_BEST;
    return !strcmp(e, "portable") ? KERN_PORTABLE : !strcmp(e, "avx2") ? KERN_NO_VNNI : KERN_BEST;
}

const char *kern_init(void) {
    int cap = env_limit() > limit ? env_limit() : limit;
#ifdef KERN_X86
    if (cap != KERN_PORTABLE && cpu_has_avx2_fma_f16c()) {
        matmul_impl[KERN_F32] = matmul_f32;
        matmul_impl[KERN_F16] = matmul_f16;
        matmul_impl[KERN_BF16] = matmul_bf16;
        matmul_impl[KERN_Q8] = matmul_q8;
        matmul_impl[KERN_Q4] = matmul_q4;
        use_portable = 0;
        use_vnni = cap == KERN_BEST && cpu_has_avx_vnni();
        return use_vnni ? "avx2+vnni" : "avx2";
    }
#endif
    use_portable = 1, use_vnni = 0;
    return "portable";
}

const char *kern_limit(int level) {
    limit = level;
    return kern_init();
}

void kern_matmul_i(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int o_begin, int o_end) {
#ifdef KERN_X86
    if (!use_portable) {
        int vnni = use_vnni && n > 1; /* decode keeps the AVX2 GEMV */
        if (w->type == KERN_I8) matmul_i8(vnni, y, ldy, x, w, n, k, o_begin, o_end);
        else matmul_i4(vnni, y, ldy, x, w, n, k, o_begin, o_end);
        return;
    }
#endif
    kern_matmul_i_ref(y, ldy, x, w, n, d, k, o_begin, o_end);
}

void kern_matmul(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int o_begin, int o_end) {
    if (use_portable) matmul_portable(y, ldy, x, w, n, d, k, o_begin, o_end);
    else matmul_impl[w->type](y, ldy, x, w, n, d, k, o_begin, o_end);
}

/* ------------------------------------------------------------------ the rest */

void kern_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps) {
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        float *orow = out + (size_t)r * dim;
        float ss = 0.0f;
        for (int i = 0; i < dim; i++) ss += xr[i] * xr[i];
        ss = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int i = 0; i < dim; i++) orow[i] = w[i] * (ss * xr[i]);
    }
}

void kern_rope_freqs(float *inv_freq, int head_dim, float base) {
    for (int i = 0; i < head_dim / 2; i++) inv_freq[i] = 1.0f / powf(base, (float)(2 * i) / (float)head_dim);
}

void kern_rope_llama3(float *inv_freq, int head_dim, float factor, float low_freq_factor, float high_freq_factor,
                      float original_context_len) {
    const double pi = 3.14159265358979323846;
    double low_wavelen = original_context_len / low_freq_factor, high_wavelen = original_context_len / high_freq_factor;
    for (int i = 0; i < head_dim / 2; i++) {
        double f = inv_freq[i], wavelen = 2.0 * pi / f;
        if (wavelen > low_wavelen) f /= factor;
        else if (wavelen >= high_wavelen) {
            double smooth = (original_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            f = (1.0 - smooth) * f / factor + smooth * f;
        }
        inv_freq[i] = (float)f;
    }
}

void kern_rope(float *v, int n, int n_heads, int head_dim, int start_pos, const float *inv_freq, int style) {
    int half = head_dim / 2;
    for (int r = 0; r < n; r++) {
        float pos = (float)(start_pos + r);
        for (int i = 0; i < half; i++) {
            float a = pos * inv_freq[i], c = cosf(a), s = sinf(a);
            int i0 = style == KERN_ROPE_ADJACENT ? 2 * i : i;
            int i1 = style == KERN_ROPE_ADJACENT ? 2 * i + 1 : i + half;
            for (int h = 0; h < n_heads; h++) {
                float *x = v + ((size_t)r * n_heads + h) * head_dim;
                float x0 = x[i0], x1 = x[i1];
                x[i0] = x0 * c - x1 * s;
                x[i1] = x0 * s + x1 * c;
            }
        }
    }
}

void kern_softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    for (int i = 0; i < n; i++) x[i] /= sum;
}

/* The keys query position p sees: lo .. p. */
static inline int att_first_key(const kern_att_shape *a, int p) {
    return a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
}

void kern_attention_ref(float *out, const float *q, const float *k_cache, const float *v_cache, int n,
                        int start_pos, const kern_att_shape *a, float *scores, int g_begin, int g_end) {
    int hd = a->head_dim, kv_dim = a->n_kv_heads * hd, group = a->n_heads / a->n_kv_heads;
    for (int r = 0; r < n; r++) {
        int p = start_pos + r, lo = att_first_key(a, p), len = p - lo + 1;
        for (int h = g_begin * group; h < g_end * group; h++) {
            const float *qh = q + ((size_t)r * a->n_heads + h) * hd;
            int kvh = h / group;
            for (int t = 0; t < len; t++) {
                const float *kt = k_cache + (size_t)((lo + t) % a->cache_rows) * kv_dim + (size_t)kvh * hd;
                float s = 0.0f;
                for (int i = 0; i < hd; i++) s += qh[i] * kt[i];
                scores[t] = s / a->score_div;
            }
            kern_softmax(scores, len);
            float *oh = out + ((size_t)r * a->n_heads + h) * hd;
            memset(oh, 0, (size_t)hd * sizeof *oh);
            for (int t = 0; t < len; t++) {
                const float *vt = v_cache + (size_t)((lo + t) % a->cache_rows) * kv_dim + (size_t)kvh * hd;
                float w = scores[t];
                for (int i = 0; i < hd; i++) oh[i] += w * vt[i];
            }
        }
    }
}

#ifdef KERN_X86
AVX2 static INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* A run of keys at consecutive cache rows: positions first .. first+count-1, scores at sc[off ..]. */
typedef struct att_run {
    int off, count;
    size_t row; /* cache row of the first key */
} att_run;

/* R queries (1..4) that read the same KV head: each K and V row loaded once serves all of them,
 * whether they are rows of the chunk or heads of a grouped-query group. Query i sees the keys at
 * score indices lo[i] .. hi[i] of the block's span; its softmax covers exactly those, and the other
 * keys get weight 0, which leaves its sums unchanged: a query's result does not depend on the block
 * it shares. The span lies in one or two runs of cache rows (two when it wraps around a ring). */
AVX2 static INLINE void att_block(int R, const float *const *q, float *const *out, const int *lo, const int *hi,
                                  const att_run *runs, int n_runs, const float *kbase, const float *vbase,
                                  size_t stride, int hd, float div, float *sc, size_t sc_stride) {
    /* Eight FMA chains whatever R is: KS keys at a time for Q.K, VL vectors per query for A.V. */
    const int KS = R == 1 ? 8 : R == 2 ? 4 : 2, VL = KS;
    int span = 0;
    for (int r = 0; r < R; r++) span = hi[r] + 1 > span ? hi[r] + 1 : span;
    for (int g = 0; g < n_runs; g++) {
        const float *kr = kbase + runs[g].row * stride;
        float *s0 = sc + runs[g].off;
        int t = 0, count = runs[g].count;
        for (; t + KS <= count; t += KS) {
            __m256 a[8];
            _Pragma("GCC unroll 8") for (int j = 0; j < R * KS; j++) a[j] = _mm256_setzero_ps();
            const float *k0 = kr + (size_t)t * stride;
            for (int i = 0; i < hd; i += 8) {
                __m256 kv[8];
                _Pragma("GCC unroll 8") for (int c = 0; c < KS; c++) kv[c] = _mm256_loadu_ps(k0 + (size_t)c * stride + i);
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                    __m256 qv = _mm256_loadu_ps(q[r] + i);
                    _Pragma("GCC unroll 8") for (int c = 0; c < KS; c++) a[r * KS + c] = _mm256_fmadd_ps(qv, kv[c], a[r * KS + c]);
                }
            }
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
                _Pragma("GCC unroll 8") for (int c = 0; c < KS; c++) s0[r * sc_stride + t + c] = hsum(a[r * KS + c]) / div;
        }
        for (; t < count; t++) /* the keys left over, one at a time: the same sums */
            for (int r = 0; r < R; r++) {
                __m256 a = _mm256_setzero_ps();
                for (int i = 0; i < hd; i += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + i), _mm256_loadu_ps(kr + (size_t)t * stride + i), a);
                s0[r * sc_stride + t] = hsum(a) / div;
            }
    }
    for (int r = 0; r < R; r++) {
        float *sr = sc + r * sc_stride;
        kern_softmax(sr + lo[r], hi[r] - lo[r] + 1);
        for (int u = 0; u < lo[r]; u++) sr[u] = 0.0f;
        for (int u = hi[r] + 1; u < span; u++) sr[u] = 0.0f;
    }
    int i = 0;
    for (; i + 8 * VL <= hd; i += 8 * VL) {
        __m256 a[8];
        _Pragma("GCC unroll 8") for (int j = 0; j < R * VL; j++) a[j] = _mm256_setzero_ps();
        for (int g = 0; g < n_runs; g++)
            for (int u = 0; u < runs[g].count; u++) {
                const float *v = vbase + (runs[g].row + (size_t)u) * stride + i;
                const float *su = sc + runs[g].off + u;
                __m256 vv[8];
                _Pragma("GCC unroll 8") for (int c = 0; c < VL; c++) vv[c] = _mm256_loadu_ps(v + 8 * c);
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                    __m256 w = _mm256_broadcast_ss(su + r * sc_stride);
                    _Pragma("GCC unroll 8") for (int c = 0; c < VL; c++) a[r * VL + c] = _mm256_fmadd_ps(w, vv[c], a[r * VL + c]);
                }
            }
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 8") for (int c = 0; c < VL; c++) _mm256_storeu_ps(out[r] + i + 8 * c, a[r * VL + c]);
    }
    for (; i < hd; i += 8) /* lanes left over (small heads): the same sums, fewer chains */
        for (int r = 0; r < R; r++) {
            __m256 a = _mm256_setzero_ps();
            for (int g = 0; g < n_runs; g++)
                for (int u = 0; u < runs[g].count; u++)
                    a = _mm256_fmadd_ps(_mm256_broadcast_ss(sc + r * sc_stride + runs[g].off + u),
                                        _mm256_loadu_ps(vbase + (runs[g].row + (size_t)u) * stride + i), a);
            _mm256_storeu_ps(out[r] + i, a);
        }
}

AVX2 static void attention_avx2(float *out, const float *q, const float *k_cache, const float *v_cache, int n,
                                int start_pos, const kern_att_shape *as, float *scores, int g_begin, int g_end) {
    int hd = as->head_dim, kv_dim = as->n_kv_heads * hd, group = as->n_heads / as->n_kv_heads, C = as->cache_rows;
    size_t row = (size_t)as->n_heads * hd;
    /* Score rows: a block's span is at most the context, or the window plus the three rows a block of
     * four queries can cover beyond the first. */
    size_t sc_stride = (size_t)(start_pos + n);
    if (as->window > 0 && (size_t)as->window + 3 < sc_stride) sc_stride = (size_t)as->window + 3;
    for (int g = g_begin; g < g_end; g++) {
        const float *kbase = k_cache + (size_t)g * hd, *vbase = v_cache + (size_t)g * hd;
        /* The queries of this KV head, row by row and head by head, in blocks of up to four. */
        int total = n * group;
        for (int b = 0; b < total; b += 4) {
            int R = total - b < 4 ? total - b : 4, lo[4], hi[4], first = 1 << 30, last = 0;
            const float *qs[4];
            float *os[4];
            for (int i = 0; i < R; i++) {
                int r = (b + i) / group, h = g * group + (b + i) % group, p = start_pos + r;
                qs[i] = q + (size_t)r * row + (size_t)h * hd;
                os[i] = out + (size_t)r * row + (size_t)h * hd;
                lo[i] = att_first_key(as, p), hi[i] = p;
                first = lo[i] < first ? lo[i] : first, last = p > last ? p : last;
            }
            for (int i = 0; i < R; i++) lo[i] -= first, hi[i] -= first;
            /* Positions first..last as runs of consecutive cache rows (one, or two around the ring). */
            att_run runs[2];
            int n_runs = 1, slot = first % C, count = last - first + 1;
            runs[0] = (att_run){0, count, (size_t)slot};
            if (slot + count > C) {
                runs[0].count = C - slot;
                runs[1] = (att_run){C - slot, count - (C - slot), 0};
                n_runs = 2;
            }
            switch (R) { /* the block size known to the compiler */
            case 4: att_block(4, qs, os, lo, hi, runs, n_runs, kbase, vbase, (size_t)kv_dim, hd, as->score_div, scores, sc_stride); break;
            case 3: att_block(3, qs, os, lo, hi, runs, n_runs, kbase, vbase, (size_t)kv_dim, hd, as->score_div, scores, sc_stride); break;
            case 2: att_block(2, qs, os, lo, hi, runs, n_runs, kbase, vbase, (size_t)kv_dim, hd, as->score_div, scores, sc_stride); break;
            default: att_block(1, qs, os, lo, hi, runs, n_runs, kbase, vbase, (size_t)kv_dim, hd, as->score_div, scores, sc_stride); break;
            }
        }
    }
}
#endif

void kern_attention(float *out, const float *q, const float *k_cache, const float *v_cache, int n, int start_pos,
                    const kern_att_shape *a, float *scores, int g_begin, int g_end) {
#ifdef KERN_X86
    if (!use_portable && a->head_dim % 8 == 0) {
        attention_avx2(out, q, k_cache, v_cache, n, start_pos, a, scores, g_begin, g_end);
        return;
    }
#endif
    kern_attention_ref(out, q, k_cache, v_cache, n, start_pos, a, scores, g_begin, g_end);
}

void kern_swiglu(float *h, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = g[i];
        h[i] *= v * (1.0f / (1.0f + expf(-v)));
    }
}

void kern_geglu(float *h, const float *g, size_t n) {
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (size_t i = 0; i < n; i++) {
        float v = g[i];
        h[i] *= 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
    }
}

void kern_softcap(float *x, size_t n, float cap) {
    for (size_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

int kern_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* ------------------------------------------------------------------ roofline */

#include <time.h>

static double secs(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#ifdef KERN_X86
/* Ten independent chains: enough to cover FMA latency times two ports. */
AVX2 static double fma_peak_avx2(double seconds) {
    __m256 a[10], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 10; i++) a[i] = _mm256_set1_ps((float)i);
    double t0 = secs(), t;
    long iters = 0;
    do {
        for (int r = 0; r < 100000; r++) {
            _Pragma("GCC unroll 10") for (int i = 0; i < 10; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
        }
        iters += 100000;
    } while ((t = secs() - t0) < seconds);
    float sink = 0;
    for (int i = 0; i < 10; i++) sink += _mm256_cvtss_f32(a[i]);
    volatile float keep = sink;
    (void)keep;
    return (double)iters * 10 * 8 * 2 / t / 1e9;
}

AVX2 static double read_bw_avx2(const float *buf, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    double t0 = secs();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(buf + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(buf + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(buf + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(buf + i + 24));
    }
    double t = secs() - t0;
    volatile float keep = _mm256_cvtss_f32(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    (void)keep;
    return (double)i * 4 / t / 1e9;
}
#endif

double kern_fma_peak(double seconds) {
#ifdef KERN_X86
    if (!use_portable) return fma_peak_avx2(seconds);
#endif
    float a[8] = {0};
    double t0 = secs(), t;
    long iters = 0;
    do {
        for (int r = 0; r < 1000000; r++)
            for (int j = 0; j < 8; j++) a[j] = a[j] * 0.999999f + 1e-7f;
        iters += 1000000;
    } while ((t = secs() - t0) < seconds);
    volatile float keep = a[0];
    (void)keep;
    return (double)iters * 8 * 2 / t / 1e9;
}

double kern_read_bandwidth(const float *buf, size_t n) {
#ifdef KERN_X86
    if (!use_portable) return read_bw_avx2(buf, n);
#endif
    double t0 = secs();
    float s = 0;
    for (size_t i = 0; i < n; i++) s += buf[i];
    volatile float keep = s;
    (void)keep;
    return (double)n * 4 / (secs() - t0) / 1e9;
}
