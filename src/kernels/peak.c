/* kernels/peak: the machine's limits measured in plain C (the portable variant's roofline), and the
 * clock every probe reads. */
#include "kern_impl.h"

#include <time.h>

double kern_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

double kern_fma_peak_portable(double seconds) {
    float a[8] = {0};
    double t0 = kern_seconds(), t;
    long iters = 0;
    do {
        for (int r = 0; r < 1000000; r++)
            for (int j = 0; j < 8; j++) a[j] = a[j] * 0.999999f + 1e-7f;
        iters += 1000000;
    } while ((t = kern_seconds() - t0) < seconds);
    volatile float keep = a[0];
    (void)keep;
    return (double)iters * 8 * 2 / t / 1e9;
}

double kern_read_bandwidth_portable(const float *buf, size_t n) {
    double t0 = kern_seconds();
    float s = 0;
    for (size_t i = 0; i < n; i++) s += buf[i];
    volatile float keep = s;
    (void)keep;
    return (double)n * 4 / (kern_seconds() - t0) / 1e9;
}
