/* readers/model: the in-memory model every reader fills and the exporter writes: its tensors and
 * the buffers and mappings they borrow, the split regexes by name, and vocabulary pieces as bytes. */
#include "reader.h"

#include "gguf.h"

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

static int32_t half_bits(const uint8_t *b) {
    uint16_t h;
    memcpy(&h, b, 2);
    return h;
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

/* Weight i of a GGML block type as its dequantize_row_* takes it apart. 32-element blocks: Q8_0 f16 d,
 * 32 int8; Q4_0 f16 d, 16 bytes of nibbles (low: elements 0..15, high: 16..31), q - 8; Q4_1 f16 d, f16
 * m, the nibbles; Q5_0 f16 d, 32 high bits, the nibbles, q - 16; Q5_1 f16 d, f16 m, the high bits,
 * the nibbles. 256-element super-blocks: Q4_K f16 d, f16 dmin, 12 bytes of 6-bit sub-block scales
 * and mins, 128 bytes of nibbles, (d * scale) * q - dmin * min per 32 (Q5_K the same with 32 bytes of
 * high bits before the nibbles); Q6_K 128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales,
 * f16 d, d * scale * (q - 32) per 16. The non-linear 4-bit types look each nibble up in GGML's table
 * kvalues_iq4nl: IQ4_NL f16 d and the nibbles as Q4_0's, d * table[q]; IQ4_XS per 256 an f16 d, the
 * high 2 bits of eight 6-bit sub-block scales (u16), their low 4 bits (4 bytes), 128 bytes of nibbles,
 * d * (scale - 32) * table[q] per 32. */
void imp_qweight_at(const imp_tensor *t, size_t i, imp_qweight *w) {
    const uint8_t *p = t->data;
    w->min = 0.0f, w->min_f16 = -1, w->d_f16 = w->dmin_f16 = -1, w->sub = w->sub_min = 0;
    int j = (int)(i % 32), lo = j < 16;
    switch (t->src_type) {
    case IMP_Q8_0: case IMP_Q4_0: case IMP_Q4_1: case IMP_IQ4_NL: {
        static const int bytes[] = {[IMP_Q8_0] = 34, [IMP_Q4_0] = 18, [IMP_Q4_1] = 20, [IMP_IQ4_NL] = 18};
        const uint8_t *b = p + (i / 32) * (size_t)bytes[t->src_type], *qs = b + (t->src_type == IMP_Q4_1 ? 4 : 2);
        w->q = t->src_type == IMP_Q8_0 ? (int8_t)qs[j] : lo ? qs[j] & 0x0F : qs[j - 16] >> 4;
        if (t->src_type == IMP_Q4_0) w->q -= 8;
        if (t->src_type == IMP_IQ4_NL) w->q = gguf_iq4nl_table[w->q];
        if (t->src_type == IMP_Q4_1) w->min_f16 = half_bits(b + 2);
        w->scale_f16 = half_bits(b);
        break;
    }
    case IMP_Q5_0: case IMP_Q5_1: {
        const uint8_t *b = p + (i / 32) * (t->src_type == IMP_Q5_0 ? 22 : 24);
        const uint8_t *qh = b + (t->src_type == IMP_Q5_0 ? 2 : 4), *qs = qh + 4;
        uint32_t h;
        memcpy(&h, qh, 4);
        w->q = (lo ? qs[j] & 0x0F : qs[j - 16] >> 4) | (int)((h >> j) & 1) << 4;
        if (t->src_type == IMP_Q5_0) w->q -= 16;
        else w->min_f16 = half_bits(b + 2);
        w->scale_f16 = half_bits(b);
        break;
    }
    case IMP_Q6_K: { /* ql[128], qh[64], int8 scales[16], f16 d */
        int e = (int)(i % 256);
        const uint8_t *b = p + (i / 256) * 210, *ql = b + 64 * (e / 128), *qh = b + 128 + 32 * (e / 128);
        const int8_t *sc = (const int8_t *)(b + 192) + 8 * (e / 128);
        int r = e % 128, quarter = r / 32, l = r % 32, is = l / 16;
        int q = quarter == 0 ? (ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4
              : quarter == 1 ? (ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4
              : quarter == 2 ? (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4
                             : (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4;
        w->q = q - 32, w->scale_f16 = -1;
        w->d_f16 = half_bits(b + 208), w->sub = sc[is + 2 * quarter];
        break;
    }
    case IMP_IQ4_XS: { /* f16 d, u16 scales_h, scales_l[4], qs[128] */
        int e = (int)(i % 256), sb = e / 32;
        const uint8_t *b = p + (i / 256) * 136, *qs = b + 8 + 16 * sb;
        int ls = ((b[4 + sb / 2] >> 4 * (sb % 2)) & 0xF) | ((half_bits(b + 2) >> 2 * sb) & 3) << 4;
        w->q = gguf_iq4nl_table[lo ? qs[j] & 0x0F : qs[j - 16] >> 4], w->scale_f16 = -1;
        w->d_f16 = half_bits(b), w->sub = ls - 32;
        break;
    }
    default: { /* Q4_K, Q5_K */
        int e = (int)(i % 256), k4 = t->src_type == IMP_Q4_K;
        const uint8_t *b = p + (i / 256) * (k4 ? 144 : 176), *qh = b + 16, *qs = b + (k4 ? 16 : 48);
        int c = e / 64, l = e % 64, high = l >= 32, sc, mn;
        l %= 32;
        scale_min_k4(2 * c + high, b + 4, &sc, &mn);
        w->q = high ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
        if (!k4 && (qh[l] & (1 << (2 * c + high)))) w->q += 16;
        w->scale_f16 = -1;
        w->d_f16 = half_bits(b), w->sub = sc, w->dmin_f16 = half_bits(b + 2), w->sub_min = -mn;
        w->min = -(kern_f16_to_f32((uint16_t)w->dmin_f16) * (float)mn); /* GGML's sign of a zero min */
        break;
    }
    }
    if (w->d_f16 >= 0) { /* an exact product (an f16 times an integer of at most 8 bits), as the kernels form it */
        w->scale = kern_f16_to_f32((uint16_t)w->d_f16) * (float)w->sub;
        return;
    }
    w->scale = kern_f16_to_f32((uint16_t)w->scale_f16);
    if (w->min_f16 >= 0) w->min = kern_f16_to_f32((uint16_t)w->min_f16);
}

int imp_int_group(int src_type) {
    switch (src_type) {
    case IMP_Q8_0: case IMP_Q4_0: case IMP_Q4_1: case IMP_Q5_0: case IMP_Q5_1: case IMP_Q4_K: case IMP_Q5_K:
    case IMP_IQ4_NL: case IMP_IQ4_XS: return 32;
    case IMP_Q6_K: return 16;
    }
    return 0;
}
int imp_sub_groups(int src_type) {
    return src_type == IMP_Q6_K ? 16 : src_type == IMP_Q4_K || src_type == IMP_Q5_K || src_type == IMP_IQ4_XS ? 8 : 0;
}
int imp_int_has_min(int src_type) {
    return src_type == IMP_Q4_1 || src_type == IMP_Q5_1 || src_type == IMP_Q4_K || src_type == IMP_Q5_K;
}

/* Element i of a source tensor as f32: a block type's q * scale (exact: the products fit in 24 bits),
 * plus its min (one rounding, as GGML's dequantization: d * q + m, or (d * scale) * q - dmin * min). */
float imp_tensor_at(const imp_tensor *t, size_t i) {
    const uint8_t *p = t->data;
    switch (t->src_type) {
    case IMP_F32: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    case IMP_F16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return kern_f16_to_f32(h); }
    case IMP_BF16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return kern_bf16_to_f32(h); }
    }
    imp_qweight w;
    imp_qweight_at(t, i, &w);
    float v = (float)w.q * w.scale;
    return imp_int_has_min(t->src_type) ? v + w.min : v;
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

