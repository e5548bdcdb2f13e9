/* runtime/limits: what a caller that serves strangers needs before any work is done: a process-wide
 * memory budget over the sessions' reservations, a cancel request a session's calls check, and caps on
 * prompts and generations. */
#include "runtime.h"

#include <stdatomic.h>

static _Atomic int64_t budget, in_use;

etch_status etch_set_memory_budget(int64_t bytes) {
    if (bytes < 0) return ETCH_ERR_ARG;
    atomic_store(&budget, bytes);
    return ETCH_OK;
}

int64_t etch_memory_in_use(void) { return atomic_load(&in_use); }
int64_t etch_memory_budget(void) { return atomic_load(&budget); }

etch_status rt_memory_admit(int64_t bytes, etch_error *err) {
    int64_t cur = atomic_load(&in_use);
    for (;;) { /* a compare-and-swap loop: two sessions made at once cannot both slip under the budget */
        int64_t limit = atomic_load(&budget);
        if (limit > 0 && cur + bytes > limit)
            return base_fail(err, ETCH_ERR_LIMIT,
                             "a session needs %.1f MiB, but the memory budget is %.1f MiB and live sessions hold %.1f "
                             "MiB: free a session, raise the budget (etch_set_memory_budget) or use a program with a "
                             "shorter context",
                             (double)bytes / 1048576.0, (double)limit / 1048576.0, (double)cur / 1048576.0);
        if (atomic_compare_exchange_weak(&in_use, &cur, cur + bytes)) return ETCH_OK;
    }
}

void rt_memory_release(int64_t bytes) { atomic_fetch_sub(&in_use, bytes); }

int64_t etch_session_memory_bytes(const etch_session *s) { return s ? s->reserved : 0; }

void etch_session_cancel(etch_session *s) {
    if (s) __atomic_store_n(&s->cancel, 1, __ATOMIC_RELAXED);
}

int rt_cancelled(const etch_session *s) { return __atomic_load_n(&s->cancel, __ATOMIC_RELAXED) != 0; }

void rt_cancel_clear(etch_session *s) { __atomic_store_n(&s->cancel, 0, __ATOMIC_RELAXED); }

etch_status etch_session_set_limits(etch_session *s, const etch_limits *l) {
    if (!s) return ETCH_ERR_ARG;
    if (!l) {
        s->limits = (etch_limits){0, 0, 0};
        return ETCH_OK;
    }
    if (l->max_prompt_bytes < 0 || l->max_prompt_tokens < 0 || l->max_new_tokens < 0)
        return rt_fail(s, ETCH_ERR_ARG, "limits are 0 (none) or positive");
    s->limits = *l;
    return ETCH_OK;
}
