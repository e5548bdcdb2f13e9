/* tools/serve/slots: N sessions on one program, and the bounded queue of requests waiting for one.
 * A request takes the free slot whose cache shares the longest prefix with its prompt, so a client
 * that re-sends its history lands where that history already is. */
#define _POSIX_C_SOURCE 200809L
#include "serve.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

etch_status slots_init(serve_slots *q, etch_program *p, int n, int queue_max, const etch_session_options *so,
                       etch_error *err) {
    memset(q, 0, sizeof *q);
    q->p = p;
    q->queue_max = queue_max;
    q->v = calloc((size_t)n, sizeof *q->v);
    if (!q->v) {
        err->status = ETCH_ERR_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory making %d slots", n);
        return ETCH_ERR_NOMEM;
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->freed, NULL);
    for (int i = 0; i < n; i++) {
        etch_status st = etch_session_new_opts(p, so, &q->v[i].s, err);
        if (st) {
            q->n = i;
            slots_free(q);
            return st;
        }
    }
    q->n = n;
    return ETCH_OK;
}

void slots_free(serve_slots *q) {
    for (int i = 0; i < q->n; i++) etch_session_free(q->v[i].s);
    free(q->v);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->freed);
    memset(q, 0, sizeof *q);
}

/* The length of the common prefix of ids[n] and the slot's cached ids. */
static int32_t shared(const serve_slot *s, const int32_t *ids, int32_t n) {
    int32_t m;
    const int32_t *c = etch_session_cache_ids(s->s, &m);
    int32_t k = 0;
    while (k < n && k < m && ids[k] == c[k]) k++;
    return k;
}

serve_slot *slots_acquire(serve_slots *q, const int32_t *ids, int32_t n, int wait_s, int *full) {
    *full = 0;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_s;
    pthread_mutex_lock(&q->mu);
    serve_slot *best = NULL;
    for (;;) {
        int32_t best_k = -1;
        for (int i = 0; i < q->n; i++) {
            serve_slot *s = &q->v[i];
            if (s->busy) continue;
            int32_t k = ids ? shared(s, ids, n) : 0;
            if (k > best_k || (k == best_k && s->last_used < best->last_used)) best = s, best_k = k;
        }
        if (best) break;
        if (q->waiting >= q->queue_max) {
            *full = 1;
            break;
        }
        q->waiting++;
        int rc = pthread_cond_timedwait(&q->freed, &q->mu, &until);
        q->waiting--;
        if (rc == ETIMEDOUT) break;
    }
    if (best) best->busy = 1, best->last_used = ++q->clock;
    pthread_mutex_unlock(&q->mu);
    return best;
}

void slots_release(serve_slots *q, serve_slot *slot) {
    pthread_mutex_lock(&q->mu);
    slot->busy = 0;
    pthread_cond_signal(&q->freed);
    pthread_mutex_unlock(&q->mu);
}

void slots_load(serve_slots *q, int *busy, int *waiting) {
    pthread_mutex_lock(&q->mu);
    *busy = 0;
    for (int i = 0; i < q->n; i++) *busy += q->v[i].busy;
    *waiting = q->waiting;
    pthread_mutex_unlock(&q->mu);
}
