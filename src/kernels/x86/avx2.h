/* kernels/x86/avx2.h: the pieces every AVX2 kernel file shares: weights widened to f32, a panel's
 * 16 outputs loaded and stored (a partial panel through a buffer), and a group's 16 scales. Each file
 * that includes it is compiled for its own instruction set (CMakeLists.txt). */
#ifndef ETCH_KERN_X86_AVX2_H
#define ETCH_KERN_X86_AVX2_H

#include "../kern_impl.h"

#include <immintrin.h>
#include <string.h>

#define INLINE __attribute__((always_inline)) inline

enum { sizeof_f32 = 4, sizeof_f16 = 2, sizeof_bf16 = 2 };

/* Eight weights widened to f32 in registers. */
static INLINE __m256 load8_f32(const void *w, size_t i) { return _mm256_loadu_ps((const float *)w + i); }
static INLINE __m256 load8_f16(const void *w, size_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
}
static INLINE __m256 load8_bf16(const void *w, size_t i) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static INLINE void store_cols(float *y, __m256 a, __m256 b, int cols) {
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

static INLINE __m256 load_cols(const float *y, int cols) {
    if (cols >= 8) return _mm256_loadu_ps(y);
    float t[8] = {0};
    memcpy(t, y, (size_t)cols * sizeof *t);
    return _mm256_loadu_ps(t);
}

/* A quantized matrix's scales or mins as the kernels read them (kern_mat: scales or mins with their
 * scale_type; KERN_SCALE_S8 with its f16 factors, scale_d or min_d). v NULL: none (a matrix without mins). */
typedef struct qscales {
    const void *v;
    const uint16_t *d;
    int type, n_groups, sub_groups;
} qscales;
static INLINE qscales qscales_of(const kern_mat *km, int mins, int n_groups) {
    return (qscales){mins ? km->mins : km->scales, mins ? km->min_d : km->scale_d, km->scale_type, n_groups,
                     km->sub_groups};
}
static INLINE size_t qscales_at(const qscales *s, int panel, int g) {
    return ((size_t)panel * (size_t)s->n_groups + (size_t)g) * KERN_PANEL;
}

/* The 16 rows' scales of group g of a panel as f32 (f16 widened exactly; two levels multiplied, exact):
 * rows 0..7 in *s0, 8..15 in *s1. */
static INLINE void scales16(const qscales *s, int panel, int g, __m256 *s0, __m256 *s1) {
    size_t i = qscales_at(s, panel, g);
    if (s->type == KERN_SCALE_S8) {
        const uint16_t *d = s->d + kern_scale_d_index(i, s->sub_groups);
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)((const int8_t *)s->v + i));
        *s0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)d)),
                            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)));
        *s1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(d + 8))),
                            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8))));
    } else if (s->type == KERN_F16) {
        const __m128i *p = (const __m128i *)(const void *)((const uint16_t *)s->v + i);
        *s0 = _mm256_cvtph_ps(_mm_loadu_si128(p));
        *s1 = _mm256_cvtph_ps(_mm_loadu_si128(p + 1));
    } else {
        *s0 = _mm256_loadu_ps((const float *)s->v + i);
        *s1 = _mm256_loadu_ps((const float *)s->v + i + 8);
    }
}

#ifdef __AVX512F__
/* The first cols of a panel's 16 outputs, as a mask (AVX-512 files). */
static INLINE __mmask16 cols_mask(int cols) {
    return cols >= 16 ? (__mmask16)0xFFFF : cols <= 0 ? (__mmask16)0 : (__mmask16)((1u << cols) - 1);
}
/* scales16 in one zmm register. */
static INLINE __m512 scales16_z(const qscales *s, int panel, int g) {
    size_t i = qscales_at(s, panel, g);
    if (s->type == KERN_SCALE_S8) {
        const uint16_t *d = s->d + kern_scale_d_index(i, s->sub_groups);
        __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)((const int8_t *)s->v + i))));
        return _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)d)), v);
    }
    if (s->type == KERN_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)s->v + i)));
    return _mm512_loadu_ps((const float *)s->v + i);
}
#endif

/* A quantized decode GEMV's prefetch of the weight line it reads now (at): into L1 1 KiB ahead and
 * into L2 4 KiB ahead, for every line of every panel it streams. The L1 distance alone left the int8
 * GEMVs, which consume a line in a few instructions, well short of the read bandwidth; the float
 * GEMV goes without either (DESIGN.md, "Decode's prefetch"). */
static INLINE void prefetch_weights(const uint8_t *at, size_t off, size_t pstride) {
    /* off: at's offset in its panel of pstride bytes. Every decode GEMV takes four consecutive panels
     * per call, so within the panel's last 4 KiB the L2 request goes to the same offset in the next
     * call's panel (four panels on): no stream would ask for the start of that panel otherwise. */
    size_t far = off + 4096 < pstride ? 4096 : 4096 + 3 * pstride;
    _mm_prefetch((const char *)at + 1024, _MM_HINT_T0);
    _mm_prefetch((const char *)at + far, _MM_HINT_T1);
}

/* A decode GEMV reads a group's 16 scales per panel (and its mins) once per group: streams of their
 * own beside the weights', which the hardware prefetcher serves late. The zmm weight-only GEMV, whose
 * 32-step groups outgrow the out-of-order window, then stalls on them at every group's end; it asks
 * for the scales (and mins) of group g of its four panels a few groups early. The other GEMVs do not
 * stall there and go without (DESIGN.md, "How near weight-only Q4 is to its ceiling"). */
#define Q_SCALES_AHEAD 2
/* The line of group g's 16 entries of one panel, and of their f16 factors (two levels). */
static INLINE void prefetch_scales1(const qscales *s, int panel, int g) {
    size_t i = qscales_at(s, panel, g);
    _mm_prefetch((const char *)s->v + i * (size_t)(s->type == KERN_F32 ? 4 : s->type == KERN_F16 ? 2 : 1), _MM_HINT_T0);
    if (s->type == KERN_SCALE_S8) _mm_prefetch((const char *)(s->d + kern_scale_d_index(i, s->sub_groups)), _MM_HINT_T0);
}
static INLINE void prefetch_scales4(const qscales *sc, const qscales *mn, int panel, int g) {
    if (g >= sc->n_groups) return;
    for (int p = 0; p < 4; p++) {
        prefetch_scales1(sc, panel + p, g);
        if (mn->v) prefetch_scales1(mn, panel + p, g);
    }
}

/* Q4's correction of a group's sums needs the sum of x over it, in order: x[b] + ... + x[e-1]. */
static inline float q4_xsum(const float *x, int b, int e) {
    float xs = 0.0f;
    for (int kk = b; kk < e; kk++) xs += x[kk];
    return xs;
}

/* Rows of a long group's sums kept at a time (the Q8/Q4 and integer tiles). */
#define Q_ROWS 48
/* Steps of a panel widened at a time for several rows (16 KiB of f32 in the kernel scratch per panel,
 * two panels for a variant's tiles: they stay in a 48 KiB L1 while the tiles run; DESIGN.md);
 * the rows whose group sums are kept at a time are Q_ROWS (3 KiB). */
#define Q_BLOCK 256

/* A weight-only quantized matrix (Q8 or Q4) around its panels (avx2_float.c). */
typedef struct qmat {
    const uint8_t *q;
    qscales sc, mn;    /* the scales, and the mins (mn.v NULL without) */
    int k, n_groups, group;
    size_t step_bytes; /* 16 (Q8) or 8 (Q4) */
    float q4_off;      /* kern_q4_offset: 8, or 0 with mins */
} qmat;
/* Whether a group's sum of x is needed: Q4's offset and the mins. */
static INLINE int q_need_xsum(int type, const qmat *m) { return type == KERN_Q4 || m->mn.v; }

/* The rows of a chunk x one or two panels (cols up to 32: two when more than 16) over whole groups
 * g0 .. g1-1, widened to f32 in blk from step kb (16 floats per step: rows 0..7 as avx2_float.c's
 * q_step widens them, then rows 8..15; the second panel's block Q_BLOCK * 16 floats after the first's;
 * Q4 over two panels paired instead: the first block holds rows 0..7 of both panels, the second
 * rows 8..15 of both, so a row's whole byte meets its partner's nibble in the same lane);
 * xsum: the sums of x per row and group ([rows][n_groups]) that Q4 and mins need, or NULL. A variant's
 * own tiles for weight-only prefill (avx512_float.c); NULL: the AVX2 ones, one panel at a time. */
typedef void (*kern_q_tiles_fn)(int type, float *y, int ldy, const float *x, int ldx, const float *blk, int kb,
                                const qmat *m, int panel, int g0, int g1, int rows, int cols, const float *xsum);
/* part[r * 16 + j] (plus its value when acc) + the FMA chain over len widened steps of a long group
 * (one per row for 8w) in blk: x[r * ldx + kk] times blk[kk * 16 + j], for r < rows. NULL: the AVX2 tiles. */
typedef void (*kern_q_long_fn)(float *part, const float *x, int ldx, int rows, int len, const float *blk, int acc);
/* y[0 .. 64) for one row x four panels from panel on (decode), the AVX2 GEMV's operations in its
 * order; xsum: the sums of x per group (Q4, mins), or NULL to compute them. NULL: the AVX2 GEMV. */
typedef void (*kern_q_gemv_fn)(int type, float *y, const float *x, const qmat *m, int panel, const float *xsum);
/* A variant's own pieces of the weight-only matmul; a NULL member takes the AVX2 one. */
typedef struct kern_q_hooks {
    kern_q_tiles_fn tiles;
    kern_q_long_fn long_tiles;
    kern_q_gemv_fn gemv4;
} kern_q_hooks;
/* Weight-only Q8/Q4 matmul (avx2_float.c) with a variant's hooks (NULL: AVX2 throughout). */
void kern_avx2_matmul_q(int type, const kern_q_hooks *hooks, float *y, int ldy, const float *x, const kern_mat *m, int n,
                        int k, int ob, int oe);

#endif
