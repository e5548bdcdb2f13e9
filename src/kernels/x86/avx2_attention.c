/* kernels/x86/avx2_attention.c: causal attention over the KV cache, AVX2 + FMA: blocks of up to
 * four queries that share a KV head read each K and V row once. avx512_attention.c compiles this file
 * again with ATT_ZMM: the same loops on 16 lanes. Each variant sums a score over its lanes and then
 * across them, so it agrees with kern_attention_ref to rounding; within a variant, a query's result
 * depends only on its own keys (batched and one-token prefill agree exactly). An f16 or Q8 cache is
 * widened in registers as it is read (kv_load), each variant's loops instantiated once per type. */
#include "avx2.h"

#ifdef ATT_ZMM
#define LANES 16
typedef __m512 vec;
#define v_zero _mm512_setzero_ps
#define v_load _mm512_loadu_ps
#define v_store _mm512_storeu_ps
#define v_fma _mm512_fmadd_ps
#define v_bcast(p) _mm512_set1_ps(*(p))
#define hsum _mm512_reduce_add_ps
#define v_from_f16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define v_from_i8(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p))))
#define ATT_ENTRY kern_avx512_attention
#else
#define LANES 8
typedef __m256 vec;
#define v_zero _mm256_setzero_ps
#define v_load _mm256_loadu_ps
#define v_store _mm256_storeu_ps
#define v_fma _mm256_fmadd_ps
#define v_bcast _mm256_broadcast_ss
#define v_from_f16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define v_from_i8(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define ATT_ENTRY kern_avx2_attention
static INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#endif

/* LANES cached values from element i of a cache of type kt, widened (a Q8 value without its scale). */
static INLINE vec kv_load(int kt, const void *base, size_t i) {
    if (kt == KERN_KV_F16) return v_from_f16((const uint16_t *)base + i);
    if (kt == KERN_KV_Q8) return v_from_i8((const int8_t *)base + i);
    return v_load((const float *)base + i);
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
/* The cache is of type kt, one KV head's rows (kbase, vbase: its row 0, rows hd values apart); a Q8
 * cache's scales are ks[row], vs[row]. */
static INLINE void att_block(int kt, int R, const float *const *q, float *const *out, const int *lo, const int *hi,
                             const att_run *runs, int n_runs, const void *kbase, const void *vbase, const float *ks,
                             const float *vs, int hd, float div, float *sc, size_t sc_stride) {
    const size_t stride = (size_t)hd;
    /* Eight FMA chains whatever R is: KS keys at a time for Q.K, VL vectors per query for A.V. */
    const int KS = R == 1 ? 8 : R == 2 ? 4 : 2, VL = KS;
    int span = 0;
    for (int r = 0; r < R; r++) span = hi[r] + 1 > span ? hi[r] + 1 : span;
    for (int g = 0; g < n_runs; g++) {
        size_t kr = runs[g].row * stride;
        const float *ksr = kt == KERN_KV_Q8 ? ks + runs[g].row : NULL;
        float *s0 = sc + runs[g].off;
        int t = 0, count = runs[g].count;
        for (; t + KS <= count; t += KS) {
            vec a[8];
            _Pragma("GCC unroll 8") for (int j = 0; j < R * KS; j++) a[j] = v_zero();
            size_t k0 = kr + (size_t)t * stride;
            for (int i = 0; i < hd; i += LANES) {
                vec kv[8];
                _Pragma("GCC unroll 8") for (int c = 0; c < KS; c++) kv[c] = kv_load(kt, kbase, k0 + (size_t)c * stride + i);
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                    vec qv = v_load(q[r] + i);
                    _Pragma("GCC unroll 8") for (int c = 0; c < KS; c++) a[r * KS + c] = v_fma(qv, kv[c], a[r * KS + c]);
                }
            }
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
                _Pragma("GCC unroll 8") for (int c = 0; c < KS; c++) {
                    float d = hsum(a[r * KS + c]);
                    if (kt == KERN_KV_Q8) d *= ksr[t + c];
                    s0[r * sc_stride + t + c] = d / div;
                }
        }
        for (; t < count; t++) /* the keys left over, one at a time: the same sums */
            for (int r = 0; r < R; r++) {
                vec a = v_zero();
                for (int i = 0; i < hd; i += LANES) a = v_fma(v_load(q[r] + i), kv_load(kt, kbase, kr + (size_t)t * stride + i), a);
                float d = hsum(a);
                if (kt == KERN_KV_Q8) d *= ksr[t];
                s0[r * sc_stride + t] = d / div;
            }
    }
    for (int r = 0; r < R; r++) {
        float *sr = sc + r * sc_stride;
        kern_softmax(sr + lo[r], hi[r] - lo[r] + 1);
        for (int u = 0; u < lo[r]; u++) sr[u] = 0.0f;
        for (int u = hi[r] + 1; u < span; u++) sr[u] = 0.0f;
        for (int g = 0; kt == KERN_KV_Q8 && g < n_runs; g++) /* a value row weighs its weight times its scale */
            for (int u = 0; u < runs[g].count; u++) sr[runs[g].off + u] *= vs[runs[g].row + (size_t)u];
    }
    int i = 0;
    for (; i + LANES * VL <= hd; i += LANES * VL) {
        vec a[8];
        _Pragma("GCC unroll 8") for (int j = 0; j < R * VL; j++) a[j] = v_zero();
        for (int g = 0; g < n_runs; g++)
            for (int u = 0; u < runs[g].count; u++) {
                size_t v = (runs[g].row + (size_t)u) * stride + i;
                const float *su = sc + runs[g].off + u;
                vec vv[8];
                _Pragma("GCC unroll 8") for (int c = 0; c < VL; c++) vv[c] = kv_load(kt, vbase, v + LANES * c);
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                    vec w = v_bcast(su + r * sc_stride);
                    _Pragma("GCC unroll 8") for (int c = 0; c < VL; c++) a[r * VL + c] = v_fma(w, vv[c], a[r * VL + c]);
                }
            }
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 8") for (int c = 0; c < VL; c++) v_store(out[r] + i + LANES * c, a[r * VL + c]);
    }
    for (; i < hd; i += LANES) /* lanes left over (small heads): the same sums, fewer chains */
        for (int r = 0; r < R; r++) {
            vec a = v_zero();
            for (int g = 0; g < n_runs; g++)
                for (int u = 0; u < runs[g].count; u++)
                    a = v_fma(v_bcast(sc + r * sc_stride + runs[g].off + u),
                              kv_load(kt, vbase, (runs[g].row + (size_t)u) * stride + i), a);
            v_store(out[r] + i, a);
        }
}

static INLINE void attention(int kt, float *out, const float *q, const kern_kv *kv, int n, int start_pos,
                             const kern_att_shape *as, float *scores, int g_begin, int g_end) {
    int hd = as->head_dim, group = as->n_heads / as->n_kv_heads, C = as->cache_rows;
    size_t esize = kern_kv_size(kt), head = (size_t)C * hd; /* a head's rows are contiguous (kernels.h) */
    size_t row = (size_t)as->n_heads * hd;
    /* Score rows: a block's span is at most the context, or the window plus the three rows a block of
     * four queries can cover beyond the first. */
    size_t sc_stride = (size_t)(start_pos + n);
    if (as->window > 0 && (size_t)as->window + 3 < sc_stride) sc_stride = (size_t)as->window + 3;
    for (int g = g_begin; g < g_end; g++) {
        const void *kbase = (const char *)kv->k + g * head * esize, *vbase = (const char *)kv->v + g * head * esize;
        const float *ks = kt == KERN_KV_Q8 ? kv->k_scale + (size_t)g * C : NULL;
        const float *vs = kt == KERN_KV_Q8 ? kv->v_scale + (size_t)g * C : NULL;
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
            case 4: att_block(kt, 4, qs, os, lo, hi, runs, n_runs, kbase, vbase, ks, vs, hd, as->score_div, scores, sc_stride); break;
            case 3: att_block(kt, 3, qs, os, lo, hi, runs, n_runs, kbase, vbase, ks, vs, hd, as->score_div, scores, sc_stride); break;
            case 2: att_block(kt, 2, qs, os, lo, hi, runs, n_runs, kbase, vbase, ks, vs, hd, as->score_div, scores, sc_stride); break;
            default: att_block(kt, 1, qs, os, lo, hi, runs, n_runs, kbase, vbase, ks, vs, hd, as->score_div, scores, sc_stride); break;
            }
        }
    }
}

void ATT_ENTRY(float *out, const float *q, const kern_kv *kv, int n, int start_pos, const kern_att_shape *a,
               float *scores, int g_begin, int g_end) {
    if (a->head_dim % LANES) kern_attention_ref(out, q, kv, n, start_pos, a, scores, g_begin, g_end);
    else if (kv->type == KERN_KV_F16) attention(KERN_KV_F16, out, q, kv, n, start_pos, a, scores, g_begin, g_end);
    else if (kv->type == KERN_KV_Q8) attention(KERN_KV_Q8, out, q, kv, n, start_pos, a, scores, g_begin, g_end);
    else attention(KERN_KV_F32, out, q, kv, n, start_pos, a, scores, g_begin, g_end);
}
