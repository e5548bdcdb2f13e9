/* kernels/x86/avx2_ops.c: softmax, SwiGLU, GeGLU and rmsnorm eight lanes at a time (AVX2 + FMA), with
 * kern_exp's operations in registers and sums in kern_sum_lanes' order: the same bits as the twins
 * in ops.c; and the KV store's conversions (F16C's rounding to nearest even, cvtps' int8 rounding),
 * the same bits as reference.c's. avx512_ops.c compiles this file again with OPS_ZMM: softmax, SwiGLU
 * and GeGLU on 16 lanes (AVX-512F), the same operations on each value, so the same bits again. */
#include "avx2.h"

#include <math.h>

#ifdef OPS_ZMM
#define LANES 16
typedef __m512 vec;
#define v_set1 _mm512_set1_ps
#define v_load _mm512_loadu_ps
#define v_store _mm512_storeu_ps
#define v_min _mm512_min_ps
#define v_max _mm512_max_ps
#define v_add _mm512_add_ps
#define v_sub _mm512_sub_ps
#define v_mul _mm512_mul_ps
#define v_div _mm512_div_ps
#define v_fma _mm512_fmadd_ps
#define v_round(x) _mm512_roundscale_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define v_neg(x) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)))
/* 2^(n - 1) for whole n in -126..128 (kern_exp's scale, halved) */
#define v_pow2m1(n) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(126)), 23))
/* b where x PRED y, else a */
#define v_pick(x, y, pred, a, b) _mm512_mask_blend_ps(_mm512_cmp_ps_mask((x), (y), (pred)), (a), (b))
#define OPS(name) kern_avx512_##name
#else
#define LANES 8
typedef __m256 vec;
#define v_set1 _mm256_set1_ps
#define v_load _mm256_loadu_ps
#define v_store _mm256_storeu_ps
#define v_min _mm256_min_ps
#define v_max _mm256_max_ps
#define v_add _mm256_add_ps
#define v_sub _mm256_sub_ps
#define v_mul _mm256_mul_ps
#define v_div _mm256_div_ps
#define v_fma _mm256_fmadd_ps
#define v_round(x) _mm256_round_ps((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define v_neg(x) _mm256_xor_ps((x), _mm256_set1_ps(-0.0f))
#define v_pow2m1(n) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23))
#define v_pick(x, y, pred, a, b) _mm256_blendv_ps((a), (b), _mm256_cmp_ps((x), (y), (pred)))
#define OPS(name) kern_avx2_##name
#endif

/* kern_exp of LANES values: the same clamps, the same fused multiply-adds in the same order. */
static INLINE vec v_exp(vec x) {
    const vec lo = v_set1(-86.0f), hi = v_set1(88.7f);
    vec xc = v_min(v_max(x, lo), hi); /* NaN becomes lo here and x again at the end */
    vec n = v_round(v_mul(xc, v_set1(1.44269504088896341f)));
    vec r = v_fma(n, v_set1(-0.693359375f), xc);
    r = v_fma(n, v_set1(2.12194440e-4f), r);
    vec p = v_set1(1.9875691500e-4f);
    p = v_fma(p, r, v_set1(1.3981999507e-3f));
    p = v_fma(p, r, v_set1(8.3334519073e-3f));
    p = v_fma(p, r, v_set1(4.1665795894e-2f));
    p = v_fma(p, r, v_set1(1.6666665459e-1f));
    p = v_fma(p, r, v_set1(5.0000001201e-1f));
    vec y = v_add(v_fma(p, v_mul(r, r), r), v_set1(1.0f));
    vec e = v_mul(v_mul(y, v_pow2m1(n)), v_set1(2.0f));
    e = v_pick(x, lo, _CMP_LT_OQ, e, v_set1(0.0f));
    e = v_pick(x, hi, _CMP_GT_OQ, e, v_set1(INFINITY));
    return v_pick(x, x, _CMP_UNORD_Q, e, x);
}

void OPS(softmax)(float *x, int n) {
    /* the largest value (a ±0 tie may pick the other zero: x - mx is then the same) */
    vec m = v_set1(x[0]);
    int i = 0;
    for (; i + LANES <= n; i += LANES) m = v_max(v_load(x + i), m); /* NaN in x: keeps m, as the twin */
    float t[KERN_SUM_LANES] __attribute__((aligned(64))), mx = x[0];
    v_store(t, m);
    for (int j = 0; j < LANES; j++) mx = t[j] > mx ? t[j] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    /* the exponentials, summed in KERN_SUM_LANES lanes: element i into lane i % 16 */
    vec vmx = v_set1(mx), a[16 / LANES];
    for (int j = 0; j < 16 / LANES; j++) a[j] = v_set1(0.0f);
    for (i = 0; i + 16 <= n; i += 16)
        for (int j = 0; j < 16 / LANES; j++) {
            vec e = v_exp(v_sub(v_load(x + i + j * LANES), vmx));
            v_store(x + i + j * LANES, e);
            a[j] = v_add(a[j], e);
        }
    if (i < n) { /* the last 1..15 through a buffer; lanes past n add +0 (every sum is >= +0: unchanged) */
        memset(t, 0, sizeof t);
        memcpy(t, x + i, (size_t)(n - i) * sizeof *t);
        for (int j = 0; j < 16 / LANES; j++) v_store(t + j * LANES, v_exp(v_sub(v_load(t + j * LANES), vmx)));
        for (int j = n - i; j < KERN_SUM_LANES; j++) t[j] = 0.0f;
        memcpy(x + i, t, (size_t)(n - i) * sizeof *t);
        for (int j = 0; j < 16 / LANES; j++) a[j] = v_add(a[j], v_load(t + j * LANES));
    }
    for (int j = 0; j < 16 / LANES; j++) v_store(t + j * LANES, a[j]);
    float total = kern_sum_lanes(t);
    vec sum = v_set1(total);
    for (i = 0; i + LANES <= n; i += LANES) v_store(x + i, v_div(v_load(x + i), sum));
    for (; i < n; i++) x[i] /= total;
}

void OPS(swiglu)(float *h, const float *g, size_t n) {
    const vec one = v_set1(1.0f);
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        vec v = v_load(g + i);
        vec s = v_div(one, v_add(one, v_exp(v_neg(v))));
        v_store(h + i, v_mul(v_load(h + i), v_mul(v, s)));
    }
    kern_swiglu_ref(h + i, g + i, n - i);
}

void OPS(geglu)(float *h, const float *g, size_t n) {
    const vec one = v_set1(1.0f), c = v_set1(KERN_GELU_C), k = v_set1(0.044715f);
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) { /* the twin's operations, unfused, in its order */
        vec v = v_load(g + i);
        vec cube = v_mul(v_mul(v_mul(k, v), v), v);
        vec z = v_mul(c, v_add(v, cube));
        vec s = v_div(one, v_add(one, v_exp(v_mul(v_set1(-2.0f), z))));
        v_store(h + i, v_mul(v_load(h + i), v_mul(v, s)));
    }
    kern_geglu_ref(h + i, g + i, n - i);
}

#ifndef OPS_ZMM
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
#endif
