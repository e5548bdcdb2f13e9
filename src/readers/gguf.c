/* readers/gguf: GGUF files (version 2 and 3), read for export.
 *
 * Layout: "GGUF", u32 version, u64 tensor count, u64 key-value count, the key-values (string key,
 * u32 type, value), the tensor infos (string name, u32 n_dims, u64 dims[n_dims] innermost first,
 * u32 ggml type, u64 offset into the data), padding to general.alignment (32), the data.
 * Strings are u64 length + bytes; arrays are u32 element type + u64 count + elements. */
#define _POSIX_C_SOURCE 200809L
#include "gguf.h"

#include "../kernels/kernels.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_T_U8: case GGUF_T_I8: case GGUF_T_BOOL: return 1;
    case GGUF_T_U16: case GGUF_T_I16: return 2;
    case GGUF_T_U32: case GGUF_T_I32: case GGUF_T_F32: return 4;
    case GGUF_T_U64: case GGUF_T_I64: case GGUF_T_F64: return 8;
    }
    return 0;
}

/* ------------------------------------------------------------------ reader */

static etch_status g_str(base_cursor *c, gguf_str *s, const char *what) {
    uint64_t n;
    etch_status st = base_cur_u64(c, &n, what);
    if (st) return st;
    if (n > c->end - c->pos)
        return base_fail(c->err, ETCH_ERR_FORMAT, "%s: %s length %llu at offset %llu runs past the end of the file",
                         c->path, what, (unsigned long long)n, (unsigned long long)(c->pos - 8));
    s->s = (const char *)c->base + c->pos;
    s->n = n;
    c->pos += n;
    return ETCH_OK;
}

/* Skips one value of type t (arrays of arrays included, depth-limited). */
static etch_status g_skip(base_cursor *c, uint32_t t, int depth, const char *key) {
    if (t == GGUF_T_STR) {
        gguf_str s;
        return g_str(c, &s, key);
    }
    if (t == GGUF_T_ARR) {
        uint32_t et;
        uint64_t n;
        etch_status st;
        if (depth > 2) return base_fail(c->err, ETCH_ERR_FORMAT, "%s: '%s' nests arrays too deep", c->path, key);
        if ((st = base_cur_u32(c, &et, key)) || (st = base_cur_u64(c, &n, key))) return st;
        uint64_t es = g_scalar_size(et), bytes;
        if (es) {
            if (!base_mul_u64(n, es, &bytes) || bytes > c->end - c->pos)
                return base_fail(c->err, ETCH_ERR_FORMAT, "%s: array '%s' of %llu elements runs past the end of the file",
                                 c->path, key, (unsigned long long)n);
            c->pos += bytes;
            return ETCH_OK;
        }
        if (et != GGUF_T_STR && et != GGUF_T_ARR) return base_fail(c->err, ETCH_ERR_FORMAT, "%s: '%s' has unknown element type %u", c->path, key, et);
        if (n > (c->end - c->pos) / 8)
            return base_fail(c->err, ETCH_ERR_FORMAT, "%s: array '%s' of %llu elements runs past the end of the file",
                             c->path, key, (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++)
            if ((st = g_skip(c, et, depth + 1, key))) return st;
        return ETCH_OK;
    }
    uint64_t es = g_scalar_size(t);
    if (!es) return base_fail(c->err, ETCH_ERR_FORMAT, "%s: '%s' has unknown value type %u", c->path, key, t);
    etch_status st = base_cur_need(c, es, key);
    if (!st) c->pos += es;
    return st;
}

const int8_t gguf_iq4nl_table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

uint32_t gguf_block_size(uint32_t type, uint32_t *bytes) {
    static const struct { uint32_t type, n, bytes; } blocks[] = {
        {GGUF_F32, 1, 4},      {GGUF_F16, 1, 2},      {GGUF_BF16, 1, 2},     {GGUF_Q8_0, 32, 34},
        {GGUF_Q4_0, 32, 18},   {GGUF_Q4_1, 32, 20},   {GGUF_Q5_0, 32, 22},   {GGUF_Q5_1, 32, 24},
        {GGUF_Q4_K, 256, 144}, {GGUF_Q5_K, 256, 176}, {GGUF_Q6_K, 256, 210}, {GGUF_IQ4_NL, 32, 18},
        {GGUF_IQ4_XS, 256, 136},
    };
    for (size_t i = 0; i < sizeof blocks / sizeof *blocks; i++)
        if (blocks[i].type == type) return *bytes = blocks[i].bytes, blocks[i].n;
    return *bytes = 0, 0;
}

static uint64_t g_tensor_bytes(uint32_t type, uint64_t count, uint64_t ne0, int *ok) {
    uint32_t bytes, n = gguf_block_size(type, &bytes);
    *ok = n && ne0 % n == 0;
    return n ? count / n * bytes : 0;
}

static const char *g_type_name(uint32_t t) {
    switch (t) {
    case GGUF_F32: return "F32";
    case GGUF_F16: return "F16";
    case GGUF_BF16: return "BF16";
    case GGUF_Q8_0: return "Q8_0";
    case GGUF_Q4_0: return "Q4_0";
    case 3: return "Q4_1";
    case 6: return "Q5_0";
    case 7: return "Q5_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K";
    case 12: return "Q4_K";
    case 13: return "Q5_K";
    case 14: return "Q6_K";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    }
    return "an unknown type";
}

etch_status gguf_open(const char *path, gguf_file *g, etch_error *err) {
    memset(g, 0, sizeof *g);
    etch_status st = base_map_open(path, &g->map, err);
    if (st) return st;
    g->path = path;
    base_cursor c = {g->map.data, 0, g->map.size, path, NULL, err};
    uint32_t magic = 0;
    uint64_t n_tensors, n_kv;
    if (g->map.size < 24 || memcmp(g->map.data, "GGUF", 4) != 0) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: not a GGUF file (bad magic)", path);
        goto fail;
    }
    c.pos = 4;
    (void)magic;
    if ((st = base_cur_u32(&c, &g->version, "version"))) goto fail;
    if (g->version != 2 && g->version != 3) {
        st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (2, 3)", path, g->version);
        goto fail;
    }
    if ((st = base_cur_u64(&c, &n_tensors, "tensor count")) || (st = base_cur_u64(&c, &n_kv, "key-value count"))) goto fail;
    /* Each key-value takes at least 12 bytes, each tensor info at least 24: bound the counts. */
    if (n_kv > (c.end - c.pos) / 12 || n_tensors > (c.end - c.pos) / 24) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: %llu key-values and %llu tensors cannot fit in %llu bytes", path,
                       (unsigned long long)n_kv, (unsigned long long)n_tensors, (unsigned long long)g->map.size);
        goto fail;
    }
    g->kv = base_calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = base_calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) {
        st = base_fail(err, ETCH_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    uint32_t alignment = 32;
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        if ((st = g_str(&c, &kv->key, "key")) || (st = base_cur_u32(&c, &kv->type, "value type"))) goto fail;
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(kv->key.n < 100 ? kv->key.n : 100), kv->key.s);
        kv->value = c.base + c.pos;
        if ((st = g_skip(&c, kv->type, 0, key))) goto fail;
        kv->value_end = c.base + c.pos;
        g->n_kv++;
        if (!strcmp(key, "general.alignment")) {
            if (kv->type != GGUF_T_U32 || base_le32(kv->value) == 0 || base_le32(kv->value) > 4096 ||
                (base_le32(kv->value) & (base_le32(kv->value) - 1))) {
                st = base_fail(err, ETCH_ERR_FORMAT, "%s: general.alignment must be a power of two up to 4096", path);
                goto fail;
            }
            alignment = base_le32(kv->value);
        }
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint32_t nd;
        if ((st = g_str(&c, &t->name, "tensor name")) || (st = base_cur_u32(&c, &nd, "n_dims"))) goto fail;
        if (nd < 1 || nd > 4) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%.*s' has %u dimensions", path, (int)t->name.n, t->name.s, nd);
            goto fail;
        }
        t->n_dims = nd;
        for (uint32_t d = 0; d < nd; d++)
            if ((st = base_cur_u64(&c, &t->ne[d], "dim"))) goto fail;
        if ((st = base_cur_u32(&c, &t->type, "tensor type")) || (st = base_cur_u64(&c, &t->offset, "tensor offset"))) goto fail;
        g->n_tensors++;
    }
    g->data_offset = (c.pos + alignment - 1) / alignment * alignment;
    if (g->data_offset > g->map.size) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: truncated before the tensor data", path);
        goto fail;
    }
    uint64_t data_size = g->map.size - g->data_offset;
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t count = 1;
        int ok = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (t->ne[d] == 0 || !base_mul_u64(count, t->ne[d], &count)) ok = 0;
        uint64_t bytes = ok ? g_tensor_bytes(t->type, count, t->ne[0], &ok) : 0, end;
        uint32_t block_bytes;
        int known = gguf_block_size(t->type, &block_bytes) > 0;
        if (!ok && !known) {
            /* An unsupported type is reported by name only if the tensor is used (gguf_tensor_data). */
            t->bytes = 0;
            t->data = NULL;
            continue;
        }
        if (!ok || count > (1ull << 40) || t->offset % alignment || !base_add_u64(t->offset, bytes, &end) || end > data_size) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%.*s' (%s, %llu bytes at %llu) has a bad shape or lies past the "
                           "data (%llu bytes)", path, (int)t->name.n, t->name.s, g_type_name(t->type),
                           (unsigned long long)bytes, (unsigned long long)t->offset, (unsigned long long)data_size);
            goto fail;
        }
        t->bytes = bytes;
        t->data = g->map.data + g->data_offset + t->offset;
    }
    return ETCH_OK;
fail:
    gguf_close(g);
    return st;
}

void gguf_close(gguf_file *g) {
    if (!g) return;
    base_map_close(&g->map);
    base_free(g->kv);
    base_free(g->tensors);
    memset(g, 0, sizeof *g);
}

const gguf_kv *gguf_find(const gguf_file *g, const char *key) {
    size_t n = strlen(key);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key.n == n && !memcmp(g->kv[i].key.s, key, n)) return &g->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name) {
    size_t n = strlen(name);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].name.n == n && !memcmp(g->tensors[i].name.s, name, n)) return &g->tensors[i];
    return NULL;
}

/* Integer of any integer type (or bool). */
int gguf_int(const gguf_file *g, const char *key, int64_t *v) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return 0;
    const uint8_t *p = kv->value;
    switch (kv->type) {
    case GGUF_T_U8: case GGUF_T_BOOL: *v = p[0]; return 1;
    case GGUF_T_I8: *v = (int8_t)p[0]; return 1;
    case GGUF_T_U16: *v = (uint16_t)(p[0] | p[1] << 8); return 1;
    case GGUF_T_I16: *v = (int16_t)(p[0] | p[1] << 8); return 1;
    case GGUF_T_U32: *v = base_le32(p); return 1;
    case GGUF_T_I32: *v = (int32_t)base_le32(p); return 1;
    case GGUF_T_U64: *v = (int64_t)base_le64(p); return 1;
    case GGUF_T_I64: *v = (int64_t)base_le64(p); return 1;
    }
    return 0;
}

int gguf_float(const gguf_file *g, const char *key, double *v) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return 0;
    if (kv->type == GGUF_T_F32) {
        uint32_t b = base_le32(kv->value);
        float f;
        memcpy(&f, &b, 4);
        *v = f;
        return 1;
    }
    if (kv->type == GGUF_T_F64) {
        uint64_t b = base_le64(kv->value);
        memcpy(v, &b, 8);
        return 1;
    }
    int64_t i;
    if (gguf_int(g, key, &i)) return *v = (double)i, 1;
    return 0;
}

int gguf_string(const gguf_file *g, const char *key, gguf_str *s) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv || kv->type != GGUF_T_STR) return 0;
    s->n = base_le64(kv->value);
    s->s = (const char *)kv->value + 8;
    return 1;
}

int gguf_array(const gguf_file *g, const char *key, uint32_t *elem_type, uint64_t *count, const uint8_t **first) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv || kv->type != GGUF_T_ARR) return 0;
    *elem_type = base_le32(kv->value);
    *count = base_le64(kv->value + 4);
    *first = kv->value + 12;
    return 1;
}

/* ------------------------------------------------------------------ import */

static etch_status read_gguf_tokenizer(const gguf_file *g, imp_model *m, etch_error *err) {
    const char *path = g->path;
    gguf_str model;
    if (!gguf_string(g, "tokenizer.ggml.model", &model))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer.ggml.model is missing", path);
    int gpt2 = model.n == 4 && !memcmp(model.s, "gpt2", 4), llama = model.n == 5 && !memcmp(model.s, "llama", 5);
    if (!gpt2 && !llama)
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported (llama, gpt2)", path,
                         (int)model.n, model.s);
    uint32_t et;
    uint64_t n;
    const uint8_t *p;
    if (!gguf_array(g, "tokenizer.ggml.tokens", &et, &n, &p) || et != GGUF_T_STR || n < 1 || n > (1 << 24))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer.ggml.tokens is missing or not a string array", path);
    int32_t nv = (int32_t)n;
    m->vocab_size = nv;
    m->tok_offsets = base_malloc(((size_t)nv + 1) * sizeof *m->tok_offsets);
    m->tok_types = base_malloc((size_t)nv);
    m->tok_scores = base_calloc((size_t)nv, sizeof *m->tok_scores);
    uint64_t blob_cap = 1 << 20;
    m->tok_blob = base_malloc(blob_cap);
    if (!m->tok_offsets || !m->tok_types || !m->tok_scores || !m->tok_blob) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    /* Types first: they decide how a token's text is read. */
    const uint8_t *tp = NULL;
    uint32_t tt;
    uint64_t tn;
    if (gguf_array(g, "tokenizer.ggml.token_type", &tt, &tn, &tp) && (tn != n || (tt != GGUF_T_I32 && tt != GGUF_T_U32)))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %llu entries for %llu tokens", path,
                         (unsigned long long)tn, (unsigned long long)n);
    const uint8_t *sp = NULL;
    uint32_t st_;
    uint64_t sn;
    if (gguf_array(g, "tokenizer.ggml.scores", &st_, &sn, &sp) && (sn != n || st_ != GGUF_T_F32))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer.ggml.scores has %llu entries for %llu tokens", path,
                         (unsigned long long)sn, (unsigned long long)n);
    if (llama && !sp) return base_fail(err, ETCH_ERR_FORMAT, "%s: a llama tokenizer needs tokenizer.ggml.scores", path);
    uint64_t at = 0; /* strings were bounds-checked by gguf_open */
    const uint8_t *q = p;
    for (int32_t i = 0; i < nv; i++) {
        uint64_t len = base_le64(q);
        const char *s = (const char *)q + 8;
        q += 8 + len;
        int32_t type = tp ? (int32_t)base_le32(tp + 4 * (size_t)i) : TOK_NORMAL;
        if (type < TOK_NORMAL || type > TOK_BYTE) type = TOK_NORMAL;
        m->tok_types[i] = (uint8_t)type;
        if (sp) {
            uint32_t b = base_le32(sp + 4 * (size_t)i);
            memcpy(&m->tok_scores[i], &b, 4);
        }
        while (at + len + 8 > blob_cap) {
            char *nb = base_realloc(m->tok_blob, blob_cap *= 2);
            if (!nb) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
            m->tok_blob = nb;
        }
        m->tok_offsets[i] = (int32_t)at;
        size_t w = (size_t)len;
        if (type == TOK_NORMAL || (type == TOK_USER && llama)) {
            if (!imp_raw_piece(s, (size_t)len, gpt2, m->tok_blob + at, &w))
                return base_fail(err, ETCH_ERR_FORMAT, "%s: token %d '%.*s' is not valid %s", path, i, (int)(len < 40 ? len : 40),
                                 s, gpt2 ? "byte-level text" : "UTF-8");
        } else {
            memcpy(m->tok_blob + at, s, (size_t)len);
        }
        at += w;
        if (at > INT32_MAX) return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: vocabulary text over 2 GiB", path);
    }
    m->tok_offsets[nv] = (int32_t)at;
    m->tok_blob_size = at;
    int64_t v;
    m->bos_id = gguf_int(g, "tokenizer.ggml.bos_token_id", &v) && v >= 0 && v < nv ? (int32_t)v : -1;
    m->unk_id = gguf_int(g, "tokenizer.ggml.unknown_token_id", &v) && v >= 0 && v < nv ? (int32_t)v : -1;
    int64_t add_bos = llama;
    gguf_int(g, "tokenizer.ggml.add_bos_token", &add_bos);
    if (!add_bos) m->bos_id = -1;
    static const char *eos_keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"};
    for (size_t k = 0; k < 3; k++)
        if (gguf_int(g, eos_keys[k], &v) && v >= 0 && v < nv) {
            int dup = 0;
            for (int i = 0; i < m->n_eos; i++) dup |= m->eos_ids[i] == (int32_t)v;
            if (!dup) m->eos_ids[m->n_eos++] = (int32_t)v;
        }
    m->tok_match_added = 1;
    if (llama) {
        int64_t space = 1;
        gguf_int(g, "tokenizer.ggml.add_space_prefix", &space);
        m->add_dummy_prefix = space != 0;
        m->tok_model = TOK_MODEL_SCORES;
        m->tok_byte_fallback = 1;
        return ETCH_OK;
    }
    /* gpt2: byte-level BPE with merges and a named split regex. */
    m->tok_model = TOK_MODEL_MERGES;
    m->tok_byte_level = 1;
    gguf_str pre = {"default", 7};
    gguf_string(g, "tokenizer.ggml.pre", &pre);
    const char *regex = NULL;
#define PRE(name) (pre.n == strlen(name) && !memcmp(pre.s, name, pre.n))
    if (PRE("qwen2")) regex = imp_regex_qwen2, m->tok_nfc = 1;
    else if (PRE("llama-bpe") || PRE("llama3")) regex = imp_regex_llama3, m->tok_ignore_merges = 1;
    else if (PRE("smollm")) regex = imp_regex_digits;
    else if (PRE("default") || PRE("gpt-2") || PRE("gpt2")) regex = imp_regex_gpt2;
#undef PRE
    if (!regex)
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not supported (qwen2, llama-bpe, smollm, "
                         "default)", path, (int)pre.n, pre.s);
    if (!(m->tok_pretok = base_strdup(regex))) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    uint32_t mt;
    uint64_t mn;
    const uint8_t *mp;
    if (!gguf_array(g, "tokenizer.ggml.merges", &mt, &mn, &mp) || mt != GGUF_T_STR || mn > (1 << 24))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer.ggml.merges is missing", path);
    tok_tokenizer look;
    tok_spec spec;
    imp_tok_spec(m, &spec);
    spec.pretok = NULL;
    spec.byte_level = 0;
    etch_status st = tok_init(&look, &spec, path, err);
    if (st) return st;
    m->tok_merges = base_malloc((size_t)(mn ? mn : 1) * 3 * sizeof *m->tok_merges);
    char *buf = base_malloc((size_t)look.max_piece_len * 4 + 64);
    if (!m->tok_merges || !buf) st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    q = mp;
    for (uint64_t k = 0; k < mn && !st; k++) {
        uint64_t len = base_le64(q);
        const char *s = (const char *)q + 8;
        q += 8 + len;
        const char *sp_at = len > 1 ? memchr(s + 1, ' ', (size_t)len - 1) : NULL;
        size_t la = 0, lb = 0;
        int ok = sp_at && (uint64_t)(sp_at - s) <= (uint64_t)look.max_piece_len * 2 &&
                 len - (uint64_t)(sp_at - s) - 1 <= (uint64_t)look.max_piece_len * 2 &&
                 imp_raw_piece(s, (size_t)(sp_at - s), 1, buf, &la) &&
                 imp_raw_piece(sp_at + 1, (size_t)(len - (uint64_t)(sp_at - s) - 1), 1, buf + la, &lb);
        int32_t a = ok ? tok_find(&look, buf, la) : -1, b = ok ? tok_find(&look, buf + la, lb) : -1;
        int32_t c = a >= 0 && b >= 0 ? tok_find(&look, buf, la + lb) : -1;
        if (c < 0)
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: merge %llu '%.*s' names a piece not in the vocabulary", path,
                           (unsigned long long)k, (int)(len < 60 ? len : 60), s);
        m->tok_merges[3 * k] = a, m->tok_merges[3 * k + 1] = b, m->tok_merges[3 * k + 2] = c;
    }
    m->tok_n_merges = st ? 0 : (int32_t)mn;
    base_free(buf);
    tok_free(&look);
    return st;
}

static etch_status need_key_int(const gguf_file *g, const char *arch, const char *suffix, int64_t lo, int64_t hi,
                                int32_t *out, int32_t dflt, int required, etch_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    if (!gguf_int(g, key, &v)) {
        if (required) return base_fail(err, ETCH_ERR_FORMAT, "%s: '%s' is missing", g->path, key);
        *out = dflt;
        return ETCH_OK;
    }
    if (v < lo || v > hi) return base_fail(err, ETCH_ERR_FORMAT, "%s: '%s' = %lld is outside %lld..%lld", g->path, key,
                                           (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return ETCH_OK;
}

/* Gemma-3 as llama.cpp reads it (norm weights already hold 1 + w; the local layers' RoPE base and the
 * pattern of one global layer in six are fixed by the architecture), and sliding windows. */
static etch_status read_windows(const gguf_file *g, const char *arch, imp_model *m, etch_error *err) {
    char key[128];
    double d;
    int32_t window;
    etch_status st = need_key_int(g, arch, "attention.sliding_window", 0, 1 << 24, &window, 0, 0, err);
    if (st) return st;
    int gemma = !strcmp(arch, "gemma3");
    if (gemma) {
        m->gelu = m->post_norms = m->qk_norm = 1;
        m->embd_scale = sqrtf((float)m->dim);
        /* llama.cpp: 1/sqrt(head_dim), except the 27B model (62 layers), which uses dim / heads. */
        m->query_pre_attn_scalar = m->n_layers == 62 ? (float)(m->dim / m->n_heads) : (float)m->head_dim;
        snprintf(key, sizeof key, "%s.final_logit_softcapping", arch);
        if (gguf_float(g, key, &d) && d > 0) m->final_softcap = (float)d;
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        gguf_str type;
        if (gguf_string(g, key, &type)) {
            if (type.n == 6 && !memcmp(type.s, "linear", 6)) {
                snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
                if (gguf_float(g, key, &d) && d > 0) m->rope_linear = (float)d;
            } else if (!(type.n == 4 && !memcmp(type.s, "none", 4))) {
                return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: %s '%.*s' is not supported (linear, none)", g->path, key,
                                 (int)(type.n < 32 ? type.n : 32), type.s);
            }
        }
        if (window > 0) m->rope_base_local = 10000.0f;
    }
    if (window <= 0) return ETCH_OK;
    uint8_t *w = base_malloc((size_t)m->n_layers);
    if (!w) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    for (int32_t l = 0; l < m->n_layers; l++) w[l] = gemma ? (l + 1) % 6 != 0 : 1;
    int ok = imp_set_windows(m, window, w);
    base_free(w);
    return ok ? ETCH_OK : base_fail(err, ETCH_ERR_NOMEM, "out of memory");
}

etch_status imp_gguf(const char *path, imp_model *m, int tokenizer_only, etch_error *err) {
    memset(m, 0, sizeof *m);
    gguf_file *g = base_calloc(1, sizeof *g);
    if (!g) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    etch_status st = gguf_open(path, g, err);
    if (st) {
        base_free(g);
        return st;
    }
    snprintf(m->source, sizeof m->source, "GGUF %s", path);
    gguf_str arch_s;
    char arch[32] = "";
    if (gguf_string(g, "general.architecture", &arch_s)) snprintf(arch, sizeof arch, "%.*s", (int)(arch_s.n < 31 ? arch_s.n : 31), arch_s.s);
    if (!tokenizer_only) {
        if (strcmp(arch, "llama") && strcmp(arch, "qwen2") && strcmp(arch, "qwen3") && strcmp(arch, "gemma3")) {
            st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (llama, qwen2, qwen3, gemma3)", path,
                           arch[0] ? arch : "(general.architecture missing)");
            goto done;
        }
        snprintf(m->model_type, sizeof m->model_type, "%s", arch);
        const int64_t big = 1 << 20;
        if ((st = need_key_int(g, arch, "embedding_length", 1, big, &m->dim, 0, 1, err)) ||
            (st = need_key_int(g, arch, "feed_forward_length", 1, big, &m->hidden_dim, 0, 1, err)) ||
            (st = need_key_int(g, arch, "block_count", 1, 4096, &m->n_layers, 0, 1, err)) ||
            (st = need_key_int(g, arch, "attention.head_count", 1, 4096, &m->n_heads, 0, 1, err)) ||
            (st = need_key_int(g, arch, "attention.head_count_kv", 1, 4096, &m->n_kv_heads, m->n_heads, 0, err)) ||
            (st = need_key_int(g, arch, "context_length", 1, 1 << 24, &m->context_len, 2048, 0, err)))
            goto done;
        if ((st = need_key_int(g, arch, "attention.key_length", 2, 4096, &m->head_dim, m->dim / m->n_heads, 0, err)))
            goto done;
        char key[128];
        double d;
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
        m->norm_eps = gguf_float(g, key, &d) && d > 0 && d < 1 ? (float)d : 1e-5f;
        snprintf(key, sizeof key, "%s.rope.freq_base", arch);
        m->rope_base = gguf_float(g, key, &d) && d > 0 ? (float)d : 10000.0f;
        if (m->head_dim % 2 || m->n_heads % m->n_kv_heads) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: head_dim %d must be even and head_count a multiple of head_count_kv", path,
                           m->head_dim);
            goto done;
        }
        /* llama.cpp stores llama weights with Q and K rows permuted for adjacent-pair RoPE; Qwen keeps
         * Hugging Face's half-split pairs (NEOX). */
        m->rope_style = !strcmp(arch, "llama") ? "adjacent" : "half";
        m->qkv_bias = !strcmp(arch, "qwen2");
        m->qk_norm = !strcmp(arch, "qwen3");
        if ((st = read_windows(g, arch, m, err))) goto done;
    }
    if ((st = read_gguf_tokenizer(g, m, err))) goto done;
    gguf_str tpl;
    if (gguf_string(g, "tokenizer.chat_template", &tpl)) {
        char *j = base_strndup(tpl.s, (size_t)tpl.n);
        if (!j) {
            st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
            goto done;
        }
        const char *kind = imp_recognize_template(j);
        snprintf(m->chat_template, sizeof m->chat_template, "%s", kind ? kind : "?");
        base_free(j);
    }
    if (tokenizer_only) goto done;

    /* Weights. GGUF dims are innermost first: a matrix [ne0 = in, ne1 = out] is [out, in] row-major. */
    int any_quant = 0, src_dtype = -1;
    for (uint64_t i = 0; i < g->n_tensors && !st; i++) {
        const gguf_tensor *t = &g->tensors[i];
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.n < 95 ? t->name.n : 95), t->name.s);
        if (!strcmp(name, "rope_freqs.weight")) continue; /* handled below */
        int matrix = t->n_dims == 2;
        if (t->n_dims > 2 || (t->n_dims == 2 && t->ne[0] > (1u << 24))) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%s' has %u dimensions", path, name, t->n_dims);
            break;
        }
        if (!t->data) {
            st = base_fail(err, ETCH_ERR_UNSUPPORTED,
                           "%s: tensor '%s' is of type %s (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, "
                           "IQ4_NL, IQ4_XS supported)", path, name, g_type_name(t->type));
            break;
        }
        int type = t->type == GGUF_F32 ? IMP_F32 : t->type == GGUF_F16 ? IMP_F16 : t->type == GGUF_BF16 ? IMP_BF16
                 : t->type == GGUF_Q8_0 ? IMP_Q8_0 : t->type == GGUF_Q4_0 ? IMP_Q4_0 : t->type == GGUF_Q4_1 ? IMP_Q4_1
                 : t->type == GGUF_Q5_0 ? IMP_Q5_0 : t->type == GGUF_Q5_1 ? IMP_Q5_1 : t->type == GGUF_Q4_K ? IMP_Q4_K
                 : t->type == GGUF_Q5_K ? IMP_Q5_K : t->type == GGUF_Q6_K ? IMP_Q6_K
                 : t->type == GGUF_IQ4_NL ? IMP_IQ4_NL : IMP_IQ4_XS;
        if (type == IMP_F32 && (uintptr_t)t->data % 4) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%s' is misaligned", path, name);
            break;
        }
        if (matrix) {
            any_quant |= type >= IMP_Q8_0;
            if (src_dtype < 0 || type == IMP_F32) src_dtype = type;
        }
        if (!imp_add_tensor(m, name, type, t->data, matrix ? t->ne[1] : t->ne[0], matrix ? t->ne[0] : 0, matrix))
            st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    }
    if (st) goto done;
    m->source_dtype = any_quant || src_dtype < 0 ? IMP_F16 : src_dtype;
    const gguf_tensor *tok = gguf_find_tensor(g, "token_embd.weight");
    int64_t vocab_rows = tok && tok->n_dims == 2 ? (int64_t)tok->ne[1] : m->vocab_size;
    if (vocab_rows < m->vocab_size) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: token_embd.weight has %lld rows for %d tokens", path, (long long)vocab_rows,
                       m->vocab_size);
        goto done;
    }
    if (vocab_rows > m->vocab_size) { /* rows past the tokenizer: unused pieces */
        int32_t *no = base_realloc(m->tok_offsets, ((size_t)vocab_rows + 1) * sizeof *no);
        uint8_t *nt = base_realloc(m->tok_types, (size_t)vocab_rows);
        float *ns = base_realloc(m->tok_scores, (size_t)vocab_rows * sizeof *ns);
        if (no) m->tok_offsets = no;
        if (nt) m->tok_types = nt;
        if (ns) m->tok_scores = ns;
        if (!no || !nt || !ns) {
            st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (int64_t i = m->vocab_size; i < vocab_rows; i++)
            m->tok_offsets[i + 1] = m->tok_offsets[m->vocab_size], m->tok_types[i] = TOK_UNUSED, m->tok_scores[i] = 0;
        m->vocab_size = (int32_t)vocab_rows;
    }
    m->tied_embeddings = gguf_find_tensor(g, "output.weight") == NULL;
    const gguf_tensor *rf = gguf_find_tensor(g, "rope_freqs.weight");
    if (rf) { /* Llama 3 scaling as llama.cpp's converter writes it: a factor per frequency */
        if (rf->type != GGUF_F32 || rf->n_dims != 1 || (int64_t)rf->ne[0] != m->head_dim / 2 || !rf->data) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: rope_freqs.weight is not %d F32 values (head_dim / 2)", path,
                           m->head_dim / 2);
            goto done;
        }
        m->rope_freq_factors = imp_own(m, base_malloc((size_t)rf->ne[0] * sizeof(float)));
        if (!m->rope_freq_factors) {
            st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(m->rope_freq_factors, rf->data, (size_t)rf->ne[0] * sizeof(float));
        for (int64_t i = 0; i < (int64_t)rf->ne[0]; i++)
            if (!(m->rope_freq_factors[i] > 0) || m->rope_freq_factors[i] > 1e6f) {
                st = base_fail(err, ETCH_ERR_FORMAT, "%s: rope_freqs.weight[%lld] = %g is not a positive factor", path,
                               (long long)i, (double)m->rope_freq_factors[i]);
                goto done;
            }
    }
    /* The mapping stays open: the tensors borrow from it. */
    m->maps[0] = g->map;
    m->n_maps = 1;
    g->map.data = NULL;
    g->map.size = 0;
done:
    gguf_close(g);
    base_free(g);
    if (st) imp_model_free(m);
    return st;
}


