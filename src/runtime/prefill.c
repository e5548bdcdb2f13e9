/* runtime/prefill: the prefill policy, written once. A prompt goes through the model in forward calls
 * of at most the program's bound (max_seq_len), each a matrix-matrix product over its rows; a bound
 * of 1 is the one-token-per-call path every program also runs. Generation, calibration, `etch eval`,
 * `etch bench` and the tests all prefill through here, so they measure and check one loop. */
#include "runtime.h"

etch_status rt_prefill(etch_session *s, const int32_t *tokens, int32_t n, int32_t start_pos, int32_t bound,
                       float *logits, int all_logits, int32_t *chunks, int32_t *n_chunks) {
    const etch_method_meta *m = &s->prog->meta;
    if (bound == 0) bound = m->max_seq_len;
    if (bound < 0 || bound > m->max_seq_len)
        return rt_fail(s, ETCH_ERR_ARG, "prefill: a bound of %d tokens per call is outside 1..max_seq_len = %d", bound,
                       m->max_seq_len);
    if (!tokens || n < 1 || start_pos < 0 || start_pos > m->max_context_len - n) {
        if (!tokens || n < 1) rt_fail(s, ETCH_ERR_INPUT, "prefill: %s", tokens ? "no tokens" : "tokens is NULL");
        else
            rt_fail(s, ETCH_ERR_INPUT, "prefill: positions %d..%lld do not fit the context (max_context_len = %d)",
                    start_pos, (long long)start_pos + n - 1, m->max_context_len);
        rt_describe_call(s->prog, tokens, n, start_pos, s->error, sizeof s->error);
        return ETCH_ERR_INPUT;
    }
    for (int32_t i = 0; i < n; i++) /* every id before any work, not chunk by chunk */
        if (tokens[i] < 0 || tokens[i] >= m->vocab_size)
            return rt_fail(s, ETCH_ERR_INPUT, "prefill: token id %d at index %d is outside the vocabulary [0, %d)",
                           tokens[i], i, m->vocab_size);
    int32_t vocab = m->vocab_size;
    for (int32_t pos = 0; pos < n;) {
        if (rt_cancelled(s))
            return rt_fail(s, ETCH_ERR_CANCELLED, "prefill was cancelled after %d of %d tokens", pos, n);
        int32_t c = n - pos < bound ? n - pos : bound;
        float *out = !logits ? NULL : all_logits ? logits + (size_t)pos * (size_t)vocab : pos + c == n ? logits : NULL;
        etch_status rc = etch_forward(s, tokens + pos, c, start_pos + pos, out, all_logits);
        if (rc) return rc;
        if (chunks) chunks[(*n_chunks)++] = c;
        pos += c;
    }
    return ETCH_OK;
}

etch_status etch_prefill(etch_session *s, const int32_t *tokens, int32_t n, int32_t start_pos, int32_t bound,
                         float *logits, int all_logits) {
    if (!s) return ETCH_ERR_ARG;
    s->error[0] = '\0';
    rt_cancel_clear(s);
    return rt_prefill(s, tokens, n, start_pos, bound, logits, all_logits, NULL, NULL);
}

void rt_set_observer(etch_session *s, model_observer fn, void *user) {
    s->st.observe = fn;
    s->st.observe_user = user;
}
