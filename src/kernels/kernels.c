/* kernels: portable C reference twins and AVX2/FMA variants. */
#include "kernels.h"

#include <math.h>
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

void kern_row_to_f32(float *dst, const void *w, int wtype, size_t row, int k) {
    size_t base = row * (size_t)k;
    if (wtype == KERN_F32) {
        memcpy(dst, (const float *)w + base, (size_t)k * sizeof *dst);
        return;
    }
    for (int i = 0; i < k; i++) dst[i] = wload(w, wtype, base + (size_t)i);
}

/* ------------------------------------------------------------------ matmul */

void kern_matmul_ref(float *y, const float *x, const void *w, int wtype, int n, int d, int k) {
    for (int r = 0; r < n; r++)
        for (int o = 0; o < d; o++) {
            float acc = 0.0f;
            for (int i = 0; i < k; i++) acc += x[(size_t)r * k + i] * wload(w, wtype, (size_t)o * k + i);
            y[(size_t)r * d + o] = acc;
        }
}

/* Portable variant: 8 partial sums per element (the compiler vectorizes them), reduced in a fixed
 * order, then the tail. Same order for every element whatever the tile. */
static float dot8_portable(const float *a, const void *w, int wtype, size_t off, int k) {
    float acc[8] = {0};
    int i = 0;
    if (wtype == KERN_F32) {
        const float *b = (const float *)w + off;
        for (; i + 8 <= k; i += 8)
            for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    } else {
        for (; i + 8 <= k; i += 8)
            for (int j = 0; j < 8; j++) acc[j] += a[i + j] * wload(w, wtype, off + (size_t)(i + j));
    }
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < k; i++) s += a[i] * wload(w, wtype, off + (size_t)i);
    return s;
}

static void matmul_portable(float *y, const float *x, const void *w, int wtype, int n, int d, int k) {
    /* Rows of w outermost: each weight row is read once from memory and reused from cache for all
     * n rows of x. */
    for (int o = 0; o < d; o++)
        for (int r = 0; r < n; r++)
            y[(size_t)r * d + o] = dot8_portable(x + (size_t)r * k, w, wtype, (size_t)o * k, k);
}

#ifdef KERN_X86
#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float hsum8(__m256 v) {
    /* lanes (0+4, 1+5, 2+6, 3+7), then ((0+2), (1+3)), then 0+1: the same tree for every element */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* Eight weights widened to f32 in registers. */
AVX2 static inline __m256 load8_f32(const void *w, size_t i) { return _mm256_loadu_ps((const float *)w + i); }
AVX2 static inline __m256 load8_f16(const void *w, size_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
}
AVX2 static inline __m256 load8_bf16(const void *w, size_t i) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* One template, three weight types: a one-element dot product and a 4 x 2 tile (8 accumulators)
 * with the same lane-wise FMA chain and reduction, so every element is computed alike. */
#define DEFINE_MATMUL(T, WT)                                                                          \
    AVX2 static float dot_##T(const float *a, const void *w, size_t off, int k) {                    \
        __m256 acc = _mm256_setzero_ps();                                                             \
        int i = 0;                                                                                    \
        for (; i + 8 <= k; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8_##T(w, off + (size_t)i), acc); \
        float s = hsum8(acc);                                                                         \
        for (; i < k; i++) s = fmaf(a[i], wload(w, WT, off + (size_t)i), s);                          \
        return s;                                                                                     \
    }                                                                                                 \
    AVX2 static void tile_##T(float *y, const float *x, const void *w, size_t off, int d, int k) {   \
        const float *x0 = x, *x1 = x + k, *x2 = x + 2 * (size_t)k, *x3 = x + 3 * (size_t)k;           \
        size_t o0 = off, o1 = off + (size_t)k;                                                        \
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,      \
               a30 = a00, a31 = a00;                                                                  \
        int i = 0;                                                                                    \
        for (; i + 8 <= k; i += 8) {                                                                  \
            __m256 b0 = load8_##T(w, o0 + (size_t)i), b1 = load8_##T(w, o1 + (size_t)i);              \
            __m256 v = _mm256_loadu_ps(x0 + i);                                                       \
            a00 = _mm256_fmadd_ps(v, b0, a00);                                                        \
            a01 = _mm256_fmadd_ps(v, b1, a01);                                                        \
            v = _mm256_loadu_ps(x1 + i);                                                              \
            a10 = _mm256_fmadd_ps(v, b0, a10);                                                        \
            a11 = _mm256_fmadd_ps(v, b1, a11);                                                        \
            v = _mm256_loadu_ps(x2 + i);                                                              \
            a20 = _mm256_fmadd_ps(v, b0, a20);                                                        \
            a21 = _mm256_fmadd_ps(v, b1, a21);                                                        \
            v = _mm256_loadu_ps(x3 + i);                                                              \
            a30 = _mm256_fmadd_ps(v, b0, a30);                                                        \
            a31 = _mm256_fmadd_ps(v, b1, a31);                                                        \
        }                                                                                             \
        float s[8] = {hsum8(a00), hsum8(a01), hsum8(a10), hsum8(a11),                                 \
                      hsum8(a20), hsum8(a21), hsum8(a30), hsum8(a31)};                                \
        const float *xr[4] = {x0, x1, x2, x3};                                                        \
        for (int r = 0; r < 4; r++)                                                                   \
            for (int c = 0; c < 2; c++) {                                                             \
                float v = s[r * 2 + c];                                                               \
                size_t wo = c ? o1 : o0;                                                              \
                for (int t = i; t < k; t++) v = fmaf(xr[r][t], wload(w, WT, wo + (size_t)t), v);      \
                y[(size_t)r * d + c] = v;                                                             \
            }                                                                                         \
    }                                                                                                 \
    AVX2 static void matmul_##T(float *y, const float *x, const void *w, int n, int d, int k) {      \
        /* Blocks of output columns small enough that their weight rows stay in cache while every  \
         * row of x streams past them. */                                                          \
        const int ob = 64;                                                                            \
        for (int b0 = 0; b0 < d; b0 += ob) {                                                          \
            int b1 = b0 + ob < d ? b0 + ob : d;                                                       \
            int r = 0;                                                                                \
            for (; r + 4 <= n; r += 4) {                                                              \
                int o = b0;                                                                           \
                for (; o + 2 <= b1; o += 2)                                                           \
                    tile_##T(y + (size_t)r * d + o, x + (size_t)r * k, w, (size_t)o * k, d, k);       \
                for (; o < b1; o++)                                                                   \
                    for (int rr = r; rr < r + 4; rr++)                                                \
                        y[(size_t)rr * d + o] = dot_##T(x + (size_t)rr * k, w, (size_t)o * k, k);     \
            }                                                                                         \
            for (; r < n; r++)                                                                        \
                for (int o = b0; o < b1; o++) y[(size_t)r * d + o] = dot_##T(x + (size_t)r * k, w, (size_t)o * k, k); \
        }                                                                                             \
    }

DEFINE_MATMUL(f32, KERN_F32)
DEFINE_MATMUL(f16, KERN_F16)
DEFINE_MATMUL(bf16, KERN_BF16)
#endif

typedef void (*matmul_fn)(float *, const float *, const void *, int, int, int);
static matmul_fn matmul_impl[3];
static int use_portable = 1, force_portable = 0;

const char *kern_init(void) {
#ifdef KERN_X86
    __builtin_cpu_init();
    if (!force_portable && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c")) {
        matmul_impl[KERN_F32] = matmul_f32;
        matmul_impl[KERN_F16] = matmul_f16;
        matmul_impl[KERN_BF16] = matmul_bf16;
        use_portable = 0;
        return "avx2";
    }
#endif
    use_portable = 1;
    return "portable";
}

void kern_force_portable(int on) {
    force_portable = on;
    kern_init();
}

void kern_matmul(float *y, const float *x, const void *w, int wtype, int n, int d, int k) {
    if (use_portable) matmul_portable(y, x, w, wtype, n, d, k);
    else matmul_impl[wtype](y, x, w, n, d, k);
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

void kern_attention(float *out, const float *q, const float *k_cache, const float *v_cache, int n,
                    int start_pos, int n_heads, int n_kv_heads, int head_dim, float *scores) {
    int kv_dim = n_kv_heads * head_dim, group = n_heads / n_kv_heads;
    float norm = sqrtf((float)head_dim);
    for (int r = 0; r < n; r++) {
        int len = start_pos + r + 1; /* causal: keys 0 .. start_pos + r */
        for (int h = 0; h < n_heads; h++) {
            const float *qh = q + ((size_t)r * n_heads + h) * head_dim;
            int kvh = h / group;
            for (int t = 0; t < len; t++) {
                const float *kt = k_cache + (size_t)t * kv_dim + (size_t)kvh * head_dim;
                float s = 0.0f;
                for (int i = 0; i < head_dim; i++) s += qh[i] * kt[i];
                scores[t] = s / norm;
            }
            kern_softmax(scores, len);
            float *oh = out + ((size_t)r * n_heads + h) * head_dim;
            memset(oh, 0, (size_t)head_dim * sizeof *oh);
            for (int t = 0; t < len; t++) {
                const float *vt = v_cache + (size_t)t * kv_dim + (size_t)kvh * head_dim;
                float a = scores[t];
                for (int i = 0; i < head_dim; i++) oh[i] += a * vt[i];
            }
        }
    }
}

void kern_swiglu(float *h, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = g[i];
        h[i] *= v * (1.0f / (1.0f + expf(-v)));
    }
}

int kern_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}
