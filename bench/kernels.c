/* bench_kernels: the matmul kernels alone, for every weight type. A model's speed mixes the kernels
 * with attention, norms, the pool's waits and the machine's neighbours; this times one matrix of one
 * shape (Qwen3-0.6B's gate, 3,072 x 1,024, by default) through the kernel set this CPU gets
 * (ETCH_KERNELS caps it), split over THREADS workers as a model splits it (output panels, one
 * parallel region per matrix), in copies whose bytes reach 256 MiB so the weights come from memory as
 * in a model (at most 64 copies: a matrix under 4 MiB is partly timed from cache; -c 1 times one
 * matrix again and again, from cache). For each type it prints prefill (ROWS rows at once) in GFLOP/s
 * and as a fraction of the threads' FMA peak, and decode (one row) in GB/s of weight bytes and as a
 * fraction of their read bandwidth, both measured by etch_roofline in every pass beside the kernels:
 * on a shared machine they move as much as the kernels do. Medians over the passes, each pass timing every type in turn. A
 * program, not a test: figures, no pass or fail.
 * -w q8,i8 times only the types whose names begin with one of the words (each pass is then shorter).
 * usage: bench_kernels [-d D] [-k K] [-n ROWS] [-r PASSES] [-t THREADS] [-c COPIES] [-w WORDS] */
#define _POSIX_C_SOURCE 200809L
#include "etch.h"
#include "base/base.h"
#include "base/pool.h"
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double now(void) { return base_now_us() * 1e-6; }

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

/* One type's matrix in copies m[0 .. copies), all in one block. */
typedef struct bench_mat {
    const char *name;
    kern_mat m[64];
    size_t bytes;   /* one copy's weight bytes (values and scales) */
    uint8_t *arena; /* every copy's bytes */
} bench_mat;

/* Packs src [d, k] as `type` (a float type, q8/q4 in groups of 32 with scales of scale_type and,
 * with `mins`, a min per group as GGUF's Q4_1/Q4_K keep, or i8/i4 from those) and copies it until
 * the copies hold at least `total` bytes (at most 64 copies). Two-level scales (KERN_SCALE_S8, as a
 * K-quant's) are made up, an f16 per 8 groups: their bytes and operations are what is timed. */
static int make_mat(bench_mat *b, const char *name, int type, int scale_type, int mins, const float *src, int d, int k,
                    size_t total, int want_copies) {
    size_t rows = (size_t)kern_packed_rows(d), vals = rows * (size_t)k, scale_bytes = 0, val_bytes;
    size_t ss = kern_wsize(scale_type), d_bytes = 0; /* d_bytes: the two-level scales' f16 factors (and the mins') */
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
        size_t n_scales = rows * (size_t)kern_q_groups(k, group);
        if (scale_type == KERN_SCALE_S8) d_bytes = n_scales / 8 * sizeof(uint16_t) * (mins ? 2 : 1);
        scale_bytes = n_scales * ss * (mins ? 2 : 1) + d_bytes; /* the mins after the scales, then the f16 factors */
        void *q = must(malloc(val_bytes));
        sc = must(malloc(n_scales * sizeof(float) * 2));
        kern_quantize(q, sc, scale_type == KERN_F16 ? KERN_F16 : KERN_F32, qtype, src, d, k, group);
        for (size_t i = 0; mins && i < n_scales; i++) { /* made-up mins: their bytes and FMAs are what is timed */
            float v = -0.05f * (float)(i % 7);
            if (scale_type == KERN_F32) ((float *)sc)[n_scales + i] = v;
            else if (scale_type == KERN_F16) ((uint16_t *)sc)[n_scales + i] = kern_f32_to_f16(v);
        }
        if (scale_type == KERN_SCALE_S8) {
            uint8_t *t = sc;
            for (size_t i = 0; i < n_scales * (mins ? 2 : 1); i++) t[i] = (uint8_t)(i < n_scales ? 17 + i % 40 : 256 - i % 40);
            uint16_t *f = (uint16_t *)(t + n_scales * (mins ? 2 : 1));
            for (size_t i = 0; i < d_bytes / sizeof *f; i++) f[i] = kern_f32_to_f16(0.002f);
        }
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
    copies = want_copies > 0 ? want_copies : copies;
    copies = copies < 1 ? 1 : copies > 64 ? 64 : copies;
    /* The copies one after another in one block on 2 MiB pages, each copy's values then its scales,
     * as a program's tensors lie in its mapping (etch maps programs with MADV_HUGEPAGE): on 4 KiB
     * pages the hardware prefetcher stops at every page, and a GEMV that streams several panels at
     * once then measures the pages, not itself. */
    size_t val_span = (val_bytes + 63) / 64 * 64, span = val_span + (scale_bytes + 63) / 64 * 64;
    size_t huge = (size_t)2 << 20, arena_bytes = (span * (size_t)copies + huge - 1) / huge * huge;
    b->arena = must(aligned_alloc(huge, arena_bytes));
    base_advise_huge(b->arena, arena_bytes);
    for (int c = 0; c < copies; c++) {
        uint8_t *at = b->arena + span * (size_t)c;
        memcpy(at, w, val_bytes);
        if (sc) memcpy(at + val_span, sc, scale_bytes);
        uint8_t *s = at + val_span;
        size_t n_scales = (scale_bytes - d_bytes) / (mins ? 2 : 1);
        b->m[c] = (kern_mat){.w = at, .scales = sc ? s : NULL, .type = type, .group = group, .scale_type = scale_type};
        if (mins) b->m[c].mins = s + n_scales;
        if (scale_type == KERN_SCALE_S8) {
            b->m[c].scale_d = (const uint16_t *)(const void *)(s + n_scales * (mins ? 2 : 1));
            b->m[c].min_d = mins ? b->m[c].scale_d + d_bytes / 4 : NULL;
            b->m[c].sub_groups = 8;
        }
    }
    free(w);
    free(sc);
    return copies;
}

static void free_mat(bench_mat *b) { free(b->arena); }

/* x[n, k] quantized to int8 in fresh buffers: per row (group 0) or per group of values of a row. */
static kern_qx qx_new(const float *x, int n, int k, int group) {
    size_t half = (size_t)k / 2, scales = group ? (size_t)kern_q_groups(k, group) : 1;
    kern_qx qx = {must(malloc((size_t)n * half * sizeof(int32_t))), must(malloc((size_t)n * scales * sizeof(float))),
                  must(malloc((size_t)n * sizeof(int32_t))), must(malloc((size_t)n * half * sizeof(uint16_t))),
                  must(malloc((size_t)n * (half + 1) * sizeof(int32_t))), group, 0};
    kern_quantize_x(&qx, x, n, k, NULL);
    return qx;
}

static void qx_free(kern_qx *qx) { free(qx->pairs), free(qx->scale), free(qx->zero), free(qx->bytes), free(qx->psum); }

/* One matrix call split over the pool's workers by output panels, as the model's mm_task. */
typedef struct call_job {
    const kern_mat *m;
    const float *x;
    const kern_qx *qx;
    float *y;
    int n, d, k;
} call_job;

static void call_task(void *ctx, int i, int nw) {
    const call_job *j = ctx;
    int b, e;
    base_split(j->d, nw, i, KERN_PANEL, &b, &e);
    if (b >= e) return;
    if (kern_is_int_dot(j->m->type)) kern_matmul_i(j->y, j->d, j->qx, j->m, j->n, j->d, j->k, b, e);
    else kern_matmul(j->y, j->d, j->x, j->m, j->n, j->d, j->k, b, e);
}

/* The time of one call with n rows: one pass through every copy, a parallel region each. */
static double time_call(base_pool *pool, const bench_mat *b, int copies, const float *x, const kern_qx *qx, float *y,
                        int n, int d, int k) {
    double t0 = now();
    for (int c = 0; c < copies; c++) {
        call_job j = {&b->m[c], x, qx, y, n, d, k};
        base_pool_run(pool, call_task, &j);
    }
    return (now() - t0) / copies;
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

/* The time of quantizing x[n, k] into qx (as its group asks), on this thread: a model does it once
 * per site, on the calling thread in decode, while the other workers wait. */
static double time_quantize(kern_qx *qx, const float *x, int n, int k) {
    int reps = n == 1 ? 256 : 4;
    double t0 = now();
    for (int r = 0; r < reps; r++) kern_quantize_x(qx, x, n, k, NULL);
    return (now() - t0) / reps;
}

/* Whether a type's name begins with one of the comma-separated words (every name without -w). */
static int name_chosen(const char *name, const char *words) {
    if (!words) return 1;
    for (const char *w = words; *w; w += *w == ',') {
        size_t len = strcspn(w, ",");
        if (len && !strncmp(name, w, len)) return 1;
        w += len;
    }
    return 0;
}

int main(int argc, char **argv) {
    int d = 3072, k = 1024, rows = 128, passes = 7, threads = 1, want_copies = 0, bad = 0;
    const char *words = NULL; /* -w: the types to time, by the start of their names */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-w") && i + 1 < argc) {
            words = argv[++i];
            continue;
        }
        int *opt = !strcmp(argv[i], "-d") ? &d : !strcmp(argv[i], "-k") ? &k : !strcmp(argv[i], "-n") ? &rows
                 : !strcmp(argv[i], "-r") ? &passes : !strcmp(argv[i], "-t") ? &threads : !strcmp(argv[i], "-c") ? &want_copies : NULL;
        char *end = NULL;
        if (!opt || i + 1 >= argc || (*opt = (int)strtol(argv[++i], &end, 10), *end)) bad = 1;
    }
    if (bad || d < 16 || k < 32 || k % 2 || rows < 2 || passes < 1 || threads < 1 || threads > 256 || want_copies < 0) {
        fprintf(stderr, "usage: bench_kernels [-d D] [-k K] [-n ROWS] [-r PASSES] [-t THREADS] [-c COPIES] [-w WORDS]\n"
                        "  D >= 16 outputs, K >= 32 inputs (even), ROWS >= 2 for prefill, COPIES 1..64 (default: 256 MiB),\n"
                        "  WORDS: comma-separated starts of the type names to time (q8,i8; default: every type)\n");
        return 2;
    }
    const char *set = kern_init();
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    etch_error err;
    base_pool *pool;
    if (base_pool_new(threads, &pool, &err) != ETCH_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.message);
        return 1;
    }

    float *src = must(malloc((size_t)d * k * sizeof *src)), *x = must(malloc((size_t)rows * k * sizeof *x));
    float *y = must(malloc((size_t)rows * kern_packed_rows(d) * sizeof *y));
    srand(1);
    for (size_t i = 0; i < (size_t)d * k; i++) src[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t i = 0; i < (size_t)rows * k; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    /* int8 activations for the integer-dot types, quantized per row as 8da's are, and with a scale per
     * 32 values as llama.cpp's Q8_0 activations (quant.act_group); outside the timing: a model
     * quantizes a site's input once for all its matrices */
    kern_qx qx_all = qx_new(x, rows, k, 0), qx_one = qx_new(x, 1, k, 0);
    kern_qx gx_all = qx_new(x, rows, k, 32), gx_one = qx_new(x, 1, k, 32);

    static const struct { const char *name; int type, scale_type, mins, act_group; } types[] = {
        {"f32", KERN_F32, 0, 0, 0}, {"f16", KERN_F16, 0, 0, 0}, {"bf16", KERN_BF16, 0, 0, 0},
        {"q8 (8w, Q8_0 kept)", KERN_Q8, KERN_F16, 0, 0}, {"q4 (4w, Q4_0 kept)", KERN_Q4, KERN_F16, 0, 0},
        {"q4, f16 scales and mins (Q4_1 kept)", KERN_Q4, KERN_F16, 1, 0}, {"q4, f32 scales and mins", KERN_Q4, KERN_F32, 1, 0},
        {"q4, two-level scales and mins (Q4_K kept)", KERN_Q4, KERN_SCALE_S8, 1, 0},
        {"i8 (8da8w)", KERN_I8, KERN_F16, 0, 0}, {"i4 (8da4w)", KERN_I4, KERN_F16, 0, 0},
        {"i8, activations per 32 (8da8w --act-group 32)", KERN_I8, KERN_F16, 0, 32},
        {"i4, activations per 32 (8da4w --act-group 32)", KERN_I4, KERN_F16, 0, 32},
    };
    /* Every type's matrices first, then passes that time each type in turn (prefill, then decode):
     * a neighbour's burst on a shared machine lands on every type alike, not on the one it met. */
    enum { N_TYPES = sizeof types / sizeof *types };
    const size_t total = (size_t)256 << 20; /* eight times the largest L3 we meet */
    bench_mat *b = must(calloc(N_TYPES, sizeof *b));
    int copies[N_TYPES], chosen[N_TYPES], n_chosen = 0;
    for (int t = 0; t < N_TYPES; t++) n_chosen += chosen[t] = name_chosen(types[t].name, words);
    if (!n_chosen) {
        fprintf(stderr, "bench_kernels: no weight type begins with a word of -w %s\n", words);
        return 2;
    }
    double *tp = must(malloc((size_t)N_TYPES * passes * sizeof *tp)), *td = must(malloc((size_t)N_TYPES * passes * sizeof *td));
    for (int t = 0; t < N_TYPES; t++) copies[t] = !chosen[t] ? 0 : make_mat(&b[t], types[t].name, types[t].type, types[t].scale_type, types[t].mins, src, d, k, total, want_copies);
    double *tb = must(malloc((size_t)passes * sizeof *tb)), *tf = must(malloc((size_t)passes * sizeof *tf));
    kern_qx *qxs[4] = {&qx_one, &gx_one, &qx_all, &gx_all}; /* per row and per 32: one row, then ROWS rows */
    double *tq = must(malloc((size_t)4 * passes * sizeof *tq));
    for (int p = -1; p < passes; p++) { /* pass -1 warms up, unmeasured */
        if (p >= 0 && etch_roofline(threads, &tf[p], &tb[p], &err) != ETCH_OK) {
            fprintf(stderr, "bench_kernels: %s\n", err.message);
            return 1;
        }
        for (int t = 0; t < N_TYPES; t++) {
            if (!chosen[t]) continue;
            int g = types[t].act_group;
            double a = time_call(pool, &b[t], copies[t], x, g ? &gx_all : &qx_all, y, rows, d, k);
            double c = time_call(pool, &b[t], copies[t], x, g ? &gx_one : &qx_one, y, 1, d, k);
            if (p >= 0) tp[t * passes + p] = a, td[t * passes + p] = c;
        }
        for (int q = 0; q < 4; q++) {
            double t = time_quantize(qxs[q], x, q < 2 ? 1 : rows, k);
            if (p >= 0) tq[q * passes + p] = t;
        }
    }
    double bw = median(tb, passes), peak = median(tf, passes);
    free(tf);
    printf("%s, kernels %s; %d thread%s: FMA peak %.1f GFLOP/s, read bandwidth %.1f GB/s (medians of the passes; the "
           "bandwidth %.1f-%.1f)\n", cpu, set, base_pool_size(pool), base_pool_size(pool) == 1 ? "" : "s", peak, bw, tb[0], tb[passes - 1]);
    free(tb);
    printf("matrix %d x %d (outputs x inputs), prefill %d rows, median of %d passes%s\n\n", d, k, rows, passes,
           want_copies ? ", copies as asked (-c)" : "");
    printf("| weights | bytes per weight | prefill GFLOP/s (of peak) | decode GB/s (of read bw) | decode us per call |\n");
    printf("|---|---|---|---|---|\n");
    for (int t = 0; t < N_TYPES; t++) {
        if (!chosen[t]) continue;
        double mp = median(tp + t * passes, passes), md = median(td + t * passes, passes);
        double gflops = 2.0 * rows * d * k / mp / 1e9, gbps = (double)b[t].bytes / md / 1e9;
        printf("| %s | %.3f | %.1f (%.0f%%) | %.1f (%.0f%%) | %.1f |\n", b[t].name, (double)b[t].bytes / ((double)d * k),
               gflops, 100 * gflops / peak, gbps, 100 * gbps / bw, md * 1e6);
        free_mat(&b[t]);
    }
    free(b), free(tp), free(td);
    printf("\nThe integer-dot types' times leave out quantizing the activations, once per site in a model (one thread):\n\n");
    printf("| activations | 1 row: us (ns per value) | %d rows: us (ns per value) |\n|---|---|---|\n", rows);
    for (int g = 0; g < 2; g++) {
        double one = median(tq + g * passes, passes), all = median(tq + (2 + g) * passes, passes);
        printf("| %s | %.2f (%.3f) | %.1f (%.3f) |\n", g ? "per 32 values" : "per row", one * 1e6, one * 1e9 / k, all * 1e6,
               all * 1e9 / ((double)rows * k));
    }
    free(tq);
    base_pool_free(pool);
    free(src), free(x), free(y);
    qx_free(&qx_all), qx_free(&qx_one), qx_free(&gx_all), qx_free(&gx_one);
    return 0;
}
