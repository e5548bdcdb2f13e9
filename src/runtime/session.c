/* runtime: sessions, the forward call and its input checks, tokenizer entry points. */
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

etch_status rt_fail(etch_session *s, etch_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->error, sizeof s->error, fmt, ap);
    va_end(ap);
    return st;
}

etch_status etch_session_new(etch_program *p, etch_session **out, etch_error *err) {
    return etch_session_new_threads(p, 0, out, err);
}

etch_status etch_session_new_threads(etch_program *p, int n_threads, etch_session **out, etch_error *err) {
    etch_session_options opt = {n_threads, NULL};
    return etch_session_new_opts(p, &opt, out, err);
}

etch_status etch_session_new_opts(etch_program *p, const etch_session_options *opt, etch_session **out,
                                  etch_error *err) {
    base_clear(err);
    etch_session_options none = {0, NULL};
    if (!opt) opt = &none;
    int n_threads = opt->n_threads;
    if (n_threads < 0 || n_threads > 256) return base_fail(err, ETCH_ERR_ARG, "threads %d is outside 0..256", n_threads);
    if (n_threads == 0) n_threads = base_physical_cores();
    int online = base_online_cpus();
    if (online > 0 && n_threads > online) n_threads = online; /* more threads than processors only wait */
    if (!out) return base_fail(err, ETCH_ERR_ARG, "etch_session_new: out is NULL");
    *out = NULL;
    if (!p) return base_fail(err, ETCH_ERR_ARG, "etch_session_new: program is NULL");
    const char *kv_name = opt->kv_type ? opt->kv_type : p->meta.kv_type;
    int kv_type = kern_kv_type_of(kv_name);
    if (kv_type < 0) return base_fail(err, ETCH_ERR_ARG, "kv_type '%s' is not one of f32, f16, q8", kv_name);
    etch_session *s = base_calloc(1, sizeof *s);
    if (!s) return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate a session");
    s->prog = p;
    etch_status st = model_state_new(&p->cfg, n_threads, kv_type, &s->st, err);
    if (!st) st = base_pool_new(n_threads, &s->pool, err);
    if (st) {
        model_state_free(&s->st);
        base_free(s);
        return st;
    }
    size_t vocab = (size_t)p->meta.vocab_size, ctx = (size_t)p->meta.max_context_len;
    s->text_cap = 3 * ((size_t)p->tok.max_piece_len + 4);
    s->logits = base_malloc(vocab * sizeof *s->logits);
    s->cand = base_malloc(vocab * sizeof *s->cand);
    s->text = base_malloc(s->text_cap);
    s->generated = base_malloc(ctx * sizeof *s->generated);
    s->generated_cap = (int32_t)ctx;
    s->chunks = base_malloc(ctx * sizeof *s->chunks);
    s->ctx_ids = base_malloc(ctx * sizeof *s->ctx_ids);
    s->pending = -1;
    if (!s->logits || !s->cand || !s->text || !s->generated || !s->chunks || !s->ctx_ids) {
        etch_session_free(s);
        return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate session buffers");
    }
    s->stats.chunks = s->chunks;
    int64_t bytes = (int64_t)s->st.bytes + (int64_t)(vocab * (sizeof *s->logits + sizeof *s->cand) + s->text_cap +
                                                     ctx * (sizeof *s->generated + sizeof *s->chunks +
                                                            sizeof *s->ctx_ids));
    if ((st = rt_memory_admit(bytes, err))) {
        etch_session_free(s);
        return st;
    }
    s->reserved = bytes;
    *out = s;
    return ETCH_OK;
}

void etch_session_free(etch_session *s) {
    if (!s) return;
    rt_memory_release(s->reserved);
    base_pool_free(s->pool);
    model_state_free(&s->st);
    base_free(s->logits), base_free(s->cand), base_free(s->text), base_free(s->prompt), base_free(s->generated), base_free(s->chunks);
    base_free(s->ctx_ids), base_free(s->hold), base_free(s->emit), base_free(s->answer);
    rt_chat_forget(s);
    base_free(s->chat.role), base_free(s->chat.content);
    base_free(s);
}

const char *etch_session_error(const etch_session *s) { return s ? s->error : "session is NULL"; }

int etch_session_threads(const etch_session *s) { return s ? base_pool_size(s->pool) : 0; }

const char *etch_session_kv_type(const etch_session *s) { return s ? kern_kv_type_name(s->st.kv_type) : "?"; }

/* Appends the method metadata and the inputs of a forward call to buf: what ExecuTorch's runner
 * prints when a call fails, so a wrong call can be read off the message. */
void rt_describe_call(const etch_program *p, const int32_t *tokens, int32_t n, int32_t start_pos,
                      char *buf, size_t cap) {
    const etch_method_meta *m = &p->meta;
    size_t at = strlen(buf);
#define APPEND(...)                                                                 \
    do {                                                                            \
        if (at < cap) {                                                             \
            int k_ = snprintf(buf + at, cap - at, __VA_ARGS__);                     \
            if (k_ > 0) at += (size_t)k_;                                           \
        }                                                                           \
    } while (0)
    APPEND("\n  method_meta: forward(tokens: int32[1, n] with 1 <= n <= %d, start_pos: int64 scalar) -> "
           "logits: float32[1, %d]",
           m->max_seq_len, m->vocab_size);
    APPEND("\n    max_seq_len=%d max_context_len=%d use_kv_cache=%d enable_dynamic_shape=%d vocab_size=%d "
           "bos_id=%d eos_ids=[",
           m->max_seq_len, m->max_context_len, m->use_kv_cache, m->enable_dynamic_shape, m->vocab_size, m->bos_id);
    for (int32_t i = 0; i < m->n_eos; i++) APPEND("%s%d", i ? ", " : "", m->eos_ids[i]);
    APPEND("] n_layers=%d n_kv_heads=%d head_dim=%d dtype=%s arch=%s", m->n_layers, m->n_kv_heads, m->head_dim,
           m->dtype, m->arch);
    if (m->sliding_window) APPEND(" sliding_window=%d (%d of %d layers)", m->sliding_window, m->n_window_layers, m->n_layers);
    APPEND("\n  inputs: tokens int32[1, %d] = [", n);
    if (tokens) {
        for (int32_t i = 0; i < n; i++) {
            if (n > 12 && i == 8) {
                APPEND("..., ");
                i = n - 4;
            }
            APPEND("%s%d", i && !(n > 12 && i == n - 4) ? ", " : "", tokens[i]);
        }
    } else {
        APPEND("NULL");
    }
    APPEND("], start_pos = %d", start_pos);
#undef APPEND
}

etch_status etch_forward(etch_session *s, const int32_t *tokens, int32_t n, int32_t start_pos, float *logits,
                         int all_logits) {
    if (!s) return ETCH_ERR_ARG;
    const etch_program *p = s->prog;
    const etch_method_meta *m = &p->meta;
    s->error[0] = '\0';
    int bad = 1;
    if (!tokens)
        snprintf(s->error, sizeof s->error, "etch_forward: tokens is NULL");
    else if (n < 1 || n > m->max_seq_len)
        snprintf(s->error, sizeof s->error,
                 "etch_forward: %d tokens in one call, but this program's forward accepts 1 to max_seq_len = %d%s", n,
                 m->max_seq_len, m->max_seq_len == 1 ? " (a static program: prefill one token per call)" : "");
    else if (start_pos < 0 || start_pos > m->max_context_len - n)
        snprintf(s->error, sizeof s->error,
                 "etch_forward: positions %d..%lld do not fit the context (max_context_len = %d)", start_pos,
                 (long long)start_pos + n - 1, m->max_context_len); /* in 64 bits: start_pos may be INT32_MAX */
    else {
        bad = 0;
        for (int32_t i = 0; i < n; i++)
            if (tokens[i] < 0 || tokens[i] >= m->vocab_size) {
                snprintf(s->error, sizeof s->error,
                         "etch_forward: token id %d at index %d is outside the vocabulary [0, %d)", tokens[i], i,
                         m->vocab_size);
                bad = 1;
                break;
            }
    }
    /* A windowed layer's ring holds the last kv_rows positions written: going back further than that
     * (rewinding a conversation) would read keys that later positions overwrote. */
    for (int32_t l = 0; !bad && l < m->n_layers && start_pos > 0 && start_pos <= s->kv_end; l++) {
        int32_t w = p->cfg.window[l], rows = p->cfg.kv_rows[l];
        int32_t need = start_pos - w + 1 > 0 ? start_pos - w + 1 : 0, held = s->kv_end - rows > 0 ? s->kv_end - rows : 0;
        if (w && need < held) {
            snprintf(s->error, sizeof s->error,
                     "etch_forward: start_pos %d needs the keys of positions %d..%d, but layer %d keeps a sliding-window "
                     "ring of %d rows that now holds positions %d..%d: continue from position %d or later, or start "
                     "again at 0",
                     start_pos, need, start_pos - 1, l, rows, held, s->kv_end - 1, held + w - 1);
            bad = 1;
        }
    }
    if (bad) {
        rt_describe_call(p, tokens, n, start_pos, s->error, sizeof s->error);
        return ETCH_ERR_INPUT;
    }
    model_forward(&p->cfg, &p->w, &s->st, s->pool, tokens, n, start_pos, logits, all_logits);
    s->kv_end = start_pos + n;
    memcpy(s->ctx_ids + start_pos, tokens, (size_t)n * sizeof *tokens); /* the conversation's ids follow the cache */
    s->n_ctx = start_pos + n;
    return ETCH_OK;
}

/* ------------------------------------------------------------------ tokenizer entry points */

etch_status etch_tokenize(const etch_program *p, const char *text, size_t len, int add_bos, int32_t **ids_out,
                          int32_t *n_out, etch_error *err) {
    base_clear(err);
    if (!p || !ids_out || !n_out || (!text && len)) return base_fail(err, ETCH_ERR_ARG, "etch_tokenize: NULL argument");
    return tok_encode(&p->tok, text ? text : "", len, add_bos ? TOK_BOS : 0, NULL, ids_out, n_out, err);
}

etch_status etch_detokenize(const etch_program *p, const int32_t *ids, int32_t n, char **text_out, size_t *len_out,
                            etch_error *err) {
    base_clear(err);
    if (!p || !text_out || (!ids && n > 0) || n < 0)
        return base_fail(err, ETCH_ERR_ARG, "etch_detokenize: bad argument");
    *text_out = NULL;
    const tok_tokenizer *t = &p->tok;
    size_t total = 1;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= p->meta.vocab_size)
            return base_fail(err, ETCH_ERR_ARG, "etch_detokenize: id %d at index %d is outside the vocabulary [0, %d)",
                             ids[i], i, p->meta.vocab_size);
        size_t l;
        tok_piece(t, i ? ids[i - 1] : -1, ids[i], 0, &l);
        total += l;
    }
    char *out = base_malloc(total);
    if (!out) return base_fail(err, ETCH_ERR_NOMEM, "etch_detokenize: cannot allocate %zu bytes", total);
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t l;
        const char *piece = tok_piece(t, i ? ids[i - 1] : -1, ids[i], 0, &l);
        memcpy(out + at, piece, l);
        at += l;
    }
    out[at] = '\0';
    *text_out = out;
    if (len_out) *len_out = at;
    return ETCH_OK;
}

struct etch_decoder {
    const etch_program *prog;
    tok_utf8_stream u;
    char *out;  /* [3 * (max_piece_len + 4)] */
};

etch_status etch_decoder_new(const etch_program *p, etch_decoder **out) {
    if (!p || !out) return ETCH_ERR_ARG;
    etch_decoder *d = base_calloc(1, sizeof *d);
    if (d) d->out = base_malloc(3 * ((size_t)p->tok.max_piece_len + 4));
    if (!d || !d->out) {
        etch_decoder_free(d);
        *out = NULL;
        return ETCH_ERR_NOMEM;
    }
    d->prog = p;
    *out = d;
    return ETCH_OK;
}

const char *etch_decoder_push(etch_decoder *d, int32_t prev_id, int32_t id, size_t *len) {
    size_t l;
    const char *piece = tok_piece(&d->prog->tok, prev_id, id, TOK_SKIP_CONTROL, &l);
    *len = tok_utf8_feed(&d->u, piece, l, d->out);
    return d->out;
}

const char *etch_decoder_flush(etch_decoder *d, size_t *len) {
    *len = tok_utf8_finish(&d->u, d->out);
    return d->out;
}

void etch_decoder_free(etch_decoder *d) {
    if (!d) return;
    base_free(d->out);
    base_free(d);
}
