/* import: quantizing a program. Reads a program file with float matrices and writes one whose
 * linear layers are Q8 or Q4 (kernels.h), everything else copied as it was. Export time only. */
#include "quantize.h"

#include "../format/format.h"
#include "../kernels/kernels.h"
#include "../base/pool.h"
#include "../model/model.h"
#include "../runtime/runtime.h"

#include <stdio.h>
#include <string.h>

/* A scheme's weight type and default group (0: one per output channel). Weight-only: 8w, 4w;
 * int8 activations quantized per token at run time: 8da8w, 8da4w; static int8 activations: a8w8. */
static int scheme_type(const char *s, int *wtype, int *group) {
    if (!strcmp(s, "8w")) return *wtype = KERN_Q8, *group = 0, 1;
    if (!strcmp(s, "4w")) return *wtype = KERN_Q4, *group = 32, 1;
    if (!strcmp(s, "8da8w") || !strcmp(s, "a8w8")) return *wtype = KERN_I8, *group = 0, 1;
    if (!strcmp(s, "8da4w")) return *wtype = KERN_I4, *group = 32, 1;
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* The linear layers a scheme quantizes: every 2-D weight but the embedding table. */
static int is_linear(const fmt_tensor *t) {
    return t->ndim == 2 && ends_with(t->name, ".weight") && strcmp(t->name, "token_embd.weight") != 0;
}

/* The outputs of quantizing one matrix: values, scales and (static activations) group sums, owned. */
typedef struct qtensor {
    void *q;
    void *scales; /* f16, or f32 for one scale per row; a GGUF's as they are (rt_add_scales) */
    void *mins;   /* NULL, or shaped and typed as the scales (a GGUF's mins, converted as they are) */
    int type;     /* KERN_* of q */
    float *wsum;
    int scale_type; /* KERN_F16, KERN_F32, or a K-quant's KERN_SCALE_S8 */
    int sub_groups; /* KERN_SCALE_S8: groups per f16 factor, which follow the int8s d_at bytes in */
    size_t d_at;
    uint64_t dims[2], sdims[2];
} qtensor;

/* A q8 or q4 matrix of the input program with its scales and mins as the loader reads them (the
 * program opened, so they are there and shaped right; rt_add_scales names them). */
static kern_mat source_mat(const fmt_file *f, const fmt_tensor *t) {
    char name[128];
    const fmt_tensor *tab[4];
    static const char *const sfx[4] = {"scale", "min", "scale_d", "min_d"};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s.%s", t->name, sfx[i]);
        tab[i] = fmt_find_tensor(f, name);
    }
    int k = (int)t->dims[1], n_groups = (int)tab[0]->dims[1];
    kern_mat m = {.w = t->data, .scales = tab[0]->data, .type = t->dtype == FMT_DT_Q8 ? KERN_Q8 : KERN_Q4,
                  .group = kern_q_group_of(k, n_groups),
                  .scale_type = tab[0]->dtype == FMT_DT_Q8 ? KERN_SCALE_S8 : tab[0]->dtype == FMT_DT_F16 ? KERN_F16 : KERN_F32,
                  .mins = tab[1] ? tab[1]->data : NULL};
    if (m.scale_type == KERN_SCALE_S8) {
        m.scale_d = tab[2]->data, m.min_d = tab[3] ? tab[3]->data : NULL;
        m.sub_groups = n_groups / (int)tab[2]->dims[1];
    }
    return m;
}

/* The observed site whose activations feed a linear layer (calibrate.c's numbering), or -1. */
static int site_of(const char *name, int n_layers, int tied) {
    static const struct { const char *suffix; int site; } sites[] = {
        {".attn_q.weight", MODEL_SITE_QKV},      {".attn_k.weight", MODEL_SITE_QKV},  {".attn_v.weight", MODEL_SITE_QKV},
        {".attn_output.weight", MODEL_SITE_WO},  {".ffn_gate.weight", MODEL_SITE_GATE_UP},
        {".ffn_up.weight", MODEL_SITE_GATE_UP},  {".ffn_down.weight", MODEL_SITE_DOWN}};
    if (!strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight"))) return n_layers * 4;
    int layer;
    if (sscanf(name, "blk.%d.", &layer) != 1 || layer < 0 || layer >= n_layers) return -1;
    for (size_t i = 0; i < sizeof sites / sizeof *sites; i++)
        if (ends_with(name, sites[i].suffix)) return layer * 4 + sites[i].site;
    return -1;
}

/* Panels of a matrix quantized by the workers of a pool: each takes whole panels, which are
 * contiguous in the values and the scales. */
typedef struct quant_job {
    void *q;
    void *scales;
    const float *rows; /* [d, k] */
    int scale_type, type, d, k, group, n_groups;
} quant_job;

static void quant_task(void *ctx, int i, int nw) {
    const quant_job *j = ctx;
    int b, e;
    base_split(j->d, nw, i, KERN_PANEL, &b, &e);
    if (b >= e) return;
    size_t vbytes = j->type == KERN_Q8 ? (size_t)b * j->k : (size_t)b * j->k / 2;
    size_t sbytes = (size_t)b * j->n_groups * kern_wsize(j->scale_type);
    kern_quantize((uint8_t *)j->q + vbytes, (uint8_t *)j->scales + sbytes, j->scale_type, j->type,
                  j->rows + (size_t)b * j->k, e - b, j->k, j->group);
}

/* A matrix that is already q8 or q4 (a GGUF's block types kept as they are) becomes i8 or i4, its own
 * width, under any integer-dot scheme (wtype i8 or i4: the scheme's width is for float matrices, so a
 * GGUF that mixes widths, as Q4_K_M does, converts whole): the same values in the integer-dot layout
 * and the same scales and mins (source_mat), nothing rounded a second time. Weight-only schemes would
 * round again: refused. */
static etch_status repack_matrix(const fmt_file *f, const fmt_tensor *t, const fmt_tensor *ts, int wtype, int group,
                                 qtensor *out, etch_error *err) {
    int q8 = t->dtype == FMT_DT_Q8;
    if (!kern_is_int_dot(wtype))
        return base_fail(err, ETCH_ERR_UNSUPPORTED,
                         "tensor '%s' is already %s: it converts as it is only to %s, under an integer-dot scheme (8da8w, "
                         "8da4w, a8w8); quantize a program with float weights (f32, f16, bf16) for the others", t->name,
                         fmt_dtype_name(t->dtype), q8 ? "i8" : "i4");
    out->type = q8 ? KERN_I8 : KERN_I4;
    int d = (int)t->dims[0], k = (int)t->dims[1]; /* the loader checked the shapes of both */
    int n_groups = ts ? (int)ts->dims[1] : 0, have = n_groups > 0 ? kern_q_group_of(k, n_groups) : 0;
    if (!ts || k % 2 || have > KERN_INT_GROUP_MAX || (have % 2 && have != k))
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "tensor '%s' (%s, %d columns, groups of %d) cannot be used for "
                         "integer dot products as it is", t->name, fmt_dtype_name(t->dtype), k, have);
    if (group > 0 && group != have && !(group >= k && have == k))
        return base_fail(err, ETCH_ERR_ARG, "tensor '%s' keeps its groups of %d when converted as it is: drop "
                         "--group-size %d", t->name, have, group);
    size_t bytes = q8 ? (size_t)d * k : (size_t)d * k / 2;
    kern_mat src = source_mat(f, t);
    out->q = base_malloc(bytes);
    out->scale_type = src.scale_type, out->sub_groups = src.sub_groups;
    size_t n = (size_t)d * n_groups, sbytes = n * kern_wsize(out->scale_type);
    size_t dbytes = out->scale_type == KERN_SCALE_S8 ? n / (size_t)src.sub_groups * sizeof(uint16_t) : 0;
    out->d_at = sbytes;
    out->scales = base_malloc(sbytes + dbytes);
    out->mins = src.mins ? base_malloc(sbytes + dbytes) : NULL; /* the loader checked it is shaped as the scales */
    if (!out->q || !out->scales || (src.mins && !out->mins)) {
        base_free(out->q), base_free(out->scales), base_free(out->mins);
        memset(out, 0, sizeof *out);
        return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate buffers to convert '%s'", t->name);
    }
    kern_to_int_dot(out->q, t->data, src.type, d, k);
    memcpy(out->scales, src.scales, sbytes);
    if (src.mins) memcpy(out->mins, src.mins, sbytes);
    if (dbytes) memcpy((uint8_t *)out->scales + sbytes, src.scale_d, dbytes);
    if (dbytes && src.mins) memcpy((uint8_t *)out->mins + sbytes, src.min_d, dbytes);
    out->dims[0] = out->sdims[0] = (uint64_t)d;
    out->dims[1] = (uint64_t)k;
    out->sdims[1] = (uint64_t)n_groups;
    return ETCH_OK;
}

/* Whether a q8/q4 matrix with mins converts as it is under scheme type wtype: to the integer-dot type
 * of its width (repack_matrix) with activations per row (static ones would shift the mins' term), in
 * even groups. */
static int keeps_mins(const fmt_tensor *t, const fmt_tensor *ts, int wtype, int is_static) {
    int k = (int)t->dims[1], g = kern_q_group_of(k, (int)ts->dims[1]);
    return !is_static && kern_is_int_dot(wtype) && k % 2 == 0 && g % 2 == 0 && g <= KERN_INT_GROUP_MAX;
}

/* Whether q8/q4 matrix t (scales ts, mins tm or NULL) goes to repack_matrix under scheme type wtype: with
 * mins when keeps_mins says so (else its weights are rounded, as a float matrix's); without, always,
 * except the untied copy of a tied table under a weight-only scheme, which is a new matrix rounded from
 * the table's weights (repack_matrix refuses the others: they are weight-only already). */
static int converts_as_is(const fmt_tensor *t, const fmt_tensor *ts, const fmt_tensor *tm, int wtype, int is_static,
                          int untied_copy) {
    if (t->dtype != FMT_DT_Q8 && t->dtype != FMT_DT_Q4) return 0;
    return tm ? keeps_mins(t, ts, wtype, is_static) : kern_is_int_dot(wtype) || !untied_copy;
}

/* The group to round an integer-dot matrix of k columns in when its inputs take a scale per G values
 * (quant.act_group): the largest size up to want that divides G and that kern_q_group_fit takes as
 * it is (even, and what k's groups give back), so every group of weights meets one input scale. 2
 * always fits. */
static int group_for_act(int k, int want, int G) {
    for (int g = want < G ? want : G; g > 2; g--)
        if (G % g == 0 && kern_q_group_fit(k, g, 1) == g) return g;
    return 2;
}

/* Quantizes a packed float matrix t (rows already padded to a panel) to wtype with groups of group
 * (0: one per row; with act_group, group_for_act's), over the pool's threads when there is one; a
 * q8/q4 matrix (its scales ts, the input program f's) goes to repack_matrix when as_is
 * (converts_as_is), else its weights are rounded from their float values as a float matrix's are. */
static etch_status quantize_matrix(const fmt_file *f, const fmt_tensor *t, const fmt_tensor *ts, int wtype, int group,
                                   int act_group, int as_is, base_pool *pool, qtensor *out, etch_error *err) {
    memset(out, 0, sizeof *out);
    int q_in = t->dtype == FMT_DT_Q8 || t->dtype == FMT_DT_Q4;
    if (as_is) return repack_matrix(f, t, ts, wtype, group, out, err);
    if (!q_in && t->dtype != FMT_DT_F32 && t->dtype != FMT_DT_F16 && t->dtype != FMT_DT_BF16)
        return base_fail(err, ETCH_ERR_UNSUPPORTED,
                         "tensor '%s' is already %s: quantize a program with float weights (f32, f16, bf16)%s", t->name,
                         fmt_dtype_name(t->dtype),
                         t->dtype == FMT_DT_I8 || t->dtype == FMT_DT_I4
                             ? ", or a GGUF exported with --activations f32 (by default its matrices are already laid "
                               "out for int8 activations)"
                             : "");
    if (t->dims[0] > (1u << 24) || t->dims[1] > (1u << 24) || t->dims[0] * t->dims[1] > ((uint64_t)1 << 34))
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "tensor '%s' is too large to quantize", t->name);
    int d = (int)t->dims[0], k = (int)t->dims[1], int_dot = kern_is_int_dot(wtype);
    if (int_dot && k % 2)
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "tensor '%s' has %d columns: int8-activation schemes need an even number",
                         t->name, k);
    if (group <= 0 || group > k) group = k;
    if (int_dot && group > KERN_INT_GROUP_MAX) group = KERN_INT_GROUP_MAX;
    group = int_dot && act_group ? group_for_act(k, group, act_group) : kern_q_group_fit(k, group, int_dot);
    int n_groups = kern_q_groups(k, group);
    float *rows = base_malloc((size_t)d * k * sizeof *rows);
    int eight = wtype == KERN_Q8 || wtype == KERN_I8;
    out->q = base_malloc(eight ? (size_t)d * k : (size_t)d * k / 2);
    /* One scale per row costs nothing next to the row: f32. Scales per group are 1/16 of 4-bit
     * weights in groups of 32 or more: f16, as GGUF's Q8_0/Q4_0 (docs/DESIGN.md, "Quantized programs"). */
    out->scale_type = n_groups == 1 ? KERN_F32 : KERN_F16;
    out->scales = base_malloc((size_t)d * n_groups * kern_wsize(out->scale_type));
    if (!rows || !out->q || !out->scales) {
        base_free(rows), base_free(out->q), base_free(out->scales);
        memset(out, 0, sizeof *out);
        return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate buffers to quantize '%s'", t->name);
    }
    kern_mat src = {.w = t->data, .type = t->dtype == FMT_DT_F32 ? KERN_F32 : t->dtype == FMT_DT_F16 ? KERN_F16 : KERN_BF16};
    if (q_in) src = source_mat(f, t);
    for (int o = 0; o < d; o++) kern_packed_row(rows + (size_t)o * k, &src, o, k);
    int qtype = wtype == KERN_I8 ? KERN_Q8 : wtype == KERN_I4 ? KERN_Q4 : wtype;
    out->type = wtype;
    quant_job job = {out->q, out->scales, rows, out->scale_type, qtype, d, k, group, n_groups};
    if (pool) base_pool_run(pool, quant_task, &job);
    else quant_task(&job, 0, 1);
    if (int_dot) { /* the same values in the integer-dot layout, through the f32 buffer's bytes */
        size_t bytes = eight ? (size_t)d * k : (size_t)d * k / 2;
        kern_to_int_dot(rows, out->q, qtype, d, k);
        memcpy(out->q, rows, bytes);
    }
    base_free(rows);
    out->dims[0] = out->sdims[0] = (uint64_t)d;
    out->dims[1] = (uint64_t)k;
    out->sdims[1] = (uint64_t)n_groups;
    return ETCH_OK;
}

static void copy_meta(fmt_writer *w, const fmt_meta *m) {
    switch (m->type) {
    case FMT_I32: fmt_put_i32s(w, m->key, m->data, m->count); break;
    case FMT_F32: fmt_put_f32s(w, m->key, m->data, m->count); break;
    case FMT_STR: fmt_put_str(w, m->key, m->data); break;
    default: fmt_put_bytes(w, m->key, m->data, m->count); break;
    }
}

etch_status etch_quantize(const char *in_path, const char *out_path, const etch_quantize_options *opt,
                          etch_error *err) {
    if (!in_path || !out_path || !opt || !opt->scheme) return base_fail(err, ETCH_ERR_ARG, "etch_quantize: NULL argument");
    int wtype, group, etype = -1, egroup = 0;
    if (!scheme_type(opt->scheme, &wtype, &group))
        return base_fail(err, ETCH_ERR_ARG, "scheme '%s' is not one of 8w, 4w, 8da8w, 8da4w, a8w8", opt->scheme);
    if (opt->group_size < 0 || opt->group_size > (1 << 20))
        return base_fail(err, ETCH_ERR_ARG, "group size %d is outside 0..%d", opt->group_size, 1 << 20);
    if (opt->group_size) group = opt->group_size;
    if (opt->qembedding && (strcmp(opt->qembedding, "8w") && strcmp(opt->qembedding, "4w")))
        return base_fail(err, ETCH_ERR_ARG, "embedding scheme '%s' is not one of 8w, 4w", opt->qembedding);
    if (opt->qembedding) scheme_type(opt->qembedding, &etype, &egroup);
    /* --group-size sets the table's groups too when it has the layers' width (4w or 8da4w with a 4w table) */
    if (etype >= 0 && opt->group_size && (etype == KERN_Q8) == (wtype == KERN_Q8 || wtype == KERN_I8)) egroup = opt->group_size;
    if (!strcmp(in_path, out_path))
        return base_fail(err, ETCH_ERR_ARG, "%s: the output would replace the input; give another path", out_path);
    int is_static = !strcmp(opt->scheme, "a8w8");
    if (is_static && opt->n_calib_files < 1)
        return base_fail(err, ETCH_ERR_ARG, "a8w8 needs calibration data (--calib FILE): its activation ranges are static");
    if (opt->act_group && (opt->act_group < 0 || opt->act_group % 2 || opt->act_group > KERN_INT_GROUP_MAX ||
                           is_static || !kern_is_int_dot(wtype)))
        return base_fail(err, ETCH_ERR_ARG, "activation group %d: it takes an even size up to %d under 8da8w or 8da4w "
                         "(scheme %s)", opt->act_group, KERN_INT_GROUP_MAX, opt->scheme);
    if (!is_static && opt->n_calib_files > 0)
        return base_fail(err, ETCH_ERR_ARG, "calibration sets static activation ranges: scheme %s has none (use a8w8)",
                         opt->scheme);

    /* The input must be a program the runtime accepts. */
    etch_program *check;
    etch_status st = etch_program_open(in_path, &check, err);
    if (st) return st;
    etch_program_close(check);
    fmt_file f;
    if ((st = fmt_open(in_path, &f, err))) return st;
    const fmt_meta *layers_meta = fmt_find_meta(&f, "n_layers");
    int n_layers = ((const int32_t *)layers_meta->data)[0]; /* the program opened: it is there */
    float *act = NULL; /* [n_layers * 4 + 1][2]: each site's static scale and zero point */
    if (is_static) {
        act = base_calloc((size_t)n_layers * 4 + 1, 2 * sizeof *act);
        if (!act) st = base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the activation parameters");
        else st = imp_calibrate(in_path, opt, act, err);
        if (st) {
            base_free(act);
            fmt_close(&f);
            return st;
        }
    }
    const fmt_meta *tied_meta = fmt_find_meta(&f, "tied_embeddings");
    int tied = tied_meta && tied_meta->type == FMT_I32 && ((const int32_t *)tied_meta->data)[0] == 1;
    /* A tied table serves as the output layer too: quantized with --qembedding it stays tied;
     * otherwise the output layer gets its own quantized copy, so decode reads it quantized. */
    const fmt_tensor *table = fmt_find_tensor(&f, "token_embd.weight");
    if (tied && etype < 0 && table && (table->dtype == FMT_DT_Q8 || table->dtype == FMT_DT_Q4) && kern_is_int_dot(wtype)) {
        etype = table->dtype == FMT_DT_Q8 ? KERN_Q8 : KERN_Q4; /* a quantized tied table converts as it is, still tied */
        const fmt_tensor *ts = fmt_find_tensor(&f, "token_embd.weight.scale");
        if (fmt_find_tensor(&f, "token_embd.weight.min") && ts) /* if rounded again (keeps_mins): in its groups */
            egroup = kern_q_group_of((int)table->dims[1], (int)ts->dims[1]);
    }
    int untie = tied && etype < 0;
    /* A tied table that the output layer of an int8-activation scheme reads is stored for integer
     * dot products (lookups read any layout): the classifier then runs as fast as the layers. */
    if (tied && etype >= 0 && kern_is_int_dot(wtype)) etype = etype == KERN_Q8 ? KERN_I8 : KERN_I4;

    base_pool *pool = NULL; /* quantizing is per panel: threads take panels (none: this thread alone) */
    if (base_pool_new(opt->threads > 0 ? opt->threads : base_physical_cores(), &pool, err)) pool = NULL;
    fmt_writer *w = fmt_writer_new();
    qtensor *qt = base_calloc((size_t)f.n_tensors + 1, sizeof *qt);
    if (!w || !qt) {
        st = base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the program writer");
        goto done;
    }
    for (uint32_t i = 0; i < f.n_meta; i++) {
        const fmt_meta *m = &f.meta[i];
        if (!strcmp(m->key, "tied_embeddings") && untie) fmt_put_i32(w, m->key, 0);
        else if (strncmp(m->key, "quant.", 6) != 0) copy_meta(w, m);
    }
    fmt_put_str(w, "quant.scheme", opt->scheme);
    int meta_group = group; /* q8/q4 layers keep their groups (repack_matrix): the first one's, then */
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        char sname[112];
        snprintf(sname, sizeof sname, "%s.scale", f.tensors[i].name);
        const fmt_tensor *ts = is_linear(&f.tensors[i]) ? fmt_find_tensor(&f, sname) : NULL;
        snprintf(sname, sizeof sname, "%s.min", f.tensors[i].name); /* rounded: in the asked-for groups */
        if (ts && converts_as_is(&f.tensors[i], ts, fmt_find_tensor(&f, sname), wtype, is_static, 0)) {
            int k = (int)f.tensors[i].dims[1], g = kern_q_group_of(k, (int)ts->dims[1]);
            meta_group = g == k ? 0 : g; /* 0: one group per row, as the schemes say it */
            break;
        }
    }
    fmt_put_i32(w, "quant.group_size", meta_group);
    if (opt->act_group) fmt_put_i32(w, "quant.act_group", opt->act_group);
    if (etype >= 0)
        fmt_put_str(w, "quant.embedding", opt->qembedding ? opt->qembedding : etype == KERN_Q8 || etype == KERN_I8 ? "8w" : "4w");
    fmt_put_str(w, "quant.source", in_path);
    if (is_static) {
        fmt_put_str(w, "quant.observer", opt->observer ? opt->observer : "minmax");
        fmt_put_str(w, "quant.calib_mode", opt->calib_mode ? opt->calib_mode : "prefill");
    }

    for (uint32_t i = 0; i <= f.n_tensors && !st; i++) {
        /* the last turn adds the untied output layer */
        const fmt_tensor *t = i < f.n_tensors ? &f.tensors[i] : untie ? fmt_find_tensor(&f, "token_embd.weight") : NULL;
        if (!t) break;
        const char *name = i < f.n_tensors ? t->name : "output.weight";
        int embd = i < f.n_tensors && !strcmp(name, "token_embd.weight");
        int type = embd ? etype : (i == f.n_tensors || is_linear(t)) ? wtype : -1, g = embd ? egroup : group;
        int sfx = ends_with(name, ".scale") ? 6 : ends_with(name, ".min") ? 4 : ends_with(name, ".scale_d") ? 8
                : ends_with(name, ".min_d") ? 6 : 0;
        if (type < 0 && i < f.n_tensors && sfx) { /* a quantized source's scales or mins */
            char base[112];
            snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - (size_t)sfx), name);
            const fmt_tensor *m = fmt_find_tensor(&f, base);
            if (m && (!strcmp(base, "token_embd.weight") ? etype >= 0 : is_linear(m))) continue; /* rewritten with it */
        }
        if (type < 0) {
            fmt_add_tensor(w, name, t->dtype, t->ndim, t->dims, t->data);
            if (opt->progress) opt->progress(opt->user, "quantizing", (int64_t)i + 1, (int64_t)f.n_tensors + untie);
            continue;
        }
        if (opt->progress) opt->progress(opt->user, "quantizing", (int64_t)i + 1, (int64_t)f.n_tensors + untie);
        char sname[112];
        snprintf(sname, sizeof sname, "%s.scale", t->name);
        char mname[112];
        snprintf(mname, sizeof mname, "%s.min", t->name);
        const fmt_tensor *tm = fmt_find_tensor(&f, mname);
        /* converted as it is: only an asked-for group counts */
        const fmt_tensor *ts = fmt_find_tensor(&f, sname);
        int kept = converts_as_is(t, ts, tm, type, is_static, i == f.n_tensors);
        if ((st = quantize_matrix(&f, t, ts, type, kept ? opt->group_size : g, opt->act_group, kept, pool, &qt[i], err)))
            break;
        snprintf(sname, sizeof sname, "%s.scale", name);
        static const uint32_t fmt_of[] = {[KERN_Q8] = FMT_DT_Q8, [KERN_Q4] = FMT_DT_Q4, [KERN_I8] = FMT_DT_I8, [KERN_I4] = FMT_DT_I4};
        type = qt[i].type; /* a q8/q4 matrix converted as it is keeps its width */
        fmt_add_tensor(w, name, fmt_of[type], 2, qt[i].dims, qt[i].q);
        rt_add_scales(w, name, qt[i].scale_type, qt[i].sub_groups, qt[i].sdims, qt[i].scales, qt[i].mins, qt[i].d_at);
        int site = is_static && kern_is_int_dot(type) ? site_of(name, n_layers, tied && !untie) : -1;
        if (site >= 0) { /* static activations: their scale and zero point, and the group sums they need */
            kern_mat m = {.w = qt[i].q, .type = type, .group = kern_q_group_of((int)qt[i].dims[1], (int)qt[i].sdims[1])};
            if (!(qt[i].wsum = base_malloc((size_t)(qt[i].sdims[0] * qt[i].sdims[1]) * sizeof *qt[i].wsum))) {
                st = base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the group sums of '%s'", name);
                break;
            }
            kern_group_sums(qt[i].wsum, &m, (int)qt[i].dims[0], (int)qt[i].dims[1]);
            uint64_t two = 2;
            snprintf(sname, sizeof sname, "%s.act", name);
            fmt_add_tensor(w, sname, FMT_DT_F32, 1, &two, act + 2 * site);
            snprintf(sname, sizeof sname, "%s.wsum", name);
            fmt_add_tensor(w, sname, FMT_DT_F32, 2, qt[i].sdims, qt[i].wsum);
        }
    }
    /* the file replaces out_path only after it opens with the runtime's own checks */
    if (!st) st = fmt_writer_write(w, out_path, rt_check_written, (void *)out_path, err);
done:
    base_pool_free(pool);
    fmt_writer_free(w);
    for (uint32_t i = 0; qt && i <= f.n_tensors; i++) base_free(qt[i].q), base_free(qt[i].scales), base_free(qt[i].mins), base_free(qt[i].wsum);
    base_free(act);
    base_free(qt);
    fmt_close(&f);
    return st;
}
