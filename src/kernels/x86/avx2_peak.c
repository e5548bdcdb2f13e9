/* kernels/x86/avx2_peak.c: the machine's limits with 256-bit vectors, for the roofline. */
#include "avx2.h"

/* Ten independent chains: enough to cover FMA latency times two ports. */
double kern_avx2_fma_peak(double seconds) {
    __m256 a[10], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 10; i++) a[i] = _mm256_set1_ps((float)i);
    double t0 = kern_seconds(), t;
    long iters = 0;
    do {
        for (int r = 0; r < 100000; r++) {
            _Pragma("GCC unroll 10") for (int i = 0; i < 10; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
        }
        iters += 100000;
    } while ((t = kern_seconds() - t0) < seconds);
    float sink = 0;
    for (int i = 0; i < 10; i++) sink += _mm256_cvtss_f32(a[i]);
    volatile float keep = sink;
    (void)keep;
    return (double)iters * 10 * 8 * 2 / t / 1e9;
}

double kern_avx2_read_bandwidth(const float *buf, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    double t0 = kern_seconds();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(buf + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(buf + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(buf + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(buf + i + 24));
    }
    double t = kern_seconds() - t0;
    volatile float keep = _mm256_cvtss_f32(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    (void)keep;
    return (double)i * 4 / t / 1e9;
}
