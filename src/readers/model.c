/* readers/model: the in-memory model every reader fills and the exporter writes: its tensors and
 * the buffers and mappings they borrow, the split regexes by name, and vocabulary pieces as bytes. */
#include "reader.h"

#include "../kernels/kernels.h"
#include "../tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void imp_model_free(imp_model *m) {
    if (!m) return;
    base_free(m->tok_blob), base_free(m->tok_offsets), base_free(m->tok_scores), base_free(m->tok_types), base_free(m->tok_merges);
    base_free(m->tok_pretok), base_free(m->tensors), base_free(m->chat_jinja), base_free(m->layer_window);
    for (int i = 0; i < m->n_maps; i++) base_map_close(&m->maps[i]);
    for (int i = 0; i < m->n_owned; i++) base_free(m->owned[i]);
    base_free(m->owned);
    memset(m, 0, sizeof *m);
}

imp_tensor *imp_add_tensor(imp_model *m, const char *name, int src_type, const void *data, uint64_t rows,
                           uint64_t cols, int matrix) {
    if (m->n_tensors == m->cap_tensors) {
        int cap = m->cap_tensors ? m->cap_tensors * 2 : 64;
        imp_tensor *nt = base_realloc(m->tensors, (size_t)cap * sizeof *nt);
        if (!nt) return NULL;
        m->tensors = nt;
        m->cap_tensors = cap;
    }
    imp_tensor *t = &m->tensors[m->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->src_type = src_type;
    t->data = data;
    t->ndim = cols ? 2 : 1;
    t->dims[0] = rows;
    t->dims[1] = cols;
    t->matrix = matrix;
    return t;
}

void *imp_own(imp_model *m, void *p) {
    if (!p) return NULL;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 16;
        void **no = base_realloc(m->owned, (size_t)cap * sizeof *no);
        if (!no) {
            base_free(p);
            return NULL;
        }
        m->owned = no;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return p;
}

static float half_at(const uint8_t *b) {
    uint16_t h;
    memcpy(&h, b, 2);
    return kern_f16_to_f32(h);
}

/* Element i of GGML's other 32-element blocks, as its dequantize_row_* computes it. Q4_1: f16 d, f16
 * m, 16 bytes of nibbles (low: elements 0..15, high: 16..31), d * q + m. Q5_0: f16 d, 32 high bits,
 * 16 bytes of nibbles, d * (q - 16). Q5_1: f16 d, f16 m, the high bits, the nibbles, d * q + m. */
static float small_block_at(int type, const uint8_t *p, size_t i) {
    int j = (int)(i % 32), lo = j < 16;
    if (type == IMP_Q4_1) {
        const uint8_t *b = p + (i / 32) * 20;
        int q = lo ? b[4 + j] & 0x0F : b[4 + j - 16] >> 4;
        return (float)q * half_at(b) + half_at(b + 2);
    }
    const uint8_t *b = p + (i / 32) * (type == IMP_Q5_0 ? 22 : 24);
    const uint8_t *qh = b + (type == IMP_Q5_0 ? 2 : 4), *qs = qh + 4;
    uint32_t h;
    memcpy(&h, qh, 4);
    int q = (lo ? qs[j] & 0x0F : qs[j - 16] >> 4) | (int)((h >> j) & 1) << 4;
    if (type == IMP_Q5_0) return (float)(q - 16) * half_at(b);
    return (float)q * half_at(b) + half_at(b + 2);
}

/* The 6-bit scale and min of sub-block j of a K-quant super-block (GGML's get_scale_min_k4). */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Element i of GGML's 256-element K-quant super-blocks, in the order dequantize_row_q{4,5,6}_K
 * computes them: Q4_K and Q5_K as (d * scale) * q - (dmin * min) per 32-element sub-block, Q6_K as
 * d * scale * (q - 32) per 16. */
static float k_block_at(int type, const uint8_t *p, size_t i) {
    int j = (int)(i % 256);
    if (type == IMP_Q6_K) { /* ql[128], qh[64], int8 scales[16], f16 d */
        const uint8_t *b = p + (i / 256) * 210, *ql = b + 64 * (j / 128), *qh = b + 128 + 32 * (j / 128);
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * (j / 128);
        int r = j % 128, quarter = r / 32, l = r % 32, is = l / 16;
        int q = quarter == 0 ? (ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4
              : quarter == 1 ? (ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4
              : quarter == 2 ? (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4
                             : (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4;
        return half_at(b + 208) * (float)sc[is + 2 * quarter] * (float)(q - 32);
    }
    /* Q4_K: f16 d, f16 dmin, scales[12], qs[128]; Q5_K: the same, then qh[32] before qs */
    const uint8_t *b = p + (i / 256) * (type == IMP_Q4_K ? 144 : 176), *scales = b + 4;
    const uint8_t *qh = b + 16, *qs = b + (type == IMP_Q4_K ? 16 : 48);
    int c = j / 64, l = j % 64, high = l >= 32, is = 2 * c + high, sc, mn;
    l %= 32;
    scale_min_k4(is, scales, &sc, &mn);
    int q = high ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
    if (type == IMP_Q5_K && (qh[l] & (1 << (2 * c + high)))) q += 16;
    float d1 = half_at(b) * (float)sc, m1 = half_at(b + 2) * (float)mn;
    return d1 * (float)q - m1;
}

int imp_int_group(int src_type) {
    switch (src_type) {
    case IMP_Q8_0: case IMP_Q4_0: case IMP_Q5_0: return 32;
    case IMP_Q6_K: return 16;
    }
    return 0;
}

float imp_group_scale(const imp_tensor *t, size_t i, int32_t *f16_bits) {
    const uint8_t *p = t->data;
    if (t->src_type == IMP_Q6_K) { /* d * scales[j / 16], d the super-block's f16 at byte 208 */
        const uint8_t *b = p + (i / 256) * 210;
        *f16_bits = -1;
        return half_at(b + 208) * (float)((const int8_t *)(b + 192))[i % 256 / 16];
    }
    const uint8_t *b = p + (i / 32) * (t->src_type == IMP_Q8_0 ? 34 : t->src_type == IMP_Q5_0 ? 22 : 18);
    uint16_t h;
    memcpy(&h, b, 2);
    *f16_bits = h;
    return kern_f16_to_f32(h);
}

/* Element i of a source tensor as f32. Q8_0 and Q4_0 are GGML's 32-element blocks: an f16 scale
 * then 32 int8 values (Q8_0), or 16 bytes of 4-bit values offset by 8 (Q4_0; low nibbles are
 * elements 0..15, high nibbles 16..31). */
float imp_tensor_at(const imp_tensor *t, size_t i) {
    const uint8_t *p = t->data;
    switch (t->src_type) {
    case IMP_F32: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    case IMP_F16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return kern_f16_to_f32(h); }
    case IMP_BF16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return kern_bf16_to_f32(h); }
    case IMP_Q8_0: {
        const uint8_t *b = p + (i / 32) * 34;
        uint16_t h; memcpy(&h, b, 2);
        return kern_f16_to_f32(h) * (float)(int8_t)b[2 + i % 32];
    }
    case IMP_Q4_0: {
        const uint8_t *b = p + (i / 32) * 18;
        uint16_t h; memcpy(&h, b, 2);
        int j = (int)(i % 32), q = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
        return kern_f16_to_f32(h) * (float)(q - 8);
    }
    case IMP_Q4_1: case IMP_Q5_0: case IMP_Q5_1: return small_block_at(t->src_type, p, i);
    case IMP_Q4_K: case IMP_Q5_K: case IMP_Q6_K: return k_block_at(t->src_type, p, i);
    }
    return 0.0f;
}

void imp_tensor_f32(const imp_tensor *t, float *out) {
    size_t n = (size_t)t->dims[0] * (t->ndim > 1 ? (size_t)t->dims[1] : 1);
    for (size_t i = 0; i < n; i++) out[i] = imp_tensor_at(t, i);
}

int imp_set_windows(imp_model *m, int32_t window, const uint8_t *is_windowed) {
    base_free(m->layer_window);
    m->layer_window = base_calloc((size_t)m->n_layers, sizeof *m->layer_window);
    if (!m->layer_window) return 0;
    for (int32_t l = 0; l < m->n_layers; l++) m->layer_window[l] = !is_windowed || is_windowed[l] ? window : 0;
    return 1;
}

const char imp_regex_gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char imp_regex_digits[] = "\\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char imp_regex_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char imp_regex_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

int imp_raw_piece(const char *s, size_t n, int byte_level, char *out, size_t *len) {
    const uint8_t *u = (const uint8_t *)s;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        int l = base_utf8_seq_len(u + i, n - i);
        if (l == 0) return 0;
        if (byte_level) {
            uint32_t cp = l == 1 ? u[i] : l == 2 ? (u[i] & 0x1Fu) << 6 | (u[i + 1] & 0x3Fu)
                                        : l == 3 ? (u[i] & 0x0Fu) << 12 | (u[i + 1] & 0x3Fu) << 6 | (u[i + 2] & 0x3Fu) : 0x110000;
            int b = tok_cp_to_byte(cp);
            if (b < 0) return 0;
            out[w++] = (char)b;
        } else if (l == 3 && u[i] == 0xE2 && u[i + 1] == 0x96 && u[i + 2] == 0x81) {
            out[w++] = ' ';
        } else {
            memcpy(out + w, s + i, (size_t)l);
            w += (size_t)l;
        }
        i += (size_t)l;
    }
    *len = w;
    return 1;
}

void imp_tok_spec(const imp_model *m, tok_spec *s) {
    *s = (tok_spec){m->vocab_size, m->tok_blob, m->tok_blob_size, m->tok_offsets, m->tok_scores, m->tok_types,
                    m->bos_id, m->unk_id, m->add_dummy_prefix, m->tok_model, m->tok_merges, m->tok_n_merges,
                    m->tok_byte_level, m->tok_byte_fallback, m->tok_ignore_merges, m->tok_match_added, m->tok_nfc,
                    m->tok_pretok};
}

