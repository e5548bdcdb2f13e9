/* kernels/x86/avx512_float.c: prefill's matmul with f32 activations and f32, f16 or bf16 weights,
 * AVX-512F: a 16-row panel is one zmm register, and a tile is up to 6 rows x 2 panels (12
 * accumulators). Every output is one FMA chain over k in order, as in the AVX2 kernel and the twin:
 * equal to both bit for bit. Decode (one row) goes to the AVX2 GEMV. */
#include "../kern_impl.h"

#include <immintrin.h>

#define INLINE __attribute__((always_inline)) inline

static INLINE __m512 load16_f32(const void *w, size_t i) { return _mm512_loadu_ps((const float *)w + i); }
static INLINE __m512 load16_f16(const void *w, size_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)w + i)));
}
static INLINE __m512 load16_bf16(const void *w, size_t i) {
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)w + i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

/* The first cols of a panel's 16 outputs. */
static INLINE __mmask16 cols_mask(int cols) {
    return cols >= 16 ? (__mmask16)0xFFFF : cols <= 0 ? (__mmask16)0 : (__mmask16)((1u << cols) - 1);
}

/* tile: R rows (1..6) x P panels (1..2): R*P accumulators; per kk P weight loads, R broadcasts. */
#define DEFINE_MATMUL(T)                                                                                          \
    static INLINE void tile_##T(float *y, int ldy, const float *x, int ldx, int k, const void *w, size_t off,      \
                                size_t stride, int R, int P, __mmask16 m0, __mmask16 m1) {                         \
        __m512 a0[6], a1[6];                                                                                      \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm512_setzero_ps();                  \
        for (int kk = 0; kk < k; kk++) {                                                                          \
            __m512 w0 = load16_##T(w, off + (size_t)kk * 16);                                                     \
            __m512 w1 = P > 1 ? load16_##T(w, off + stride + (size_t)kk * 16) : w0;                              \
            _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                                 \
                __m512 xb = _mm512_set1_ps(x[(size_t)r * ldx + kk]);                                              \
                a0[r] = _mm512_fmadd_ps(xb, w0, a0[r]);                                                           \
                if (P > 1) a1[r] = _mm512_fmadd_ps(xb, w1, a1[r]);                                                \
            }                                                                                                     \
        }                                                                                                         \
        _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {                                                     \
            _mm512_mask_storeu_ps(y + (size_t)r * ldy, m0, a0[r]);                                                \
            if (P > 1) _mm512_mask_storeu_ps(y + (size_t)r * ldy + 16, m1, a1[r]);                                \
        }                                                                                                         \
    }                                                                                                             \
    /* All n rows against P panels, six rows at a time, the tail's row count known to the compiler. */          \
    static void tiles_##T(float *y, int ldy, const float *x, int n, int k, const void *w, size_t off,              \
                          size_t stride, int P, __mmask16 m0, __mmask16 m1) {                                     \
        int r = 0;                                                                                                \
        for (; r + 6 <= n; r += 6)                                                                                \
            if (P > 1) tile_##T(y + (size_t)r * ldy, ldy, x + (size_t)r * k, k, k, w, off, stride, 6, 2, m0, m1); \
            else tile_##T(y + (size_t)r * ldy, ldy, x + (size_t)r * k, k, k, w, off, stride, 6, 1, m0, m1);       \
        y += (size_t)r * ldy, x += (size_t)r * k;                                                                 \
        switch ((n - r) * 2 + (P > 1)) {                                                                          \
        case 11: tile_##T(y, ldy, x, k, k, w, off, stride, 5, 2, m0, m1); break;                                  \
        case 10: tile_##T(y, ldy, x, k, k, w, off, stride, 5, 1, m0, m1); break;                                  \
        case 9: tile_##T(y, ldy, x, k, k, w, off, stride, 4, 2, m0, m1); break;                                   \
        case 8: tile_##T(y, ldy, x, k, k, w, off, stride, 4, 1, m0, m1); break;                                   \
        case 7: tile_##T(y, ldy, x, k, k, w, off, stride, 3, 2, m0, m1); break;                                   \
        case 6: tile_##T(y, ldy, x, k, k, w, off, stride, 3, 1, m0, m1); break;                                   \
        case 5: tile_##T(y, ldy, x, k, k, w, off, stride, 2, 2, m0, m1); break;                                   \
        case 4: tile_##T(y, ldy, x, k, k, w, off, stride, 2, 1, m0, m1); break;                                   \
        case 3: tile_##T(y, ldy, x, k, k, w, off, stride, 1, 2, m0, m1); break;                                   \
        case 2: tile_##T(y, ldy, x, k, k, w, off, stride, 1, 1, m0, m1); break;                                   \
        }                                                                                                         \
    }                                                                                                             \
    void kern_avx512_matmul_##T(float *y, int ldy, const float *x, const kern_mat *m, int n, int d, int k, int ob,  \
                                int oe) {                                                                         \
        (void)d;                                                                                                  \
        const void *w = m->w;                                                                                     \
        size_t stride = (size_t)k * KERN_PANEL; /* one panel */                                                   \
        if (n == 1) { /* decode: the AVX2 GEMV, which streams the weights faster than a 512-bit one did */     \
            kern_avx2_matmul_##T(y, ldy, x, m, n, d, k, ob, oe);                                                  \
            return;                                                                                               \
        }                                                                                                         \
        int p0 = ob;                                                                                              \
        while (p0 < oe) {                                                                                         \
            int left = oe - p0, P = left > KERN_PANEL ? 2 : 1;                                                    \
            __mmask16 m0 = cols_mask(left), m1 = cols_mask(left - KERN_PANEL);                                    \
            tiles_##T(y + p0, ldy, x, n, k, w, (size_t)(p0 / KERN_PANEL) * stride, stride, P, m0, m1);            \
            p0 += P * KERN_PANEL;                                                                                 \
        }                                                                                                         \
    }

DEFINE_MATMUL(f32)
DEFINE_MATMUL(f16)
DEFINE_MATMUL(bf16)

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
