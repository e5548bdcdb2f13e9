/* base: the thread pool. Workers wait on a generation counter: they spin for a short while (a
 * region usually follows within microseconds during a forward pass), then sleep on a condition
 * variable. The caller spins until every worker has reported done. */
#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPIN_ROUNDS 4000 /* ~0.1 ms of pause: a forward pass starts regions back to back, and longer spins starve a worker when cores are shared */

struct base_pool {
    int n;                        /* workers, the caller included */
    pthread_t *threads;           /* [n - 1] */
    base_task_fn fn;
    void *ctx;
    atomic_uint generation;       /* bumped to start a region */
    atomic_int pending;           /* workers still running the current region */
    atomic_int quit;
    pthread_mutex_t lock;
    pthread_cond_t wake;
};

typedef struct worker_arg {
    base_pool *p;
    int index;
} worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg) {
    worker_arg a = *(worker_arg *)arg;
    base_free(arg);
    base_pool *p = a.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen && !atomic_load(&p->quit)) {
            if (++spins < SPIN_ROUNDS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->lock);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = g;
        p->fn(p->ctx, a.index, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

etch_status base_pool_new(int n_threads, base_pool **out, etch_error *err) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 256) return base_fail(err, ETCH_ERR_ARG, "threads %d is outside 1..256", n_threads);
    base_pool *p = base_calloc(1, sizeof *p);
    if (!p) return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate a thread pool");
    p->n = n_threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->threads = base_calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        p->n = 1; /* no thread to join */
        base_pool_free(p);
        return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate a thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = base_malloc(sizeof *a);
        if (a) a->p = p, a->index = i; /* filled before the thread can read it */
        if (!a || pthread_create(&p->threads[i - 1], NULL, worker_main, a) != 0) {
            base_free(a);
            p->n = i; /* only the threads started so far are joined */
            base_pool_free(p);
            return base_fail(err, ETCH_ERR_NOMEM, "cannot start thread %d of %d", i, n_threads);
        }
    }
    *out = p;
    return ETCH_OK;
}

void base_pool_run(base_pool *p, base_task_fn fn, void *ctx) {
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->lock); /* a sleeping worker cannot miss the bump */
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    fn(ctx, 0, p->n);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0)
        if (++spins < SPIN_ROUNDS) cpu_relax();
        else sched_yield();
}

int base_pool_size(const base_pool *p) { return p ? p->n : 1; }

void base_pool_free(base_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    base_free(p->threads);
    base_free(p);
}

int base_online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n < 1 << 20 ? (int)n : 0;
}

int base_physical_cores(void) {
    /* Distinct (package, core) pairs under sysfs; the online CPU count when sysfs says nothing. */
    long n_cpu = sysconf(_SC_NPROCESSORS_ONLN);
    int seen[1024][2], n_seen = 0;
    for (long c = 0; c < n_cpu && c < 1024; c++) {
        char path[128];
        int pkg = -1, core = -1;
        FILE *f;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/physical_package_id", c);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%d", &pkg) != 1) pkg = -1;
            fclose(f);
        }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/core_id", c);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%d", &core) != 1) core = -1;
            fclose(f);
        }
        if (pkg < 0 || core < 0) return n_cpu > 0 ? (int)n_cpu : 1;
        int dup = 0;
        for (int i = 0; i < n_seen; i++) dup |= seen[i][0] == pkg && seen[i][1] == core;
        if (!dup) seen[n_seen][0] = pkg, seen[n_seen][1] = core, n_seen++;
    }
    return n_seen > 0 ? n_seen : 1;
}

void base_split(int n, int parts, int i, int align, int *b, int *e) {
    int units = (n + align - 1) / align;
    int per = units / parts, extra = units % parts;
    int ub = i * per + (i < extra ? i : extra), ue = ub + per + (i < extra);
    *b = ub * align < n ? ub * align : n;
    *e = ue * align < n ? ue * align : n;
}
