/* model: the Llama decoder over n rows at a time. Every weight matrix multiplies all n rows of a
 * chunk in one call; attention is causal inside the chunk and over the cache. */
#include "model.h"

#include "../kernels/kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* One worker's share of one matrix's decode calls (claim, below), on a cache line of its own. */
struct model_claim {
    _Atomic uint64_t range; /* the share's next call << 32 | its end */
    char line[64 - sizeof(uint64_t)];
};

int model_kv_rows(int window, int max_seq_len, int max_context_len) {
    if (window <= 0) return max_context_len;
    int64_t rows = (int64_t)window + max_seq_len - 1;
    return rows < max_context_len ? (int)rows : max_context_len;
}

size_t model_kv_bytes(const model_config *c, int kv_type, size_t rows) {
    size_t per_row = (size_t)c->n_kv_heads * (c->head_dim * kern_kv_size(kv_type) + (kv_type == KERN_KV_Q8 ? 4 : 0));
    return 2 * rows * per_row;
}

kern_kv model_layer_kv(const model_config *c, const model_state *s, int l) {
    size_t row = s->kv_off[l], kv_dim = (size_t)c->n_kv_heads * c->head_dim, es = kern_kv_size(s->kv_type);
    kern_kv kv = {s->kv_type, (char *)s->k_cache + row * kv_dim * es, (char *)s->v_cache + row * kv_dim * es, NULL, NULL};
    if (s->k_scale) kv.k_scale = s->k_scale + row * c->n_kv_heads, kv.v_scale = s->v_scale + row * c->n_kv_heads;
    return kv;
}

/* The widest input of a linear layer. */
static size_t widest_in(const model_config *c) {
    size_t q_dim = (size_t)c->n_heads * c->head_dim, wide = q_dim > (size_t)c->dim ? q_dim : (size_t)c->dim;
    return wide > (size_t)c->hidden_dim ? wide : (size_t)c->hidden_dim;
}

etch_status model_state_new(const model_config *c, int n_threads, int kv_type, model_state *s, etch_error *err) {
    memset(s, 0, sizeof *s);
    s->n_threads = n_threads;
    s->kv_type = kv_type;
    size_t rows = (size_t)c->max_seq_len, q_dim = (size_t)c->n_heads * c->head_dim;
    size_t kv_dim = (size_t)c->n_kv_heads * c->head_dim, wide = q_dim > (size_t)c->dim ? q_dim : (size_t)c->dim;
    s->kv_off = base_malloc((size_t)c->n_layers * sizeof *s->kv_off);
    if (!s->kv_off) return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the cache table");
    size_t cache_rows = 0;
    for (int l = 0; l < c->n_layers; l++) s->kv_off[l] = cache_rows, cache_rows += (size_t)c->kv_rows[l];
    size_t es = kern_kv_size(kv_type), scales = kv_type == KERN_KV_Q8 ? cache_rows * c->n_kv_heads : 0;
    struct { float **p; size_t n; } plan[] = {
        {&s->x, rows * c->dim},          {&s->xb, rows * wide},
        {&s->q, rows * q_dim},           {&s->proj, rows * c->dim},
        {&s->hb, rows * c->hidden_dim},  {&s->hb2, rows * c->hidden_dim},
        {&s->scores, (size_t)n_threads * KERN_ATT_BLOCK * c->max_context_len},
        {&s->k_tmp, rows * kv_dim},      {&s->v_tmp, rows * kv_dim},
        {&s->rope, rows * c->head_dim},  {&s->rope_local, c->inv_freq_local != c->inv_freq ? rows * c->head_dim : 0},
        {&s->k_scale, scales},           {&s->v_scale, scales},
        {&s->qx.scale, !c->int_dot ? 0 : c->act_group ? rows * (size_t)kern_q_groups((int)widest_in(c), c->act_group) : rows},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        if (!plan[i].n) continue; /* not needed: stays NULL */
        *plan[i].p = base_calloc_lines(plan[i].n, sizeof(float));
        if (!*plan[i].p) {
            model_state_free(s);
            return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate %zu bytes of session state",
                             plan[i].n * sizeof(float));
        }
        s->bytes += plan[i].n * sizeof(float);
    }
    s->claims = base_calloc_lines((size_t)3 * n_threads, sizeof *s->claims);
    if (!s->claims) {
        model_state_free(s);
        return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the threads' shares");
    }
    s->k_cache = base_calloc_lines(cache_rows * kv_dim, es);
    s->v_cache = base_calloc_lines(cache_rows * kv_dim, es);
    if (!s->k_cache || !s->v_cache) {
        model_state_free(s);
        return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate %zu bytes of KV cache", 2 * cache_rows * kv_dim * es);
    }
    /* 4 KiB pages, so that a session is resident for the positions it has used: head-major rows
     * spread the heads' first positions over the whole cache (a head every 1.1 MB for Qwen3-0.6B at
     * 4,224 positions), and 2 MiB pages made all of it resident, zeroed by the first forward call
     * (DESIGN.md, "The KV cache") */
    base_advise_small(s->k_cache, cache_rows * kv_dim * es), base_advise_small(s->v_cache, cache_rows * kv_dim * es);
    s->kv_bytes = model_kv_bytes(c, kv_type, cache_rows);
    s->bytes += 2 * cache_rows * kv_dim * es;
    if (c->int_dot) { /* int8 activations, as pairs of int16 per word, and each row's zero point */
        size_t widest = widest_in(c);
        /* on cache lines, as every session buffer: AMX loads a group's 32 bytes of 16 rows as a
         * tile, and a row 16 or 48 bytes into a line splits every other group's load in two
         * (DESIGN.md, "Memory") */
        s->qx.pairs = base_calloc_lines(rows * (widest / 2 + 1), sizeof *s->qx.pairs);
        s->qx.psum = base_calloc_lines(rows * (widest / 2 + 1), sizeof *s->qx.psum);
        s->qx.bytes = base_calloc_lines(rows * (widest / 2 + 1), sizeof *s->qx.bytes);
        s->qx.zero = base_calloc(rows, sizeof *s->qx.zero);
        if (!s->qx.pairs || !s->qx.psum || !s->qx.bytes || !s->qx.zero) {
            model_state_free(s);
            return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the int8 activations");
        }
        s->bytes += rows * (widest / 2 + 1) * (sizeof *s->qx.pairs + sizeof *s->qx.psum + sizeof *s->qx.bytes) +
                    rows * sizeof *s->qx.zero;
    }
    return ETCH_OK;
}

void model_state_free(model_state *s) {
    if (!s) return;
    float **lines[] = {&s->x,     &s->xb,   &s->q,    &s->proj,       &s->hb,      &s->hb2,     &s->scores,
                       &s->k_tmp, &s->v_tmp, &s->rope, &s->rope_local, &s->k_scale, &s->v_scale, &s->qx.scale};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) base_free_lines(*lines[i]);
    base_free_lines(s->k_cache), base_free_lines(s->v_cache), base_free(s->kv_off);
    base_free_lines(s->qx.pairs), base_free(s->qx.zero), base_free_lines(s->qx.psum);
    base_free_lines(s->qx.bytes), base_free_lines(s->claims);
    memset(s, 0, sizeof *s);
}

static void add_rows(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static void add_bias(float *x, const float *b, int n, int d) {
    for (int r = 0; r < n; r++)
        for (int i = 0; i < d; i++) x[(size_t)r * d + i] += b[i];
}

/* ---- parallel regions: each worker takes a share of the output panels, or of the heads */

/* Decode's integer-dot and float matmuls: each worker starts on an even share of the calls (four
 * panels each, as the decode GEMV takes them), from its front, and one that has run out takes calls
 * from the back of the largest share left. An even split alone leaves one worker waiting on the
 * other at the end of most regions (two cores do not get the same share of the memory bandwidth),
 * and a shared counter would interleave the workers' calls, sending each one's prefetch of its next
 * call's panels into the other's (DESIGN.md, "Threads"). An output's value does not depend on which
 * worker computes it. */
#define MM_CALL (4 * KERN_PANEL)

static void claims_init(struct model_claim *c, int units, int nw) {
    for (int i = 0; i < nw; i++) {
        int b, e;
        base_split(units, nw, i, 1, &b, &e);
        atomic_store_explicit(&c[i].range, (uint64_t)b << 32 | (uint32_t)e, memory_order_relaxed);
    }
}

/* Worker i's next unit (a call; in attention, a KV head): the front of its own share, or the back of
 * the largest left; -1 when none is left. Relaxed: a unit is claimed by one worker (the word's CAS),
 * and the pool's barrier publishes the outputs. */
static int claim(struct model_claim *c, int i, int nw) {
    uint64_t v = atomic_load_explicit(&c[i].range, memory_order_relaxed);
    while ((uint32_t)(v >> 32) < (uint32_t)v)
        if (atomic_compare_exchange_weak_explicit(&c[i].range, &v, v + ((uint64_t)1 << 32), memory_order_relaxed,
                                                  memory_order_relaxed))
            return (int)(v >> 32);
    for (;;) {
        int victim = -1;
        uint32_t most = 0;
        uint64_t seen = 0;
        for (int j = 0; j < nw; j++) {
            uint64_t w = atomic_load_explicit(&c[j].range, memory_order_relaxed);
            uint32_t next = (uint32_t)(w >> 32), end = (uint32_t)w;
            if (next < end && end - next > most) most = end - next, victim = j, seen = w;
        }
        if (victim < 0) return -1;
        if (atomic_compare_exchange_weak_explicit(&c[victim].range, &seen, seen - 1, memory_order_relaxed,
                                                  memory_order_relaxed))
            return (int)((uint32_t)seen - 1);
    }
}

typedef struct mm_job {
    float *y;
    const float *x;
    const kern_mat *w;
    int n, d, k;
    const kern_qx *qx; /* x as int8, for I8/I4 matrices */
    struct model_claim *claims; /* [n_workers] shares of the calls (mm_claims), or NULL: an even split */
} mm_job;

/* Worker i's output columns [*b, *e) of a matmul with d outputs: mm_task's share, which a gated
 * mm_group's activation takes again. */
static void mm_share(int d, int i, int nw, int *b, int *e) { base_split(d, nw, i, KERN_PANEL, b, e); }

/* Output columns [b, e) of a matmul. */
static void mm_cols(const mm_job *j, int b, int e) {
    if (b >= e) return;
    if (kern_is_int_dot(j->w->type)) kern_matmul_i(j->y, j->d, j->qx, j->w, j->n, j->d, j->k, b, e);
    else kern_matmul(j->y, j->d, j->x, j->w, j->n, j->d, j->k, b, e);
}

/* Call c's output columns of a d-output matmul. */
static void call_cols(int c, int d, int *b, int *e) {
    *b = c * MM_CALL, *e = *b + MM_CALL < d ? *b + MM_CALL : d;
}

static void mm_task(void *ctx, int i, int nw) {
    const mm_job *j = ctx;
    int b, e;
    if (j->claims) {
        for (int c; (c = claim(j->claims, i, nw)) >= 0;) call_cols(c, j->d, &b, &e), mm_cols(j, b, e);
        return;
    }
    mm_share(j->d, i, nw, &b, &e);
    mm_cols(j, b, e);
}

/* Whether a matmul's calls are claimed (claim) rather than split evenly: one row (decode) of an
 * integer-dot or float matrix. A weight-only call sums x per group first, once per call: claimed
 * calls of four panels would redo that for every call. */
static int mm_claimed(const model_state *s, base_pool *pool, const kern_mat *w, int n) {
    int nw = base_pool_size(pool);
    return n == 1 && nw >= 2 && nw <= s->n_threads && (kern_is_int_dot(w->type) || w->type <= KERN_BF16);
}

/* The claims of slot 0..2 (a region's matrices) set to even shares of a claimed matmul's calls, or
 * NULL when it is split evenly. */
static struct model_claim *mm_claims(model_state *s, base_pool *pool, const kern_mat *w, int n, int d, int slot) {
    if (!mm_claimed(s, pool, w, n)) return NULL;
    int nw = base_pool_size(pool);
    struct model_claim *c = s->claims + (size_t)slot * s->n_threads;
    claims_init(c, (d + MM_CALL - 1) / MM_CALL, nw);
    return c;
}

/* Several matmuls over the same input in one parallel region (q, k, v; gate, up): one barrier
 * instead of one per matrix. Each worker takes its share of every matrix, the same output columns
 * of each, so with `gated` it then applies the gate to its own columns, in the same region:
 * j[0].y = act(j[1].y) * j[0].y (up and gate, [n, d] each). */
typedef struct mm_group {
    mm_job j[3];
    int count;
    int gated, act; /* act: MODEL_ACT_* */
} mm_group;

/* The gate applied to columns [b, e) of up and gate. */
static void mm_gate(const mm_group *g, int b, int e) {
    int d = g->j[0].d;
    for (int r = 0; r < g->j[0].n && b < e; r++) {
        float *h = g->j[0].y + (size_t)r * d + b;
        const float *gate = g->j[1].y + (size_t)r * d + b;
        if (g->act == MODEL_ACT_GELU_TANH) kern_geglu(h, gate, (size_t)(e - b));
        else kern_swiglu(h, gate, (size_t)(e - b));
    }
}

static void mm_group_task(void *ctx, int i, int nw) {
    const mm_group *g = ctx;
    int b, e;
    if (g->gated && g->j[0].claims) { /* a claimed call of up, the same of gate, and the gate on it */
        for (int c; (c = claim(g->j[0].claims, i, nw)) >= 0;) {
            call_cols(c, g->j[0].d, &b, &e);
            mm_cols(&g->j[0], b, e), mm_cols(&g->j[1], b, e), mm_gate(g, b, e);
        }
        return;
    }
    for (int m = 0; m < g->count; m++) mm_task((void *)&g->j[m], i, nw);
    if (!g->gated) return;
    mm_share(g->j[0].d, i, nw, &b, &e);
    mm_gate(g, b, e);
}

/* Below this many multiply-adds a matmul runs on the calling thread: waking the pool would cost
 * more than the work (stories260K's 64 x 64 layers). */
#define MM_PARALLEL_MIN (1 << 18)

/* Attention runs over the pool from this many bytes of cache read, however little arithmetic: a
 * decode step's keys come from memory (the weights streamed through the caches since they were
 * written), and one thread alone reads at a fraction of the machine's bandwidth. */
#define ATT_PARALLEL_BYTES (1 << 14)

/* One site: the observer sees x[n, k]; if an integer-dot matrix reads it, x is quantized to int8
 * once for all of them (per row, or with their static parameters: the loader made sure the
 * matrices of a site agree). w: the site's matrices, up to three. Returns what the jobs read. */
static void quantize_rows(base_pool *pool, kern_qx *qx, const float *x, int n, int k, const float *act, int group);
static const kern_qx *site_input(model_state *s, base_pool *pool, int layer, int site, const float *x, int n, int k,
                                 const kern_mat *w0, const kern_mat *w1, const kern_mat *w2) {
    if (s->observe) s->observe(s->observe_user, layer, site, x, n, k);
    const kern_mat *ws[3] = {w0, w1, w2};
    for (int i = 0; i < 3; i++)
        if (ws[i] && kern_is_int_dot(ws[i]->type)) {
            quantize_rows(pool, &s->qx, x, n, k, ws[i]->act, ws[i]->act_group);
            return &s->qx;
        }
    return NULL;
}

/* y[n, d] = x[n, k] . W^T over the pool, x as float or as int8 (qx). */
static void matmul(model_state *s, base_pool *pool, float *y, const float *x, const kern_qx *qx, const kern_mat *w,
                   int n, int d, int k) {
    mm_job j = {y, x, w, n, d, k, qx, NULL};
    if ((int64_t)n * d * k < MM_PARALLEL_MIN) mm_task(&j, 0, 1);
    else j.claims = mm_claims(s, pool, w, n, d, 0), base_pool_run(pool, mm_task, &j);
}

typedef struct att_job {
    const model_config *c;
    model_state *s;
    kern_kv kv;
    kern_att_shape shape;
    int n, start_pos;
    struct model_claim *claims; /* [n_workers] shares of the KV heads (claim), or NULL: an even split */
} att_job;

/* Workers split the KV heads, each claiming them (claim) from an even share: a KV head's keys are
 * one stream, and a worker that streams faster takes the other's last heads. With fewer KV heads
 * than workers (Gemma 3 has one) they take blocks of four rows in turn instead (turns, because
 * causal rows grow longer), or, in a chunk too short for that (decode), the query heads: each then
 * reads the KV head's rows for its own heads, where one worker would compute every head while the
 * others wait. A query's result does not depend on which queries share its call, so every split
 * gives the same numbers. */
static void att_task(void *ctx, int i, int nw) {
    const att_job *j = ctx;
    const int n_kv = j->c->n_kv_heads, group = j->c->n_heads / n_kv;
    float *scores = j->s->scores + (size_t)i * KERN_ATT_BLOCK * j->c->max_context_len;
    if (j->claims) {
        for (int h; (h = claim(j->claims, i, nw)) >= 0;)
            kern_attention(j->s->xb, j->s->q, &j->kv, j->n, j->start_pos, &j->shape, scores, h * group, (h + 1) * group);
        return;
    }
    if (n_kv >= nw || j->n < 8) {
        int b, e;
        if (n_kv >= nw) base_split(n_kv, nw, i, 1, &b, &e), b *= group, e *= group;
        else base_split(j->c->n_heads, nw, i, 1, &b, &e);
        if (b < e) kern_attention(j->s->xb, j->s->q, &j->kv, j->n, j->start_pos, &j->shape, scores, b, e);
        return;
    }
    const size_t row = (size_t)j->c->n_heads * j->c->head_dim;
    for (int r = 4 * i; r < j->n; r += 4 * nw) {
        int rows = j->n - r < 4 ? j->n - r : 4;
        kern_attention(j->s->xb + r * row, j->s->q + r * row, &j->kv, rows, j->start_pos + r, &j->shape, scores, 0,
                       j->c->n_heads);
    }
}

/* Row-wise work of a chunk, split over the pool's workers by rows: every row's result is the same
 * whichever worker computes it, and on the calling thread alone the other workers would wait. NORM: out = rmsnorm(x) * w, rows of `width`; QK: Qwen3's
 * per-head q/k norms and RoPE of q and k, rows of the chunk; QUANT: x quantized to int8 into qx. */
enum { ROWS_NORM, ROWS_QK, ROWS_QUANT };
typedef struct rows_job {
    int op, n, width;
    float *out;
    const float *x, *w; /* NORM: weights; QUANT: the static activation parameters or NULL */
    const model_config *c;
    float *q, *k;              /* QK */
    const float *rope;         /* QK: the chunk's turns, kern_rope_table's [n, head_dim] */
    const model_layer *L;      /* QK */
    kern_qx *qx;               /* QUANT */
} rows_job;

static void rows_task(void *ctx, int i, int nw) {
    const rows_job *j = ctx;
    int b, e;
    base_split(j->n, nw, i, 1, &b, &e);
    if (b >= e) return;
    size_t at = (size_t)b * j->width;
    if (j->op == ROWS_NORM) {
        kern_rmsnorm(j->out + at, j->x + at, j->w, e - b, j->width, j->c->norm_eps);
    } else if (j->op == ROWS_QK) {
        const model_config *c = j->c;
        int hd = c->head_dim;
        float *q = j->q + (size_t)b * c->n_heads * hd, *k = j->k + (size_t)b * c->n_kv_heads * hd;
        if (c->qk_norm) { /* each head is a row of head_dim values */
            kern_rmsnorm(q, q, j->L->q_norm, (e - b) * c->n_heads, hd, c->norm_eps);
            kern_rmsnorm(k, k, j->L->k_norm, (e - b) * c->n_kv_heads, hd, c->norm_eps);
        }
        kern_rope(q, e - b, c->n_heads, hd, j->rope + (size_t)b * hd, c->rope_style);
        kern_rope(k, e - b, c->n_kv_heads, hd, j->rope + (size_t)b * hd, c->rope_style);
    } else {
        size_t half = (size_t)j->width / 2, scales = j->qx->group ? (size_t)j->qx->n_groups : 1;
        kern_qx v = {j->qx->pairs + b * half, j->qx->scale + b * scales, j->qx->zero + b, j->qx->bytes + b * half,
                     j->qx->psum + b * (half + 1), j->qx->group, j->qx->n_groups};
        kern_quantize_x(&v, j->x + at, e - b, j->width, j->w);
    }
}

/* Runs a rows job over the pool, or on this thread when the chunk is small (decode, tiny models):
 * waking the pool would cost more than the work. */
static void run_rows(base_pool *pool, rows_job *j) {
    int64_t width = j->op == ROWS_QK ? (int64_t)j->c->n_heads * j->c->head_dim : j->width;
    if (j->n < 2 || (int64_t)j->n * width < (1 << 14)) rows_task(j, 0, 1);
    else base_pool_run(pool, rows_task, j);
}

static void quantize_rows(base_pool *pool, kern_qx *qx, const float *x, int n, int k, const float *act, int group) {
    qx->group = group, qx->n_groups = group ? kern_q_groups(k, group) : 0;
    rows_job j = {ROWS_QUANT, n, k, NULL, x, act, NULL, NULL, NULL, NULL, NULL, qx};
    run_rows(pool, &j);
}

static void rmsnorm_rows(base_pool *pool, const model_config *c, float *out, const float *x, const float *w, int n, int dim) {
    rows_job j = {ROWS_NORM, n, dim, out, x, w, c, NULL, NULL, NULL, NULL, NULL};
    run_rows(pool, &j);
}

void model_forward(const model_config *c, const model_weights *w, model_state *s, base_pool *pool,
                   const int32_t *tokens, int n, int start_pos, float *logits, int all_logits) {
    const int dim = c->dim, hd = c->head_dim, q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    for (int r = 0; r < n; r++) kern_packed_row(s->x + (size_t)r * dim, &w->tok_embd, tokens[r], dim);
    if (c->embd_scale != 1.0f)
        for (size_t i = 0; i < (size_t)n * dim; i++) s->x[i] *= c->embd_scale;

    kern_rope_table(s->rope, n, hd, start_pos, c->inv_freq);
    if (s->rope_local) kern_rope_table(s->rope_local, n, hd, start_pos, c->inv_freq_local);

    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &w->layers[l];
        const int rows = c->kv_rows[l], window = c->window[l];
        const kern_kv kv = model_layer_kv(c, s, l);
        const kern_att_shape shape = {c->n_heads, c->n_kv_heads, hd, c->score_div, window, rows};
        /* k and v rows of the chunk, stored into the cache (head-major, converted) once RoPE is done */
        float *k_rows = s->k_tmp, *v_rows = s->v_tmp;
        const float *rope = window && s->rope_local ? s->rope_local : s->rope;

        /* attention: q, k, v for all n rows */
        rmsnorm_rows(pool, c, s->xb, s->x, L->attn_norm, n, dim);
        const kern_qx *qx = site_input(s, pool, l, MODEL_SITE_QKV, s->xb, n, dim, &L->wq, &L->wk, &L->wv);
        mm_group qkv = {{{s->q, s->xb, &L->wq, n, q_dim, dim, qx, NULL},
                         {k_rows, s->xb, &L->wk, n, kv_dim, dim, qx, NULL},
                         {v_rows, s->xb, &L->wv, n, kv_dim, dim, qx, NULL}}, 3, 0, 0};
        if ((int64_t)n * (q_dim + 2 * kv_dim) * dim < MM_PARALLEL_MIN) mm_group_task(&qkv, 0, 1);
        else {
            for (int m = 0; m < 3; m++) qkv.j[m].claims = mm_claims(s, pool, qkv.j[m].w, n, qkv.j[m].d, m);
            base_pool_run(pool, mm_group_task, &qkv);
        }
        if (c->qkv_bias) {
            add_bias(s->q, L->bq, n, q_dim);
            add_bias(k_rows, L->bk, n, kv_dim);
            add_bias(v_rows, L->bv, n, kv_dim);
        }
        rows_job qk = {ROWS_QK, n, 0, NULL, NULL, NULL, c, s->q, k_rows, rope, L, NULL};
        run_rows(pool, &qk);
        kern_kv_store(&kv, k_rows, v_rows, n, start_pos, &shape);
        att_job aj = {c, s, kv, shape, n, start_pos, NULL};
        int64_t keys = window && window < start_pos + n ? window + n : start_pos + n;
        /* by bytes only where the reads split: under 8 rows att_task splits the KV heads, and with one
         * (Gemma 3 270M) the query heads, each worker reading all of the head's rows */
        int64_t kv_bytes = keys * 2 * kv_dim * (int64_t)kern_kv_size(kv.type);
        int by_bytes = kv_bytes >= ATT_PARALLEL_BYTES && (c->n_kv_heads > 1 || n >= 8);
        if ((int64_t)n * keys * q_dim < MM_PARALLEL_MIN && !by_bytes) att_task(&aj, 0, 1);
        else {
            int nw = base_pool_size(pool);
            if (c->n_kv_heads >= nw && nw <= s->n_threads)
                aj.claims = s->claims, claims_init(aj.claims, c->n_kv_heads, nw); /* slot 0: regions run one at a time */
            base_pool_run(pool, att_task, &aj);
        }
        qx = site_input(s, pool, l, MODEL_SITE_WO, s->xb, n, q_dim, &L->wo, NULL, NULL);
        matmul(s, pool, s->proj, s->xb, qx, &L->wo, n, dim, q_dim);
        if (c->post_norms) rmsnorm_rows(pool, c, s->proj, s->proj, L->post_attn_norm, n, dim);
        add_rows(s->x, s->proj, (size_t)n * dim);

        /* feed-forward: w_down(act(w_gate x) * w_up x) */
        rmsnorm_rows(pool, c, s->xb, s->x, L->ffn_norm, n, dim);
        qx = site_input(s, pool, l, MODEL_SITE_GATE_UP, s->xb, n, dim, &L->w_up, &L->w_gate, NULL);
        mm_group ffn = {{{s->hb, s->xb, &L->w_up, n, c->hidden_dim, dim, qx, NULL},
                         {s->hb2, s->xb, &L->w_gate, n, c->hidden_dim, dim, qx, NULL}}, 2, 1, c->act};
        if ((int64_t)n * 2 * c->hidden_dim * dim < MM_PARALLEL_MIN) mm_group_task(&ffn, 0, 1);
        else { /* up's claims are gate's too: both must be claimed */
            if (mm_claimed(s, pool, &L->w_gate, n)) ffn.j[0].claims = mm_claims(s, pool, &L->w_up, n, c->hidden_dim, 0);
            base_pool_run(pool, mm_group_task, &ffn);
        }
        qx = site_input(s, pool, l, MODEL_SITE_DOWN, s->hb, n, c->hidden_dim, &L->w_down, NULL, NULL);
        matmul(s, pool, s->proj, s->hb, qx, &L->w_down, n, dim, c->hidden_dim);
        if (c->post_norms) rmsnorm_rows(pool, c, s->proj, s->proj, L->post_ffn_norm, n, dim);
        add_rows(s->x, s->proj, (size_t)n * dim);
    }

    if (!logits && !s->observe) return;
    /* The classifier runs only on the rows asked for: the last one, unless all are wanted. An
     * observer sees the classifier's input of every row all the same (the norm is cheap). */
    int first = all_logits ? 0 : n - 1, rows = n - first, normed = s->observe ? 0 : first;
    kern_rmsnorm(s->xb, s->x + (size_t)normed * dim, w->out_norm, n - normed, dim, c->norm_eps);
    if (s->observe) s->observe(s->observe_user, c->n_layers, MODEL_SITE_OUTPUT, s->xb, n, dim);
    if (!logits) return;
    const float *in = s->xb + (size_t)(first - normed) * dim;
    const kern_qx *qx = NULL;
    if (kern_is_int_dot(w->output.type)) {
        quantize_rows(pool, &s->qx, in, rows, dim, w->output.act, w->output.act_group);
        qx = &s->qx;
    }
    matmul(s, pool, logits, in, qx, &w->output, rows, c->vocab_size, dim);
    if (c->final_softcap > 0) kern_softcap(logits, (size_t)rows * c->vocab_size, c->final_softcap);
}
