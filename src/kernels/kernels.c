/* kernels: portable C reference twins and AVX2/FMA variants. */
#include "kernels.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define KERN_X86 1
#include <immintrin.h>
#endif

/* ------------------------------------------------------------------ matmul */

void kern_matmul_f32_ref(float *y, const float *x, const float *w, int n, int d, int k) {
    for (int r = 0; r < n; r++)
        for (int o = 0; o < d; o++) {
            float acc = 0.0f;
            for (int i = 0; i < k; i++) acc += x[(size_t)r * k + i] * w[(size_t)o * k + i];
            y[(size_t)r * d + o] = acc;
        }
}

/* Portable variant: 8 partial sums per element (the compiler vectorizes them), reduced in a fixed
 * order, then the tail. Same order for every element whatever the tile. */
static float dot8_portable(const float *a, const float *b, int k) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= k; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < k; i++) s += a[i] * b[i];
    return s;
}

static void matmul_portable(float *y, const float *x, const float *w, int n, int d, int k) {
    /* Rows of w outermost: each weight row is read once from memory and reused from cache for all
     * n rows of x. */
    for (int o = 0; o < d; o++)
        for (int r = 0; r < n; r++) y[(size_t)r * d + o] = dot8_portable(x + (size_t)r * k, w + (size_t)o * k, k);
}

#ifdef KERN_X86
__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 v) {
    /* lanes (0+4, 1+5, 2+6, 3+7), then ((0+2), (1+3)), then 0+1: the same tree for every element */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* One element: the same lane-wise FMA chain and reduction as the tiles below. */
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int k) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= k; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = hsum8(acc);
    for (; i < k; i++) s = fmaf(a[i], b[i], s);
    return s;
}

/* A 4 x 2 tile: rows r..r+3 of x against rows o, o+1 of w; 8 accumulators. */
__attribute__((target("avx2,fma"))) static void tile_4x2(float *y, const float *x, const float *w, int d,
                                                          int k) {
    const float *x0 = x, *x1 = x + k, *x2 = x + 2 * (size_t)k, *x3 = x + 3 * (size_t)k;
    const float *w0 = w, *w1 = w + k;
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,
           a31 = a00;
    int i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 b0 = _mm256_loadu_ps(w0 + i), b1 = _mm256_loadu_ps(w1 + i);
        __m256 v = _mm256_loadu_ps(x0 + i);
        a00 = _mm256_fmadd_ps(v, b0, a00);
        a01 = _mm256_fmadd_ps(v, b1, a01);
        v = _mm256_loadu_ps(x1 + i);
        a10 = _mm256_fmadd_ps(v, b0, a10);
        a11 = _mm256_fmadd_ps(v, b1, a11);
        v = _mm256_loadu_ps(x2 + i);
        a20 = _mm256_fmadd_ps(v, b0, a20);
        a21 = _mm256_fmadd_ps(v, b1, a21);
        v = _mm256_loadu_ps(x3 + i);
        a30 = _mm256_fmadd_ps(v, b0, a30);
        a31 = _mm256_fmadd_ps(v, b1, a31);
    }
    float s[8] = {hsum8(a00), hsum8(a01), hsum8(a10), hsum8(a11),
                  hsum8(a20), hsum8(a21), hsum8(a30), hsum8(a31)};
    const float *xr[4] = {x0, x1, x2, x3};
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 2; c++) {
            float v = s[r * 2 + c];
            const float *wr = c ? w1 : w0;
            for (int t = i; t < k; t++) v = fmaf(xr[r][t], wr[t], v);
            y[(size_t)r * d + c] = v;
        }
}

__attribute__((target("avx2,fma"))) static void matmul_avx2(float *y, const float *x, const float *w, int n,
                                                             int d, int k) {
    /* Blocks of output columns small enough that their weight rows stay in L2 while every row of x
     * streams past them. */
    const int ob = 64;
    for (int o0 = 0; o0 < d; o0 += ob) {
        int o1 = o0 + ob < d ? o0 + ob : d;
        int r = 0;
        for (; r + 4 <= n; r += 4) {
            int o = o0;
            for (; o + 2 <= o1; o += 2)
                tile_4x2(y + (size_t)r * d + o, x + (size_t)r * k, w + (size_t)o * k, d, k);
            for (; o < o1; o++)
                for (int rr = r; rr < r + 4; rr++)
                    y[(size_t)rr * d + o] = dot_avx2(x + (size_t)rr * k, w + (size_t)o * k, k);
        }
        for (; r < n; r++)
            for (int o = o0; o < o1; o++) y[(size_t)r * d + o] = dot_avx2(x + (size_t)r * k, w + (size_t)o * k, k);
    }
}
#endif

typedef void (*matmul_fn)(float *, const float *, const float *, int, int, int);
static matmul_fn matmul_impl = matmul_portable;
static int force_portable = 0;

const char *kern_init(void) {
#ifdef KERN_X86
    __builtin_cpu_init();
    if (!force_portable && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        matmul_impl = matmul_avx2;
        return "avx2";
    }
#endif
    matmul_impl = matmul_portable;
    return "portable";
}

void kern_force_portable(int on) {
    force_portable = on;
    kern_init();
}

void kern_matmul_f32(float *y, const float *x, const float *w, int n, int d, int k) { matmul_impl(y, x, w, n, d, k); }

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

void kern_rope(float *v, int n, int n_heads, int head_dim, int start_pos, float base, int style) {
    int half = head_dim / 2;
    for (int r = 0; r < n; r++) {
        float pos = (float)(start_pos + r);
        for (int h = 0; h < n_heads; h++) {
            float *x = v + ((size_t)r * n_heads + h) * head_dim;
            for (int i = 0; i < half; i++) {
                /* base^(-2i/d) written as llama2.c writes it, so its reference outputs match. */
                float freq = 1.0f / powf(base, (float)(2 * i) / (float)head_dim);
                float a = pos * freq, c = cosf(a), s = sinf(a);
                int i0 = style == KERN_ROPE_ADJACENT ? 2 * i : i;
                int i1 = style == KERN_ROPE_ADJACENT ? 2 * i + 1 : i + half;
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
