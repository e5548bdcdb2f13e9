/* bench_kernels: the matmul kernels alone, on one thread, for every weight type. A model's speed
 * mixes the kernels with attention, norms, the pool's waits and the machine's neighbours; this
 * times one matrix of one shape (Qwen3-0.6B's gate, 3,072 x 1,024, by default) through the kernel
 * set this CPU gets (ETCH_KERNELS caps it), in copies whose bytes reach 256 MiB, so the weights come
 * from memory as in a model (at most 64 copies: a matrix under 4 MiB is partly timed from cache). For each type it prints prefill (ROWS rows at once) in
 * GFLOP/s and as a fraction of this thread's FMA peak, and decode (one row) in GB/s of weight bytes
 * and as a fraction of this thread's read bandwidth, both measured by etch_roofline in the same run
 * (the bandwidth before and after the passes, the larger one: a neighbour's burst lowers either).
 * Medians over the passes, each pass timing every type in turn. A program, not a test: figures, no
 * pass or fail.
 * usage: bench_kernels [D K [ROWS [PASSES]]] */
#define _POSIX_C_SOURCE 200809L
#include "etch.h"
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *must(void *p) {
    if (!p) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        exit(1);
    }
    return p;
}

/* The CPU's model name from /proc/cpuinfo (Linux), or "unknown CPU". */
static void cpu_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            const char *v = strchr(line, ':') + 2;
            snprintf(out, cap, "%.*s", (int)strcspn(v, "\n"), v);
            break;
        }
    fclose(f);
}

/* One type's matrix: the packed values and scales of copy 0, copied `copies` times. */
typedef struct bench_mat {
    const char *name;
    kern_mat m[64];
    size_t bytes; /* one copy's weight bytes (values and scales) */
} bench_mat;

/* Packs src [d, k] as `type` (a float type, q8/q4 in groups of 32, or i8/i4 from those) and copies
 * it until the copies hold at least `total` bytes (at most 64 copies). */
static int make_mat(bench_mat *b, const char *name, int type, const float *src, int d, int k, size_t total) {
    size_t rows = (size_t)kern_packed_rows(d), vals = rows * (size_t)k, scale_bytes = 0, val_bytes;
    void *w = NULL, *sc = NULL;
    int group = 0, qtype = type == KERN_I8 ? KERN_Q8 : type == KERN_I4 ? KERN_Q4 : type;
    if (!kern_is_quantized(type)) {
        size_t es = kern_wsize(type);
        val_bytes = vals * es;
        w = must(calloc(1, val_bytes));
        for (int o = 0; o < d; o++)
            for (int kk = 0; kk < k; kk++) {
                float v = src[(size_t)o * k + kk];
                size_t i = kern_packed_index(o, kk, k);
                if (type == KERN_F32) ((float *)w)[i] = v;
                else if (type == KERN_F16) ((uint16_t *)w)[i] = kern_f32_to_f16(v);
                else ((uint16_t *)w)[i] = kern_f32_to_bf16(v);
            }
    } else {
        val_bytes = qtype == KERN_Q8 ? vals : vals / 2;
        group = kern_q_group_fit(k, 32, kern_is_int_dot(type));
        scale_bytes = rows * (size_t)kern_q_groups(k, group) * sizeof(uint16_t);
        void *q = must(malloc(val_bytes));
        sc = must(malloc(scale_bytes));
        kern_quantize(q, sc, KERN_F16, qtype, src, d, k, group);
        if (kern_is_int_dot(type)) {
            w = must(malloc(val_bytes));
            kern_to_int_dot(w, q, qtype, d, k);
            free(q);
        } else {
            w = q;
        }
    }
    b->name = name;
    b->bytes = val_bytes + scale_bytes;
    int copies = (int)((total + b->bytes - 1) / b->bytes);
    copies = copies < 1 ? 1 : copies > 64 ? 64 : copies;
    for (int c = 0; c < 64; c++) b->m[c].w = NULL;
    for (int c = 0; c < copies; c++) {
        void *wc = c ? must(malloc(val_bytes)) : w, *sc_c = c && sc ? must(malloc(scale_bytes)) : sc;
        if (c) memcpy(wc, w, val_bytes);
        if (c && sc) memcpy(sc_c, sc, scale_bytes);
        b->m[c] = (kern_mat){wc, sc_c, type, group, NULL, NULL, KERN_F16, NULL};
    }
    return copies;
}

static void free_mat(bench_mat *b) {
    for (int c = 0; c < 64 && b->m[c].w; c++) {
        free((void *)b->m[c].w);
        free((void *)b->m[c].scales);
    }
}

/* The time of one call with n rows: one pass through every copy. */
static double time_call(const bench_mat *b, int copies, const float *x, const kern_qx *qx, float *y, int n, int d, int k) {
    double t0 = now();
    for (int c = 0; c < copies; c++) {
        if (kern_is_int_dot(b->m[c].type)) kern_matmul_i(y, d, qx, &b->m[c], n, d, k, 0, d);
        else kern_matmul(y, d, x, &b->m[c], n, d, k, 0, d);
    }
    return (now() - t0) / copies;
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

int main(int argc, char **argv) {
    int d = argc > 2 ? atoi(argv[1]) : 3072, k = argc > 2 ? atoi(argv[2]) : 1024;
    int rows = argc > 3 ? atoi(argv[3]) : 128, passes = argc > 4 ? atoi(argv[4]) : 7;
    if (d < 16 || k < 32 || k % 2 || rows < 2 || passes < 1) {
        fprintf(stderr, "usage: bench_kernels [D K [ROWS [PASSES]]]  (D >= 16, K >= 32 and even, ROWS >= 2)\n");
        return 2;
    }
    const char *set = kern_init();
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    double peak = 0, bw = 0;
    etch_error err;
    if (etch_roofline(1, &peak, &bw, &err) != ETCH_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.message);
        return 1;
    }

    float *src = must(malloc((size_t)d * k * sizeof *src)), *x = must(malloc((size_t)rows * k * sizeof *x));
    float *y = must(malloc((size_t)rows * kern_packed_rows(d) * sizeof *y));
    srand(1);
    for (size_t i = 0; i < (size_t)d * k; i++) src[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t i = 0; i < (size_t)rows * k; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    /* int8 activations for the integer-dot types, quantized per row as 8da's are (outside the timing:
     * a model quantizes a site's input once for all its matrices) */
    kern_qx qx_all = {must(malloc((size_t)rows * k / 2 * sizeof(int32_t))), must(malloc((size_t)rows * sizeof(float))),
                      must(malloc((size_t)rows * sizeof(int32_t))), must(malloc((size_t)rows * k / 2 * sizeof(uint16_t))),
                      must(malloc((size_t)rows * (k / 2 + 1) * sizeof(int32_t)))};
    kern_qx qx_one = {must(malloc((size_t)k / 2 * sizeof(int32_t))), must(malloc(sizeof(float))), must(malloc(sizeof(int32_t))),
                      must(malloc((size_t)k / 2 * sizeof(uint16_t))), must(malloc((size_t)(k / 2 + 1) * sizeof(int32_t)))};
    kern_quantize_x(&qx_all, x, rows, k, NULL);
    kern_quantize_x(&qx_one, x, 1, k, NULL);

    static const struct { const char *name; int type; } types[] = {
        {"f32", KERN_F32}, {"f16", KERN_F16}, {"bf16", KERN_BF16}, {"q8 (8w)", KERN_Q8},
        {"q4 (4w)", KERN_Q4}, {"i8 (8da8w)", KERN_I8}, {"i4 (8da4w)", KERN_I4},
    };
    /* Every type's matrices first, then passes that time each type in turn (prefill, then decode):
     * a neighbour's burst on a shared machine lands on every type alike, not on the one it met. */
    enum { N_TYPES = sizeof types / sizeof *types };
    const size_t total = (size_t)256 << 20; /* eight times the largest L3 we meet */
    bench_mat *b = must(calloc(N_TYPES, sizeof *b));
    int copies[N_TYPES];
    double *tp = must(malloc((size_t)N_TYPES * passes * sizeof *tp)), *td = must(malloc((size_t)N_TYPES * passes * sizeof *td));
    for (int t = 0; t < N_TYPES; t++) copies[t] = make_mat(&b[t], types[t].name, types[t].type, src, d, k, total);
    for (int p = -1; p < passes; p++) /* pass -1 warms up, unmeasured */
        for (int t = 0; t < N_TYPES; t++) {
            double a = time_call(&b[t], copies[t], x, &qx_all, y, rows, d, k);
            double c = time_call(&b[t], copies[t], x, &qx_one, y, 1, d, k);
            if (p >= 0) tp[t * passes + p] = a, td[t * passes + p] = c;
        }
    double peak2 = 0, bw2 = 0;
    if (etch_roofline(1, &peak2, &bw2, &err) != ETCH_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.message);
        return 1;
    }
    printf("%s, kernels %s; one thread: FMA peak %.1f GFLOP/s, read bandwidth %.1f GB/s (%.1f before the passes, %.1f after)\n",
           cpu, set, peak, bw2 > bw ? bw2 : bw, bw, bw2);
    bw = bw2 > bw ? bw2 : bw;
    printf("matrix %d x %d (outputs x inputs), prefill %d rows, median of %d passes\n\n", d, k, rows, passes);
    printf("| weights | bytes per weight | prefill GFLOP/s (of peak) | decode GB/s (of read bw) | decode us per call |\n");
    printf("|---|---|---|---|---|\n");
    for (int t = 0; t < N_TYPES; t++) {
        double mp = median(tp + t * passes, passes), md = median(td + t * passes, passes);
        double gflops = 2.0 * rows * d * k / mp / 1e9, gbps = (double)b[t].bytes / md / 1e9;
        printf("| %s | %.3f | %.1f (%.0f%%) | %.1f (%.0f%%) | %.1f |\n", b[t].name, (double)b[t].bytes / ((double)d * k),
               gflops, 100 * gflops / peak, gbps, 100 * gbps / bw, md * 1e6);
        free_mat(&b[t]);
    }
    free(b), free(tp), free(td);
    printf("\nThe integer-dot types' times leave out quantizing the activations (once per site in a model).\n");
    free(src), free(x), free(y);
    free(qx_all.pairs), free(qx_all.scale), free(qx_all.zero), free(qx_all.bytes), free(qx_all.psum);
    free(qx_one.pairs), free(qx_one.scale), free(qx_one.zero), free(qx_one.bytes), free(qx_one.psum);
    return 0;
}
