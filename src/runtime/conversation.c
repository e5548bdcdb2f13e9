/* runtime/conversation: a session's state across calls: the ids its cache holds, rewinding and
 * resetting, the conversation it answered (so a new turn prefills only its new part, after the
 * answer's ids exactly as generated), and session files that save and load all of it. */
#include "runtime.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int32_t etch_session_position(const etch_session *s) { return s ? s->n_ctx : 0; }

const int32_t *etch_session_cache_ids(const etch_session *s, int32_t *n) {
    if (n) *n = s ? s->n_ctx : 0;
    return s ? s->ctx_ids : NULL;
}

void rt_reset(etch_session *s) {
    s->n_ctx = 0;
    s->kv_end = 0;
    s->pending = -1;
    rt_chat_forget(s);
}

void etch_session_reset(etch_session *s) {
    if (!s) return;
    s->gen.active = 0;
    rt_reset(s);
}

etch_status rt_rewind_possible(etch_session *s, int32_t pos) {
    const etch_program *p = s->prog;
    for (int32_t l = 0; l < p->meta.n_layers && pos > 0; l++) {
        int32_t w = p->cfg.window[l], rows = p->cfg.kv_rows[l];
        int32_t need = pos - w + 1 > 0 ? pos - w + 1 : 0, held = s->kv_end - rows > 0 ? s->kv_end - rows : 0;
        if (w && need < held)
            return rt_fail(s, ETCH_ERR_INPUT,
                           "cannot go back to position %d: layer %d keeps a sliding-window ring of %d rows that now holds "
                           "positions %d..%d, and position %d needs the keys of %d..%d; reset the session and prefill "
                           "again",
                           pos, l, rows, held, s->kv_end - 1, pos, need, pos - 1);
    }
    return ETCH_OK;
}

etch_status rt_rewind(etch_session *s, int32_t pos) {
    if (pos < 0 || pos > s->n_ctx)
        return rt_fail(s, ETCH_ERR_ARG, "cannot go to position %d: the cache holds 0..%d", pos, s->n_ctx);
    if (pos == s->n_ctx) return ETCH_OK;
    etch_status st = rt_rewind_possible(s, pos);
    if (st) return st;
    s->n_ctx = pos;
    return ETCH_OK;
}

etch_status etch_session_rewind(etch_session *s, int32_t pos) {
    if (!s) return ETCH_ERR_ARG;
    s->error[0] = '\0';
    etch_status st = rt_rewind(s, pos);
    if (st) return st;
    s->gen.active = 0;
    s->pending = -1;
    rt_chat_forget(s); /* the conversation no longer ends where it did */
    return ETCH_OK;
}

/* ------------------------------------------------------------------ the conversation */

void rt_chat_forget(etch_session *s) {
    for (int32_t i = 0; i < s->chat.n; i++) base_free(s->chat.role[i]), base_free(s->chat.content[i]);
    s->chat.n = 0;
    s->chat.open = 0;
}

void rt_answer_add(etch_session *s, const char *text, size_t n) {
    if (!n) return;
    if (s->answer_len + n + 1 > s->answer_cap) {
        size_t cap = (s->answer_len + n + 1) * 2;
        char *na = base_realloc(s->answer, cap);
        if (!na) { /* the conversation cannot be followed: forget it rather than mismatch later */
            rt_chat_forget(s);
            return;
        }
        s->answer = na, s->answer_cap = cap;
    }
    memcpy(s->answer + s->answer_len, text, n);
    s->answer_len += n;
    s->answer[s->answer_len] = '\0';
}

/* Appends a message (copies of role and content) to the conversation; 0 when memory ran out. */
static int chat_push(etch_session *s, const char *role, const char *content, size_t len) {
    if (s->chat.n == s->chat.cap) {
        int32_t cap = s->chat.cap ? s->chat.cap * 2 : 8;
        char **nr = base_realloc(s->chat.role, (size_t)cap * sizeof *nr);
        if (nr) s->chat.role = nr;
        char **nc = nr ? base_realloc(s->chat.content, (size_t)cap * sizeof *nc) : NULL;
        if (!nc) return 0;
        s->chat.content = nc, s->chat.cap = cap;
    }
    char *r = base_strdup(role), *c = base_strndup(content, len);
    if (!r || !c) {
        base_free(r), base_free(c);
        return 0;
    }
    s->chat.role[s->chat.n] = r, s->chat.content[s->chat.n] = c;
    s->chat.n++;
    return 1;
}

void rt_chat_answered(etch_session *s) {
    if (!s->chat.open) return;
    s->chat.open = 0;
    if (!chat_push(s, "assistant", s->answer ? s->answer : "", s->answer_len)) rt_chat_forget(s);
}

/* Whether messages[0..k) are the conversation the session holds (k = its length), the new ones
 * after them starting with a user turn: then only those are rendered. */
static int continues(const etch_session *s, const etch_chat_message *m, int32_t n) {
    int32_t k = s->chat.n;
    if (k == 0 || n <= k || s->chat.open || strcmp(s->chat.role[k - 1], "assistant") || strcmp(m[k].role, "user"))
        return 0;
    for (int32_t i = 0; i < k; i++)
        if (strcmp(m[i].role, s->chat.role[i]) || strcmp(m[i].content, s->chat.content[i])) return 0;
    return s->n_ctx > 0;
}

etch_status etch_chat_start(etch_session *s, const etch_chat_message *messages, int32_t n,
                            const etch_chat_options *opt, const etch_generate_config *cfg_in) {
    if (!s) return ETCH_ERR_ARG;
    const etch_program *p = s->prog;
    s->error[0] = '\0';
    s->gen.active = 0;
    etch_generate_config cfg;
    if (cfg_in) cfg = *cfg_in;
    else etch_generate_config_default(&cfg);
    if (!messages || n < 1) return rt_fail(s, ETCH_ERR_ARG, "etch_chat_start: no messages");
    size_t bytes = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!messages[i].role || !messages[i].content ||
            (strcmp(messages[i].role, "system") && strcmp(messages[i].role, "user") && strcmp(messages[i].role, "assistant")))
            return rt_fail(s, ETCH_ERR_ARG, "message %d needs a role (system, user or assistant) and a content", i);
        bytes += strlen(messages[i].content);
    }
    if (strcmp(messages[n - 1].role, "user"))
        return rt_fail(s, ETCH_ERR_ARG, "the last message is the user's turn to answer (it is %s)", messages[n - 1].role);
    if (s->limits.max_prompt_bytes && (int64_t)bytes > s->limits.max_prompt_bytes)
        return rt_fail(s, ETCH_ERR_LIMIT, "the messages have %zu bytes, but this session allows at most %lld", bytes,
                       (long long)s->limits.max_prompt_bytes);
    const char *name = opt && opt->template_name ? opt->template_name : p->meta.chat_template;
    if (!rt_chat_template_known(name))
        return rt_fail(s, ETCH_ERR_UNSUPPORTED, "this program has no chat template: name one (%s)", rt_chat_template_list);
    int think = opt ? opt->think : -1;
    etch_status rc = rt_generate_begin(s, &cfg);
    if (rc) return rc;

    etch_error err;
    char *text = NULL;
    int32_t *ids = NULL, n_ids = 0, keep = 0, feed = 0, from = 0;
    if (continues(s, messages, n)) { /* only the new turns, after the answer's ids as generated */
        int32_t k = s->chat.n;
        size_t marker;
        rc = rt_chat_render_after_answer(name, messages + k, n - k, think, &text, &marker, &err);
        if (rc) return rt_fail(s, rc, "%s", err.message);
        const char *t = text;
        if (s->pending >= 0 && rt_is_eos(&p->meta, s->pending)) { /* the answer's end token is the unfed one */
            size_t pl;
            const char *piece = tok_piece(&p->tok, -1, s->pending, 0, &pl);
            for (size_t at = 0; pl && at + pl <= marker; at++) /* the marker's text past that token */
                if (!memcmp(text + at, piece, pl)) {
                    t = text + at + pl;
                    break;
                }
        }
        rc = tok_encode(&p->tok, t, strlen(t), TOK_CONTINUES, &s->cancel, &ids, &n_ids, &err);
        keep = s->n_ctx, feed = 1;
    } else { /* the whole conversation, with what the cache shares kept */
        rc = rt_chat_render_turns(name, messages, n, 1, think, &text, &err);
        if (!rc) rc = tok_encode(&p->tok, text, strlen(text), TOK_BOS, &s->cancel, &ids, &n_ids, &err);
        if (!rc) {
            int32_t have = s->n_ctx + (s->pending >= 0);
            while (from < n_ids && from < have && ids[from] == (from < s->n_ctx ? s->ctx_ids[from] : s->pending)) from++;
            if (from == n_ids && n_ids > 0) from--;
            keep = from < s->n_ctx ? from : s->n_ctx;
            from = keep;
            if (rt_rewind_possible(s, keep) != ETCH_OK) keep = from = 0, s->error[0] = '\0';
        }
    }
    base_free(text);
    if (rc) return rt_fail(s, rc, "chat: %s", err.message);
    s->stats.token_encode_end_ms = base_now_us() / 1000.0;
    /* the conversation the cache will hold: these messages, then the answer */
    rt_chat_forget(s);
    for (int32_t i = 0; i < n; i++)
        if (!chat_push(s, messages[i].role, messages[i].content, strlen(messages[i].content))) {
            rt_chat_forget(s);
            break;
        }
    int recorded = s->chat.n == n;
    rc = rt_generate_ids(s, ids + from, n_ids - from, keep, feed, &cfg);
    base_free(ids);
    if (rc) {
        rt_chat_forget(s);
        return rc;
    }
    s->chat.open = recorded;
    return ETCH_OK;
}

/* ------------------------------------------------------------------ session files */

/* A session file: "ETCHSESS", u32 version 2, u64 the program's header checksum, i32 n_layers,
 * max_context_len, kv width, n_ctx, kv_end, pending, KV type (KERN_KV_*), then ctx_ids[n_ctx], then
 * per layer its K rows head by head (the rows the layer keeps: all of a ring, 0..n_ctx-1 of a full
 * cache) as the cache holds them, its V rows, and for Q8 the K and V rows' scales, head by head.
 * Version 1 (an f32 cache row by row) is refused. */
#define SESS_MAGIC "ETCHSESS"

static size_t layer_rows(const etch_session *s, int32_t l) {
    const etch_program *p = s->prog;
    int32_t rows = p->cfg.kv_rows[l];
    return rows < p->meta.max_context_len ? (size_t)rows : (size_t)s->n_ctx;
}

/* The parts of layer l's cache a session file holds, in order: K, V, and for Q8 the K and V scales.
 * Each is [n_kv_heads, kv rows, unit bytes] (kern_kv); of each head the first layer_rows rows are
 * saved. Returns how many parts (2 or 4). */
typedef struct kv_part {
    char *base;
    size_t unit, head; /* bytes of a row, and of a head's rows */
} kv_part;

static int layer_parts(const etch_session *s, int32_t l, kv_part part[4]) {
    const etch_program *p = s->prog;
    kern_kv kv = model_layer_kv(&p->cfg, &s->st, l);
    size_t rows = (size_t)p->cfg.kv_rows[l], unit = (size_t)p->meta.head_dim * kern_kv_size(s->st.kv_type);
    part[0] = (kv_part){kv.k, unit, rows * unit}, part[1] = (kv_part){kv.v, unit, rows * unit};
    if (s->st.kv_type != KERN_KV_Q8) return 2;
    part[2] = (kv_part){(char *)kv.k_scale, 4, rows * 4}, part[3] = (kv_part){(char *)kv.v_scale, 4, rows * 4};
    return 4;
}

etch_status etch_session_save(etch_session *s, const char *path) {
    if (!s || !path) return ETCH_ERR_ARG;
    s->error[0] = '\0';
    const etch_program *p = s->prog;
    etch_error err;
    base_outfile out;
    etch_status st = base_out_open(&out, path, &err);
    if (st) return rt_fail(s, st, "%s", err.message);
    int32_t kvw = p->meta.n_kv_heads * p->meta.head_dim;
    int32_t head[7] = {p->meta.n_layers, p->meta.max_context_len, kvw, s->n_ctx, s->kv_end, s->pending, s->st.kv_type};
    uint32_t version = 2;
    uint64_t sum = p->file.checksum;
    int ok = fwrite(SESS_MAGIC, 1, 8, out.f) == 8 && fwrite(&version, 4, 1, out.f) == 1 && fwrite(&sum, 8, 1, out.f) == 1 &&
             fwrite(head, 4, 7, out.f) == 7 &&
             fwrite(s->ctx_ids, 4, (size_t)s->n_ctx, out.f) == (size_t)s->n_ctx;
    for (int32_t l = 0; ok && l < p->meta.n_layers; l++) {
        kv_part part[4];
        int n_parts = layer_parts(s, l, part);
        size_t rows = layer_rows(s, l);
        for (int i = 0; ok && i < n_parts; i++)
            for (int32_t h = 0; ok && h < p->meta.n_kv_heads; h++)
                ok = fwrite(part[i].base + (size_t)h * part[i].head, 1, rows * part[i].unit, out.f) == rows * part[i].unit;
    }
    if (!ok) {
        int e = errno;
        base_out_abort(&out);
        return rt_fail(s, ETCH_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    }
    st = base_out_commit(&out, &err);
    return st ? rt_fail(s, st, "%s", err.message) : ETCH_OK;
}

etch_status etch_session_load(etch_session *s, const char *path) {
    if (!s || !path) return ETCH_ERR_ARG;
    s->error[0] = '\0';
    const etch_program *p = s->prog;
    etch_error err;
    base_map map;
    etch_status st = base_map_open(path, &map, &err);
    if (st) return rt_fail(s, st, "%s", err.message);
    base_cursor c = {map.data, 0, map.size, path, NULL, &err};
    int32_t kvw = p->meta.n_kv_heads * p->meta.head_dim, head[7];
    uint32_t version = 0;
    uint64_t sum = 0;
    if (map.size < 8 || memcmp(map.data, SESS_MAGIC, 8)) {
        base_map_close(&map);
        return rt_fail(s, ETCH_ERR_FORMAT, "%s: not an etch session file", path);
    }
    c.pos = 8;
    if ((st = base_cur_u32(&c, &version, "version")) || (st = base_cur_u64(&c, &sum, "program checksum"))) goto bad;
    if (version != 2) { /* version 1 kept an f32 cache row by row, before caches were head-major */
        st = rt_fail(s, ETCH_ERR_UNSUPPORTED, "%s: session file version %u (this etch reads 2)", path, version);
        goto out;
    }
    for (int i = 0; i < 7; i++) {
        uint32_t v;
        if ((st = base_cur_u32(&c, &v, "header"))) goto bad;
        head[i] = (int32_t)v;
    }
    if (sum != p->file.checksum || head[0] != p->meta.n_layers || head[1] != p->meta.max_context_len || head[2] != kvw) {
        st = rt_fail(s, ETCH_ERR_INPUT,
                     "%s was saved from another program (checksum %016llx, %d layers, context %d), not this one "
                     "(checksum %016llx, %d layers, context %d)",
                     path, (unsigned long long)sum, head[0], head[1], (unsigned long long)p->file.checksum,
                     p->meta.n_layers, p->meta.max_context_len);
        goto out;
    }
    if (head[6] != s->st.kv_type) {
        st = rt_fail(s, ETCH_ERR_INPUT, "%s keeps a %s KV cache; this session keeps %s", path,
                     kern_kv_type_name(head[6]), kern_kv_type_name(s->st.kv_type));
        goto out;
    }
    int32_t n_ctx = head[3], kv_end = head[4], pending = head[5];
    if (n_ctx < 0 || n_ctx > p->meta.max_context_len || kv_end < n_ctx || kv_end > p->meta.max_context_len ||
        pending < -1 || pending >= p->meta.vocab_size) {
        st = rt_fail(s, ETCH_ERR_FORMAT, "%s: positions %d, %d and token %d do not fit this program", path, n_ctx, kv_end,
                     pending);
        goto out;
    }
    const uint8_t *ids = c.base + c.pos;
    if ((st = base_cur_skip(&c, (uint64_t)n_ctx * 4, "ids"))) goto bad;
    for (int32_t i = 0; i < n_ctx; i++) {
        int32_t id;
        memcpy(&id, ids + 4 * (size_t)i, 4);
        if (id < 0 || id >= p->meta.vocab_size) {
            st = rt_fail(s, ETCH_ERR_FORMAT, "%s: id %d at position %d is outside the vocabulary", path, id, i);
            goto out;
        }
    }
    s->n_ctx = n_ctx; /* the rows' sizes follow from n_ctx */
    size_t total = 0;
    for (int32_t l = 0; l < p->meta.n_layers; l++) {
        kv_part part[4];
        for (int i = 0, n_parts = layer_parts(s, l, part); i < n_parts; i++)
            total += (size_t)p->meta.n_kv_heads * layer_rows(s, l) * part[i].unit;
    }
    if (c.end - c.pos != total) {
        s->n_ctx = 0;
        st = rt_fail(s, ETCH_ERR_FORMAT, "%s: %llu bytes of keys and values where %zu belong", path,
                     (unsigned long long)(c.end - c.pos), total);
        goto out;
    }
    memcpy(s->ctx_ids, ids, (size_t)n_ctx * 4);
    for (int32_t l = 0; l < p->meta.n_layers; l++) {
        kv_part part[4];
        int n_parts = layer_parts(s, l, part);
        size_t rows = layer_rows(s, l);
        for (int i = 0; i < n_parts; i++)
            for (int32_t h = 0; h < p->meta.n_kv_heads; h++)
                memcpy(part[i].base + (size_t)h * part[i].head, c.base + c.pos, rows * part[i].unit), c.pos += rows * part[i].unit;
    }
    s->kv_end = kv_end;
    s->pending = pending;
    s->gen.active = 0;
    rt_chat_forget(s);
    goto out;
bad:
    rt_fail(s, st, "%s", err.message);
out:
    base_map_close(&map);
    return st;
}
