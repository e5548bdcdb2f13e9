/* model: the decoder. forward of n tokens at positions start_pos.. over the KV cache, for the Llama
 * architecture (RMSNorm, RoPE, grouped-query attention, SwiGLU), configured by the program. */
#ifndef ETCH_MODEL_H
#define ETCH_MODEL_H

#include "../base/base.h"
#include "../base/pool.h"
#include "../kernels/kernels.h"

typedef struct model_config {
    int dim;          /* hidden size */
    int hidden_dim;   /* feed-forward size */
    int n_layers, n_heads, n_kv_heads, head_dim;
    int vocab_size;
    int max_context_len; /* KV-cache rows */
    int max_seq_len;     /* most rows one forward call takes */
    float norm_eps;
    int rope_style;      /* KERN_ROPE_* */
    const float *inv_freq; /* [head_dim / 2] RoPE frequencies (scaling applied), owned by the program */
    int qkv_bias;        /* Qwen2: q, k, v projections have biases */
    int qk_norm;         /* Qwen3: RMSNorm over each head of q and k before RoPE */
    int act;             /* MODEL_ACT_*: the gate's activation */
    int post_norms;      /* Gemma: RMSNorm on the attention output and on the feed-forward output */
    float embd_scale;    /* embeddings are multiplied by this (Gemma: sqrt(dim)); 1 otherwise */
    float score_div;     /* attention scores are q.k / score_div */
    float final_softcap; /* 0, or logits = cap * tanh(logits / cap) */
    const int32_t *window;  /* [n_layers]: 0 for full attention, else the layer's sliding window */
    const int32_t *kv_rows; /* [n_layers]: cache rows of the layer: max_context_len, or a ring for a window */
    const float *inv_freq_local; /* [head_dim / 2] RoPE frequencies of windowed layers (Gemma: their own base) */
    int int_dot;         /* some matrices are I8/I4: sessions keep int8 activations */
    int act_group;       /* 0, or the integer-dot matrices' inputs take a scale per this many values
                          * (kern_mat.act_group) */
} model_config;

/* Where the inputs of the linear layers are, for observers (calibration): the input of q, k and v;
 * of the attention output projection; of gate and up; of down; of the classifier (layer n_layers). */
enum { MODEL_SITE_QKV = 0, MODEL_SITE_WO = 1, MODEL_SITE_GATE_UP = 2, MODEL_SITE_DOWN = 3, MODEL_SITE_OUTPUT = 4,
       MODEL_N_SITES = 5 };
/* Sees x[n, k], the rows a forward call feeds to the linear layers at one site of one layer. */
typedef void (*model_observer)(void *user, int layer, int site, const float *x, int n, int k);

enum { MODEL_ACT_SILU = 0, MODEL_ACT_GELU_TANH = 1 };

/* Cache rows a layer with this window needs so that a forward call of up to max_seq_len rows never
 * overwrites a key one of its own queries still sees: the query at p reads p-window+1 .. p, and the
 * call writes up to p + max_seq_len - 1, so window + max_seq_len - 1 rows (the context when smaller). */
int model_kv_rows(int window, int max_seq_len, int max_context_len);

/* Views into the program's mapping. Matrices are packed in 16-row panels (kern_packed_index), each
 * of its own type (f32, f16, bf16, or quantized with its scales); shapes below are the logical
 * [out, in]. Norms and biases are always f32. */
typedef struct model_layer {
    const float *attn_norm; /* [dim] */
    kern_mat wq;         /* [n_heads * head_dim, dim] */
    kern_mat wk;         /* [n_kv_heads * head_dim, dim] */
    kern_mat wv;         /* [n_kv_heads * head_dim, dim] */
    const float *bq, *bk, *bv; /* [q_dim], [kv_dim], [kv_dim] when qkv_bias, else NULL */
    const float *q_norm, *k_norm; /* [head_dim] when qk_norm, else NULL */
    kern_mat wo;         /* [dim, n_heads * head_dim] */
    const float *post_attn_norm; /* [dim] when post_norms, else NULL */
    const float *ffn_norm;  /* [dim] */
    const float *post_ffn_norm;  /* [dim] when post_norms, else NULL */
    kern_mat w_gate;     /* [hidden_dim, dim]   (llama2.c w1) */
    kern_mat w_up;       /* [hidden_dim, dim]   (llama2.c w3) */
    kern_mat w_down;     /* [dim, hidden_dim]   (llama2.c w2) */
} model_layer;

typedef struct model_weights {
    kern_mat tok_embd;      /* [vocab_size, dim] */
    model_layer *layers;    /* [n_layers], owned by the program */
    const float *out_norm;  /* [dim] */
    kern_mat output;        /* [vocab_size, dim]: tok_embd when tied */
} model_weights;

/* Everything one session writes; sized once from the config. */
typedef struct model_state {
    float *x;        /* [max_seq_len, dim] residual stream */
    float *xb;       /* [max_seq_len, max(dim, q_dim)] normed input / attention output */
    float *q;        /* [max_seq_len, q_dim] */
    float *proj;     /* [max_seq_len, dim] output of wo and w_down */
    float *hb;       /* [max_seq_len, hidden_dim] */
    float *hb2;      /* [max_seq_len, hidden_dim] */
    float *scores;   /* [n_threads, 4, max_context_len]: attention scores, four query rows per worker */
    float *k_tmp, *v_tmp; /* [max_seq_len, kv_dim]: this chunk's keys and values before they are stored */
    float *rope;     /* [max_seq_len, head_dim]: the chunk's RoPE turns (kern_rope_table) by inv_freq */
    float *rope_local; /* the same by inv_freq_local, where windowed layers have their own; else NULL */
    int n_threads;
    struct model_claim *claims; /* [3, n_threads]: decode's matmul shares, one cache line each (model.c) */
    int kv_type;     /* KERN_KV_F32, KERN_KV_F16 or KERN_KV_Q8 */
    void *k_cache;   /* values of kv_type: layer l's block [n_kv_heads, kv_rows[l], head_dim] (kern_kv) starts
                      * at element kv_off[l] * kv_dim */
    void *v_cache;   /* same shape */
    float *k_scale, *v_scale; /* Q8: layer l's [n_kv_heads, kv_rows[l]] at kv_off[l] * n_kv_heads; else NULL */
    size_t *kv_off;  /* [n_layers] first row of each layer */
    kern_qx qx;      /* int8 activations [max_seq_len, widest input / 2] when the program has I8/I4 matrices */
    model_observer observe; /* NULL, or called at every site of every forward call */
    void *observe_user;
    size_t kv_bytes; /* the K and V caches, with their scales */
    size_t bytes;    /* total allocated */
} model_state;

etch_status model_state_new(const model_config *c, int n_threads, int kv_type, model_state *s, etch_error *err);
/* Bytes of K and V cache (scales included) that `rows` cache rows take with a cache of kv_type. */
size_t model_kv_bytes(const model_config *c, int kv_type, size_t rows);
/* Layer l's cache as the attention kernels see it. */
kern_kv model_layer_kv(const model_config *c, const model_state *s, int l);
void model_state_free(model_state *s);

/* The forward pass of tokens[n] at positions start_pos .. start_pos+n-1. The caller has checked
 * the inputs (1 <= n <= max_seq_len, start_pos+n <= max_context_len, ids in range, and for windowed
 * layers that the ring still holds the keys the first query sees).
 * logits: NULL, [vocab] for the last row, or [n, vocab] when all_logits. */
void model_forward(const model_config *c, const model_weights *w, model_state *s, base_pool *pool,
                   const int32_t *tokens, int n, int start_pos, float *logits, int all_logits);

#endif
