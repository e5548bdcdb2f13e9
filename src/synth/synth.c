/* import: synthetic models with seeded random weights, written as a Hugging Face folder or GGUF. */
#define _POSIX_C_SOURCE 200809L
#include "gguf_writer.h"

#include "../kernels/kernels.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ shapes */

typedef struct synth_cfg {
    char arch[16];
    int32_t dim, hidden, layers, heads, kv_heads, head_dim, vocab, ctx;
    float eps, rope_base, std;
    int tied, qkv_bias, qk_norm, llama3;
    int gemma, window; /* Gemma-3: sandwich norms, (1 + w) norms in the HF folder, local layers' window */
} synth_cfg;

typedef struct synth_tensor {
    char hf[96], gguf[96];
    uint64_t rows, cols; /* cols 0: a vector */
    int kind;            /* 0 matrix, 1 norm, 2 bias, 3 Gemma norm (stored w in HF, 1 + w in GGUF) */
    int permute_heads;   /* GGUF llama: Q/K rows reordered for adjacent-pair RoPE; the head count */
} synth_tensor;

static int list_tensors(const synth_cfg *c, synth_tensor *t) {
    int n = 0;
    uint64_t D = (uint64_t)c->dim, Q = (uint64_t)c->heads * c->head_dim, K = (uint64_t)c->kv_heads * c->head_dim;
    uint64_t F = (uint64_t)c->hidden, V = (uint64_t)c->vocab, hd = (uint64_t)c->head_dim;
    int llama = !strcmp(c->arch, "llama");
#define ADD(H, G, R, C, KIND, PERM)                                                     \
    do {                                                                                \
        snprintf(t[n].hf, sizeof t[n].hf, "%s", H);                                     \
        snprintf(t[n].gguf, sizeof t[n].gguf, "%s", G);                                 \
        t[n].rows = R, t[n].cols = C, t[n].kind = KIND, t[n].permute_heads = PERM;      \
        n++;                                                                            \
    } while (0)
    ADD("model.embed_tokens.weight", "token_embd.weight", V, D, 0, 0);
    for (int l = 0; l < c->layers; l++) {
        char h[96], g[96];
#define L(HS, GS, R, C, KIND, PERM)                                   \
        snprintf(h, sizeof h, "model.layers.%d.%s", l, HS);          \
        snprintf(g, sizeof g, "blk.%d.%s", l, GS);                   \
        ADD(h, g, R, C, KIND, PERM)
        int nk = c->gemma ? 3 : 1;
        L("input_layernorm.weight", "attn_norm.weight", D, 0, nk, 0);
        L("self_attn.q_proj.weight", "attn_q.weight", Q, D, 0, llama ? c->heads : 0);
        L("self_attn.k_proj.weight", "attn_k.weight", K, D, 0, llama ? c->kv_heads : 0);
        L("self_attn.v_proj.weight", "attn_v.weight", K, D, 0, 0);
        if (c->qkv_bias) {
            L("self_attn.q_proj.bias", "attn_q.bias", Q, 0, 2, 0);
            L("self_attn.k_proj.bias", "attn_k.bias", K, 0, 2, 0);
            L("self_attn.v_proj.bias", "attn_v.bias", K, 0, 2, 0);
        }
        if (c->qk_norm) {
            L("self_attn.q_norm.weight", "attn_q_norm.weight", hd, 0, nk, 0);
            L("self_attn.k_norm.weight", "attn_k_norm.weight", hd, 0, nk, 0);
        }
        L("self_attn.o_proj.weight", "attn_output.weight", D, Q, 0, 0);
        if (c->gemma) {
            L("post_attention_layernorm.weight", "post_attention_norm.weight", D, 0, nk, 0);
            L("pre_feedforward_layernorm.weight", "ffn_norm.weight", D, 0, nk, 0);
            L("post_feedforward_layernorm.weight", "post_ffw_norm.weight", D, 0, nk, 0);
        } else {
            L("post_attention_layernorm.weight", "ffn_norm.weight", D, 0, 1, 0);
        }
        L("mlp.gate_proj.weight", "ffn_gate.weight", F, D, 0, 0);
        L("mlp.up_proj.weight", "ffn_up.weight", F, D, 0, 0);
        L("mlp.down_proj.weight", "ffn_down.weight", D, F, 0, 0);
#undef L
    }
    ADD("model.norm.weight", "output_norm.weight", D, 0, c->gemma ? 3 : 1, 0);
    if (!c->tied) ADD("lm_head.weight", "output.weight", V, D, 0, 0);
#undef ADD
    return n;
}

/* splitmix64, then Box-Muller: a stream per tensor, seeded by the seed and the tensor's name, so
 * each tensor's values do not depend on the others. */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Values N(0, std); a norm's are 1 + N(0, std), except a Gemma norm in a Hugging Face folder (gguf 0),
 * which stores the N(0, std) part w of its (1 + w) scale: llama.cpp's converter adds the 1, as f32. */
static void fill_tensor(const synth_cfg *c, const synth_tensor *t, uint64_t seed, int gguf, float *x) {
    uint64_t s = seed ^ base_fnv1a(BASE_FNV_INIT, t->hf, strlen(t->hf));
    uint64_t n = t->rows * (t->cols ? t->cols : 1);
    /* Gemma multiplies embeddings by sqrt(dim): its table is drawn that much smaller, as a trained
     * one is, or each token's own row would dominate the residual stream (and the tied classifier). */
    double std = c->gemma && !strcmp(t->gguf, "token_embd.weight") ? c->std / sqrt((double)c->dim) : c->std;
    for (uint64_t i = 0; i < n; i += 2) {
        double u1 = ((double)(mix(&s) >> 11) + 1.0) / 9007199254740993.0, u2 = (double)(mix(&s) >> 11) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1));
        float a = (float)(r * cos(2 * M_PI * u2) * std), b = (float)(r * sin(2 * M_PI * u2) * std);
        int one = t->kind == 1 || (t->kind == 3 && gguf);
        x[i] = one ? 1.0f + a : a;
        if (i + 1 < n) x[i + 1] = one ? 1.0f + b : b;
    }
}

/* Hugging Face rotate_half pairs (i, i + d/2) become adjacent pairs (2i, 2i + 1), head by head,
 * as llama.cpp's converter permutes llama Q and K. */
static void permute_rows(float *x, uint64_t rows, uint64_t cols, int heads, float *tmp) {
    uint64_t hd = rows / (uint64_t)heads;
    for (int h = 0; h < heads; h++) {
        float *head = x + (uint64_t)h * hd * cols;
        memcpy(tmp, head, hd * cols * sizeof *tmp);
        for (uint64_t i = 0; i < hd / 2; i++) {
            memcpy(head + (2 * i) * cols, tmp + i * cols, cols * sizeof *tmp);
            memcpy(head + (2 * i + 1) * cols, tmp + (i + hd / 2) * cols, cols * sizeof *tmp);
        }
    }
}

/* ------------------------------------------------------------------ Hugging Face folder */

static etch_status copy_file(const char *from, const char *to, etch_error *err) {
    uint8_t *data;
    uint64_t size;
    etch_status st = base_read_file(from, &data, &size, err);
    if (st) return st;
    base_outfile out;
    if ((st = base_out_open(&out, to, err))) {
        base_free(data);
        return st;
    }
    int ok = fwrite(data, 1, (size_t)size, out.f) == size;
    base_free(data);
    if (!ok) {
        base_out_abort(&out);
        return base_fail(err, ETCH_ERR_IO, "%s: cannot write", to);
    }
    return base_out_commit(&out, err);
}

static etch_status write_json(cJSON *j, const char *path, etch_error *err) {
    char *s = cJSON_Print(j);
    if (!s) return base_fail(err, ETCH_ERR_NOMEM, "%s: out of memory", path);
    base_outfile out;
    etch_status st = base_out_open(&out, path, err);
    if (st) {
        base_free(s);
        return st;
    }
    int ok = fputs(s, out.f) >= 0 && fputc('\n', out.f) != EOF;
    base_free(s);
    if (!ok) {
        base_out_abort(&out);
        return base_fail(err, ETCH_ERR_IO, "%s: cannot write", path);
    }
    return base_out_commit(&out, err);
}

static etch_status write_hf(const synth_cfg *c, const imp_model *tok, const char *tok_path, int dtype, uint64_t seed,
                            const char *dir, etch_error *err) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return base_fail(err, ETCH_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
    char path[4200];
    static const char *archs[] = {"llama", "LlamaForCausalLM", "qwen2", "Qwen2ForCausalLM", "qwen3", "Qwen3ForCausalLM",
                                  "gemma3", "Gemma3ForCausalLM"};
    const char *arch_name = "";
    for (int i = 0; i < 8; i += 2)
        if (!strcmp(c->arch, archs[i])) arch_name = archs[i + 1];
    cJSON *j = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(arch_name));
    cJSON_AddStringToObject(j, "model_type", c->gemma ? "gemma3_text" : c->arch);
    cJSON_AddNumberToObject(j, "hidden_size", c->dim);
    cJSON_AddNumberToObject(j, "intermediate_size", c->hidden);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->heads);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->ctx);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->eps);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_base);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tied);
    if (c->gemma) {
        cJSON_AddStringToObject(j, "hidden_activation", "gelu_pytorch_tanh");
        cJSON_AddNumberToObject(j, "query_pre_attn_scalar", c->head_dim);
        cJSON_AddNumberToObject(j, "rope_local_base_freq", 10000.0);
        cJSON_AddNumberToObject(j, "sliding_window", c->window);
        cJSON_AddNumberToObject(j, "sliding_window_pattern", 6);
        cJSON *lt = cJSON_AddArrayToObject(j, "layer_types");
        for (int l = 0; l < c->layers; l++)
            cJSON_AddItemToArray(lt, cJSON_CreateString((l + 1) % 6 ? "sliding_attention" : "full_attention"));
        cJSON_AddNullToObject(j, "final_logit_softcapping");
        cJSON_AddNullToObject(j, "attn_logit_softcapping");
    } else {
        cJSON_AddStringToObject(j, "hidden_act", "silu");
    }
    cJSON_AddBoolToObject(j, "attention_bias", c->qkv_bias);
    cJSON_AddStringToObject(j, "torch_dtype", dtype == KERN_F32 ? "float32" : dtype == KERN_F16 ? "float16" : "bfloat16");
    if (tok->bos_id >= 0) cJSON_AddNumberToObject(j, "bos_token_id", tok->bos_id);
    if (tok->n_eos > 0) cJSON_AddNumberToObject(j, "eos_token_id", tok->eos_ids[0]);
    if (c->llama3) {
        cJSON *rs = cJSON_AddObjectToObject(j, "rope_scaling");
        cJSON_AddStringToObject(rs, "rope_type", "llama3");
        cJSON_AddNumberToObject(rs, "factor", 32.0);
        cJSON_AddNumberToObject(rs, "low_freq_factor", 1.0);
        cJSON_AddNumberToObject(rs, "high_freq_factor", 4.0);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings", 8192);
    } else {
        cJSON_AddNullToObject(j, "rope_scaling");
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    etch_status st = write_json(j, path, err);
    cJSON_Delete(j);
    if (st) return st;
    /* tokenizer.json and tokenizer_config.json, as they are. */
    char src_dir[4096];
    snprintf(src_dir, sizeof src_dir, "%s", tok_path);
    struct stat sb;
    if (stat(tok_path, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        char *slash = strrchr(src_dir, '/');
        if (slash) *slash = '\0';
        else snprintf(src_dir, sizeof src_dir, ".");
    }
    static const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2 && !st; i++) {
        char from[4200];
        snprintf(from, sizeof from, "%s/%s", src_dir, files[i]);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (i == 1 && stat(from, &sb) != 0) continue;
        st = copy_file(from, path, err);
    }
    if (st) return st;

    /* model.safetensors: the header (padded to 8 bytes), then every tensor in order. */
    synth_tensor *ts = base_calloc((size_t)c->layers * 16 + 8, sizeof *ts);
    if (!ts) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    int n = list_tensors(c, ts);
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0, max_n = 0;
    for (int i = 0; i < n; i++) {
        int type = ts[i].kind == 0 ? dtype : KERN_F32;
        uint64_t cnt = ts[i].rows * (ts[i].cols ? ts[i].cols : 1), bytes = cnt * kern_wsize(type);
        if (cnt > max_n) max_n = cnt;
        cJSON *e = cJSON_AddObjectToObject(h, ts[i].hf);
        cJSON_AddStringToObject(e, "dtype", type == KERN_F32 ? "F32" : type == KERN_F16 ? "F16" : "BF16");
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)ts[i].rows));
        if (ts[i].cols) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)ts[i].cols));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + bytes)));
        off += bytes;
    }
    char *hs = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    base_outfile out = {0};
    etch_status ost = hs ? base_out_open(&out, path, err) : base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    FILE *f = ost ? NULL : out.f;
    float *x = base_malloc((size_t)max_n * sizeof *x);
    void *conv = base_malloc((size_t)max_n * 2 + 8);
    int ok = f && x && conv;
    if (ok) {
        size_t hl = strlen(hs), padded = (hl + 7) / 8 * 8;
        uint8_t len[8];
        for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)padded >> (8 * i));
        ok = fwrite(len, 1, 8, f) == 8 && fwrite(hs, 1, hl, f) == hl;
        for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    }
    for (int i = 0; ok && i < n; i++) {
        int type = ts[i].kind == 0 ? dtype : KERN_F32;
        uint64_t cnt = ts[i].rows * (ts[i].cols ? ts[i].cols : 1);
        fill_tensor(c, &ts[i], seed, 0, x);
        if (type == KERN_F32) {
            ok = fwrite(x, 4, (size_t)cnt, f) == cnt;
        } else {
            uint16_t *h16 = conv;
            for (uint64_t k = 0; k < cnt; k++) h16[k] = type == KERN_F16 ? kern_f32_to_f16(x[k]) : kern_f32_to_bf16(x[k]);
            ok = fwrite(h16, 2, (size_t)cnt, f) == cnt;
        }
    }
    base_free(hs), base_free(x), base_free(conv), base_free(ts);
    if (ost) return ost;
    if (!ok) {
        base_out_abort(&out);
        return base_fail(err, ETCH_ERR_IO, "%s: cannot write", path);
    }
    return base_out_commit(&out, err);
}

/* ------------------------------------------------------------------ GGUF */

/* The token's text as GGUF stores it: normal pieces byte-level encoded (gpt2) or with U+2581 for a
 * space (llama); added tokens as they are. Returns the length written into out (4x the piece). */
static size_t gguf_token_text(const imp_model *t, int32_t id, char *out) {
    const char *p = t->tok_blob + t->tok_offsets[id];
    size_t n = (size_t)(t->tok_offsets[id + 1] - t->tok_offsets[id]), w = 0;
    uint8_t ty = t->tok_types[id];
    if (ty == TOK_UNUSED && n == 0) return (size_t)sprintf(out, "[PAD%d]", id);
    if (ty != TOK_NORMAL) {
        memcpy(out, p, n);
        return n;
    }
    for (size_t i = 0; i < n; i++) {
        if (t->tok_byte_level) {
            uint32_t cp = tok_byte_to_cp((uint8_t)p[i]);
            if (cp < 0x80) out[w++] = (char)cp;
            else out[w++] = (char)(0xC0 | cp >> 6), out[w++] = (char)(0x80 | (cp & 0x3F));
        } else if (p[i] == ' ') {
            out[w++] = (char)0xE2, out[w++] = (char)0x96, out[w++] = (char)0x81;
        } else {
            out[w++] = p[i];
        }
    }
    return w;
}

static etch_status write_gguf(const synth_cfg *c, const imp_model *tok, int gtype, uint64_t seed, const char *path,
                              etch_error *err) {
    synth_tensor *ts = base_calloc((size_t)c->layers * 16 + 8, sizeof *ts);
    if (!ts) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    int n = list_tensors(c, ts);
    const char *pre = NULL;
    if (tok->tok_byte_level) {
        const char *re = tok->tok_pretok;
        pre = !re || !strcmp(re, imp_regex_gpt2) ? "default" : !strcmp(re, imp_regex_qwen2) ? "qwen2"
            : !strcmp(re, imp_regex_llama3) ? "llama-bpe" : !strcmp(re, imp_regex_digits) ? "smollm" : NULL;
        if (!pre) {
            base_free(ts);
            return base_fail(err, ETCH_ERR_UNSUPPORTED, "the tokenizer's split regex has no llama.cpp pre-tokenizer name");
        }
    }
    gguf_writer g;
    etch_status st = gguf_writer_open(&g, path, (uint64_t)n + (c->llama3 ? 1 : 0), err);
    if (st) {
        base_free(ts);
        return st;
    }
    char key[128];
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", c->arch, suffix), key)
    gguf_kv_str(&g, "general.architecture", c->arch);
    gguf_kv_str(&g, "general.name", "etch synth");
    gguf_kv_u32(&g, K("context_length"), (uint32_t)c->ctx);
    gguf_kv_u32(&g, K("embedding_length"), (uint32_t)c->dim);
    gguf_kv_u32(&g, K("block_count"), (uint32_t)c->layers);
    gguf_kv_u32(&g, K("feed_forward_length"), (uint32_t)c->hidden);
    gguf_kv_u32(&g, K("attention.head_count"), (uint32_t)c->heads);
    gguf_kv_u32(&g, K("attention.head_count_kv"), (uint32_t)c->kv_heads);
    gguf_kv_f32(&g, K("attention.layer_norm_rms_epsilon"), c->eps);
    gguf_kv_f32(&g, K("rope.freq_base"), c->rope_base);
    gguf_kv_u32(&g, K("attention.key_length"), (uint32_t)c->head_dim);
    gguf_kv_u32(&g, K("attention.value_length"), (uint32_t)c->head_dim);
    if (c->gemma) gguf_kv_u32(&g, K("attention.sliding_window"), (uint32_t)c->window);
#undef K
    /* Tokenizer. */
    gguf_kv_str(&g, "tokenizer.ggml.model", tok->tok_byte_level ? "gpt2" : "llama");
    size_t max_piece = 0;
    for (int32_t i = 0; i < tok->vocab_size; i++)
        if ((size_t)(tok->tok_offsets[i + 1] - tok->tok_offsets[i]) > max_piece)
            max_piece = (size_t)(tok->tok_offsets[i + 1] - tok->tok_offsets[i]);
    char *buf = base_malloc(8 * max_piece + 64); /* two pieces, each at most 3 bytes per byte, and a space */
    int32_t vocab = c->vocab;
    gguf_kv_arr_begin(&g, "tokenizer.ggml.tokens", GGUF_T_STR, (uint64_t)vocab);
    for (int32_t i = 0; i < vocab && buf; i++) {
        if (i < tok->vocab_size) {
            size_t l = gguf_token_text(tok, i, buf);
            gguf_arr_str(&g, buf, l);
        } else {
            int l = sprintf(buf, "[PAD%d]", i);
            gguf_arr_str(&g, buf, (size_t)l);
        }
    }
    gguf_kv_arr_begin(&g, "tokenizer.ggml.token_type", GGUF_T_I32, (uint64_t)vocab);
    for (int32_t i = 0; i < vocab; i++) {
        int32_t ty = i < tok->vocab_size ? tok->tok_types[i] : TOK_UNUSED;
        if (i == tok->unk_id) ty = TOK_UNKNOWN;
        gguf_arr_i32(&g, ty);
    }
    if (tok->tok_byte_level) {
        gguf_kv_str(&g, "tokenizer.ggml.pre", pre);
        gguf_kv_arr_begin(&g, "tokenizer.ggml.merges", GGUF_T_STR, (uint64_t)tok->tok_n_merges);
        for (int32_t k = 0; k < tok->tok_n_merges && buf; k++) {
            size_t l = gguf_token_text(tok, tok->tok_merges[3 * k], buf);
            buf[l++] = ' ';
            l += gguf_token_text(tok, tok->tok_merges[3 * k + 1], buf + l);
            gguf_arr_str(&g, buf, l);
        }
    } else {
        /* SentencePiece scores from merge ranks: the piece an earlier merge makes scores higher. */
        float *score = base_malloc((size_t)vocab * sizeof *score);
        for (int32_t i = 0; score && i < vocab; i++) score[i] = -1e9f - (float)i;
        for (int32_t k = tok->tok_n_merges - 1; score && k >= 0; k--) score[tok->tok_merges[3 * k + 2]] = -(float)k;
        gguf_kv_arr_begin(&g, "tokenizer.ggml.scores", GGUF_T_F32, (uint64_t)vocab);
        for (int32_t i = 0; i < vocab; i++) gguf_arr_f32(&g, score ? score[i] : 0.0f);
        base_free(score);
        gguf_kv_bool(&g, "tokenizer.ggml.add_space_prefix", tok->add_dummy_prefix);
    }
    gguf_kv_bool(&g, "tokenizer.ggml.add_bos_token", tok->bos_id >= 0);
    if (tok->bos_id >= 0) gguf_kv_u32(&g, "tokenizer.ggml.bos_token_id", (uint32_t)tok->bos_id);
    if (tok->n_eos > 0) gguf_kv_u32(&g, "tokenizer.ggml.eos_token_id", (uint32_t)tok->eos_ids[0]);
    if (tok->unk_id >= 0) gguf_kv_u32(&g, "tokenizer.ggml.unknown_token_id", (uint32_t)tok->unk_id);
    if (tok->chat_jinja) gguf_kv_str(&g, "tokenizer.chat_template", tok->chat_jinja);
    /* Tensor infos, then data. Norms and biases stay F32, as llama.cpp expects. */
    for (int i = 0; i < n; i++) gguf_tensor_info(&g, ts[i].gguf, ts[i].kind == 0 ? gtype : GGUF_F32, ts[i].rows, ts[i].cols);
    if (c->llama3) gguf_tensor_info(&g, "rope_freqs.weight", GGUF_F32, (uint64_t)(c->head_dim / 2), 0);
    uint64_t max_n = 0;
    for (int i = 0; i < n; i++) {
        uint64_t cnt = ts[i].rows * (ts[i].cols ? ts[i].cols : 1);
        if (cnt > max_n) max_n = cnt;
    }
    float *x = base_malloc((size_t)max_n * sizeof *x), *tmp = base_malloc((size_t)max_n * sizeof *tmp);
    if (!x || !tmp || !buf) st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !st; i++) {
        fill_tensor(c, &ts[i], seed, 1, x);
        if (ts[i].permute_heads) permute_rows(x, ts[i].rows, ts[i].cols, ts[i].permute_heads, tmp);
        gguf_tensor_data(&g, ts[i].kind == 0 ? gtype : GGUF_F32, x, ts[i].rows * (ts[i].cols ? ts[i].cols : 1));
    }
    if (c->llama3 && !st) { /* Llama 3 scaling as llama.cpp's converter writes it: a factor per frequency */
        const double pi = 3.14159265358979323846, factor = 32, lo = 1, hi = 4, orig = 8192;
        for (int i = 0; i < c->head_dim / 2; i++) {
            double freq = 1.0 / pow(c->rope_base, 2.0 * i / c->head_dim), wavelen = 2 * pi / freq, smooth;
            x[i] = wavelen < orig / hi ? 1.0f : wavelen > orig / lo ? (float)factor
                 : (smooth = (orig / wavelen - lo) / (hi - lo), (float)(1.0 / ((1 - smooth) / factor + smooth)));
        }
        gguf_tensor_data(&g, GGUF_F32, x, (uint64_t)(c->head_dim / 2));
    }
    etch_status cst = gguf_writer_close(&g, err);
    base_free(x), base_free(tmp), base_free(buf), base_free(ts);
    return st ? st : cst;
}

/* ------------------------------------------------------------------ entry */

etch_status etch_synth(const etch_synth_options *o, const char *out_path, etch_error *err) {
    base_clear(err);
    if (!o || !out_path || !o->arch || !o->tokenizer || !o->format)
        return base_fail(err, ETCH_ERR_ARG, "etch_synth: arch, tokenizer, format and output are required");
    synth_cfg c = {0};
    if (strcmp(o->arch, "llama") && strcmp(o->arch, "qwen2") && strcmp(o->arch, "qwen3") && strcmp(o->arch, "gemma3"))
        return base_fail(err, ETCH_ERR_ARG, "arch '%s' is not one of llama, qwen2, qwen3, gemma3", o->arch);
    snprintf(c.arch, sizeof c.arch, "%s", o->arch);
    const char *preset = o->preset ? o->preset : "tiny";
    if (!strcmp(preset, "qwen3-0.6b")) {
        c = (synth_cfg){"", 1024, 3072, 28, 16, 8, 128, 151936, 40960, 1e-6f, 1000000.0f, 0, 1, 0, 0, 0, 0, 0};
    } else if (!strcmp(preset, "llama-3.2-1b")) {
        c = (synth_cfg){"", 2048, 8192, 16, 32, 8, 64, 128256, 131072, 1e-5f, 500000.0f, 0, 1, 0, 0, 1, 0, 0};
    } else if (!strcmp(preset, "gemma3-1b")) {
        c = (synth_cfg){"", 1152, 6912, 26, 4, 1, 256, 262144, 32768, 1e-6f, 1000000.0f, 0, 1, 0, 0, 0, 0, 0};
    } else if (!strcmp(preset, "tiny")) {
        c = (synth_cfg){"", 64, 192, 2, 4, 2, 16, 0, 2048, 1e-5f, 10000.0f, 0, 1, 0, 0, 0, 0, 0};
    } else {
        return base_fail(err, ETCH_ERR_ARG, "preset '%s' is not one of qwen3-0.6b, llama-3.2-1b, gemma3-1b, tiny", preset);
    }
    snprintf(c.arch, sizeof c.arch, "%s", o->arch);
    c.qkv_bias = !strcmp(o->arch, "qwen2");
    c.gemma = !strcmp(o->arch, "gemma3");
    c.qk_norm = !strcmp(o->arch, "qwen3") || c.gemma;
    if (strcmp(o->arch, "llama")) c.llama3 = 0;
    if (c.gemma) c.tied = 1, c.rope_base = 1000000.0f;
    if (o->sliding_window < 0 || (o->sliding_window && !c.gemma))
        return base_fail(err, ETCH_ERR_ARG, "sliding_window %d: only gemma3 takes one, and it must be positive", o->sliding_window);
    c.window = o->sliding_window ? o->sliding_window : 512;
    if (o->layers) c.layers = o->layers;
    if (o->dim) c.dim = o->dim;
    if (o->hidden_dim) c.hidden = o->hidden_dim;
    if (o->heads) c.heads = o->heads;
    if (o->kv_heads) c.kv_heads = o->kv_heads;
    if (o->head_dim) c.head_dim = o->head_dim;
    else if (o->dim || o->heads) c.head_dim = c.dim / c.heads;
    if (o->context_len) c.ctx = o->context_len;
    c.std = o->std > 0 ? o->std : 0.02f;
    if (c.layers < 1 || c.layers > 256 || c.dim < 2 || c.hidden < 1 || c.heads < 1 || c.kv_heads < 1 || c.heads % c.kv_heads ||
        c.head_dim < 2 || c.head_dim % 2 || c.ctx < 1)
        return base_fail(err, ETCH_ERR_ARG, "shapes are inconsistent (layers %d, dim %d, heads %d, kv_heads %d, head_dim %d)",
                         c.layers, c.dim, c.heads, c.kv_heads, c.head_dim);
    const char *dt = o->dtype ? o->dtype : "f32";
    int hf = !strcmp(o->format, "hf");
    if (!hf && strcmp(o->format, "gguf")) return base_fail(err, ETCH_ERR_ARG, "format '%s' is not hf or gguf", o->format);
    int ktype = !strcmp(dt, "f32") ? KERN_F32 : !strcmp(dt, "f16") ? KERN_F16 : !strcmp(dt, "bf16") ? KERN_BF16 : -1;
    int gtype = !strcmp(dt, "f32") ? GGUF_F32 : !strcmp(dt, "f16") ? GGUF_F16 : !strcmp(dt, "bf16") ? GGUF_BF16
              : !strcmp(dt, "q8_0") ? GGUF_Q8_0 : !strcmp(dt, "q4_0") ? GGUF_Q4_0 : !strcmp(dt, "q4_1") ? GGUF_Q4_1
              : !strcmp(dt, "q5_1") ? GGUF_Q5_1 : !strcmp(dt, "q4_k") ? GGUF_Q4_K : !strcmp(dt, "q5_k") ? GGUF_Q5_K
              : !strcmp(dt, "iq4_nl") ? GGUF_IQ4_NL : !strcmp(dt, "iq4_xs") ? GGUF_IQ4_XS : -1;
    if (gtype < 0 || (hf && ktype < 0))
        return base_fail(err, ETCH_ERR_ARG, "dtype '%s' is not supported for %s (f32, f16, bf16%s)", dt, o->format,
                         hf ? "" : ", q8_0, q4_0, q4_1, q5_1, q4_k, q5_k, iq4_nl, iq4_xs");
    uint32_t block_bytes, block = gguf_block_size((uint32_t)gtype, &block_bytes);
    if (c.dim % block || c.hidden % block || (c.heads * c.head_dim) % block)
        return base_fail(err, ETCH_ERR_ARG, "%s needs every matrix's row length to be a multiple of %u", dt, block);
    imp_model tok;
    etch_status st = imp_hf_tokenizer(o->tokenizer, &tok, err);
    if (st) return st;
    if (c.vocab < tok.vocab_size) c.vocab = tok.vocab_size; /* the tokenizer must fit the embedding */
    st = hf ? write_hf(&c, &tok, o->tokenizer, ktype, o->seed, out_path, err)
            : write_gguf(&c, &tok, gtype, o->seed, out_path, err);
    imp_model_free(&tok);
    return st;
}
