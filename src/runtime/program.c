/* runtime: opening a program: map, validate metadata and tensors, build the tokenizer. */
#include "runtime.h"

#include "../kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Required scalar and array lookups; each failure names the file and the key. */
static etch_status need_meta(const etch_program *p, const char *path, const char *key, uint32_t type,
                             uint32_t count, const fmt_meta **out, etch_error *err) {
    const fmt_meta *m = fmt_find_meta(&p->file, key);
    if (!m) return base_fail(err, ETCH_ERR_FORMAT, "%s: metadata '%s' is missing", path, key);
    if (m->type != type || (count && m->count != count))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: metadata '%s' has type %u with %u values; expected type %u%s",
                         path, key, m->type, m->count, type, count == 1 ? " with one value" : "");
    *out = m;
    return ETCH_OK;
}

static etch_status need_i32(const etch_program *p, const char *path, const char *key, int32_t lo, int32_t hi,
                            int32_t *v, etch_error *err) {
    const fmt_meta *m = NULL;
    etch_status st = need_meta(p, path, key, FMT_I32, 1, &m, err);
    if (st) return st;
    memcpy(v, m->data, 4);
    if (*v < lo || *v > hi)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: metadata '%s' = %d is outside %d..%d", path, key, *v, lo, hi);
    return ETCH_OK;
}

static etch_status need_f32(const etch_program *p, const char *path, const char *key, float *v, etch_error *err) {
    const fmt_meta *m = NULL;
    etch_status st = need_meta(p, path, key, FMT_F32, 1, &m, err);
    if (st) return st;
    memcpy(v, m->data, 4);
    if (!(*v > 0.0f) || *v > 1e9f)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: metadata '%s' = %g is not a positive finite value", path, key,
                         (double)*v);
    return ETCH_OK;
}

static etch_status need_str(const etch_program *p, const char *path, const char *key, const char **v,
                            etch_error *err) {
    const fmt_meta *m = NULL;
    etch_status st = need_meta(p, path, key, FMT_STR, 0, &m, err);
    if (st) return st;
    *v = m->data;
    return ETCH_OK;
}

/* Optional keys: absent means the default; present must have the right type. */
static etch_status opt_i32(const etch_program *p, const char *path, const char *key, int32_t lo, int32_t hi,
                           int32_t dflt, int32_t *v, etch_error *err) {
    *v = dflt;
    return fmt_find_meta(&p->file, key) ? need_i32(p, path, key, lo, hi, v, err) : ETCH_OK;
}

static etch_status opt_f32(const etch_program *p, const char *path, const char *key, float dflt, float *v,
                           etch_error *err) {
    *v = dflt;
    return fmt_find_meta(&p->file, key) ? need_f32(p, path, key, v, err) : ETCH_OK;
}

static etch_status opt_str(const etch_program *p, const char *path, const char *key, const char *dflt,
                           const char **v, etch_error *err) {
    *v = dflt;
    return fmt_find_meta(&p->file, key) ? need_str(p, path, key, v, err) : ETCH_OK;
}

/* A tensor: present, of the given dtype, and exactly the shape the config implies (cols 0: a vector).
 * Matrices are packed in 16-row panels, so their stored row count is rounded up to a panel. */
static etch_status need_tensor(const etch_program *p, const char *path, const char *name, uint32_t dtype,
                               uint64_t rows, uint64_t cols, const void **out, etch_error *err) {
    const fmt_tensor *t = fmt_find_tensor(&p->file, name);
    if (!t) return base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
    int ok = t->dtype == dtype && (cols == 0 ? (t->ndim == 1 && t->dims[0] == rows)
                                             : (t->ndim == 2 && t->dims[0] == rows && t->dims[1] == cols));
    if (!ok)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%s' is %s with %u dims [%llu, %llu]; expected %s [%llu%s%llu]",
                         path, name, fmt_dtype_name(t->dtype), t->ndim, (unsigned long long)t->dims[0],
                         (unsigned long long)(t->ndim > 1 ? t->dims[1] : 0), fmt_dtype_name(dtype),
                         (unsigned long long)rows, cols ? ", " : "", (unsigned long long)cols);
    *out = t->data;
    return ETCH_OK;
}

static etch_status load_meta(etch_program *p, const char *path, etch_error *err) {
    etch_method_meta *m = &p->meta;
    const int32_t big = 1 << 20;
    etch_status st;
    const char *layout;
    if ((st = need_str(p, path, "weight_layout", &layout, err))) return st;
    if (strcmp(layout, "packed16"))
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: weight_layout '%s' is not supported (packed16): re-export it", path,
                         layout);
    if ((st = need_str(p, path, "arch", &m->arch, err)) || (st = need_str(p, path, "dtype", &m->dtype, err)) ||
        (st = need_str(p, path, "rope_style", &m->rope_style, err)) ||
        (st = need_str(p, path, "tokenizer.model", &m->tokenizer, err)))
        return st;
    if (strcmp(m->arch, "llama") != 0)
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (llama)", path, m->arch);
    if (strcmp(m->dtype, "f32") && strcmp(m->dtype, "f16") && strcmp(m->dtype, "bf16"))
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: dtype '%s' is not supported (f32, f16, bf16)", path, m->dtype);
    if (strcmp(m->tokenizer, "sp-bpe") != 0 && strcmp(m->tokenizer, "bpe") != 0)
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: tokenizer '%s' is not supported (sp-bpe, bpe)", path,
                         m->tokenizer);
    int rope = strcmp(m->rope_style, "adjacent") == 0 ? KERN_ROPE_ADJACENT
               : strcmp(m->rope_style, "half") == 0  ? KERN_ROPE_HALF
                                                     : -1;
    if (rope < 0)
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: rope_style '%s' is unknown (adjacent, half)", path,
                         m->rope_style);
    if ((st = opt_str(p, path, "model_type", "llama", &m->model_type, err)) ||
        (st = opt_str(p, path, "chat_template", "", &m->chat_template, err)))
        return st;
    if ((st = need_i32(p, path, "vocab_size", 1, 1 << 24, &m->vocab_size, err)) ||
        (st = need_i32(p, path, "n_layers", 1, 4096, &m->n_layers, err)) ||
        (st = need_i32(p, path, "dim", 1, big, &m->dim, err)) ||
        (st = need_i32(p, path, "hidden_dim", 1, big, &m->hidden_dim, err)) ||
        (st = need_i32(p, path, "n_heads", 1, 4096, &m->n_heads, err)) ||
        (st = need_i32(p, path, "n_kv_heads", 1, m->n_heads, &m->n_kv_heads, err)) ||
        (st = need_i32(p, path, "head_dim", 2, 4096, &m->head_dim, err)) ||
        (st = need_i32(p, path, "max_context_len", 1, big, &m->max_context_len, err)) ||
        (st = need_i32(p, path, "max_seq_len", 1, m->max_context_len, &m->max_seq_len, err)) ||
        (st = need_i32(p, path, "use_kv_cache", 1, 1, &m->use_kv_cache, err)) ||
        (st = need_i32(p, path, "enable_dynamic_shape", 0, 1, &m->enable_dynamic_shape, err)) ||
        (st = need_i32(p, path, "bos_id", -1, m->vocab_size - 1, &m->bos_id, err)) ||
        (st = need_i32(p, path, "tied_embeddings", 0, 1, &m->tied_embeddings, err)) ||
        (st = need_f32(p, path, "norm_eps", &m->norm_eps, err)) ||
        (st = need_f32(p, path, "rope_base", &m->rope_base, err)))
        return st;
    if (m->n_heads % m->n_kv_heads != 0 || m->head_dim % 2 != 0)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: n_heads %d is not a multiple of n_kv_heads %d, or head_dim %d is odd",
                         path, m->n_heads, m->n_kv_heads, m->head_dim);
    if (m->enable_dynamic_shape != (m->max_seq_len > 1))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: enable_dynamic_shape %d disagrees with max_seq_len %d", path,
                         m->enable_dynamic_shape, m->max_seq_len);
    const fmt_meta *eos = NULL;
    if ((st = need_meta(p, path, "eos_ids", FMT_I32, 0, &eos, err))) return st;
    if (eos->count > 64) return base_fail(err, ETCH_ERR_FORMAT, "%s: %u EOS ids (64 at most)", path, eos->count);
    m->n_eos = (int32_t)eos->count;
    m->eos_ids = eos->data;
    for (int32_t i = 0; i < m->n_eos; i++)
        if (m->eos_ids[i] < 0 || m->eos_ids[i] >= m->vocab_size)
            return base_fail(err, ETCH_ERR_FORMAT, "%s: EOS id %d is outside the vocabulary", path, m->eos_ids[i]);

    model_config *c = &p->cfg;
    *c = (model_config){m->dim, m->hidden_dim, m->n_layers, m->n_heads, m->n_kv_heads, m->head_dim,
                        m->vocab_size, m->max_context_len, m->max_seq_len, m->norm_eps, rope, NULL, 0, 0,
                        MODEL_ACT_SILU, 0, 1.0f, 1.0f, 0.0f, NULL, NULL, NULL, 0, 0};
    const char *act;
    float qpas = (float)m->head_dim;
    if ((st = opt_i32(p, path, "qkv_bias", 0, 1, 0, &c->qkv_bias, err)) ||
        (st = opt_i32(p, path, "quant.act_group", 0, KERN_INT_GROUP_MAX, 0, &c->act_group, err)) ||
        (st = opt_i32(p, path, "qk_norm", 0, 1, 0, &c->qk_norm, err)) ||
        (st = opt_i32(p, path, "post_norms", 0, 1, 0, &c->post_norms, err)) ||
        (st = opt_str(p, path, "act", "silu", &act, err)) ||
        (st = opt_f32(p, path, "embd_scale", 1.0f, &c->embd_scale, err)) ||
        (st = opt_f32(p, path, "query_pre_attn_scalar", qpas, &qpas, err)) ||
        (st = opt_f32(p, path, "final_logit_softcap", 0.0f, &c->final_softcap, err)))
        return st;
    c->act = !strcmp(act, "silu") ? MODEL_ACT_SILU : !strcmp(act, "gelu_tanh") ? MODEL_ACT_GELU_TANH : -1;
    if (c->act < 0) return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: act '%s' is not supported (silu, gelu_tanh)", path, act);
    c->score_div = sqrtf(qpas);

    /* Attention windows, layer by layer, and the cache rows they need. */
    p->window = base_calloc((size_t)m->n_layers, sizeof *p->window);
    p->kv_rows = base_calloc((size_t)m->n_layers, sizeof *p->kv_rows);
    if (!p->window || !p->kv_rows) return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate the layer windows", path);
    const fmt_meta *lw = fmt_find_meta(&p->file, "layer_window");
    if (lw) {
        if ((st = need_meta(p, path, "layer_window", FMT_I32, (uint32_t)m->n_layers, &lw, err))) return st;
        memcpy(p->window, lw->data, (size_t)m->n_layers * sizeof *p->window);
    }
    if ((st = opt_str(p, path, "kv_type", ETCH_DEFAULT_KV_TYPE, &m->kv_type, err))) return st;
    int kv_type = kern_kv_type_of(m->kv_type);
    if (kv_type < 0)
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: kv_type '%s' is not supported (f32, f16, q8)", path, m->kv_type);
    for (int l = 0; l < m->n_layers; l++) {
        if (p->window[l] < 0 || p->window[l] > big)
            return base_fail(err, ETCH_ERR_FORMAT, "%s: layer_window[%d] = %d is outside 0..%d", path, l, p->window[l], big);
        if (p->window[l] >= m->max_context_len) p->window[l] = 0; /* the window covers the whole context */
        p->kv_rows[l] = model_kv_rows(p->window[l], m->max_seq_len, m->max_context_len);
        if (p->window[l]) {
            m->n_window_layers++;
            if (p->window[l] > m->sliding_window) m->sliding_window = p->window[l];
        }
        m->kv_cache_bytes += (int64_t)model_kv_bytes(c, kv_type, (size_t)p->kv_rows[l]);
        m->kv_cache_full_bytes += (int64_t)model_kv_bytes(c, kv_type, (size_t)m->max_context_len);
    }
    m->layer_window = p->window;
    c->window = p->window;
    c->kv_rows = p->kv_rows;

    /* RoPE frequencies, computed once here, with the recorded scaling. */
    p->inv_freq = base_malloc((size_t)m->head_dim / 2 * sizeof *p->inv_freq);
    if (!p->inv_freq) return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate the RoPE table", path);
    kern_rope_freqs(p->inv_freq, m->head_dim, m->rope_base);
    const char *scaling;
    if ((st = opt_str(p, path, "rope_scaling", "none", &scaling, err))) return st;
    if (strcmp(scaling, "llama3") == 0) {
        float f, lo, hi, orig;
        if ((st = need_f32(p, path, "rope_scaling.factor", &f, err)) ||
            (st = need_f32(p, path, "rope_scaling.low_freq_factor", &lo, err)) ||
            (st = need_f32(p, path, "rope_scaling.high_freq_factor", &hi, err)) ||
            (st = need_f32(p, path, "rope_scaling.original_context_len", &orig, err)))
            return st;
        if (!(hi > lo)) return base_fail(err, ETCH_ERR_FORMAT, "%s: rope_scaling high_freq_factor <= low_freq_factor", path);
        kern_rope_llama3(p->inv_freq, m->head_dim, f, lo, hi, orig);
    } else if (strcmp(scaling, "linear") == 0) { /* positions divided by the factor */
        float f;
        if ((st = need_f32(p, path, "rope_scaling.factor", &f, err))) return st;
        for (int i = 0; i < m->head_dim / 2; i++) p->inv_freq[i] /= f;
    } else if (strcmp(scaling, "none") != 0) {
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: rope_scaling '%s' is not supported (none, llama3, linear)", path,
                         scaling);
    }
    const fmt_meta *rf = fmt_find_meta(&p->file, "rope_freq_factors");
    if (rf) { /* GGUF's rope_freqs.weight: each frequency divided by its factor, as llama.cpp does */
        if (rf->type != FMT_F32 || rf->count != (uint32_t)(m->head_dim / 2))
            return base_fail(err, ETCH_ERR_FORMAT, "%s: rope_freq_factors holds %u values, not head_dim / 2 = %d", path,
                             rf->count, m->head_dim / 2);
        const float *f = rf->data;
        for (int i = 0; i < m->head_dim / 2; i++) {
            if (!(f[i] > 0)) return base_fail(err, ETCH_ERR_FORMAT, "%s: rope_freq_factors[%d] is not positive", path, i);
            p->inv_freq[i] /= f[i];
        }
    }
    c->inv_freq = c->inv_freq_local = p->inv_freq;
    /* Windowed layers with their own base (Gemma-3: 10,000 beside the global layers' 1,000,000) and no scaling. */
    if (fmt_find_meta(&p->file, "rope_base_local")) {
        float base;
        if ((st = need_f32(p, path, "rope_base_local", &base, err))) return st;
        p->inv_freq_local = base_malloc((size_t)m->head_dim / 2 * sizeof *p->inv_freq_local);
        if (!p->inv_freq_local) return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate the RoPE table", path);
        kern_rope_freqs(p->inv_freq_local, m->head_dim, base);
        c->inv_freq_local = p->inv_freq_local;
    }
    return ETCH_OK;
}

void rt_add_scales(fmt_writer *w, const char *name, int scale_type, int sub_groups, const uint64_t sdims[2],
                   const void *scales, const void *mins, size_t d_at) {
    uint32_t dt = scale_type == KERN_SCALE_S8 ? FMT_DT_Q8 : scale_type == KERN_F16 ? FMT_DT_F16 : FMT_DT_F32;
    uint64_t ddims[2] = {sdims[0], sub_groups > 0 ? sdims[1] / (uint64_t)sub_groups : 0};
    const void *tabs[2] = {scales, mins};
    for (int i = 0; i < 2; i++) {
        if (!tabs[i]) continue;
        char sname[128];
        snprintf(sname, sizeof sname, "%s.%s", name, i ? "min" : "scale");
        fmt_add_tensor(w, sname, dt, 2, sdims, tabs[i]);
        if (scale_type != KERN_SCALE_S8) continue;
        snprintf(sname, sizeof sname, "%s.%s", name, i ? "min_d" : "scale_d");
        fmt_add_tensor(w, sname, FMT_DT_F16, 2, ddims, (const uint8_t *)tabs[i] + d_at);
    }
}

/* A quantized matrix's scales or mins ('<name><suffix>') as the loader finds them: f32 or f16
 * [prows, n_groups], or two levels (KERN_SCALE_S8): int8, dtype q8, [prows, n_groups] with f16
 * factors '<name><suffix>_d' [prows, n_groups / sub_groups], sub_groups a power of two dividing
 * n_groups. A table of mins (is_min) must be stored as the scales are (m->scale_type, m->sub_groups). */
static etch_status need_scales(etch_program *p, const char *path, const char *name, const char *suffix, int is_min,
                               uint64_t prows, int n_groups, kern_mat *m, etch_error *err) {
    char sname[112];
    snprintf(sname, sizeof sname, "%s%s", name, suffix);
    const fmt_tensor *s = fmt_find_tensor(&p->file, sname);
    int type = s->dtype == FMT_DT_Q8 ? KERN_SCALE_S8 : s->dtype == FMT_DT_F16 ? KERN_F16 : KERN_F32;
    if (is_min && type != m->scale_type)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: '%s' is %s where the scales are %s", path, sname,
                         fmt_dtype_name(s->dtype), m->scale_type == KERN_SCALE_S8 ? "q8" : m->scale_type == KERN_F16 ? "f16" : "f32");
    const void **tab = is_min ? &m->mins : &m->scales;
    etch_status st = need_tensor(p, path, sname, type == KERN_SCALE_S8 ? FMT_DT_Q8 : type == KERN_F16 ? FMT_DT_F16 : FMT_DT_F32,
                                 prows, (uint64_t)n_groups, tab, err);
    if (st) return st;
    m->scale_type = type;
    if (type != KERN_SCALE_S8) return ETCH_OK;
    snprintf(sname, sizeof sname, "%s%s_d", name, suffix);
    const fmt_tensor *d = fmt_find_tensor(&p->file, sname);
    uint64_t n_d = d && d->ndim == 2 ? d->dims[1] : 0;
    uint64_t per = n_d ? (uint64_t)n_groups / n_d : 0;
    if (!n_d || n_groups % n_d || (per & (per - 1)) || (is_min && (uint64_t)(n_groups / m->sub_groups) != n_d))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: int8 scales '%s%s' need f16 factors '%s' [%llu, %d / a power of two%s]",
                         path, name, suffix, sname, (unsigned long long)prows, n_groups, is_min ? ", as the scales'" : "");
    m->sub_groups = n_groups / (int)n_d;
    return need_tensor(p, path, sname, FMT_DT_F16, prows, n_d, (const void **)(is_min ? &m->min_d : &m->scale_d), err);
}

/* A weight matrix [rows, cols] (rows padded to a panel): f32, f16, bf16, or q8/q4/i8/i4 with its
 * scales in '<name>.scale' [padded rows, n_groups] (need_scales), the group size following from cols and
 * n_groups, and maybe mins in '<name>.min', of the scales' type and shape (kern_mat.mins). i8/i4 (int8
 * activations) need an even cols and even groups of at most KERN_INT_GROUP_MAX, and may carry static
 * activation parameters '<name>.act' (f32 [2]: scale, zero point) with their group sums '<name>.wsum'
 * (f32, shaped as the scales). */
static etch_status need_matrix(etch_program *p, const char *path, const char *name, uint64_t rows, uint64_t cols,
                               kern_mat *m, etch_error *err) {
    const fmt_tensor *t = fmt_find_tensor(&p->file, name);
    if (!t) return base_fail(err, ETCH_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
    static const int kern_of[] = {[FMT_DT_F32] = KERN_F32, [FMT_DT_F16] = KERN_F16, [FMT_DT_BF16] = KERN_BF16,
                                  [FMT_DT_Q8] = KERN_Q8, [FMT_DT_Q4] = KERN_Q4, [FMT_DT_I8] = KERN_I8,
                                  [FMT_DT_I4] = KERN_I4};
    *m = (kern_mat){0};
    m->type = kern_of[t->dtype]; /* the reader admits only known dtypes */
    uint64_t prows = (uint64_t)kern_packed_rows((int)rows);
    etch_status st = need_tensor(p, path, name, t->dtype, prows, cols, &m->w, err);
    if (st || !kern_is_quantized(m->type)) return st;
    char sname[96];
    snprintf(sname, sizeof sname, "%s.scale", name);
    const fmt_tensor *s = fmt_find_tensor(&p->file, sname);
    if (!s || s->ndim != 2 || s->dims[1] < 1 || s->dims[1] > cols)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: quantized tensor '%s' has no scales '%s' [rows, 1..%llu]", path,
                         name, sname, (unsigned long long)cols);
    int n_groups = (int)s->dims[1];
    m->group = kern_q_group_of((int)cols, n_groups);
    if (kern_q_groups((int)cols, m->group) != n_groups)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: '%s' has %d groups, which no group size gives for %llu columns",
                         path, sname, n_groups, (unsigned long long)cols);
    if ((st = need_scales(p, path, name, ".scale", 0, prows, n_groups, m, err))) return st;
    snprintf(sname, sizeof sname, "%s.min", name); /* a GGUF's Q4_1/Q4_K/Q5_1/Q5_K: w = u * scale + min */
    if (fmt_find_tensor(&p->file, sname) && (st = need_scales(p, path, name, ".min", 1, prows, n_groups, m, err)))
        return st;
    if (!kern_is_int_dot(m->type)) return ETCH_OK;
    if (cols % 2 || m->group % 2 || m->group > KERN_INT_GROUP_MAX)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: '%s' (%s) has %llu columns in groups of %d: integer-dot matrices need "
                         "even columns and even groups of at most %d", path, name, fmt_dtype_name(t->dtype),
                         (unsigned long long)cols, m->group, KERN_INT_GROUP_MAX);
    p->cfg.int_dot = 1;
    snprintf(sname, sizeof sname, "%s.act", name);
    if (!fmt_find_tensor(&p->file, sname)) { /* dynamic activations: per row, or per quant.act_group values */
        int G = p->cfg.act_group;
        if (G && (G % 2 || G % m->group))
            return base_fail(err, ETCH_ERR_FORMAT, "%s: quant.act_group %d is not an even multiple of '%s''s group of %d: "
                             "each group of its weights needs one input scale", path, G, name, m->group);
        m->act_group = G;
        return ETCH_OK;
    }
    if (m->mins) /* the kernels add min times the inputs' sum, which a zero point would shift */
        return base_fail(err, ETCH_ERR_FORMAT, "%s: '%s' has mins and static activations '%s': etch takes one or the other",
                         path, name, sname);
    if ((st = need_tensor(p, path, sname, FMT_DT_F32, 2, 0, (const void **)&m->act, err))) return st;
    /* a scale that is positive and finite, a zero point that is an integer in int8's range */
    if (!(m->act[0] > 0 && m->act[0] < 1e30f) || !(m->act[1] >= -128 && m->act[1] <= 127) || m->act[1] != (float)(int)m->act[1])
        return base_fail(err, ETCH_ERR_FORMAT, "%s: '%s' = (%g, %g) is not a positive scale and an int8 zero point", path,
                         sname, m->act[0], m->act[1]);
    snprintf(sname, sizeof sname, "%s.wsum", name);
    if ((st = need_tensor(p, path, sname, FMT_DT_F32, prows, (uint64_t)n_groups, (const void **)&m->wsum, err)))
        return st;
    /* The sums are used in int32 arithmetic: each must be an integer a group of int8 values can make. */
    for (uint64_t i = 0; i < prows * (uint64_t)n_groups; i++)
        if (!(fabsf(m->wsum[i]) <= 128.0f * (float)m->group) || m->wsum[i] != (float)(int32_t)m->wsum[i])
            return base_fail(err, ETCH_ERR_FORMAT, "%s: '%s' entry %llu (%g) is not a sum of %d int8 values", path, sname,
                             (unsigned long long)i, m->wsum[i], m->group);
    return ETCH_OK;
}

/* Matrices that read the same input share its int8 quantization: their integer-dot members must
 * all quantize it per row, or all with the same static scale and zero point. */
static etch_status same_site(const char *path, int layer, const char *what, const kern_mat *a, const kern_mat *b,
                             const kern_mat *c, etch_error *err) {
    const kern_mat *ms[3] = {a, b, c}, *first = NULL;
    for (int i = 0; i < 3; i++) {
        if (!ms[i] || !kern_is_int_dot(ms[i]->type)) continue;
        if (!first) first = ms[i];
        else if (!first->act != !ms[i]->act ||
                 (first->act && (first->act[0] != ms[i]->act[0] || first->act[1] != ms[i]->act[1])))
            return base_fail(err, ETCH_ERR_FORMAT, "%s: layer %d: %s read one input but disagree on its activation "
                             "quantization (.act)", path, layer, what);
    }
    return ETCH_OK;
}

static etch_status load_weights(etch_program *p, const char *path, etch_error *err) {
    model_config *c = &p->cfg;
    uint64_t dim = (uint64_t)c->dim, q_dim = (uint64_t)c->n_heads * c->head_dim, hd = (uint64_t)c->head_dim;
    uint64_t kv_dim = (uint64_t)c->n_kv_heads * c->head_dim, hid = (uint64_t)c->hidden_dim;
    model_weights *w = &p->w;
    w->layers = base_calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers) return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate the layer table", path);
    etch_status st;
    if ((st = need_matrix(p, path, "token_embd.weight", (uint64_t)c->vocab_size, dim, &w->tok_embd, err)) ||
        (st = need_tensor(p, path, "output_norm.weight", FMT_DT_F32, dim, 0, (const void **)&w->out_norm, err)))
        return st;
    if (p->meta.tied_embeddings) w->output = w->tok_embd;
    else if ((st = need_matrix(p, path, "output.weight", (uint64_t)c->vocab_size, dim, &w->output, err)))
        return st;
    for (int l = 0; l < c->n_layers; l++) {
        model_layer *L = &w->layers[l];
        struct { const char *name; uint64_t rows, cols; const void **vec; kern_mat *mat; int want; } t[] = {
            {"attn_norm.weight", dim, 0, (const void **)&L->attn_norm, NULL, 1},
            {"attn_q.weight", q_dim, dim, NULL, &L->wq, 1},
            {"attn_k.weight", kv_dim, dim, NULL, &L->wk, 1},
            {"attn_v.weight", kv_dim, dim, NULL, &L->wv, 1},
            {"attn_q.bias", q_dim, 0, (const void **)&L->bq, NULL, c->qkv_bias},
            {"attn_k.bias", kv_dim, 0, (const void **)&L->bk, NULL, c->qkv_bias},
            {"attn_v.bias", kv_dim, 0, (const void **)&L->bv, NULL, c->qkv_bias},
            {"attn_q_norm.weight", hd, 0, (const void **)&L->q_norm, NULL, c->qk_norm},
            {"attn_k_norm.weight", hd, 0, (const void **)&L->k_norm, NULL, c->qk_norm},
            {"attn_output.weight", dim, q_dim, NULL, &L->wo, 1},
            {"post_attention_norm.weight", dim, 0, (const void **)&L->post_attn_norm, NULL, c->post_norms},
            {"ffn_norm.weight", dim, 0, (const void **)&L->ffn_norm, NULL, 1},
            {"post_ffw_norm.weight", dim, 0, (const void **)&L->post_ffn_norm, NULL, c->post_norms},
            {"ffn_gate.weight", hid, dim, NULL, &L->w_gate, 1},
            {"ffn_up.weight", hid, dim, NULL, &L->w_up, 1},
            {"ffn_down.weight", dim, hid, NULL, &L->w_down, 1},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            if (!t[i].want) continue;
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s", l, t[i].name);
            st = t[i].mat ? need_matrix(p, path, name, t[i].rows, t[i].cols, t[i].mat, err)
                          : need_tensor(p, path, name, FMT_DT_F32, t[i].rows, 0, t[i].vec, err);
            if (st) return st;
        }
    }
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &w->layers[l];
        if ((st = same_site(path, l, "q, k and v", &L->wq, &L->wk, &L->wv, err)) ||
            (st = same_site(path, l, "gate and up", &L->w_gate, &L->w_up, NULL, err)))
            return st;
    }
    for (uint32_t i = 0; i < p->file.n_tensors; i++) {
        const fmt_tensor *t = &p->file.tensors[i];
        const char *dot = strrchr(t->name, '.');
        /* quantization scales and mins, a8w8's group sums (.wsum) and activation parameters (.act) are
         * derived from the weights, not parameters */
        if (dot && (!strcmp(dot, ".scale") || !strcmp(dot, ".min") || !strcmp(dot, ".scale_d") || !strcmp(dot, ".min_d") ||
                    !strcmp(dot, ".wsum") || !strcmp(dot, ".act")))
            continue;
        uint64_t count = 1;
        for (uint32_t d = 0; d < t->ndim; d++) count *= t->dims[d];
        p->n_params += count;
    }
    return ETCH_OK;
}

static etch_status load_tokenizer(etch_program *p, const char *path, etch_error *err) {
    const etch_method_meta *m = &p->meta;
    const fmt_meta *pieces = NULL, *offsets = NULL, *scores = NULL, *types = NULL, *merges = NULL;
    tok_spec s = {0};
    etch_status st;
    uint32_t n = (uint32_t)m->vocab_size;
    s.model = strcmp(m->tokenizer, "bpe") == 0 ? TOK_MODEL_MERGES : TOK_MODEL_SCORES;
    if ((st = need_meta(p, path, "tokenizer.pieces", FMT_BYTES, 0, &pieces, err)) ||
        (st = need_meta(p, path, "tokenizer.offsets", FMT_I32, n + 1, &offsets, err)) ||
        (st = need_meta(p, path, "tokenizer.types", FMT_BYTES, n, &types, err)) ||
        (st = need_i32(p, path, "tokenizer.unk_id", -1, m->vocab_size - 1, &s.unk_id, err)) ||
        (st = need_i32(p, path, "tokenizer.add_dummy_prefix", 0, 1, &s.add_dummy_prefix, err)) ||
        (st = opt_i32(p, path, "tokenizer.byte_level", 0, 1, 0, &s.byte_level, err)) ||
        (st = opt_i32(p, path, "tokenizer.byte_fallback", 0, 1, 1, &s.byte_fallback, err)) ||
        (st = opt_i32(p, path, "tokenizer.ignore_merges", 0, 1, 0, &s.ignore_merges, err)) ||
        (st = opt_i32(p, path, "tokenizer.match_added", 0, 1, 0, &s.match_added, err)) ||
        (st = opt_i32(p, path, "tokenizer.nfc", 0, 1, 0, &s.nfc, err)) ||
        (st = opt_str(p, path, "tokenizer.pretok", NULL, &s.pretok, err)))
        return st;
    if (s.model == TOK_MODEL_SCORES) {
        if ((st = need_meta(p, path, "tokenizer.scores", FMT_F32, n, &scores, err))) return st;
        s.scores = scores->data;
    } else {
        if ((st = need_meta(p, path, "tokenizer.merges", FMT_I32, 0, &merges, err))) return st;
        if (merges->count % 3 != 0)
            return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer.merges has %u values, not a multiple of 3", path,
                             merges->count);
        s.merges = merges->data;
        s.n_merges = (int32_t)(merges->count / 3);
    }
    s.n_vocab = m->vocab_size;
    s.blob = pieces->data;
    s.blob_size = pieces->count;
    s.offsets = offsets->data;
    s.types = types->data;
    s.bos_id = m->bos_id;
    return tok_init(&p->tok, &s, path, err);
}

etch_status etch_program_open(const char *path, etch_program **out, etch_error *err) {
    base_clear(err);
    if (!out) return base_fail(err, ETCH_ERR_ARG, "etch_program_open: out is NULL");
    *out = NULL;
    if (!path) return base_fail(err, ETCH_ERR_ARG, "etch_program_open: path is NULL");
    double t0 = base_now_us();
    kern_init();
    etch_program *p = base_calloc(1, sizeof *p);
    if (!p) return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate the program", path);
    etch_status st = fmt_open(path, &p->file, err);
    if (!st) st = load_meta(p, path, err);
    if (!st) st = load_weights(p, path, err);
    if (!st) st = load_tokenizer(p, path, err);
    if (st) {
        etch_program_close(p);
        return st;
    }
    p->load_start_ms = t0 / 1000.0;
    p->load_end_ms = base_now_us() / 1000.0;
    *out = p;
    return ETCH_OK;
}

void etch_program_close(etch_program *p) {
    if (!p) return;
    tok_free(&p->tok);
    base_free(p->w.layers);
    base_free(p->inv_freq), base_free(p->inv_freq_local), base_free(p->window), base_free(p->kv_rows);
    fmt_close(&p->file);
    base_free(p);
}

const etch_method_meta *etch_program_meta(const etch_program *p) { return p ? &p->meta : NULL; }

void etch_program_info_get(const etch_program *p, etch_program_info *o) {
    memset(o, 0, sizeof *o);
    if (!p) return;
    o->format_version = p->file.version;
    o->file_size = p->file.map.size;
    o->checksum = p->file.checksum;
    o->data_hash = p->file.data_hash;
    o->n_tensors = (int32_t)p->file.n_tensors;
    o->n_metadata = (int32_t)p->file.n_meta;
    o->n_parameters = p->n_params;
    o->load_start_ms = p->load_start_ms;
    o->load_end_ms = p->load_end_ms;
}

etch_status etch_program_tensor(const etch_program *p, int32_t i, etch_tensor_info *o) {
    if (!p || !o || i < 0 || (uint32_t)i >= p->file.n_tensors) return ETCH_ERR_ARG;
    const fmt_tensor *t = &p->file.tensors[i];
    memset(o, 0, sizeof *o);
    o->name = t->name;
    o->dtype = fmt_dtype_name(t->dtype);
    o->ndim = (int32_t)t->ndim;
    for (uint32_t d = 0; d < t->ndim; d++) o->dims[d] = (int64_t)t->dims[d];
    o->offset = t->offset;
    o->nbytes = t->nbytes;
    return ETCH_OK;
}

etch_status etch_program_verify_data(const etch_program *p, etch_error *err) {
    if (!p) return base_fail(err, ETCH_ERR_ARG, "etch_program_verify_data: program is NULL");
    return fmt_verify_data(&p->file, err);
}

int etch_program_metadata_text(const etch_program *p, int32_t i, char *buf, size_t cap) {
    if (!p || i < 0 || (uint32_t)i >= p->file.n_meta) return -1;
    const fmt_meta *m = &p->file.meta[i];
    int n = snprintf(buf, cap, "%s: ", m->key);
    size_t at = n > 0 ? (size_t)n : 0;
#define APPEND(...)                                                                        \
    do {                                                                                   \
        int k_ = snprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0, __VA_ARGS__); \
        if (k_ > 0) at += (size_t)k_;                                                      \
    } while (0)
    if (m->type == FMT_STR) {
        APPEND("\"%s\"", (const char *)m->data);
    } else if (m->type == FMT_BYTES) {
        APPEND("bytes[%u]", m->count);
    } else {
        if (m->count != 1) APPEND("%s[%u] [", m->type == FMT_I32 ? "i32" : "f32", m->count);
        for (uint32_t j = 0; j < m->count && j < 8; j++) {
            if (m->type == FMT_I32) APPEND("%s%d", j ? ", " : "", ((const int32_t *)m->data)[j]);
            else APPEND("%s%g", j ? ", " : "", (double)((const float *)m->data)[j]);
        }
        if (m->count > 8) APPEND(", ...");
        if (m->count != 1) APPEND("]");
    }
#undef APPEND
    return (int)at;
}

etch_status rt_check_written(const char *tmp_path, void *user, etch_error *err) {
    etch_program *p;
    etch_status st = etch_program_open(tmp_path, &p, err);
    if (!st) {
        etch_program_close(p);
        return ETCH_OK;
    }
    /* the message again, with the destination's name where the temporary's stood */
    char msg[sizeof err->message];
    const char *m = err->message, *hit;
    size_t at = 0, tl = strlen(tmp_path);
    while ((hit = strstr(m, tmp_path)) && at < sizeof msg - 1) {
        at += (size_t)snprintf(msg + at, sizeof msg - at, "%.*s%s", (int)(hit - m), m, (const char *)user);
        m = hit + tl;
    }
    if (at < sizeof msg - 1) snprintf(msg + at, sizeof msg - at, "%s", m);
    return base_fail(err, st, "%s", msg);
}
