/* runtime/generate: a generation: encode the prompt, prefill it (prefill.c), then sample (sample.c) and
 * decode token by token, recording the stats. */
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
}

/* ------------------------------------------------------------------ generation */

static double now_ms(void) { return base_now_us() / 1000.0; }

static int is_eos(const etch_method_meta *m, int32_t id) {
    for (int32_t i = 0; i < m->n_eos; i++)
        if (m->eos_ids[i] == id) return 1;
    return 0;
}

etch_status etch_generate_start(etch_session *s, const char *prompt, const etch_generate_config *cfg_in) {
    if (!s) return ETCH_ERR_ARG;
    etch_generate_config cfg;
    if (cfg_in) cfg = *cfg_in;
    else etch_generate_config_default(&cfg);
    const etch_program *p = s->prog;
    const etch_method_meta *m = &p->meta;
    s->error[0] = '\0';
    s->gen.active = 0;
    if (!prompt) return rt_fail(s, ETCH_ERR_ARG, "etch_generate: prompt is NULL");
    if (cfg.max_new_tokens < 0) return rt_fail(s, ETCH_ERR_ARG, "max_new_tokens %d is negative", cfg.max_new_tokens);
    if (!(cfg.temperature >= 0.0f) || cfg.temperature > 100.0f)
        return rt_fail(s, ETCH_ERR_ARG, "temperature %g is outside 0..100", (double)cfg.temperature);
    if (!(cfg.top_p > 0.0f && cfg.top_p <= 1.0f))
        return rt_fail(s, ETCH_ERR_ARG, "top_p %g is outside (0, 1]", (double)cfg.top_p);
    if (cfg.top_k < 0) return rt_fail(s, ETCH_ERR_ARG, "top_k %d is negative", cfg.top_k);
    if (cfg.prefill != ETCH_PREFILL_AUTO && cfg.prefill != ETCH_PREFILL_BATCHED &&
        cfg.prefill != ETCH_PREFILL_SEQUENTIAL)
        return rt_fail(s, ETCH_ERR_ARG, "unknown prefill mode %d", (int)cfg.prefill);
    etch_stats *st = &s->stats;
    memset(st, 0, sizeof *st);
    st->chunks = s->chunks;
    st->model_load_start_ms = p->load_start_ms;
    st->model_load_end_ms = p->load_end_ms;
    st->inference_start_ms = now_ms();
    s->n_generated = 0;
    s->rng = cfg.seed ? cfg.seed : 0x9E3779B97F4A7C15ull;
    s->utf8.n_held = 0;
    rt_cancel_clear(s);
    const etch_limits *lim = &s->limits;
    size_t prompt_bytes = strlen(prompt);
    if (lim->max_new_tokens && cfg.max_new_tokens > lim->max_new_tokens)
        return rt_fail(s, ETCH_ERR_LIMIT, "%d new tokens asked, but this session allows at most %d per call",
                       cfg.max_new_tokens, lim->max_new_tokens);
    if (lim->max_prompt_bytes && (int64_t)prompt_bytes > lim->max_prompt_bytes)
        return rt_fail(s, ETCH_ERR_LIMIT, "the prompt has %zu bytes, but this session allows at most %lld", prompt_bytes,
                       (long long)lim->max_prompt_bytes);

    /* Encode. */
    base_free(s->prompt);
    s->prompt = NULL;
    s->n_prompt = 0;
    etch_error err;
    etch_status rc = tok_encode(&p->tok, prompt, prompt_bytes, cfg.add_bos, &s->cancel, &s->prompt, &s->n_prompt, &err);
    if (rc) return rt_fail(s, rc, "prompt: %s", err.message);
    st->token_encode_end_ms = now_ms();
    int32_t n_prompt = s->n_prompt;
    st->prompt_tokens = n_prompt;
    if (n_prompt == 0)
        return rt_fail(s, ETCH_ERR_ARG, "the prompt is empty and no BOS token is added: nothing to condition on");
    if (lim->max_prompt_tokens && n_prompt > lim->max_prompt_tokens)
        return rt_fail(s, ETCH_ERR_LIMIT, "the prompt has %d tokens, but this session allows at most %d", n_prompt,
                       lim->max_prompt_tokens);
    if (n_prompt > m->max_context_len)
        return rt_fail(s, ETCH_ERR_CONTEXT,
                       "the prompt has %d tokens but the context holds %d (max_context_len): shorten the prompt "
                       "or export with a larger --max-context-len",
                       n_prompt, m->max_context_len);

    /* Prefill: chunks of min(bound, tokens left); the bound is 1 for sequential prefill. */
    int32_t bound = cfg.prefill == ETCH_PREFILL_SEQUENTIAL ? 1 : m->max_seq_len;
    st->prefill_used = bound > 1 ? ETCH_PREFILL_BATCHED : ETCH_PREFILL_SEQUENTIAL;
    st->model_execution_start_ms = now_ms();
    rc = rt_prefill(s, s->prompt, n_prompt, 0, bound, s->logits, 0, s->chunks, &st->n_chunks);
    if (rc) {
        if (rc == ETCH_ERR_CANCELLED) st->stop_reason = 4, st->prompt_eval_end_ms = st->inference_end_ms = now_ms();
        return rc;
    }
    int32_t pos = n_prompt;
    st->prompt_eval_end_ms = now_ms();
    st->model_execution_end_ms = st->prompt_eval_end_ms;
    st->first_token_ms = st->prompt_eval_end_ms;
    s->gen.cfg = cfg;
    s->gen.pos = pos;
    s->gen.prev = s->prompt[n_prompt - 1];
    s->gen.sampling_us = 0.0;
    s->gen.done = 0;
    s->gen.active = 1;
    return ETCH_OK;
}

/* Ends a generation: the held tail of an unfinished character, and the final stats. */
static void finish(etch_session *s, int32_t reason, int32_t *token, const char **text, size_t *len) {
    etch_stats *st = &s->stats;
    if (!s->gen.done) st->stop_reason = reason;
    s->gen.done = 1;
    s->gen.active = 0;
    *token = -1;
    *len = tok_utf8_finish(&s->utf8, s->text);
    *text = s->text;
    st->generated_tokens = s->n_generated;
    st->aggregate_sampling_time_ms = s->gen.sampling_us / 1000.0;
    st->inference_end_ms = now_ms();
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
    if (s->n_generated >= cfg->max_new_tokens) {
        finish(s, 0, token, text, len);
        return ETCH_OK;
    }
    if (rt_cancelled(s)) {
        finish(s, 4, token, text, len);
        return ETCH_OK;
    }
    if (s->n_generated > 0) {
        if (is_eos(m, s->gen.prev)) {
            finish(s, 1, token, text, len);
            return ETCH_OK;
        }
        if (s->gen.pos >= m->max_context_len) { /* the last token cannot be fed back */
            finish(s, 2, token, text, len);
            return ETCH_OK;
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
    s->generated[s->n_generated++] = tok;
    if (s->n_generated == 1) st->first_token_ms = now_ms();
    size_t plen;
    const char *piece = tok_piece(&p->tok, s->gen.prev, tok, TOK_SKIP_CONTROL, &plen);
    *len = tok_utf8_feed(&s->utf8, piece, plen, s->text);
    *text = s->text;
    *token = tok;
    s->gen.prev = tok;
    st->generated_tokens = s->n_generated;
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
    for (;;) {
        int32_t tok;
        const char *text;
        size_t len;
        if ((rc = etch_generate_next(s, &tok, &text, &len))) return rc;
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

