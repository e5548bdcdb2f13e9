/* runtime: the machine's limits, measured with the same thread pool the sessions use. */
#include "runtime.h"

#include "../base/pool.h"
#include "../kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

typedef struct roof_job {
    double result[256];
    float *buf;
    size_t n;
    int what; /* 0: FMA peak, 1: read bandwidth */
} roof_job;

static void roof_task(void *ctx, int i, int nw) {
    roof_job *j = ctx;
    if (j->what == 0) {
        j->result[i] = kern_fma_peak(0.2);
        return;
    }
    int b, e;
    base_split((int)(j->n / 1024), nw, i, 1, &b, &e);
    j->result[i] = kern_read_bandwidth(j->buf + (size_t)b * 1024, (size_t)(e - b) * 1024);
}

etch_status etch_roofline(int n_threads, double *gflops, double *read_gbps, etch_error *err) {
    base_clear(err);
    if (!gflops || !read_gbps) return base_fail(err, ETCH_ERR_ARG, "etch_roofline: NULL argument");
    kern_init();
    if (n_threads <= 0) n_threads = base_physical_cores();
    base_pool *pool;
    etch_status st = base_pool_new(n_threads, &pool, err);
    if (st) return st;
    roof_job *j = base_calloc(1, sizeof *j);
    size_t n = (size_t)1 << 26; /* 256 MiB of floats: eight times the largest L3 we meet, and a quarter of the time to fill */
    if (j) j->buf = base_malloc(n * sizeof(float));
    if (!j || !j->buf) {
        if (j) base_free(j->buf);
        base_free(j);
        base_pool_free(pool);
        return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate 256 MiB for the bandwidth measurement");
    }
    /* On 2 MiB pages (every whole 2 MiB block of it), as a mapped program's weights are: on 4 KiB
     * pages the hardware prefetchers stop at every page, and the probe can read less than the
     * weights stream (DESIGN.md, "The read probe"). */
    base_advise_huge(j->buf, n * sizeof(float));
    memset(j->buf, 1, n * sizeof(float)); /* touch every page before timing */
    j->n = n;
    j->what = 0;
    base_pool_run(pool, roof_task, j);
    *gflops = 0;
    for (int i = 0; i < n_threads; i++) *gflops += j->result[i];
    double best = 0;
    j->what = 1;
    for (int rep = 0; rep < 3; rep++) { /* the best of three: bandwidth varies with the neighbours */
        base_pool_run(pool, roof_task, j);
        double sum = 0, slowest = 1e30;
        for (int i = 0; i < n_threads; i++) sum += j->result[i], slowest = j->result[i] < slowest ? j->result[i] : slowest;
        (void)slowest;
        best = sum > best ? sum : best;
    }
    *read_gbps = best;
    base_free(j->buf);
    base_free(j);
    base_pool_free(pool);
    return ETCH_OK;
}
