/* base: a thread pool, created once (per session) and reused for every parallel region: the caller
 * runs worker 0 itself, the others wait spinning briefly, then asleep, for the next region. */
#ifndef ETCH_POOL_H
#define ETCH_POOL_H

#include "base.h"

typedef struct base_pool base_pool;

/* fn(ctx, i, n) runs once for every worker i in 0..n-1. */
typedef void (*base_task_fn)(void *ctx, int worker, int n_workers);

/* n_threads counts the caller: 1 makes a pool with no extra threads. */
etch_status base_pool_new(int n_threads, base_pool **out, etch_error *err);
/* Runs fn on every worker and returns when all have finished. One region at a time per pool. */
void base_pool_run(base_pool *p, base_task_fn fn, void *ctx);
int base_pool_size(const base_pool *p);
void base_pool_free(base_pool *p);

/* Physical cores (hyperthreads counted once), at least 1. */
int base_physical_cores(void);
/* Processors online (sysconf), or 0 when the system does not say. */
int base_online_cpus(void);

/* Splits [0, n) into `parts` nearly equal ranges aligned to `align`: range i is [*b, *e). */
void base_split(int n, int parts, int i, int align, int *b, int *e);

#endif
