/* kernels/x86/avx2_attention.c: causal attention over the KV cache, AVX2 + FMA: micro-blocks of up
 * to four queries that share a KV head read each K and V row once, and blocks of four micro-blocks
 * read the keys tile by tile, each tile once per block. avx512_attention.c compiles this file again
 * with ATT_ZMM: the same loops on 16 lanes.
 * Each variant sums a score over its lanes and then across them, so it agrees with kern_attention_ref
 * to rounding; within a variant, a query's result depends only on its own keys (batched and one-token
 * prefill agree exactly). An f16 or Q8 cache is widened in registers as it is read (kv_load), each
 * variant's loops instantiated once per type. */
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
#define CHAINS 16 /* FMA chains per micro-kernel: half the registers */
/* The sums of a[0..7], in order, each by _mm512_reduce_add_ps's tree (halves of 256, then 128 bits,
 * then lanes i and i+2, then 0 and 1), so bit for bit hsum's; eight at a time in 24 instructions
 * where hsum takes eight each. Level by level: x[j] holds a[2j] and a[2j+1] halved (256-bit halves),
 * y[j] a[4j .. 4j+3] quartered (one per 128-bit chunk), z sums a[m] and a[4+m] to two lanes of chunk
 * m, and w to one: a[m] in lane 4m, a[4+m] in lane 4m+1. */
static INLINE __m256 hsum8(const vec *a) {
    __m512 x[4], y[2];
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
        x[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    _Pragma("GCC unroll 2") for (int j = 0; j < 2; j++)
        y[j] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * j], x[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(x[2 * j], x[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 w = _mm512_add_ps(_mm512_shuffle_ps(z, z, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(z, z, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, w));
}
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
#define CHAINS 8
static INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
/* The sums of a[0..7], in order, each by hsum's tree (128-bit halves, then lanes i and i+2, then 0
 * and 1), so bit for bit hsum's; eight at a time in 23 instructions where hsum takes six each. x[j]
 * holds a[2j] and a[2j+1] halved; y[j] sums a[4j + L] and a[4j + 2 + L] to two lanes of 128-bit lane
 * L; w leaves lane L = [a[L], a[2+L], a[4+L], a[6+L]]. */
static INLINE __m256 hsum8(const vec *a) {
    __m256 x[4], y[2];
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
        x[j] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * j], a[2 * j + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * j], a[2 * j + 1], 0x31));
    _Pragma("GCC unroll 2") for (int j = 0; j < 2; j++)
        y[j] = _mm256_add_ps(_mm256_shuffle_ps(x[2 * j], x[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(x[2 * j], x[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 w = _mm256_add_ps(_mm256_shuffle_ps(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(w, _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0));
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

/* Scores of R queries (1..4) against count consecutive cached keys from element k0 of kbase (a Q8
 * cache's key scales from ksr): query r's score of key t goes to s0[r * sc_stride + t]. CHAINS FMA
 * chains (KS keys at a time), each key's vector loaded once for the R queries and each query's once
 * for the KS keys. Each score is its own sum, whatever keys share the call. */
static INLINE void qk_keys(int kt, int R, const float *const *q, const void *kbase, size_t k0, const float *ksr,
                           int count, int hd, float div, float *s0, size_t sc_stride) {
    const size_t stride = (size_t)hd;
    const int KS = CHAINS / (R == 3 ? 4 : R), N = R * KS;
    int t = 0;
    for (; t + KS <= count; t += KS) {
        vec a[CHAINS];
        _Pragma("GCC unroll 16") for (int j = 0; j < N; j++) a[j] = v_zero();
        size_t kr = k0 + (size_t)t * stride;
        for (int i = 0; i < hd; i += LANES) {
            vec kv[CHAINS];
            _Pragma("GCC unroll 16") for (int c = 0; c < KS; c++) kv[c] = kv_load(kt, kbase, kr + (size_t)c * stride + i);
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                vec qv = v_load(q[r] + i);
                _Pragma("GCC unroll 16") for (int c = 0; c < KS; c++) a[r * KS + c] = v_fma(qv, kv[c], a[r * KS + c]);
            }
        }
        float sums[CHAINS]; /* sums[r * KS + c]: query r, key t + c */
        _Pragma("GCC unroll 2") for (int j = 0; j < N; j += 8) {
            for (int z = N; z < j + 8; z++) a[z] = v_zero(); /* R = 3 on 8 chains: six sums */
            __m256 d = hsum8(a + j);
            if (kt == KERN_KV_Q8) {
                float sk[8];
                _Pragma("GCC unroll 8") for (int z = 0; z < 8; z++) sk[z] = ksr[t + (j + z) % KS];
                d = _mm256_mul_ps(d, _mm256_loadu_ps(sk));
            }
            _mm256_storeu_ps(sums + j, _mm256_div_ps(d, _mm256_set1_ps(div)));
        }
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) memcpy(s0 + r * sc_stride + t, sums + r * KS, KS * sizeof(float));
    }
    for (; t < count; t++) /* the keys left over, one at a time: the same sums */
        for (int r = 0; r < R; r++) {
            vec a = v_zero();
            for (int i = 0; i < hd; i += LANES) a = v_fma(v_load(q[r] + i), kv_load(kt, kbase, k0 + (size_t)t * stride + i), a);
            float d = hsum(a);
            if (kt == KERN_KV_Q8) d *= ksr[t];
            s0[r * sc_stride + t] = d / div;
        }
}

/* out[r] += w[r * sc_stride + u] times value row u, for count consecutive rows from element v0 of
 * vbase, u in order: each output lane is one FMA chain over the keys, carried in out from one call to
 * the next (a ring's second run continues the first's sums). */
static INLINE void av_keys(int kt, int R, const float *w, size_t sc_stride, const void *vbase, size_t v0, int count, int hd,
                           float *const *out) {
    const size_t stride = (size_t)hd;
    /* up to CHAINS FMA chains: VL vectors per query (at most eight: a slice within a head of 128) */
    const int VL = CHAINS / (R == 3 ? 4 : R) < 8 ? CHAINS / (R == 3 ? 4 : R) : 8;
    int i = 0;
    for (; i + LANES * VL <= hd; i += LANES * VL) {
        vec a[CHAINS];
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 8") for (int c = 0; c < VL; c++) a[r * VL + c] = v_load(out[r] + i + LANES * c);
        for (int u = 0; u < count; u++) {
            size_t v = v0 + (size_t)u * stride + i;
            vec vv[8];
            _Pragma("GCC unroll 8") for (int c = 0; c < VL; c++) vv[c] = kv_load(kt, vbase, v + LANES * c);
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                vec wr = v_bcast(w + r * sc_stride + u);
                _Pragma("GCC unroll 8") for (int c = 0; c < VL; c++) a[r * VL + c] = v_fma(wr, vv[c], a[r * VL + c]);
            }
        }
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 8") for (int c = 0; c < VL; c++) v_store(out[r] + i + LANES * c, a[r * VL + c]);
    }
    for (; i < hd; i += LANES) /* lanes left over (small heads): the same sums, fewer chains */
        for (int r = 0; r < R; r++) {
            vec a = v_load(out[r] + i);
            for (int u = 0; u < count; u++)
                a = v_fma(v_bcast(w + r * sc_stride + u), kv_load(kt, vbase, v0 + (size_t)u * stride + i), a);
            v_store(out[r] + i, a);
        }
}

#define ATT_MICRO 4             /* queries per micro-kernel call (qk_keys, av_keys) */
#define ATT_TILE_BYTES (32 << 10) /* keys per tile: K or V rows that stay in L1 for every micro-block */

/* qk_keys and av_keys with R, the micro-block's queries, known to the compiler. */
static INLINE void qk_micro(int kt, int R, const float *const *q, const void *kbase, size_t k0, const float *ksr, int count,
                            int hd, float div, float *s0, size_t sc_stride) {
    switch (R) {
    case 4: qk_keys(kt, 4, q, kbase, k0, ksr, count, hd, div, s0, sc_stride); break;
    case 3: qk_keys(kt, 3, q, kbase, k0, ksr, count, hd, div, s0, sc_stride); break;
    case 2: qk_keys(kt, 2, q, kbase, k0, ksr, count, hd, div, s0, sc_stride); break;
    default: qk_keys(kt, 1, q, kbase, k0, ksr, count, hd, div, s0, sc_stride); break;
    }
}
static INLINE void av_micro(int kt, int R, const float *w, size_t sc_stride, const void *vbase, size_t v0, int count, int hd,
                            float *const *out) {
    switch (R) {
    case 4: av_keys(kt, 4, w, sc_stride, vbase, v0, count, hd, out); break;
    case 3: av_keys(kt, 3, w, sc_stride, vbase, v0, count, hd, out); break;
    case 2: av_keys(kt, 2, w, sc_stride, vbase, v0, count, hd, out); break;
    default: av_keys(kt, 1, w, sc_stride, vbase, v0, count, hd, out); break;
    }
}

/* One pass of a block over its span: the scores (values = 0) or the value sums (values = 1). Tile
 * after tile, a ring's second run after its first, each tile clipped to the keys of every
 * micro-block m in turn (mq[m] queries, score indices mlo[m] .. mhi[m]); value sums carry in out
 * from tile to tile. */
static INLINE void att_tiles(int kt, int values, int nm, const int *mq, const int *mlo, const int *mhi, int tile,
                             const att_run *runs, int n_runs, const float *const *q, float *const *out,
                             const void *kbase, const void *vbase, const float *ks, int hd, float div, float *sc,
                             size_t sc_stride) {
    for (int g = 0; g < n_runs; g++)
        for (int a = runs[g].off; a < runs[g].off + runs[g].count; a += tile) {
            int e = a + tile < runs[g].off + runs[g].count ? a + tile : runs[g].off + runs[g].count;
            for (int m = 0; m < nm; m++) {
                int b0 = a > mlo[m] ? a : mlo[m], b1 = e < mhi[m] + 1 ? e : mhi[m] + 1;
                size_t row = runs[g].row + (size_t)(b0 - runs[g].off);
                float *s0 = sc + (size_t)m * ATT_MICRO * sc_stride + b0;
                if (b0 >= b1) continue;
                if (values) av_micro(kt, mq[m], s0, sc_stride, vbase, row * (size_t)hd, b1 - b0, hd, out + m * ATT_MICRO);
                else
                    qk_micro(kt, mq[m], q + m * ATT_MICRO, kbase, row * (size_t)hd, kt == KERN_KV_Q8 ? ks + row : NULL,
                             b1 - b0, hd, div, s0, sc_stride);
            }
        }
}

/* Q queries (1..KERN_ATT_BLOCK) that read the same KV head, whether rows of the chunk or heads of a
 * grouped-query group, in micro-blocks of ATT_MICRO: each K and V row loaded once serves a
 * micro-block, and the keys go in tiles that every micro-block reads in turn, so that a long span
 * leaves L1 once per block rather than once per micro-block. Query i sees the keys at score indices
 * lo[i] .. hi[i] of the block's span (one or two runs of cache rows: two when it wraps around a
 * ring); its softmax covers exactly those, and the other keys of its micro-block get weight 0, which
 * leaves its sums unchanged: a query's result depends neither on the block it shares nor on the
 * tiles (a score is its own sum; an output lane one FMA chain over the keys in order, carried in out
 * from tile to tile). The cache is of type kt, one KV head's rows (kbase, vbase: its row 0, rows hd
 * values apart); a Q8 cache's scales are ks[row], vs[row]. sc holds Q score rows, sc_stride apart. */
static INLINE void att_block(int kt, int Q, const float *const *q, float *const *out, const int *lo, const int *hi,
                             const att_run *runs, int n_runs, const void *kbase, const void *vbase, const float *ks,
                             const float *vs, int hd, float div, float *sc, size_t sc_stride) {
    enum { M = KERN_ATT_BLOCK / ATT_MICRO };
    int nm = (Q + ATT_MICRO - 1) / ATT_MICRO, mlo[M], mhi[M], mq[M]; /* micro-block m: its keys, its queries */
    for (int m = 0; m < nm; m++) {
        mq[m] = Q - m * ATT_MICRO < ATT_MICRO ? Q - m * ATT_MICRO : ATT_MICRO;
        mlo[m] = 1 << 30, mhi[m] = -1;
        for (int r = m * ATT_MICRO; r < m * ATT_MICRO + mq[m]; r++)
            mlo[m] = lo[r] < mlo[m] ? lo[r] : mlo[m], mhi[m] = hi[r] > mhi[m] ? hi[r] : mhi[m];
    }
    /* a lone micro-block (decode) reads each row once anyway: its keys in one piece */
    int tile = nm == 1 ? 1 << 30 : ATT_TILE_BYTES / (hd * (int)kern_kv_size(kt)) / 16 * 16;
    if (tile < 16) tile = 16;
    att_tiles(kt, 0, nm, mq, mlo, mhi, tile, runs, n_runs, q, out, kbase, vbase, ks, hd, div, sc, sc_stride);
    for (int r = 0; r < Q; r++) {
        int m = r / ATT_MICRO;
        float *sr = sc + r * sc_stride;
        kern_softmax(sr + lo[r], hi[r] - lo[r] + 1);
        for (int u = mlo[m]; u < lo[r]; u++) sr[u] = 0.0f;
        for (int u = hi[r] + 1; u <= mhi[m]; u++) sr[u] = 0.0f;
        for (int g = 0; kt == KERN_KV_Q8 && g < n_runs; g++) { /* a value row weighs its weight times its scale */
            int u0 = mlo[m] - runs[g].off > 0 ? mlo[m] - runs[g].off : 0;
            int u1 = mhi[m] + 1 - runs[g].off < runs[g].count ? mhi[m] + 1 - runs[g].off : runs[g].count;
            for (int u = u0; u < u1; u++) sr[runs[g].off + u] *= vs[runs[g].row + (size_t)u];
        }
        memset(out[r], 0, (size_t)hd * sizeof(float));
    }
    att_tiles(kt, 1, nm, mq, mlo, mhi, tile, runs, n_runs, q, out, kbase, vbase, ks, hd, div, sc, sc_stride);
}

static INLINE void attention(int kt, float *out, const float *q, const kern_kv *kv, int n, int start_pos,
                             const kern_att_shape *as, float *scores, int h_begin, int h_end) {
    int hd = as->head_dim, group = as->n_heads / as->n_kv_heads, C = as->cache_rows;
    size_t esize = kern_kv_size(kt), head = (size_t)C * hd; /* a head's rows are contiguous (kernels.h) */
    size_t row = (size_t)as->n_heads * hd;
    /* Score rows: a block's span is at most the context, or the window plus the rows a block's queries
     * can cover beyond the first. */
    size_t sc_stride = (size_t)(start_pos + n);
    if (as->window > 0 && (size_t)as->window + KERN_ATT_BLOCK - 1 < sc_stride) sc_stride = (size_t)as->window + KERN_ATT_BLOCK - 1;
    for (int g = h_begin / group; g * group < h_end; g++) {
        /* this KV head's query heads in the range: hb .. he-1 */
        int hb = h_begin > g * group ? h_begin : g * group;
        int he = h_end < (g + 1) * group ? h_end : (g + 1) * group, heads = he - hb;
        const void *kbase = (const char *)kv->k + g * head * esize, *vbase = (const char *)kv->v + g * head * esize;
        const float *ks = kt == KERN_KV_Q8 ? kv->k_scale + (size_t)g * C : NULL;
        const float *vs = kt == KERN_KV_Q8 ? kv->v_scale + (size_t)g * C : NULL;
        /* The queries of this KV head, row by row and head by head, in blocks of up to KERN_ATT_BLOCK. */
        int total = n * heads;
        for (int b = 0; b < total; b += KERN_ATT_BLOCK) {
            int Q = total - b < KERN_ATT_BLOCK ? total - b : KERN_ATT_BLOCK, lo[KERN_ATT_BLOCK], hi[KERN_ATT_BLOCK];
            int first = 1 << 30, last = 0;
            const float *qs[KERN_ATT_BLOCK];
            float *os[KERN_ATT_BLOCK];
            for (int i = 0; i < Q; i++) {
                int r = (b + i) / heads, h = hb + (b + i) % heads, p = start_pos + r;
                qs[i] = q + (size_t)r * row + (size_t)h * hd;
                os[i] = out + (size_t)r * row + (size_t)h * hd;
                lo[i] = att_first_key(as, p), hi[i] = p;
                first = lo[i] < first ? lo[i] : first, last = p > last ? p : last;
            }
            for (int i = 0; i < Q; i++) lo[i] -= first, hi[i] -= first;
            /* Positions first..last as runs of consecutive cache rows (one, or two around the ring). */
            att_run runs[2];
            int n_runs = 1, slot = first % C, count = last - first + 1;
            runs[0] = (att_run){0, count, (size_t)slot};
            if (slot + count > C) {
                runs[0].count = C - slot;
                runs[1] = (att_run){C - slot, count - (C - slot), 0};
                n_runs = 2;
            }
            att_block(kt, Q, qs, os, lo, hi, runs, n_runs, kbase, vbase, ks, vs, hd, as->score_div, scores, sc_stride);
        }
    }
}

void ATT_ENTRY(float *out, const float *q, const kern_kv *kv, int n, int start_pos, const kern_att_shape *a,
               float *scores, int h_begin, int h_end) {
    if (a->head_dim % LANES) kern_attention_ref(out, q, kv, n, start_pos, a, scores, h_begin, h_end);
    else if (kv->type == KERN_KV_F16) attention(KERN_KV_F16, out, q, kv, n, start_pos, a, scores, h_begin, h_end);
    else if (kv->type == KERN_KV_Q8) attention(KERN_KV_Q8, out, q, kv, n, start_pos, a, scores, h_begin, h_end);
    else attention(KERN_KV_F32, out, q, kv, n, start_pos, a, scores, h_begin, h_end);
}
