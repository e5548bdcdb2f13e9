/* kernels/x86/avx2_ops.c: softmax, SwiGLU, GeGLU and rmsnorm eight lanes at a time (AVX2 + FMA), with
 * kern_exp's operations in registers and sums in kern_sum_lanes' order: the same bits as the twins
 * in ops.c; and the KV store's conversions (F16C's rounding to nearest even, cvtps' int8 rounding),
 * the same bits as reference.c's. */
#include "avx2.h"

#include <math.h>

/* kern_exp of eight values: the same clamps, the same fused multiply-adds in the same order. */
static INLINE __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-86.0f), hi = _mm256_set1_ps(88.7f);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi); /* NaN becomes lo here and x again at the end */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), xc);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
    __m256 e = _mm256_mul_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(bits)), _mm256_set1_ps(2.0f));
    e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

void kern_avx2_softmax(float *x, int n) {
    /* the largest value (a ±0 tie may pick the other zero: x - mx is then the same) */
    __m256 m = _mm256_set1_ps(x[0]);
    int i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m); /* NaN in x: keeps m, as the twin */
    float t[KERN_SUM_LANES] __attribute__((aligned(32))), mx = x[0];
    _mm256_store_ps(t, m);
    for (int j = 0; j < 8; j++) mx = t[j] > mx ? t[j] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    /* the exponentials, summed in KERN_SUM_LANES lanes: element i into lane i % 16 */
    __m256 vmx = _mm256_set1_ps(mx), a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx)), e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vmx));
        _mm256_storeu_ps(x + i, e0), _mm256_storeu_ps(x + i + 8, e1);
        a0 = _mm256_add_ps(a0, e0), a1 = _mm256_add_ps(a1, e1);
    }
    if (i < n) { /* the last 1..15 through a buffer; lanes past n add +0 (every sum is >= +0: unchanged) */
        memset(t, 0, sizeof t);
        memcpy(t, x + i, (size_t)(n - i) * sizeof *t);
        __m256 e0 = exp8(_mm256_sub_ps(_mm256_load_ps(t), vmx)), e1 = exp8(_mm256_sub_ps(_mm256_load_ps(t + 8), vmx));
        _mm256_store_ps(t, e0), _mm256_store_ps(t + 8, e1);
        for (int j = n - i; j < KERN_SUM_LANES; j++) t[j] = 0.0f;
        memcpy(x + i, t, (size_t)(n - i) * sizeof *t);
        a0 = _mm256_add_ps(a0, _mm256_load_ps(t)), a1 = _mm256_add_ps(a1, _mm256_load_ps(t + 8));
    }
    _mm256_store_ps(t, a0), _mm256_store_ps(t + 8, a1);
    float total = kern_sum_lanes(t);
    __m256 sum = _mm256_set1_ps(total);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_div_ps(_mm256_loadu_ps(x + i), sum));
    for (; i < n; i++) x[i] /= total;
}

void kern_avx2_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps) {
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        float *orow = out + (size_t)r * dim;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int i = 0;
        for (; i + 16 <= dim; i += 16) {
            __m256 v0 = _mm256_loadu_ps(xr + i), v1 = _mm256_loadu_ps(xr + i + 8);
            a0 = _mm256_fmadd_ps(v0, v0, a0), a1 = _mm256_fmadd_ps(v1, v1, a1);
        }
        float t[KERN_SUM_LANES] __attribute__((aligned(32)));
        _mm256_store_ps(t, a0), _mm256_store_ps(t + 8, a1);
        for (int j = 0; i + j < dim; j++) t[j] = fmaf(xr[i + j], xr[i + j], t[j]); /* the last 0..15 */
        __m256 ss = _mm256_set1_ps(1.0f / sqrtf(kern_sum_lanes(t) / (float)dim + eps));
        for (i = 0; i + 8 <= dim; i += 8)
            _mm256_storeu_ps(orow + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(ss, _mm256_loadu_ps(xr + i))));
        for (float s1 = _mm256_cvtss_f32(ss); i < dim; i++) orow[i] = w[i] * (s1 * xr[i]);
    }
}

void kern_avx2_swiglu(float *h, const float *g, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(g + i);
        __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_xor_ps(v, sign))));
        _mm256_storeu_ps(h + i, _mm256_mul_ps(_mm256_loadu_ps(h + i), _mm256_mul_ps(v, s)));
    }
    kern_swiglu_ref(h + i, g + i, n - i);
}

void kern_avx2_geglu(float *h, const float *g, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), c = _mm256_set1_ps(KERN_GELU_C), k = _mm256_set1_ps(0.044715f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { /* the twin's operations, unfused, in its order */
        __m256 v = _mm256_loadu_ps(g + i);
        __m256 cube = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(k, v), v), v);
        __m256 z = _mm256_mul_ps(c, _mm256_add_ps(v, cube));
        __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), z))));
        _mm256_storeu_ps(h + i, _mm256_mul_ps(_mm256_loadu_ps(h + i), _mm256_mul_ps(v, s)));
    }
    kern_geglu_ref(h + i, g + i, n - i);
}

static void kv_f16_row(uint16_t *dst, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    kern_kv_f16_row_ref(dst + i, x + i, n - i);
}

static void kv_q8_head(int8_t *dst, float *scale, const float *x, int hd) {
    if (hd % 32) {
        kern_kv_q8_head_ref(dst, scale, x, hd);
        return;
    }
    __m256 m = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < hd; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float amax = _mm_cvtss_f32(h), inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    *scale = amax / 127.0f;
    /* four vectors of int32 packed to 32 bytes: the packs interleave 128-bit lanes, the permute undoes it */
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int i = 0; i < hd; i += 32) {
        __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
        __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), vinv));
        __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 16), vinv));
        __m256i d = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 24), vinv));
        __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_permutevar8x32_epi32(bytes, order));
    }
}

void kern_avx2_kv_store(const kern_kv *kv, const float *k, const float *v, int n, int start_pos, const kern_att_shape *a) {
    kern_kv_store_rows(kv, k, v, n, start_pos, a, kv_f16_row, kv_q8_head);
}
