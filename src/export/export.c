/* export: the program writer. A reader's in-memory model (readers/) becomes one program file: weights
 * converted once into the layout the kernels read (GGUF block types repacked exactly), the
 * tokenizer and the method metadata; etch_export_{llama2c,hf,gguf} read, then write. */
#include "export.h"

#include "../format/format.h"
#include "../kernels/kernels.h"
#include "../runtime/runtime.h"
#include "../tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_SEQ_LEN 128
/* A GGUF's activations by default: int8 per 32 values, as llama.cpp rounds them for its 32-value
 * block types (per 256 for the K-quants: 32 is finer, and every GGUF group, 32 or Q6_K's 16, divides it). */
#define EXPORT_ACT_GROUP 32

static uint32_t fmt_of(int kern_type) {
    return kern_type == KERN_F32 ? FMT_DT_F32 : kern_type == KERN_F16 ? FMT_DT_F16 : FMT_DT_BF16;
}

static void put_elem(void *out, size_t i, int target, float f) {
    if (target == KERN_F32) ((float *)out)[i] = f;
    else if (target == KERN_F16) ((uint16_t *)out)[i] = kern_f32_to_f16(f);
    else ((uint16_t *)out)[i] = kern_f32_to_bf16(f);
}

/* The tensor in the program's form, owned by *owned: vectors converted to the target dtype (or
 * borrowed when they already are), matrices converted and packed into 16-row panels, rows padded
 * with zeros to a whole panel (kern_packed_index). *rows_out is the stored row count. */
static const void *convert(const imp_tensor *t, int target, void **owned, uint64_t *rows_out) {
    *owned = NULL;
    *rows_out = t->dims[0];
    if (!t->matrix) {
        int same = (target == KERN_F32 && t->src_type == IMP_F32) || (target == KERN_F16 && t->src_type == IMP_F16) ||
                   (target == KERN_BF16 && t->src_type == IMP_BF16);
        if (same) return t->data;
        void *out = base_malloc((size_t)t->dims[0] * kern_wsize(target));
        if (!out) return NULL;
        for (size_t i = 0; i < t->dims[0]; i++) put_elem(out, i, target, imp_tensor_at(t, i));
        return *owned = out;
    }
    int d = (int)t->dims[0], k = (int)t->dims[1], rows = kern_packed_rows(d);
    void *out = base_calloc((size_t)rows * (size_t)k, kern_wsize(target));
    if (!out) return NULL;
    for (int o = 0; o < d; o++)
        for (int kk = 0; kk < k; kk++) put_elem(out, kern_packed_index(o, kk, k), target, imp_tensor_at(t, (size_t)o * k + kk));
    *rows_out = (uint64_t)rows;
    return *owned = out;
}

/* A GGUF matrix whose weights are integers times a scale per group, plus a min for some (imp_int_group:
 * Q8_0, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, IQ4_NL, IQ4_XS) repacked into etch's panels without
 * rounding a value, a scale or a min: the linear 4-bit types into Q4, the others into Q8 (Q5's and Q6_K's
 * integers fit int8, and so do the entries of IQ4's table), groups as the source has them. A type with
 * mins keeps its unsigned integers (Q4: the nibble is q, kern_mat.mins). Scales and mins are kept as
 * the source stores them: f16 bits per group, or for the K-quants and IQ4_XS two levels
 * (KERN_SCALE_S8: each group's integer as int8, then the f16 per imp_sub_groups groups). *q, *scales
 * and *mins (NULL without mins) are malloc'ed; a two-level table holds both levels, the f16s after the
 * int8s (*d_at bytes in). */
static int gguf_4bit(int src_type) { return src_type == IMP_Q4_0 || src_type == IMP_Q4_1 || src_type == IMP_Q4_K; }

static etch_status repack_gguf(const imp_tensor *t, void **q, void **scales, void **mins, size_t *d_at,
                               uint64_t *rows_out) {
    int d = (int)t->dims[0], k = (int)t->dims[1], rows = kern_packed_rows(d), group = imp_int_group(t->src_type);
    int n_groups = k / group, src = t->src_type, has_min = imp_int_has_min(src), sub = imp_sub_groups(src);
    int q4 = gguf_4bit(src);
    size_t n = (size_t)rows * n_groups, bytes = sub ? n + n / (size_t)sub * 2 : n * 2;
    *d_at = sub ? n : 0;
    *q = base_calloc(q4 ? (size_t)rows * k / 2 : (size_t)rows * k, 1);
    *scales = base_calloc(bytes, 1);
    *mins = has_min ? base_calloc(bytes, 1) : NULL;
    if (!*q || !*scales || (has_min && !*mins)) return ETCH_ERR_NOMEM;
    if (q4) memset(*q, 0x88, (size_t)rows * k / 2); /* value 0 is stored as 8 in both nibbles */
    for (int o = 0; o < d; o++)
        for (int g = 0; g < n_groups; g++) {
            size_t at = kern_packed_index(o, g, n_groups);
            for (int j = 0; j < group; j++) {
                int kk = g * group + j;
                imp_qweight w;
                imp_qweight_at(t, (size_t)o * k + kk, &w);
                if (j == 0 && sub) {
                    ((int8_t *)*scales)[at] = (int8_t)w.sub;
                    ((uint16_t *)(void *)((uint8_t *)*scales + n))[kern_scale_d_index(at, sub)] = (uint16_t)w.d_f16;
                    if (has_min) {
                        ((int8_t *)*mins)[at] = (int8_t)w.sub_min;
                        ((uint16_t *)(void *)((uint8_t *)*mins + n))[kern_scale_d_index(at, sub)] = (uint16_t)w.dmin_f16;
                    }
                } else if (j == 0) {
                    ((uint16_t *)*scales)[at] = (uint16_t)w.scale_f16;
                    if (has_min) ((uint16_t *)*mins)[at] = (uint16_t)w.min_f16;
                }
                if (q4) kern_q4_put(*q, o, kk, k, has_min ? w.q - 8 : w.q);
                else ((int8_t *)*q)[kern_packed_index(o, kk, k)] = (int8_t)w.q;
            }
        }
    *rows_out = (uint64_t)rows;
    return ETCH_OK;
}

etch_status imp_export(const imp_model *m, const char *out_path, const etch_export_options *opt, etch_error *err) {
    etch_export_options o = {0, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    if (opt) o = *opt;
    /* A negative context means "the model's, at most -N" (the command line's default for large models). */
    if (o.max_context_len < -(1 << 20) || o.max_context_len > (1 << 20))
        return base_fail(err, ETCH_ERR_ARG, "max_context_len %d is outside 1..%d", o.max_context_len, 1 << 20);
    if (o.max_seq_len < 0) return base_fail(err, ETCH_ERR_ARG, "max_seq_len %d is negative", o.max_seq_len);
    int32_t ctx = o.max_context_len > 0 ? o.max_context_len : m->context_len;
    if (o.max_context_len < 0 && ctx > -o.max_context_len) ctx = -o.max_context_len;
    if (ctx > (1 << 20)) ctx = 1 << 20;
    int32_t seq = o.max_seq_len ? o.max_seq_len : DEFAULT_MAX_SEQ_LEN;
    if (seq > ctx) seq = ctx;
    int wtype;
    const char *dtype = o.dtype;
    if (!dtype) dtype = m->source_dtype == IMP_F32 ? "f32" : m->source_dtype == IMP_BF16 ? "bf16" : "f16";
    if (strcmp(dtype, "f32") == 0) wtype = KERN_F32;
    else if (strcmp(dtype, "f16") == 0) wtype = KERN_F16;
    else if (strcmp(dtype, "bf16") == 0) wtype = KERN_BF16;
    else return base_fail(err, ETCH_ERR_ARG, "dtype '%s' is not one of f32, f16, bf16", dtype);
    if (o.activations && strcmp(o.activations, "int8") && strcmp(o.activations, "f32"))
        return base_fail(err, ETCH_ERR_ARG, "activations '%s' is not one of int8, f32", o.activations);
    if (o.activations && !strcmp(o.activations, "int8") && o.dtype)
        return base_fail(err, ETCH_ERR_ARG, "int8 activations go with a GGUF's block types kept as they are: drop the "
                         "dtype '%s' (it dequantizes them) or ask for f32 activations", o.dtype);
    if (o.kv_type && kern_kv_type_of(o.kv_type) < 0)
        return base_fail(err, ETCH_ERR_ARG, "kv_type '%s' is not one of f32, f16, q8", o.kv_type);
    if (!strcmp(m->chat_template, "?") && !o.chat_template)
        return base_fail(err, ETCH_ERR_UNSUPPORTED,
                         "%s: the chat template is not one etch recognizes (%s): pass --chat-template NAME or "
                         "--chat-template none",
                         m->source, rt_chat_template_list);
    const char *chat = o.chat_template ? o.chat_template : m->chat_template;
    if (strcmp(chat, "none") == 0) chat = "";
    if (chat[0] && !rt_chat_template_known(chat))
        return base_fail(err, ETCH_ERR_ARG, "chat template '%s' is not one of none, %s", chat, rt_chat_template_list);

    /* The tokenizer must be one the runtime accepts: check it before writing anything. */
    tok_tokenizer tok;
    tok_spec spec;
    imp_tok_spec(m, &spec);
    etch_status st = tok_init(&tok, &spec, m->source, err);
    if (st) return st;
    tok_free(&tok);
    if (m->tok_blob_size > UINT32_MAX) return base_fail(err, ETCH_ERR_UNSUPPORTED, "vocabulary text over 4 GiB");

    fmt_writer *w = fmt_writer_new();
    void **conv = base_calloc(3 * (size_t)m->n_tensors + 1, sizeof *conv); /* tensors, their scales, mins */
    if (!w || !conv) {
        fmt_writer_free(w);
        base_free(conv);
        return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the program writer");
    }
    /* Method metadata, named as ExecuTorch's runner names its constant methods. */
    fmt_put_i32(w, "max_seq_len", seq);
    if (o.kv_type) fmt_put_str(w, "kv_type", o.kv_type);
    fmt_put_i32(w, "max_context_len", ctx);
    fmt_put_i32(w, "use_kv_cache", 1);
    fmt_put_i32(w, "enable_dynamic_shape", seq > 1);
    fmt_put_i32(w, "bos_id", m->bos_id);
    /* Every end of turn stops a turn: the template's end-of-turn token joins the EOS ids the source
     * declared (a model whose generation_config names only <|endoftext|> still ends at <|im_end|>). */
    int32_t eos[17], n_eos = m->n_eos;
    memcpy(eos, m->eos_ids, (size_t)n_eos * sizeof *eos);
    const char *end = chat[0] ? rt_chat_end_token(chat) : NULL;
    for (int32_t i = 0; end && i < m->vocab_size && n_eos < 17; i++) {
        size_t len = (size_t)(m->tok_offsets[i + 1] - m->tok_offsets[i]);
        if (len != strlen(end) || memcmp(m->tok_blob + m->tok_offsets[i], end, len)) continue;
        int dup = 0;
        for (int32_t k = 0; k < n_eos; k++) dup |= eos[k] == i;
        if (!dup) eos[n_eos++] = i;
        break;
    }
    fmt_put_i32s(w, "eos_ids", eos, (uint32_t)n_eos);
    fmt_put_i32(w, "vocab_size", m->vocab_size);
    fmt_put_i32(w, "n_layers", m->n_layers);
    fmt_put_i32(w, "n_heads", m->n_heads);
    fmt_put_i32(w, "n_kv_heads", m->n_kv_heads);
    fmt_put_i32(w, "head_dim", m->head_dim);
    fmt_put_i32(w, "dim", m->dim);
    fmt_put_i32(w, "hidden_dim", m->hidden_dim);
    fmt_put_f32(w, "norm_eps", m->norm_eps);
    fmt_put_f32(w, "rope_base", m->rope_base);
    fmt_put_str(w, "rope_style", m->rope_style);
    if (m->rope_llama3) {
        fmt_put_str(w, "rope_scaling", "llama3");
        fmt_put_f32(w, "rope_scaling.factor", m->rs_factor);
        fmt_put_f32(w, "rope_scaling.low_freq_factor", m->rs_low);
        fmt_put_f32(w, "rope_scaling.high_freq_factor", m->rs_high);
        fmt_put_f32(w, "rope_scaling.original_context_len", m->rs_orig);
    }
    if (m->rope_freq_factors) fmt_put_f32s(w, "rope_freq_factors", m->rope_freq_factors, (uint32_t)(m->head_dim / 2));
    if (m->rope_linear > 0) {
        fmt_put_str(w, "rope_scaling", "linear");
        fmt_put_f32(w, "rope_scaling.factor", m->rope_linear);
    }
    /* The variations of the decoder (Gemma-3 and sliding windows), written only when they apply. */
    if (m->gelu) fmt_put_str(w, "act", "gelu_tanh");
    if (m->post_norms) fmt_put_i32(w, "post_norms", 1);
    if (m->embd_scale > 0) fmt_put_f32(w, "embd_scale", m->embd_scale);
    if (m->query_pre_attn_scalar > 0) fmt_put_f32(w, "query_pre_attn_scalar", m->query_pre_attn_scalar);
    if (m->final_softcap > 0) fmt_put_f32(w, "final_logit_softcap", m->final_softcap);
    if (m->rope_base_local > 0) fmt_put_f32(w, "rope_base_local", m->rope_base_local);
    int32_t any_window = 0;
    for (int32_t l = 0; m->layer_window && l < m->n_layers; l++) any_window |= m->layer_window[l] > 0;
    if (any_window) fmt_put_i32s(w, "layer_window", m->layer_window, (uint32_t)m->n_layers);
    fmt_put_i32(w, "tied_embeddings", m->tied_embeddings);
    fmt_put_i32(w, "qkv_bias", m->qkv_bias);
    fmt_put_i32(w, "qk_norm", m->qk_norm);
    fmt_put_str(w, "arch", "llama");
    fmt_put_str(w, "model_type", m->model_type);
    fmt_put_str(w, "dtype", dtype);
    fmt_put_str(w, "weight_layout", "packed16");
    fmt_put_str(w, "chat_template", chat);
    fmt_put_i32(w, "source_context_len", m->context_len);
    fmt_put_str(w, "source", m->source);
    fmt_put_str(w, "etch_version", ETCH_VERSION_STRING);
    /* The tokenizer. */
    fmt_put_str(w, "tokenizer.model", m->tok_model == TOK_MODEL_MERGES ? "bpe" : "sp-bpe");
    fmt_put_bytes(w, "tokenizer.pieces", m->tok_blob, (uint32_t)m->tok_blob_size);
    fmt_put_i32s(w, "tokenizer.offsets", m->tok_offsets, (uint32_t)m->vocab_size + 1);
    if (m->tok_model == TOK_MODEL_SCORES) fmt_put_f32s(w, "tokenizer.scores", m->tok_scores, (uint32_t)m->vocab_size);
    else fmt_put_i32s(w, "tokenizer.merges", m->tok_merges, (uint32_t)m->tok_n_merges * 3);
    fmt_put_bytes(w, "tokenizer.types", m->tok_types, (uint32_t)m->vocab_size);
    fmt_put_i32(w, "tokenizer.unk_id", m->unk_id);
    fmt_put_i32(w, "tokenizer.add_dummy_prefix", m->add_dummy_prefix);
    fmt_put_i32(w, "tokenizer.byte_level", m->tok_byte_level);
    fmt_put_i32(w, "tokenizer.byte_fallback", m->tok_byte_fallback);
    fmt_put_i32(w, "tokenizer.ignore_merges", m->tok_ignore_merges);
    fmt_put_i32(w, "tokenizer.match_added", m->tok_match_added);
    fmt_put_i32(w, "tokenizer.nfc", m->tok_nfc);
    if (m->tok_pretok) fmt_put_str(w, "tokenizer.pretok", m->tok_pretok);
    /* GGUF's block-type matrices stay as they are (repacked, exact) unless a dtype was asked for; by
     * default in the integer-dot layout, their inputs rounded to int8 per EXPORT_ACT_GROUP values at
     * run time as llama.cpp rounds them (docs/DESIGN.md, "A GGUF's defaults"); with f32 activations,
     * weight-only. The lookup table converts too when the output layer reads it (tied). */
    int keep_quant = !o.dtype, kept = 0;
    for (int32_t i = 0; i < m->n_tensors; i++) kept |= keep_quant && m->tensors[i].matrix && imp_int_group(m->tensors[i].src_type);
    int int8 = kept && !(o.activations && !strcmp(o.activations, "f32"));
    if (kept) fmt_put_str(w, "quant.scheme", "gguf");
    if (int8) fmt_put_i32(w, "quant.act_group", EXPORT_ACT_GROUP);
    /* Weights, converted once: matrices to the program's dtype, norms and biases to f32. */
    for (int32_t i = 0; i < m->n_tensors; i++) {
        const imp_tensor *t = &m->tensors[i];
        int target = t->matrix ? wtype : KERN_F32;
        uint64_t dims[2] = {t->dims[0], t->dims[1]};
        if (keep_quant && t->matrix && imp_int_group(t->src_type)) {
            uint64_t sdims[2] = {0, t->dims[1] / (uint64_t)imp_int_group(t->src_type)};
            int sub = imp_sub_groups(t->src_type); /* two-level scales (K-quants, IQ4_XS), else f16 */
            void **scales = &conv[m->n_tensors + i], **mins = &conv[2 * m->n_tensors + i];
            size_t d_at;
            if (repack_gguf(t, &conv[i], scales, mins, &d_at, &dims[0])) {
                st = base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the repacked tensor '%s'", t->name);
                break;
            }
            sdims[0] = dims[0];
            int q4 = gguf_4bit(t->src_type), fdt = q4 ? FMT_DT_Q4 : FMT_DT_Q8;
            if (int8 && (strcmp(t->name, "token_embd.weight") || m->tied_embeddings)) {
                size_t bytes = q4 ? (size_t)dims[0] * dims[1] / 2 : (size_t)dims[0] * dims[1];
                void *idot = base_malloc(bytes);
                if (!idot) {
                    st = base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the integer-dot tensor '%s'", t->name);
                    break;
                }
                kern_to_int_dot(idot, conv[i], q4 ? KERN_Q4 : KERN_Q8, (int)dims[0], (int)dims[1]);
                base_free(conv[i]);
                conv[i] = idot;
                fdt = q4 ? FMT_DT_I4 : FMT_DT_I8;
            }
            fmt_add_tensor(w, t->name, fdt, 2, dims, conv[i]);
            rt_add_scales(w, t->name, sub ? KERN_SCALE_S8 : KERN_F16, sub, sdims, *scales, *mins, d_at);
            if (o.progress) o.progress(o.progress_user, "exporting", (int64_t)i + 1, m->n_tensors);
            continue;
        }
        const void *data = convert(t, target, &conv[i], &dims[0]);
        if (!data) {
            st = base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the converted tensor '%s'", t->name);
            break;
        }
        fmt_add_tensor(w, t->name, fmt_of(target), t->ndim, dims, data);
        if (o.progress) o.progress(o.progress_user, "exporting", (int64_t)i + 1, m->n_tensors);
    }
    /* the file replaces out_path only after it opens with the runtime's own checks */
    if (!st) st = fmt_writer_write(w, out_path, rt_check_written, (void *)out_path, err);
    fmt_writer_free(w);
    for (int32_t i = 0; i < 3 * m->n_tensors; i++) base_free(conv[i]);
    base_free(conv);
    return st;
}

/* ------------------------------------------------------------------ from each source */

etch_status etch_export_llama2c(const char *model_path, const char *tokenizer_path, const char *out_path,
                                const etch_export_options *opt, etch_error *err) {
    base_clear(err);
    if (!model_path || !tokenizer_path || !out_path)
        return base_fail(err, ETCH_ERR_ARG, "etch_export_llama2c: a path is NULL");
    imp_model m;
    etch_status st = imp_llama2c(model_path, tokenizer_path, &m, err);
    if (st) return st;
    st = imp_export(&m, out_path, opt, err);
    imp_model_free(&m);
    return st;
}

etch_status etch_export_hf(const char *dir, const char *out_path, const etch_export_options *opt, etch_error *err) {
    base_clear(err);
    if (!dir || !out_path) return base_fail(err, ETCH_ERR_ARG, "etch_export_hf: a path is NULL");
    imp_model m;
    etch_status st = imp_hf(dir, &m, err);
    if (st) return st;
    /* The tensors present decide tied embeddings when config.json is silent or wrong. */
    int has_output = 0;
    for (int i = 0; i < m.n_tensors; i++) has_output |= !strcmp(m.tensors[i].name, "output.weight");
    if (!has_output) m.tied_embeddings = 1;
    if (m.tied_embeddings && has_output) m.tied_embeddings = 0;
    st = imp_export(&m, out_path, opt, err);
    imp_model_free(&m);
    return st;
}

etch_status etch_export_gguf(const char *path, const char *out_path, const etch_export_options *opt, etch_error *err) {
    base_clear(err);
    if (!path || !out_path) return base_fail(err, ETCH_ERR_ARG, "etch_export_gguf: a path is NULL");
    imp_model m;
    etch_status st = imp_gguf(path, &m, 0, err);
    if (st) return st;
    st = imp_export(&m, out_path, opt, err);
    imp_model_free(&m);
    return st;
}
