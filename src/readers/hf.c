/* import: Hugging Face model folders: config.json, safetensors (single or sharded),
 * tokenizer.json, tokenizer_config.json, generation_config.json. */
#define _POSIX_C_SOURCE 200809L
#include "reader.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ JSON helpers */

/* Parses a JSON file. On failure, a message naming the file (and the place the parser stopped). */
static etch_status read_json(const char *path, cJSON **out, etch_error *err) {
    *out = NULL;
    uint8_t *data;
    uint64_t size;
    etch_status st = base_read_file(path, &data, &size, err);
    if (st) return st;
    const char *end = NULL;
    unsigned failures = base_alloc_failures();
    cJSON *j = cJSON_ParseWithLengthOpts((const char *)data, (size_t)size, &end, 0);
    if (!j) {
        size_t at = end && end >= (const char *)data ? (size_t)(end - (const char *)data) : 0;
        base_free(data);
        if (base_alloc_failures() != failures) return base_fail(err, ETCH_ERR_NOMEM, "%s: out of memory parsing it", path);
        return base_fail(err, ETCH_ERR_FORMAT, "%s: not valid JSON (near byte %zu)", path, at);
    }
    base_free(data);
    *out = j;
    return ETCH_OK;
}

static int path_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A required integer field in [lo, hi]. */
static etch_status get_int(const cJSON *o, const char *file, const char *key, long lo, long hi, int32_t *v,
                           etch_error *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) return base_fail(err, ETCH_ERR_FORMAT, "%s: '%s' is missing", file, key);
    /* The range first: a double past long's range must not reach the cast. */
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= (double)lo && x->valuedouble <= (double)hi) ||
        x->valuedouble != (double)(long)x->valuedouble)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: '%s' must be an integer in %ld..%ld", file, key, lo, hi);
    *v = (int32_t)x->valuedouble;
    return ETCH_OK;
}

static etch_status opt_int(const cJSON *o, const char *file, const char *key, long lo, long hi, int32_t dflt,
                           int32_t *v, etch_error *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x)) {
        *v = dflt;
        return ETCH_OK;
    }
    return get_int(o, file, key, lo, hi, v, err);
}

static etch_status opt_num(const cJSON *o, const char *file, const char *key, double dflt, float *v, etch_error *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x || cJSON_IsNull(x)) {
        *v = (float)dflt;
        return ETCH_OK;
    }
    if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) || x->valuedouble > 1e12)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: '%s' must be a positive number", file, key);
    *v = (float)x->valuedouble;
    return ETCH_OK;
}

static int opt_bool(const cJSON *o, const char *key, int dflt) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(x) ? cJSON_IsTrue(x) : dflt;
}

static const char *opt_string(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* ------------------------------------------------------------------ config.json */

/* Gemma-3's own keys: scaled embeddings, sandwich norms with (1 + w) weights, q/k norms, the score
 * scale, RoPE bases of local and global layers, soft-capping. */
static etch_status read_gemma3(const cJSON *c, const char *path, imp_model *m, etch_error *err) {
    etch_status st;
    m->gelu = m->post_norms = m->norm_plus_one = m->qk_norm = 1;
    m->embd_scale = sqrtf((float)m->dim);
    m->tied_embeddings = 1;
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(c, "attn_logit_softcapping");
    if (cap && !cJSON_IsNull(cap))
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: attn_logit_softcapping is not supported (Gemma-3 has none)", path);
    if ((st = opt_num(c, path, "query_pre_attn_scalar", (double)m->head_dim, &m->query_pre_attn_scalar, err)) ||
        (st = opt_num(c, path, "rope_theta", 1000000.0, &m->rope_base, err)) ||
        (st = opt_num(c, path, "rope_local_base_freq", 10000.0, &m->rope_base_local, err)))
        return st;
    const cJSON *fc = cJSON_GetObjectItemCaseSensitive(c, "final_logit_softcapping");
    if (fc && !cJSON_IsNull(fc) && (st = opt_num(c, path, "final_logit_softcapping", 0, &m->final_softcap, err))) return st;
    return ETCH_OK;
}

/* Sliding windows: `layer_types` when the config lists them; else Gemma-3's pattern (every
 * sliding_window_pattern-th layer global), Qwen2/Qwen3's use_sliding_window from max_window_layers on,
 * or Mistral's window on every layer. */
static etch_status read_windows(const cJSON *c, const char *path, imp_model *m, etch_error *err) {
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(c, "sliding_window");
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(c, "layer_types");
    int gemma = !strcmp(m->model_type, "gemma3"), qwen = !strncmp(m->model_type, "qwen", 4);
    int32_t window = 0;
    etch_status st;
    if (sw && !cJSON_IsNull(sw) && (st = get_int(c, path, "sliding_window", 1, 1 << 24, &window, err))) return st;
    if (qwen && !opt_bool(c, "use_sliding_window", 0)) window = 0;
    if (!window) {
        if (gemma) return base_fail(err, ETCH_ERR_FORMAT, "%s: 'sliding_window' is missing", path);
        return ETCH_OK;
    }
    uint8_t *w = base_calloc((size_t)m->n_layers, 1);
    if (!w) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    st = ETCH_OK;
    if (cJSON_IsArray(types)) {
        if (cJSON_GetArraySize(types) != m->n_layers)
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: 'layer_types' has %d entries for %d layers", path,
                           cJSON_GetArraySize(types), m->n_layers);
        int l = 0;
        for (const cJSON *e = types->child; e && !st; e = e->next, l++) {
            const char *t = cJSON_GetStringValue(e);
            if (t && !strcmp(t, "sliding_attention")) w[l] = 1;
            else if (!t || strcmp(t, "full_attention"))
                st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: layer_types[%d] '%s' is not supported (sliding_attention, "
                               "full_attention)", path, l, t ? t : "?");
        }
    } else if (gemma) {
        int32_t pattern;
        st = opt_int(c, path, "sliding_window_pattern", 1, 4096, 6, &pattern, err);
        for (int l = 0; l < m->n_layers && !st; l++) w[l] = (l + 1) % pattern != 0;
    } else if (qwen) {
        int32_t from;
        st = opt_int(c, path, "max_window_layers", 0, 4096, 0, &from, err);
        for (int l = 0; l < m->n_layers && !st; l++) w[l] = l >= from;
    } else {
        memset(w, 1, (size_t)m->n_layers);
    }
    if (!st && !imp_set_windows(m, window, w)) st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    base_free(w);
    return st;
}

static etch_status read_config(const char *dir, imp_model *m, etch_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *c;
    etch_status st = read_json(path, &c, err);
    if (st) return st;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(c, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const char *arch = cJSON_IsString(a0) ? a0->valuestring : NULL;
    if (!arch) {
        cJSON_Delete(c);
        return base_fail(err, ETCH_ERR_FORMAT, "%s: 'architectures' is missing", path);
    }
    int gemma = 0;
    if (!strcmp(arch, "LlamaForCausalLM")) snprintf(m->model_type, sizeof m->model_type, "llama");
    else if (!strcmp(arch, "MistralForCausalLM")) snprintf(m->model_type, sizeof m->model_type, "mistral");
    else if (!strcmp(arch, "Qwen2ForCausalLM")) snprintf(m->model_type, sizeof m->model_type, "qwen2"), m->qkv_bias = 1;
    else if (!strcmp(arch, "Qwen3ForCausalLM")) snprintf(m->model_type, sizeof m->model_type, "qwen3"), m->qk_norm = 1;
    else if (!strcmp(arch, "Gemma3ForCausalLM")) snprintf(m->model_type, sizeof m->model_type, "gemma3"), gemma = 1;
    else {
        st = base_fail(err, ETCH_ERR_UNSUPPORTED,
                       "%s: architecture '%s' is not supported (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                       "Qwen3ForCausalLM, Gemma3ForCausalLM%s)",
                       path, arch, !strcmp(arch, "Gemma3ForConditionalGeneration") ? "; the multimodal Gemma-3 is not: "
                       "export a text-only Gemma3ForCausalLM checkpoint" : "");
        cJSON_Delete(c);
        return st;
    }
    const int32_t big = 1 << 20;
    if ((st = get_int(c, path, "hidden_size", 1, big, &m->dim, err)) ||
        (st = get_int(c, path, "intermediate_size", 1, big, &m->hidden_dim, err)) ||
        (st = get_int(c, path, "num_hidden_layers", 1, 4096, &m->n_layers, err)) ||
        (st = get_int(c, path, "num_attention_heads", 1, 4096, &m->n_heads, err)) ||
        (st = opt_int(c, path, "num_key_value_heads", 1, 4096, m->n_heads, &m->n_kv_heads, err)) ||
        (st = get_int(c, path, "vocab_size", 1, 1 << 24, &m->vocab_size, err)) ||
        (st = opt_int(c, path, "max_position_embeddings", 1, 1 << 24, 2048, &m->context_len, err)) ||
        (st = opt_num(c, path, "rms_norm_eps", 1e-6, &m->norm_eps, err)) ||
        (st = opt_num(c, path, "rope_theta", 10000.0, &m->rope_base, err)))
        goto done;
    if (m->dim % m->n_heads && !cJSON_GetObjectItemCaseSensitive(c, "head_dim")) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: hidden_size %d is not a multiple of num_attention_heads %d", path,
                       m->dim, m->n_heads);
        goto done;
    }
    if ((st = opt_int(c, path, "head_dim", 2, 4096, m->dim / m->n_heads, &m->head_dim, err))) goto done;
    if (m->head_dim % 2 || m->n_heads % m->n_kv_heads) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: head_dim %d must be even and num_attention_heads %d a multiple of "
                       "num_key_value_heads %d", path, m->head_dim, m->n_heads, m->n_kv_heads);
        goto done;
    }
    const char *act = opt_string(c, gemma ? "hidden_activation" : "hidden_act");
    if (!act && gemma) act = opt_string(c, "hidden_act");
    if (gemma ? act && strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_tanh") : act && strcmp(act, "silu")) {
        st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: hidden activation '%s' is not supported (%s)", path, act,
                       gemma ? "gelu_pytorch_tanh" : "silu");
        goto done;
    }
    if (gemma && (st = read_gemma3(c, path, m, err))) goto done;
    if ((st = read_windows(c, path, m, err))) goto done;
    if (!strcmp(m->model_type, "llama") && opt_bool(c, "attention_bias", 0)) {
        st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: attention_bias true is not supported for Llama", path);
        goto done;
    }
    if (opt_bool(c, "mlp_bias", 0) || (gemma && opt_bool(c, "attention_bias", 0))) {
        st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: %s is not supported", path,
                       opt_bool(c, "mlp_bias", 0) ? "mlp_bias" : "attention_bias");
        goto done;
    }
    m->tied_embeddings = opt_bool(c, "tie_word_embeddings", 0);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    if (rs && !cJSON_IsNull(rs)) {
        const char *type = opt_string(rs, "rope_type");
        if (!type) type = opt_string(rs, "type");
        if (type && !strcmp(type, "linear")) {
            if ((st = opt_num(rs, path, "factor", 1.0, &m->rope_linear, err))) goto done;
            goto scaled;
        }
        if (!type || strcmp(type, "llama3") != 0) {
            st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: rope_scaling type '%s' is not supported (llama3, linear)", path,
                           type ? type : "?");
            goto done;
        }
        int32_t orig;
        m->rope_llama3 = 1;
        if ((st = opt_num(rs, path, "factor", 8.0, &m->rs_factor, err)) ||
            (st = opt_num(rs, path, "low_freq_factor", 1.0, &m->rs_low, err)) ||
            (st = opt_num(rs, path, "high_freq_factor", 4.0, &m->rs_high, err)) ||
            (st = opt_int(rs, path, "original_max_position_embeddings", 1, 1 << 24, 8192, &orig, err)))
            goto done;
        m->rs_orig = (float)orig;
    }
scaled:;
    const char *dt = opt_string(c, "torch_dtype");
    m->source_dtype = dt && !strcmp(dt, "float32") ? IMP_F32 : dt && !strcmp(dt, "float16") ? IMP_F16 : IMP_BF16;
    m->rope_style = "half"; /* Hugging Face's rotate_half */
    /* BOS/EOS from config as a fallback; tokenizer_config and generation_config refine them. */
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(c, "eos_token_id");
    if (cJSON_IsNumber(eos)) m->eos_ids[m->n_eos++] = eos->valueint;
    for (const cJSON *e = cJSON_IsArray(eos) ? eos->child : NULL; e && m->n_eos < 16; e = e->next)
        if (cJSON_IsNumber(e)) m->eos_ids[m->n_eos++] = e->valueint;
done:
    cJSON_Delete(c);
    return st;
}

/* ------------------------------------------------------------------ safetensors */

/* HF tensor name -> program name, and whether it is a matrix. Returns 0 for an unknown name. */
static int map_name(const char *hf, int gemma, char *out, size_t cap, int *matrix) {
    /* Gemma's four norms per block: its post_attention_layernorm follows attention; the norm before
     * the feed-forward is pre_feedforward_layernorm. */
    static const struct { const char *hf, *etch; } gemma_norms[] = {
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    };
    static const struct { const char *hf, *etch; int matrix; } layer[] = {
        {"input_layernorm.weight", "attn_norm.weight", 0},
        {"self_attn.q_proj.weight", "attn_q.weight", 1},
        {"self_attn.k_proj.weight", "attn_k.weight", 1},
        {"self_attn.v_proj.weight", "attn_v.weight", 1},
        {"self_attn.q_proj.bias", "attn_q.bias", 0},
        {"self_attn.k_proj.bias", "attn_k.bias", 0},
        {"self_attn.v_proj.bias", "attn_v.bias", 0},
        {"self_attn.q_norm.weight", "attn_q_norm.weight", 0},
        {"self_attn.k_norm.weight", "attn_k_norm.weight", 0},
        {"self_attn.o_proj.weight", "attn_output.weight", 1},
        {"post_attention_layernorm.weight", "ffn_norm.weight", 0},
        {"mlp.gate_proj.weight", "ffn_gate.weight", 1},
        {"mlp.up_proj.weight", "ffn_up.weight", 1},
        {"mlp.down_proj.weight", "ffn_down.weight", 1},
    };
    if (!strcmp(hf, "model.embed_tokens.weight")) return *matrix = 1, snprintf(out, cap, "token_embd.weight"), 1;
    if (!strcmp(hf, "model.norm.weight")) return *matrix = 0, snprintf(out, cap, "output_norm.weight"), 1;
    if (!strcmp(hf, "lm_head.weight")) return *matrix = 1, snprintf(out, cap, "output.weight"), 1;
    int l, used = 0;
    if (sscanf(hf, "model.layers.%d.%n", &l, &used) == 1 && used > 0 && l >= 0 && gemma)
        for (size_t i = 0; i < sizeof gemma_norms / sizeof *gemma_norms; i++)
            if (!strcmp(hf + used, gemma_norms[i].hf)) return *matrix = 0, snprintf(out, cap, "blk.%d.%s", l, gemma_norms[i].etch), 1;
    if (used > 0 && l >= 0)
        for (size_t i = 0; i < sizeof layer / sizeof *layer; i++)
            if (!strcmp(hf + used, layer[i].hf)) return *matrix = layer[i].matrix, snprintf(out, cap, "blk.%d.%s", l, layer[i].etch), 1;
    return 0;
}

/* Reads one safetensors file's header and adds the tensors that `wanted` names (NULL: all),
 * borrowing their data from the mapping. */
static etch_status read_safetensors(const char *path, imp_model *m, const cJSON *wanted_map, const char *wanted_file,
                                    etch_error *err) {
    if (m->n_maps >= (int)(sizeof m->maps / sizeof m->maps[0]))
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: more than 64 shards", path);
    base_map *mp = &m->maps[m->n_maps];
    etch_status st = base_map_open(path, mp, err);
    if (st) return st;
    m->n_maps++;
    if (mp->size < 8) return base_fail(err, ETCH_ERR_FORMAT, "%s: shorter than the 8-byte header length", path);
    uint64_t hlen = base_le64(mp->data);
    if (hlen > mp->size - 8 || hlen > (100u << 20))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%llu bytes)", path,
                         (unsigned long long)hlen, (unsigned long long)mp->size);
    const uint8_t *data = mp->data + 8 + hlen;
    uint64_t data_size = mp->size - 8 - hlen;
    unsigned failures = base_alloc_failures();
    cJSON *h = cJSON_ParseWithLength((const char *)mp->data + 8, (size_t)hlen);
    if (!cJSON_IsObject(h)) {
        cJSON_Delete(h);
        if (base_alloc_failures() != failures) return base_fail(err, ETCH_ERR_NOMEM, "%s: out of memory parsing the header", path);
        return base_fail(err, ETCH_ERR_FORMAT, "%s: the header is not a JSON object", path);
    }
    int first = m->n_tensors;
    for (const cJSON *t = h->child; t && !st; t = t->next) {
        if (!strcmp(t->string, "__metadata__")) continue;
        if (wanted_map) { /* sharded: only the tensors the index places in this file */
            const char *f = opt_string(wanted_map, t->string);
            if (!f || strcmp(f, wanted_file) != 0) continue;
        }
        char name[96];
        int matrix;
        if (strstr(t->string, "rotary_emb.inv_freq")) continue; /* recomputed from rope_theta */
        if (!map_name(t->string, !strcmp(m->model_type, "gemma3"), name, sizeof name, &matrix)) {
            st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: tensor '%s' is not part of a supported architecture", path,
                           t->string);
            break;
        }
        const char *dt = opt_string(t, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        const cJSON *offs = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        int type = !dt ? -1 : !strcmp(dt, "F32") ? IMP_F32 : !strcmp(dt, "F16") ? IMP_F16 : !strcmp(dt, "BF16") ? IMP_BF16 : -1;
        if (type < 0) {
            st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype '%s' (F32, F16, BF16 supported)", path,
                           t->string, dt ? dt : "?");
            break;
        }
        int nd = cJSON_GetArraySize(shape);
        if (!cJSON_IsArray(shape) || nd < 1 || nd > 2 || !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%s': shape or data_offsets malformed (1 or 2 dims)", path,
                           t->string);
            break;
        }
        uint64_t dims[2] = {0, 0}, count = 1, lo, hi, bytes;
        for (int d = 0; d < nd; d++) {
            const cJSON *x = cJSON_GetArrayItem(shape, d);
            if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 1e12) count = 0;
            else dims[d] = (uint64_t)x->valuedouble;
            if (!count || !base_mul_u64(count, dims[d], &count)) count = 0;
        }
        const cJSON *a = cJSON_GetArrayItem(offs, 0), *b = cJSON_GetArrayItem(offs, 1);
        if (!count || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0 || b->valuedouble < a->valuedouble ||
            b->valuedouble > 1e15) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%s': invalid shape or data_offsets", path, t->string);
            break;
        }
        lo = (uint64_t)a->valuedouble, hi = (uint64_t)b->valuedouble;
        if (!base_mul_u64(count, type == IMP_F32 ? 4 : 2, &bytes) || bytes != hi - lo) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%s': shape and dtype make %llu bytes but data_offsets span %llu",
                           path, t->string, (unsigned long long)(count * (type == IMP_F32 ? 4 : 2)),
                           (unsigned long long)(hi - lo));
            break;
        }
        if (hi > data_size) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%s': data_offsets %llu..%llu run past the data (%llu bytes)",
                           path, t->string, (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)data_size);
            break;
        }
        if (type == IMP_F32 && (uintptr_t)(data + lo) % 4 != 0) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%s' is not 4-byte aligned", path, t->string);
            break;
        }
        imp_tensor *it = imp_add_tensor(m, name, type, data + lo, dims[0], nd == 2 ? dims[1] : 0, matrix);
        if (!it) {
            st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
            break;
        }
        /* Overlap with a tensor of this file: compare byte ranges. */
        for (int j = first; j < m->n_tensors - 1 && !st; j++) {
            const imp_tensor *o = &m->tensors[j];
            const uint8_t *os = o->data, *ns = it->data;
            uint64_t olen = o->dims[0] * (o->ndim > 1 ? o->dims[1] : 1) * (o->src_type == IMP_F32 ? 4 : 2);
            if (ns < os + olen && os < ns + bytes)
                st = base_fail(err, ETCH_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", path, o->name, name);
            else if (!strcmp(o->name, name))
                st = base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%s' appears twice", path, name);
        }
    }
    cJSON_Delete(h);
    return st;
}

static etch_status read_weights(const char *dir, imp_model *m, etch_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (path_exists(path)) return read_safetensors(path, m, NULL, NULL, err);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (!path_exists(path))
        return base_fail(err, ETCH_ERR_IO, "%s: neither model.safetensors nor model.safetensors.index.json is there", dir);
    cJSON *idx;
    etch_status st = read_json(path, &idx, err);
    if (st) return st;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(idx);
        return base_fail(err, ETCH_ERR_FORMAT, "%s: 'weight_map' is missing", path);
    }
    /* Each shard once, in the order the map first names it. */
    const char *seen[64];
    int n_seen = 0;
    for (const cJSON *e = map->child; e && !st; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !strcmp(e->valuestring, "..")) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: weight_map entry '%s' is not a file name", path, e->string);
            break;
        }
        int dup = 0;
        for (int i = 0; i < n_seen; i++) dup |= !strcmp(seen[i], e->valuestring);
        if (dup) continue;
        if (n_seen == 64) {
            st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: more than 64 shards", path);
            break;
        }
        seen[n_seen++] = e->valuestring;
        char shard[4096];
        snprintf(shard, sizeof shard, "%s/%s", dir, e->valuestring);
        st = read_safetensors(shard, m, map, e->valuestring, err);
    }
    cJSON_Delete(idx);
    return st;
}

/* ------------------------------------------------------------------ tokenizer.json */

/* A growable byte buffer for pieces. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_reserve(sbuf *b, size_t n);
static int sb_put(sbuf *b, const void *s, size_t n) {
    if (!sb_reserve(b, n)) return 0;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 1;
}

/* Makes room for n more bytes in b. */
static int sb_reserve(sbuf *b, size_t n) {
    if (b->n + n <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + n) cap *= 2;
    char *np = base_realloc(b->p, cap);
    if (!np) return 0;
    b->p = np;
    b->cap = cap;
    return 1;
}

/* Appends the raw bytes of a vocabulary string (imp_raw_piece; never longer than the string). */
static int raw_piece(const char *s, int byte_level, sbuf *out) {
    size_t n = strlen(s), w;
    if (n == 0) return 1; /* nothing to append (and out->p may still be NULL) */
    if (!sb_reserve(out, n) || !imp_raw_piece(s, n, byte_level, out->p + out->n, &w)) return 0;
    out->n += w;
    return 1;
}

/* The items of a "Sequence" node (its list under list_key), or the node itself. */
static int sequence_items(const cJSON *node, const char *list_key, const cJSON **items, int max) {
    int n = 0;
    const char *t = opt_string(node, "type");
    const cJSON *list = t && !strcmp(t, "Sequence") ? cJSON_GetObjectItemCaseSensitive(node, list_key) : NULL;
    if (!list) {
        items[n++] = node;
        return n;
    }
    for (const cJSON *e = list->child; e && n < max; e = e->next) items[n++] = e;
    return n;
}

/* Is this node (or one inside its Sequence) of the given type? */
static const cJSON *find_typed(const cJSON *node, const char *list_key, const char *type) {
    if (!node || cJSON_IsNull(node)) return NULL;
    const cJSON *items[16];
    int n = sequence_items(node, list_key, items, 16);
    for (int i = 0; i < n; i++) {
        const char *t = opt_string(items[i], "type");
        if (t && !strcmp(t, type)) return items[i];
    }
    return NULL;
}

/* Reads pre_tokenizer into m->tok_pretok and m->tok_byte_level / add_dummy_prefix. */
static etch_status read_pretokenizer(const char *path, const cJSON *pre, imp_model *m, etch_error *err) {
    if (!pre || cJSON_IsNull(pre)) return ETCH_OK;
    const cJSON *items[16];
    int n = sequence_items(pre, "pretokenizers", items, 16);
    const char *regex = NULL;
    int digits = 0;
    for (int i = 0; i < n; i++) {
        const char *ty = opt_string(items[i], "type");
        if (!ty) return base_fail(err, ETCH_ERR_FORMAT, "%s: a pre_tokenizer has no type", path);
        if (!strcmp(ty, "Split")) {
            const cJSON *pat = cJSON_GetObjectItemCaseSensitive(items[i], "pattern");
            const char *re = pat ? opt_string(pat, "Regex") : NULL;
            const char *beh = opt_string(items[i], "behavior");
            if (!re || (beh && strcmp(beh, "Isolated")) || opt_bool(items[i], "invert", 0) || regex)
                return base_fail(err, ETCH_ERR_UNSUPPORTED,
                                 "%s: pre_tokenizer Split is supported with one Regex pattern, behavior Isolated, invert "
                                 "false", path);
            regex = re;
        } else if (!strcmp(ty, "ByteLevel")) {
            m->tok_byte_level = 1;
            if (opt_bool(items[i], "add_prefix_space", 0))
                return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: ByteLevel add_prefix_space true is not supported", path);
            if (opt_bool(items[i], "use_regex", 1)) {
                if (regex) return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: Split followed by a ByteLevel regex", path);
                regex = digits ? imp_regex_digits : imp_regex_gpt2;
            }
        } else if (!strcmp(ty, "Digits") && opt_bool(items[i], "individual_digits", 0) && !regex) {
            digits = 1;
        } else if (!strcmp(ty, "Metaspace")) {
            const char *scheme = opt_string(items[i], "prepend_scheme");
            m->add_dummy_prefix = scheme ? strcmp(scheme, "never") != 0 : opt_bool(items[i], "add_prefix_space", 1);
            if (opt_bool(items[i], "split", 0))
                return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: Metaspace with split true is not supported", path);
        } else {
            return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: pre_tokenizer '%s' is not supported", path, ty);
        }
    }
    if (digits && !m->tok_byte_level)
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: Digits without ByteLevel is not supported", path);
    if (regex && !(m->tok_pretok = base_strdup(regex))) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    return ETCH_OK;
}

static etch_status read_normalizer(const char *path, const cJSON *nz, imp_model *m, etch_error *err) {
    if (!nz || cJSON_IsNull(nz)) return ETCH_OK;
    const cJSON *items[16];
    int n = sequence_items(nz, "normalizers", items, 16);
    for (int i = 0; i < n; i++) {
        const char *ty = opt_string(items[i], "type");
        if (ty && !strcmp(ty, "NFC")) {
            m->tok_nfc = 1;
        } else if (ty && !strcmp(ty, "Prepend") && opt_string(items[i], "prepend") &&
                   !strcmp(opt_string(items[i], "prepend"), "\xe2\x96\x81")) {
            m->add_dummy_prefix = 1;
        } else if (ty && !strcmp(ty, "Replace")) {
            /* Only " " -> U+2581, which raw pieces make the identity. */
            const cJSON *pat = cJSON_GetObjectItemCaseSensitive(items[i], "pattern");
            const char *from = pat ? opt_string(pat, "String") : NULL, *to = opt_string(items[i], "content");
            if (!from || !to || strcmp(from, " ") || strcmp(to, "\xe2\x96\x81"))
                return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: normalizer Replace is supported only as \" \" -> \"\xe2\x96\x81\"",
                                 path);
        } else {
            return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: normalizer '%s' is not supported (NFC, Prepend, Replace)",
                             path, ty ? ty : "?");
        }
    }
    return ETCH_OK;
}

/* The id of a token named in tokenizer_config.json (a string or {"content": ...}), or -1. */
static int32_t config_token(const cJSON *cfg, const char *key, const imp_model *m, const tok_tokenizer *t) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
    const char *s = cJSON_IsString(x) ? x->valuestring : x ? opt_string(x, "content") : NULL;
    if (!s) return -1;
    size_t n = strlen(s);
    for (int32_t i = 0; i < m->vocab_size; i++) /* control tokens are not in the lookup table */
        if ((size_t)(m->tok_offsets[i + 1] - m->tok_offsets[i]) == n && !memcmp(m->tok_blob + m->tok_offsets[i], s, n))
            return i;
    return tok_find(t, s, n);
}

const char *imp_recognize_template(const char *j) {
    if (!j || !*j) return "";
    if (strstr(j, "<|im_start|>")) return strstr(j, "enable_thinking") ? "qwen3" : "chatml";
    if (strstr(j, "<|start_header_id|>")) return "llama3";
    if (strstr(j, "[INST]")) return "llama2";
    if (strstr(j, "<start_of_turn>")) return "gemma";
    return NULL;
}

/* tokenizer.json (+ tokenizer_config.json in the same folder). vocab_hint: the model's vocab_size
 * (rows past the tokenizer are unused pieces), or 0. */
static etch_status read_tokenizer_json(const char *dir, imp_model *m, int32_t vocab_hint, etch_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    cJSON *j;
    etch_status st = read_json(path, &j, err);
    if (st) return st;
    sbuf blob = {0};
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const char *mtype = model ? opt_string(model, "type") : NULL;
    const cJSON *vocab = model ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : NULL;
    const cJSON *merges = model ? cJSON_GetObjectItemCaseSensitive(model, "merges") : NULL;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(j, "added_tokens");
    if (!mtype || strcmp(mtype, "BPE") != 0) {
        st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: tokenizer model '%s' is not supported (BPE)", path, mtype ? mtype : "?");
        goto done;
    }
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: model.vocab or model.merges is missing", path);
        goto done;
    }
    if ((st = read_pretokenizer(path, cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), m, err)) ||
        (st = read_normalizer(path, cJSON_GetObjectItemCaseSensitive(j, "normalizer"), m, err)))
        goto done;
    if (!m->tok_byte_level && find_typed(cJSON_GetObjectItemCaseSensitive(j, "decoder"), "decoders", "ByteLevel"))
        m->tok_byte_level = 1;
    m->tok_model = TOK_MODEL_MERGES;
    m->tok_byte_fallback = opt_bool(model, "byte_fallback", 0);
    m->tok_ignore_merges = opt_bool(model, "ignore_merges", 0);
    m->tok_match_added = 1;
    /* Vocabulary size: the largest id + 1 over vocab and added tokens, or the model's rows. */
    int32_t n = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (1 << 24)) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: vocab entry '%.40s' has a bad id", path, e->string);
            goto done;
        }
        if (e->valueint + 1 > n) n = e->valueint + 1;
    }
    for (const cJSON *e = cJSON_IsArray(added) ? added->child : NULL; e; e = e->next) {
        int32_t id;
        if ((st = get_int(e, path, "id", 0, (1 << 24) - 1, &id, err))) goto done;
        if (id + 1 > n) n = id + 1;
    }
    if (vocab_hint > 0) {
        if (vocab_hint < n) {
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: token ids reach %d but config.json's vocab_size is %d", path, n - 1,
                           vocab_hint);
            goto done;
        }
        n = vocab_hint;
    }
    m->vocab_size = n;
    const char **text = base_calloc((size_t)n, sizeof *text); /* the string of each id, from vocab or added */
    m->tok_types = base_malloc((size_t)n);
    m->tok_offsets = base_malloc(((size_t)n + 1) * sizeof *m->tok_offsets);
    if (!text || !m->tok_types || !m->tok_offsets) {
        base_free(text);
        st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
        goto done;
    }
    memset(m->tok_types, TOK_UNUSED, (size_t)n);
    for (const cJSON *e = vocab->child; e; e = e->next) {
        text[e->valueint] = e->string;
        m->tok_types[e->valueint] = TOK_NORMAL;
    }
    for (const cJSON *e = cJSON_IsArray(added) ? added->child : NULL; e; e = e->next) {
        const char *content = opt_string(e, "content");
        int32_t id = cJSON_GetObjectItemCaseSensitive(e, "id")->valueint;
        if (!content || !*content) {
            base_free(text);
            st = base_fail(err, ETCH_ERR_FORMAT, "%s: added token %d has no content", path, id);
            goto done;
        }
        text[id] = content;
        m->tok_types[id] = opt_bool(e, "special", 0) ? TOK_CONTROL : TOK_USER;
    }
    const char *unk = opt_string(model, "unk_token");
    m->unk_id = -1;
    for (int32_t i = 0; i < n && !st; i++) {
        m->tok_offsets[i] = (int32_t)blob.n;
        if (!text[i]) continue;
        if (unk && !strcmp(text[i], unk)) m->unk_id = i;
        if (m->tok_types[i] == TOK_NORMAL) {
            size_t l = strlen(text[i]);
            if (m->tok_byte_fallback && l == 6 && !memcmp(text[i], "<0x", 3) && text[i][5] == '>') {
                m->tok_types[i] = TOK_BYTE;
                if (!sb_put(&blob, text[i], 6)) st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
            } else if (!raw_piece(text[i], m->tok_byte_level, &blob)) {
                st = base_fail(err, ETCH_ERR_FORMAT, "%s: vocab piece %d '%.40s' is not valid %s", path, i, text[i],
                               m->tok_byte_level ? "byte-level text" : "UTF-8");
            }
        } else if (!sb_put(&blob, text[i], strlen(text[i]))) { /* added tokens are raw text */
            st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
        }
        if (blob.n > INT32_MAX) st = base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: vocabulary text over 2 GiB", path);
    }
    base_free(text);
    if (st) goto done;
    m->tok_offsets[n] = (int32_t)blob.n;
    m->tok_blob = blob.p ? blob.p : base_malloc(1);
    m->tok_blob_size = blob.n;
    blob.p = NULL;

    /* Merges, as id triples. A lookup table of the pieces is needed first: a tokenizer without merges. */
    {
        tok_tokenizer look;
        tok_spec sp;
        m->tok_n_merges = 0;
        imp_tok_spec(m, &sp);
        sp.model = TOK_MODEL_MERGES;
        sp.pretok = NULL;
        sp.byte_level = 0;
        if ((st = tok_init(&look, &sp, path, err))) goto done;
        int32_t nm = cJSON_GetArraySize(merges);
        m->tok_merges = base_malloc((size_t)(nm ? nm : 1) * 3 * sizeof *m->tok_merges);
        sbuf a = {0}, b = {0};
        if (!m->tok_merges) st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
        int32_t k = 0;
        for (const cJSON *e = merges->child; e && !st; e = e->next, k++) {
            const char *l = NULL, *r = NULL;
            char *sp_copy = NULL;
            if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2) {
                l = cJSON_GetArrayItem(e, 0)->valuestring;
                r = cJSON_GetArrayItem(e, 1)->valuestring;
            } else if (cJSON_IsString(e) && e->valuestring[0] && (sp_copy = base_strdup(e->valuestring)) &&
                       strchr(sp_copy + 1, ' ')) {
                char *cut = strchr(sp_copy + 1, ' '); /* "a b": the first space after the first character */
                *cut = '\0';
                l = sp_copy, r = cut + 1;
            }
            a.n = b.n = 0;
            if (!l || !r || !raw_piece(l, m->tok_byte_level, &a) || !raw_piece(r, m->tok_byte_level, &b)) {
                st = base_fail(err, ETCH_ERR_FORMAT, "%s: merge %d is malformed", path, k);
            } else {
                int32_t li = tok_find(&look, a.p, a.n), ri = tok_find(&look, b.p, b.n), mi = -1;
                if (li >= 0 && ri >= 0 && sb_put(&a, b.p, b.n)) mi = tok_find(&look, a.p, a.n);
                if (li < 0 || ri < 0 || mi < 0)
                    st = base_fail(err, ETCH_ERR_FORMAT, "%s: merge %d ('%s' + '%s') names a piece not in the vocabulary",
                                   path, k, l, r);
                m->tok_merges[3 * k] = li, m->tok_merges[3 * k + 1] = ri, m->tok_merges[3 * k + 2] = mi;
            }
            base_free(sp_copy);
        }
        m->tok_n_merges = st ? 0 : k;
        base_free(a.p);
        base_free(b.p);
        tok_free(&look);
        if (st) goto done;
    }

    /* tokenizer_config.json: BOS, EOS, whether BOS is added, the chat template. */
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    m->bos_id = -1;
    if (path_exists(path)) {
        cJSON *cfg;
        if ((st = read_json(path, &cfg, err))) goto done;
        tok_tokenizer look;
        tok_spec sp;
        imp_tok_spec(m, &sp);
        sp.pretok = NULL;
        if ((st = tok_init(&look, &sp, path, err))) {
            cJSON_Delete(cfg);
            goto done;
        }
        int32_t bos = config_token(cfg, "bos_token", m, &look), eos = config_token(cfg, "eos_token", m, &look);
        /* add_bos_token when stated; else the post-processor's template decides (Llama 3). */
        int add_bos = opt_bool(cfg, "add_bos_token", -1);
        if (add_bos < 0) {
            const cJSON *pp = cJSON_GetObjectItemCaseSensitive(j, "post_processor");
            const cJSON *single = pp ? cJSON_GetObjectItemCaseSensitive(pp, "single") : NULL;
            const cJSON *first = cJSON_IsArray(single) ? cJSON_GetArrayItem(single, 0) : NULL;
            const cJSON *spt = first ? cJSON_GetObjectItemCaseSensitive(first, "SpecialToken") : NULL;
            add_bos = spt && bos >= 0 && opt_string(spt, "id") && !strcmp(opt_string(spt, "id"), m->tok_blob + m->tok_offsets[bos]);
        }
        if (add_bos && bos >= 0) m->bos_id = bos;
        if (eos >= 0 && m->n_eos < 16) {
            int dup = 0;
            for (int i = 0; i < m->n_eos; i++) dup |= m->eos_ids[i] == eos;
            if (!dup) m->eos_ids[m->n_eos++] = eos;
        }
        const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        const char *jinja = cJSON_IsString(tpl) ? tpl->valuestring : NULL;
        for (const cJSON *e = cJSON_IsArray(tpl) ? tpl->child : NULL; e && !jinja; e = e->next) /* named templates */
            if (opt_string(e, "name") && !strcmp(opt_string(e, "name"), "default")) jinja = opt_string(e, "template");
        const char *kind = imp_recognize_template(jinja);
        if (jinja && !(m->chat_jinja = base_strdup(jinja))) st = base_fail(err, ETCH_ERR_NOMEM, "out of memory");
        if (!kind) snprintf(m->chat_template, sizeof m->chat_template, "?");
        else snprintf(m->chat_template, sizeof m->chat_template, "%s", kind);
        tok_free(&look);
        cJSON_Delete(cfg);
    }
done:
    base_free(blob.p);
    cJSON_Delete(j);
    return st;
}

static void read_generation_config(const char *dir, imp_model *m) {
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    cJSON *g;
    if (!path_exists(path) || read_json(path, &g, NULL)) return;
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(g, "eos_token_id");
    const cJSON *one = cJSON_IsNumber(eos) ? eos : NULL;
    for (const cJSON *e = one ? one : cJSON_IsArray(eos) ? eos->child : NULL; e; e = one ? NULL : e->next) {
        if (!cJSON_IsNumber(e) || e->valueint < 0 || e->valueint >= m->vocab_size) continue;
        int dup = 0;
        for (int i = 0; i < m->n_eos; i++) dup |= m->eos_ids[i] == e->valueint;
        if (!dup && m->n_eos < 16) m->eos_ids[m->n_eos++] = e->valueint;
    }
    cJSON_Delete(g);
}

/* Gemma's RMSNorm scales by (1 + w): the program stores 1 + w (in f32, as Hugging Face computes it),
 * so the runtime's norm is the same for every family. */
static etch_status shift_norms(imp_model *m, etch_error *err) {
    for (int32_t i = 0; i < m->n_tensors; i++) {
        imp_tensor *t = &m->tensors[i];
        size_t len = strlen(t->name);
        if (t->matrix || len < 11 || strcmp(t->name + len - 11, "norm.weight")) continue;
        float *v = imp_own(m, base_malloc((size_t)t->dims[0] * sizeof *v));
        if (!v) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
        imp_tensor_f32(t, v);
        for (uint64_t k = 0; k < t->dims[0]; k++) v[k] = 1.0f + v[k];
        t->data = v;
        t->src_type = IMP_F32;
    }
    return ETCH_OK;
}

etch_status imp_hf_tokenizer(const char *path, imp_model *m, etch_error *err) {
    memset(m, 0, sizeof *m);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    if (!is_dir(path)) { /* a tokenizer.json: its folder */
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(m->source, sizeof m->source, "Hugging Face tokenizer %s", path);
    unsigned failures = base_alloc_failures();
    etch_status st = base_nomem_since(read_tokenizer_json(dir, m, 0, err), failures, err, path);
    if (st) imp_model_free(m);
    return st;
}

etch_status imp_hf_config(const char *dir, imp_model *m, etch_error *err) {
    memset(m, 0, sizeof *m);
    etch_status st = read_config(dir, m, err);
    imp_model_free(m);
    return st;
}

etch_status imp_safetensors(const char *path, imp_model *m, etch_error *err) {
    memset(m, 0, sizeof *m);
    snprintf(m->model_type, sizeof m->model_type, "llama");
    etch_status st = read_safetensors(path, m, NULL, NULL, err);
    if (st) imp_model_free(m);
    return st;
}

etch_status imp_hf(const char *dir, imp_model *m, etch_error *err) {
    memset(m, 0, sizeof *m);
    if (!is_dir(dir)) return base_fail(err, ETCH_ERR_IO, "%s: not a folder (a Hugging Face model folder is expected)", dir);
    snprintf(m->source, sizeof m->source, "Hugging Face folder %s", dir);
    etch_status st = read_config(dir, m, err);
    int32_t eos_cfg[16], n_eos_cfg = m->n_eos;
    memcpy(eos_cfg, m->eos_ids, sizeof eos_cfg);
    m->n_eos = 0;
    unsigned failures = base_alloc_failures();
    if (!st) st = base_nomem_since(read_tokenizer_json(dir, m, m->vocab_size, err), failures, err, dir);
    if (!st) {
        for (int i = 0; i < n_eos_cfg && m->n_eos < 16; i++) { /* config.json's EOS ids join the tokenizer's */
            int dup = 0;
            for (int k = 0; k < m->n_eos; k++) dup |= m->eos_ids[k] == eos_cfg[i];
            if (!dup && eos_cfg[i] >= 0 && eos_cfg[i] < m->vocab_size) m->eos_ids[m->n_eos++] = eos_cfg[i];
        }
        read_generation_config(dir, m);
        st = read_weights(dir, m, err);
    }
    if (!st && m->norm_plus_one) st = shift_norms(m, err);
    if (st) imp_model_free(m);
    return st;
}

