/* runtime/generate: a generation: encode the prompt, prefill it after what the cache keeps
 * (prefill.c), then sample (sample.c) and decode token by token, holding text back while it could
 * still become a stop string, making room when the context fills, and recording the stats. */
#include "runtime.h"

#include <math.h>
#include <string.h>

void etch_generate_config_default(etch_generate_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->max_new_tokens = 128;
    cfg->temperature = 0.0f;
    cfg->top_k = 0;
    cfg->top_p = 1.0f;
    cfg->seed = 42;
    cfg->prefill = ETCH_PREFILL_AUTO;
    cfg->add_bos = 1;
    cfg->cache = ETCH_CACHE_RESET;
    cfg->context = ETCH_CONTEXT_STOP;
}

static double now_ms(void) { return base_now_us() / 1000.0; }

int rt_is_eos(const etch_method_meta *m, int32_t id) {
    for (int32_t i = 0; i < m->n_eos; i++)
        if (m->eos_ids[i] == id) return 1;
    return 0;
}

/* Checks a configuration before any work. */
static etch_status check_config(etch_session *s, const etch_generate_config *cfg) {
    if (cfg->max_new_tokens < 0) return rt_fail(s, ETCH_ERR_ARG, "max_new_tokens %d is negative", cfg->max_new_tokens);
    if (!(cfg->temperature >= 0.0f) || cfg->temperature > 100.0f)
        return rt_fail(s, ETCH_ERR_ARG, "temperature %g is outside 0..100", (double)cfg->temperature);
    if (!(cfg->top_p > 0.0f && cfg->top_p <= 1.0f))
        return rt_fail(s, ETCH_ERR_ARG, "top_p %g is outside (0, 1]", (double)cfg->top_p);
    if (cfg->top_k < 0) return rt_fail(s, ETCH_ERR_ARG, "top_k %d is negative", cfg->top_k);
    if (cfg->prefill != ETCH_PREFILL_AUTO && cfg->prefill != ETCH_PREFILL_BATCHED &&
        cfg->prefill != ETCH_PREFILL_SEQUENTIAL)
        return rt_fail(s, ETCH_ERR_ARG, "unknown prefill mode %d", (int)cfg->prefill);
    if (cfg->cache != ETCH_CACHE_RESET && cfg->cache != ETCH_CACHE_CONTINUE && cfg->cache != ETCH_CACHE_REUSE)
        return rt_fail(s, ETCH_ERR_ARG, "unknown cache mode %d", (int)cfg->cache);
    if (cfg->context != ETCH_CONTEXT_STOP && cfg->context != ETCH_CONTEXT_SHIFT)
        return rt_fail(s, ETCH_ERR_ARG, "unknown context policy %d", (int)cfg->context);
    if (cfg->n_keep < 0 || cfg->n_stop < 0 || (cfg->n_stop > 0 && !cfg->stop))
        return rt_fail(s, ETCH_ERR_ARG, "n_keep and n_stop are counts (and stop holds n_stop strings)");
    for (int32_t i = 0; i < cfg->n_stop; i++)
        if (!cfg->stop[i] || !cfg->stop[i][0]) return rt_fail(s, ETCH_ERR_ARG, "stop string %d is empty", i);
    const etch_limits *lim = &s->limits;
    if (lim->max_new_tokens && cfg->max_new_tokens > lim->max_new_tokens)
        return rt_fail(s, ETCH_ERR_LIMIT, "%d new tokens asked, but this session allows at most %d per call",
                       cfg->max_new_tokens, lim->max_new_tokens);
    return ETCH_OK;
}

/* Fresh stats for a call that starts now. */
static void stats_begin(etch_session *s) {
    etch_stats *st = &s->stats;
    memset(st, 0, sizeof *st);
    st->chunks = s->chunks;
    st->model_load_start_ms = s->prog->load_start_ms;
    st->model_load_end_ms = s->prog->load_end_ms;
    st->inference_start_ms = now_ms();
}

etch_status rt_generate_ids(etch_session *s, const int32_t *ids, int32_t n, int32_t keep, int feed_pending,
                            const etch_generate_config *cfg) {
    const etch_method_meta *m = &s->prog->meta;
    etch_stats *st = &s->stats;
    const etch_limits *lim = &s->limits;
    /* The ids this call prefills: the last sampled token first when it was left unfed. */
    int32_t pend = feed_pending && s->pending >= 0, total = pend + n;
    base_free(s->prompt);
    s->prompt = base_malloc((size_t)(total ? total : 1) * sizeof *s->prompt);
    if (!s->prompt) {
        s->n_prompt = 0;
        return rt_fail(s, ETCH_ERR_NOMEM, "out of memory holding the prompt");
    }
    if (pend) s->prompt[0] = s->pending;
    memcpy(s->prompt + pend, ids, (size_t)n * sizeof *ids);
    s->n_prompt = total;
    st->prompt_tokens = total;
    st->reused_tokens = keep;
    if (total == 0)
        return rt_fail(s, ETCH_ERR_ARG, "the prompt is empty and no BOS token is added: nothing to condition on");
    if (lim->max_prompt_tokens && total > lim->max_prompt_tokens)
        return rt_fail(s, ETCH_ERR_LIMIT, "the prompt has %d tokens, but this session allows at most %d", total,
                       lim->max_prompt_tokens);
    if ((int64_t)keep + total > m->max_context_len)
        return rt_fail(s, ETCH_ERR_CONTEXT,
                       "the prompt has %d tokens %s%d cached but the context holds %d (max_context_len): shorten the "
                       "prompt, reset the session, or export with a larger --max-context-len",
                       total, keep ? "after " : "and ", keep, m->max_context_len);
    etch_status rc = rt_rewind(s, keep);
    if (rc) return rc;
    s->pending = -1;
    s->n_generated = 0;
    s->utf8.n_held = 0;
    s->n_hold = 0;
    s->answer_len = 0;

    /* Prefill: chunks of min(bound, tokens left); the bound is 1 for sequential prefill. */
    int32_t bound = cfg->prefill == ETCH_PREFILL_SEQUENTIAL ? 1 : m->max_seq_len;
    st->prefill_used = bound > 1 ? ETCH_PREFILL_BATCHED : ETCH_PREFILL_SEQUENTIAL;
    st->model_execution_start_ms = now_ms();
    rc = rt_prefill(s, s->prompt, total, keep, bound, s->logits, 0, s->chunks, &st->n_chunks);
    if (rc) {
        if (rc == ETCH_ERR_CANCELLED) st->stop_reason = 4, st->prompt_eval_end_ms = st->inference_end_ms = now_ms();
        return rc;
    }
    st->prompt_eval_end_ms = now_ms();
    st->model_execution_end_ms = st->prompt_eval_end_ms;
    st->first_token_ms = st->prompt_eval_end_ms;
    s->gen.cfg = *cfg;
    s->gen.pos = keep + total;
    s->gen.prev = s->prompt[total - 1];
    s->gen.sampling_us = 0.0;
    s->gen.done = 0;
    s->gen.stopped = 0;
    s->gen.active = 1;
    s->rng = cfg->seed ? cfg->seed : 0x9E3779B97F4A7C15ull;
    return ETCH_OK;
}

etch_status rt_generate_begin(etch_session *s, const etch_generate_config *cfg) {
    etch_status rc = check_config(s, cfg);
    if (rc) return rc;
    stats_begin(s);
    rt_cancel_clear(s);
    return ETCH_OK;
}

etch_status etch_generate_start(etch_session *s, const char *prompt, const etch_generate_config *cfg_in) {
    if (!s) return ETCH_ERR_ARG;
    etch_generate_config cfg;
    if (cfg_in) cfg = *cfg_in;
    else etch_generate_config_default(&cfg);
    const etch_program *p = s->prog;
    s->error[0] = '\0';
    s->gen.active = 0;
    if (!prompt) return rt_fail(s, ETCH_ERR_ARG, "etch_generate: prompt is NULL");
    etch_status rc = rt_generate_begin(s, &cfg);
    if (rc) return rc;
    rt_chat_forget(s); /* a plain generation is not a turn of the conversation the session held */
    size_t prompt_bytes = strlen(prompt);
    if (s->limits.max_prompt_bytes && (int64_t)prompt_bytes > s->limits.max_prompt_bytes)
        return rt_fail(s, ETCH_ERR_LIMIT, "the prompt has %zu bytes, but this session allows at most %lld", prompt_bytes,
                       (long long)s->limits.max_prompt_bytes);
    if (cfg.cache == ETCH_CACHE_RESET) rt_reset(s);

    /* Encode: BOS only at position 0. */
    int at_start = cfg.cache == ETCH_CACHE_CONTINUE ? s->n_ctx == 0 && s->pending < 0 : 1;
    int32_t *ids = NULL, n = 0;
    etch_error err;
    int flags = (cfg.add_bos && at_start ? TOK_BOS : 0) | (at_start ? 0 : TOK_CONTINUES);
    rc = tok_encode(&p->tok, prompt, prompt_bytes, flags, &s->cancel, &ids, &n, &err);
    if (rc) return rt_fail(s, rc, "prompt: %s", err.message);
    s->stats.token_encode_end_ms = now_ms();
    int32_t keep = 0, from = 0;
    if (cfg.cache == ETCH_CACHE_CONTINUE) {
        keep = s->n_ctx;
    } else if (cfg.cache == ETCH_CACHE_REUSE) { /* the longest common prefix, the unfed token included */
        int32_t have = s->n_ctx + (s->pending >= 0);
        while (from < n && from < have && ids[from] == (from < s->n_ctx ? s->ctx_ids[from] : s->pending)) from++;
        if (from == n && n > 0) from--; /* at least one token goes through the model: its logits are needed */
        keep = from < s->n_ctx ? from : s->n_ctx;
        from = keep;
        if (rt_rewind_possible(s, keep) != ETCH_OK) keep = from = 0; /* a ring lost those keys: start again */
    }
    rc = rt_generate_ids(s, ids + from, n - from, keep, cfg.cache == ETCH_CACHE_CONTINUE, &cfg);
    base_free(ids);
    return rc;
}

/* ------------------------------------------------------------------ text out: stop strings */

/* Appends bytes to the held text; the view it is released into grows with it, so releasing never
 * allocates. 0 when memory ran out. */
static int hold_add(etch_session *s, const char *p, size_t n) {
    if (!n) return 1;
    if (s->n_hold + n > s->hold_cap) {
        size_t cap = (s->n_hold + n) * 2 + 64;
        char *nh = base_realloc(s->hold, cap);
        if (!nh) return 0;
        s->hold = nh, s->hold_cap = cap;
        char *ne = base_realloc(s->emit, cap);
        if (!ne) return 0;
        s->emit = ne, s->emit_cap = cap;
    }
    memcpy(s->hold + s->n_hold, p, n);
    s->n_hold += n;
    return 1;
}

/* Moves held text to the caller's view: all of it at the end, else all but a tail that could still
 * begin a stop string. Sets *stopped when a stop string is complete (its text and what follows are
 * dropped). The view (s->emit) lives until the next call. */
static size_t release(etch_session *s, int at_end, int *stopped, const char **out) {
    const etch_generate_config *cfg = &s->gen.cfg;
    size_t n = s->n_hold, cut = n;
    *stopped = 0;
    for (int32_t i = 0; i < cfg->n_stop; i++) { /* the earliest complete stop string ends the text */
        size_t sl = strlen(cfg->stop[i]);
        for (size_t at = 0; at + sl <= n && at < cut; at++)
            if (!memcmp(s->hold + at, cfg->stop[i], sl)) {
                cut = at, *stopped = 1;
                break;
            }
    }
    size_t give = cut;
    if (!*stopped && !at_end)
        for (int32_t i = 0; i < cfg->n_stop; i++) { /* keep a tail that is a stop string's beginning */
            size_t sl = strlen(cfg->stop[i]);
            for (size_t at = n > sl ? n - sl + 1 : 0; at < give; at++)
                if (!memcmp(s->hold + at, cfg->stop[i], n - at)) {
                    give = at;
                    break;
                }
        }
    if (give) memcpy(s->emit, s->hold, give); /* emit_cap >= hold_cap >= give (hold_add) */
    if (n > give) memmove(s->hold, s->hold + give, n - give);
    s->n_hold = *stopped ? 0 : n - give;
    rt_answer_add(s, s->emit, give); /* the answer so far, for a conversation */
    *out = s->emit ? s->emit : "";
    return give;
}

/* ------------------------------------------------------------------ decoding */

/* Ends a generation: the text still held (an unfinished character as U+FFFD, a tail that never
 * became a stop string), the unfed last token, and the final stats. */
static void finish(etch_session *s, int32_t reason, int32_t *token, const char **text, size_t *len) {
    etch_stats *st = &s->stats;
    if (!s->gen.done) st->stop_reason = reason;
    size_t tail = tok_utf8_finish(&s->utf8, s->text);
    *text = "";
    *len = 0;
    if (reason != 5) { /* after a stop string nothing more is said */
        int stopped;
        if (!hold_add(s, s->text, tail)) tail = 0; /* the last character's replacement, lost to memory */
        *len = release(s, 1, &stopped, text);
    }
    s->gen.done = 1;
    s->gen.active = 0;
    *token = -1;
    /* the last sampled token was not fed; the next turn feeds it, if it has a place */
    s->pending = s->n_generated > 0 && s->gen.pos < s->prog->meta.max_context_len ? s->gen.prev : -1;
    st->generated_tokens = s->n_generated;
    st->aggregate_sampling_time_ms = s->gen.sampling_us / 1000.0;
    st->inference_end_ms = now_ms();
    rt_chat_answered(s);
}

/* SHIFT: keeps the first n_keep positions and the newer half of the rest, prefilled again at their
 * new positions (the same tokens, so the keys are those a run of that text would have). */
static etch_status shift_context(etch_session *s) {
    const etch_method_meta *m = &s->prog->meta;
    int32_t n = s->n_ctx, keep = s->gen.cfg.n_keep < n ? s->gen.cfg.n_keep : n - 1;
    int32_t drop = (n - keep) / 2, rest = n - keep - drop;
    if (drop < 1) return rt_fail(s, ETCH_ERR_CONTEXT, "the context is full and n_keep %d leaves nothing to drop", keep);
    int32_t *ids = base_malloc((size_t)rest * sizeof *ids);
    if (!ids) return rt_fail(s, ETCH_ERR_NOMEM, "out of memory shifting the context");
    memcpy(ids, s->ctx_ids + keep + drop, (size_t)rest * sizeof *ids);
    int32_t from = rt_rewind_possible(s, keep) == ETCH_OK ? keep : 0; /* a window's ring may need all again */
    etch_status rc = ETCH_OK;
    if (from < keep) { /* prefill the kept head too: it is still s->ctx_ids[0..keep) */
        int32_t *all = base_malloc((size_t)(keep + rest) * sizeof *all);
        if (!all) rc = rt_fail(s, ETCH_ERR_NOMEM, "out of memory shifting the context");
        if (all) {
            memcpy(all, s->ctx_ids, (size_t)keep * sizeof *all);
            memcpy(all + keep, ids, (size_t)rest * sizeof *all);
            rt_reset(s);
            rc = rt_prefill(s, all, keep + rest, 0, m->max_seq_len, NULL, 0, NULL, NULL);
            base_free(all);
        }
    } else {
        rc = rt_rewind(s, keep);
        if (!rc) rc = rt_prefill(s, ids, rest, keep, m->max_seq_len, NULL, 0, NULL, NULL);
    }
    base_free(ids);
    if (!rc) {
        s->gen.pos = s->n_ctx;
        s->stats.context_shifts++;
    }
    return rc;
}

etch_status etch_generate_next(etch_session *s, int32_t *token, const char **text, size_t *len) {
    static const char empty[] = "";
    if (!s || !token || !text || !len) return ETCH_ERR_ARG;
    *token = -1, *text = empty, *len = 0;
    if (!s->gen.active) {
        if (s->gen.done) return ETCH_OK; /* already ended: more calls keep saying so */
        return rt_fail(s, ETCH_ERR_ARG, "etch_generate_next: no generation started (call etch_generate_start)");
    }
    const etch_program *p = s->prog;
    const etch_method_meta *m = &p->meta;
    etch_stats *st = &s->stats;
    const etch_generate_config *cfg = &s->gen.cfg;
    if (s->gen.stopped) { /* the last call's text ended at a stop string */
        finish(s, 5, token, text, len);
        return ETCH_OK;
    }
    if (s->n_generated >= cfg->max_new_tokens) {
        finish(s, 0, token, text, len);
        return ETCH_OK;
    }
    if (rt_cancelled(s)) {
        finish(s, 4, token, text, len);
        return ETCH_OK;
    }
    if (s->n_generated > 0) {
        if (rt_is_eos(m, s->gen.prev)) {
            finish(s, 1, token, text, len);
            return ETCH_OK;
        }
        if (s->gen.pos >= m->max_context_len) {
            if (cfg->context != ETCH_CONTEXT_SHIFT) { /* the last token cannot be fed back */
                finish(s, 2, token, text, len);
                return ETCH_OK;
            }
            etch_status rc = shift_context(s);
            if (rc) {
                s->gen.active = 0;
                return rc;
            }
        }
        etch_status rc = etch_forward(s, &s->gen.prev, 1, s->gen.pos, s->logits, 0);
        if (rc) {
            s->gen.active = 0;
            return rc;
        }
        s->gen.pos++;
        st->model_execution_end_ms = now_ms();
    }
    int32_t vocab = m->vocab_size;
    for (int32_t i = 0; i < vocab; i++) /* NaN or infinity would sample one id forever, silently */
        if (!isfinite(s->logits[i])) {
            s->gen.active = 0;
            return rt_fail(s, ETCH_ERR_NUMERIC,
                           "the logits at position %d are not finite (id %d is %g): the program's weights or a kernel "
                           "are broken (`etch inspect` verifies the file's data hash)",
                           s->gen.pos - 1, i, (double)s->logits[i]);
        }
    double t0 = base_now_us();
    int32_t tok = rt_sample(s, cfg, s->logits);
    s->gen.sampling_us += base_now_us() - t0;
    if (s->n_generated == s->generated_cap) { /* past the context (SHIFT), the ids outgrow it */
        int32_t cap = s->generated_cap * 2;
        int32_t *ng = base_realloc(s->generated, (size_t)cap * sizeof *ng);
        if (!ng) {
            s->gen.active = 0;
            return rt_fail(s, ETCH_ERR_NOMEM, "out of memory holding the generated ids");
        }
        s->generated = ng, s->generated_cap = cap;
    }
    s->generated[s->n_generated++] = tok;
    if (s->n_generated == 1) st->first_token_ms = now_ms();
    size_t plen;
    const char *piece = tok_piece(&p->tok, s->gen.prev, tok, TOK_SKIP_CONTROL, &plen);
    size_t got = tok_utf8_feed(&s->utf8, piece, plen, s->text);
    s->gen.prev = tok;
    st->generated_tokens = s->n_generated;
    if (!hold_add(s, s->text, got)) {
        s->gen.active = 0;
        return rt_fail(s, ETCH_ERR_NOMEM, "out of memory holding the generated text");
    }
    int stopped;
    *len = release(s, 0, &stopped, text);
    *token = tok;
    s->gen.stopped = stopped; /* the text before the stop string is the last: the next call ends */
    return ETCH_OK;
}

void etch_generate_stop(etch_session *s) {
    if (!s || !s->gen.active) return;
    int32_t t;
    const char *x;
    size_t l;
    finish(s, 3, &t, &x, &l);
}

etch_status etch_generate(etch_session *s, const char *prompt, const etch_generate_config *cfg,
                          etch_token_callback on_token, void *user) {
    etch_status rc = etch_generate_start(s, prompt, cfg);
    if (rc) return rc;
    return rt_generate_loop(s, on_token, user);
}

etch_status rt_generate_loop(etch_session *s, etch_token_callback on_token, void *user) {
    for (;;) {
        int32_t tok;
        const char *text;
        size_t len;
        etch_status rc = etch_generate_next(s, &tok, &text, &len);
        if (rc) return rc;
        if (tok < 0) {
            if (len && on_token) on_token(user, -1, text, len);
            return ETCH_OK;
        }
        if (on_token && on_token(user, tok, text, len)) {
            etch_generate_stop(s);
            return ETCH_OK;
        }
    }
}

const int32_t *etch_session_prompt_ids(const etch_session *s, int32_t *n) {
    *n = s ? s->n_prompt : 0;
    return s ? s->prompt : NULL;
}

const int32_t *etch_session_generated_ids(const etch_session *s, int32_t *n) {
    *n = s ? s->n_generated : 0;
    return s ? s->generated : NULL;
}

const etch_stats *etch_session_stats(const etch_session *s) { return s ? &s->stats : NULL; }
