/* import: llama2.c checkpoints (legacy version 0) and tokenizer.bin files. */
#include "reader.h"

#include "../tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads the tokenizer: int32 max_token_length, then per token: f32 score, int32 length, bytes. */
static etch_status read_tokenizer(const char *path, imp_model *m, etch_error *err) {
    uint8_t *data;
    uint64_t size;
    etch_status st = base_read_file(path, &data, &size, err);
    if (st) return st;
    int32_t n = m->vocab_size;
    m->tok_offsets = base_malloc(((size_t)n + 1) * sizeof *m->tok_offsets);
    m->tok_scores = base_malloc((size_t)n * sizeof *m->tok_scores);
    m->tok_types = base_malloc((size_t)n);
    m->tok_blob = base_malloc(size ? (size_t)size : 1); /* the pieces are shorter than the file */
    if (!m->tok_offsets || !m->tok_scores || !m->tok_types || !m->tok_blob) {
        base_free(data);
        return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate the vocabulary", path);
    }
    uint64_t at = 4, blob = 0;
    if (size < 4) {
        base_free(data);
        return base_fail(err, ETCH_ERR_FORMAT, "%s: shorter than its 4-byte header", path);
    }
    int32_t max_len = (int32_t)base_le32(data);
    if (max_len < 1 || max_len > 65536) {
        base_free(data);
        return base_fail(err, ETCH_ERR_FORMAT, "%s: max_token_length %d is out of range", path, max_len);
    }
    for (int32_t i = 0; i < n; i++) {
        if (size - at < 8) {
            base_free(data);
            return base_fail(err, ETCH_ERR_FORMAT, "%s: truncated at token %d of %d (offset %llu)", path, i, n,
                             (unsigned long long)at);
        }
        float score;
        uint32_t bits = base_le32(data + at);
        memcpy(&score, &bits, 4);
        int32_t len = (int32_t)base_le32(data + at + 4);
        at += 8;
        if (len < 0 || len > max_len || (uint64_t)len > size - at) {
            base_free(data);
            return base_fail(err, ETCH_ERR_FORMAT, "%s: token %d has length %d (max_token_length %d, %llu bytes left)",
                             path, i, len, max_len, (unsigned long long)(size - at));
        }
        m->tok_offsets[i] = (int32_t)blob;
        const char *piece = (const char *)data + at;
        at += (uint64_t)len;
        m->tok_scores[i] = score;
        /* llama2.c's convention: 0 <unk>, 1 <s>, 2 </s>; <0xHH> pieces are byte fallback. */
        uint8_t type = TOK_NORMAL;
        if (i == 0) type = TOK_UNKNOWN;
        else if (i == 1 || i == 2) type = TOK_CONTROL;
        else if (len == 6 && memcmp(piece, "<0x", 3) == 0 && piece[5] == '>') type = TOK_BYTE;
        m->tok_types[i] = type;
        if (type == TOK_CONTROL) /* llama2.c writes "\n<s>\n": keep the name, drop the newlines */
            while (len > 0 && (*piece == '\n' || piece[len - 1] == '\n')) {
                if (*piece == '\n') piece++;
                len--;
            }
        memcpy(m->tok_blob + blob, piece, (size_t)len);
        blob += (uint64_t)len;
    }
    m->tok_offsets[n] = (int32_t)blob;
    m->tok_blob_size = blob;
    base_free(data);
    m->bos_id = n > 1 ? 1 : -1;
    m->unk_id = 0;
    m->eos_ids[0] = n > 2 ? 2 : 0;
    m->n_eos = n > 2 ? 1 : 0;
    m->add_dummy_prefix = 1;
    m->tok_model = TOK_MODEL_SCORES;
    m->tok_byte_fallback = 1;
    return ETCH_OK;
}

etch_status imp_llama2c(const char *model_path, const char *tokenizer_path, imp_model *m, etch_error *err) {
    memset(m, 0, sizeof *m);
    etch_status st = base_map_open(model_path, &m->maps[0], err);
    if (st) return st;
    m->n_maps = 1;
    const uint8_t *d = m->maps[0].data;
    uint64_t size = m->maps[0].size;
    if (size < 28) {
        imp_model_free(m);
        return base_fail(err, ETCH_ERR_FORMAT, "%s: %llu bytes is shorter than the 28-byte llama2.c header", model_path,
                         (unsigned long long)size);
    }
    if (memcmp(d, "24ka", 4) == 0) { /* 0x616b3432 little-endian: llama2.c's versioned export */
        uint32_t version = base_le32(d + 4); /* read before the mapping goes */
        imp_model_free(m);
        return base_fail(err, ETCH_ERR_UNSUPPORTED,
                         "%s: llama2.c versioned export (magic 'ak42', version %u) is not supported; export with "
                         "the legacy (version 0) format",
                         model_path, version);
    }
    int32_t h[7];
    for (int i = 0; i < 7; i++) h[i] = (int32_t)base_le32(d + 4 * i);
    int shared = h[5] > 0;
    int32_t dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv_heads = h[4];
    int32_t vocab = h[5] == INT32_MIN ? 0 : h[5] < 0 ? -h[5] : h[5], seq_len = h[6]; /* negative: not shared */
    if (dim < 1 || dim > (1 << 16) || hidden < 1 || hidden > (1 << 18) || layers < 1 || layers > 1024 ||
        heads < 1 || heads > dim || kv_heads < 1 || kv_heads > heads || vocab < 3 || vocab > (1 << 22) ||
        seq_len < 1 || seq_len > (1 << 20) || dim % heads != 0 || heads % kv_heads != 0 || (dim / heads) % 2 != 0) {
        imp_model_free(m);
        return base_fail(err, ETCH_ERR_FORMAT,
                         "%s: header (dim %d, hidden_dim %d, n_layers %d, n_heads %d, n_kv_heads %d, vocab_size %d, "
                         "seq_len %d) is not a valid llama2.c model",
                         model_path, dim, hidden, layers, heads, kv_heads, h[5], seq_len);
    }
    uint64_t hs = (uint64_t)(dim / heads), kv = hs * (uint64_t)kv_heads, D = (uint64_t)dim, H = (uint64_t)hidden;
    uint64_t L = (uint64_t)layers, V = (uint64_t)vocab;
    /* Floats in file order; the sizes are bounded above so none of these products overflow. */
    uint64_t counts[] = {V * D, L * D, L * D * D, L * kv * D, L * kv * D, L * D * D, L * D,
                         L * H * D, L * D * H, L * H * D, D, (uint64_t)seq_len * hs / 2 * 2, shared ? 0 : V * D};
    uint64_t want = 28;
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) want += counts[i] * 4;
    if (size != want) {
        imp_model_free(m);
        return base_fail(err, ETCH_ERR_FORMAT,
                         "%s: the header implies %llu bytes of weights and tables but the file has %llu (%s)",
                         model_path, (unsigned long long)want, (unsigned long long)size,
                         size < want ? "truncated" : "trailing bytes");
    }
    snprintf(m->model_type, sizeof m->model_type, "llama");
    m->source_dtype = IMP_F32;
    m->dim = dim, m->hidden_dim = hidden, m->n_layers = layers, m->n_heads = heads, m->n_kv_heads = kv_heads;
    m->head_dim = (int32_t)hs, m->vocab_size = vocab, m->context_len = seq_len;
    m->norm_eps = 1e-5f, m->rope_base = 10000.0f, m->rope_style = "adjacent", m->tied_embeddings = shared;
    m->chat_template[0] = '\0';
    snprintf(m->source, sizeof m->source, "llama2.c checkpoint %s", model_path);
    /* The checkpoint's data starts at byte 28, so its floats are only 4-byte aligned: the mapping is
     * page-aligned and 28 is a multiple of 4, which is all float access needs. */
    const float *f = (const float *)(const void *)(d + 28);
    const float *emb = f, *rms_att = emb + counts[0], *wq = rms_att + counts[1], *wk = wq + counts[2];
    const float *wv = wk + counts[3], *wo = wv + counts[4], *rms_ffn = wo + counts[5], *w1 = rms_ffn + counts[6];
    const float *w2 = w1 + counts[7], *w3 = w2 + counts[8], *rms_final = w3 + counts[9];
    const float *wcls = rms_final + counts[10] + counts[11];
    int ok = imp_add_tensor(m, "token_embd.weight", IMP_F32, emb, V, D, 1) != NULL;
    for (int32_t l = 0; l < layers; l++) {
        char name[64];
        uint64_t i = (uint64_t)l;
#define T(suffix, ptr, rows, cols)                                   \
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);      \
    ok = ok && imp_add_tensor(m, name, IMP_F32, ptr, rows, cols, cols != 0) != NULL
        T("attn_norm", rms_att + i * D, D, 0);
        T("attn_q", wq + i * D * D, D, D);
        T("attn_k", wk + i * kv * D, kv, D);
        T("attn_v", wv + i * kv * D, kv, D);
        T("attn_output", wo + i * D * D, D, D);
        T("ffn_norm", rms_ffn + i * D, D, 0);
        T("ffn_gate", w1 + i * H * D, H, D);
        T("ffn_down", w2 + i * D * H, D, H);
        T("ffn_up", w3 + i * H * D, H, D);
#undef T
    }
    ok = ok && imp_add_tensor(m, "output_norm.weight", IMP_F32, rms_final, D, 0, 0) != NULL;
    if (!shared) ok = ok && imp_add_tensor(m, "output.weight", IMP_F32, wcls, V, D, 1) != NULL;
    if (!ok) {
        imp_model_free(m);
        return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate the tensor list", model_path);
    }
    if ((st = read_tokenizer(tokenizer_path, m, err))) {
        imp_model_free(m);
        return st;
    }
    return ETCH_OK;
}

