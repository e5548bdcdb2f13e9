/* kernels: math on raw fp32 buffers. Each optimized kernel has a plain-C reference twin
 * (suffix _ref) that tests compare it with; kern_init picks the variants once from the CPU. */
#ifndef ETCH_KERNELS_H
#define ETCH_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Picks AVX2/FMA variants when the CPU has them. Idempotent and thread-safe in effect (every
 * caller computes the same choice). Returns the name of the variant set: "avx2" or "portable". */
const char *kern_init(void);

/* Weight element types. */
enum { KERN_F32 = 0, KERN_F16 = 1, KERN_BF16 = 2 };
/* Bytes per element of a weight type. */
size_t kern_wsize(int wtype);

/* IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN). */
float kern_f16_to_f32(uint16_t h);
uint16_t kern_f32_to_f16(float f);
float kern_bf16_to_f32(uint16_t b);
uint16_t kern_f32_to_bf16(float f);
/* Packed matrices. A weight matrix W[d, k] (one row per output, as PyTorch's Linear stores it) is
 * packed at export into ceil(d/16) panels of 16 rows; panel p holds, for each kk in 0..k-1, the 16
 * values W[16p + j][kk], j = 0..15, next to each other (rows past d are zero). Element (o, kk) is at
 * ((o / 16) * k + kk) * 16 + o % 16. One step of the micro-kernel reads 16 consecutive weights. */
#define KERN_PANEL 16
static inline size_t kern_packed_index(int o, int kk, int k) {
    return ((size_t)(o / KERN_PANEL) * (size_t)k + (size_t)kk) * KERN_PANEL + (size_t)(o % KERN_PANEL);
}
/* Rows of a packed matrix with d outputs: d rounded up to a whole panel. */
static inline int kern_packed_rows(int d) { return (d + KERN_PANEL - 1) / KERN_PANEL * KERN_PANEL; }
/* dst[kk] = W[row][kk] widened to f32 (an embedding lookup in a packed table). */
void kern_packed_row(float *dst, const void *w, int wtype, int row, int k);

/* y[r, o] = sum over kk of x[r, kk] * W[o, kk], for r < n and o in [o_begin, o_end) (o_begin a
 * multiple of 16; o_end a multiple of 16 or d). x is [n, k] row-major, y has row stride ldy, W is
 * packed and of type wtype (widened in registers: F16C for f16, a shift for bf16).
 * Every element is one fused multiply-add chain over kk in order, whatever n and the tiling are:
 * the AVX2 kernel equals the reference twin bit for bit, and a row's result does not depend on the
 * other rows of the call (batched and one-token prefill agree exactly). */
void kern_matmul(float *y, int ldy, const float *x, const void *w, int wtype, int n, int d, int k, int o_begin,
                 int o_end);
void kern_matmul_ref(float *y, int ldy, const float *x, const void *w, int wtype, int n, int d, int k, int o_begin,
                     int o_end);
/* Forces the portable variant (tests use it to compare both paths). */
void kern_force_portable(int on);

/* out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w, for r < n. out may equal x. */
void kern_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps);

enum { KERN_ROPE_ADJACENT = 0, KERN_ROPE_HALF = 1 };
/* inv_freq[i] = base^(-2i/head_dim) for i < head_dim/2 (as llama2.c computes it, so its reference
 * outputs match). */
void kern_rope_freqs(float *inv_freq, int head_dim, float base);
/* Llama 3 rope scaling of a frequency table: long wavelengths divided by factor, short ones kept,
 * a smooth blend between (Hugging Face's _compute_llama3_parameters). */
void kern_rope_llama3(float *inv_freq, int head_dim, float factor, float low_freq_factor, float high_freq_factor,
                      float original_context_len);
/* Rotates v[r, h*head_dim ...] for n rows at positions start_pos + r, for n_heads heads:
 * ADJACENT rotates pairs (x[2i], x[2i+1]) (llama2.c, GGUF llama); HALF rotates (x[i], x[i+d/2])
 * (Hugging Face rotate_half). Pair i turns by position * inv_freq[i]. */
void kern_rope(float *v, int n, int n_heads, int head_dim, int start_pos, const float *inv_freq, int style);

/* The geometry of one attention layer. */
typedef struct kern_att_shape {
    int n_heads, n_kv_heads, head_dim;
    float score_div;  /* a score is q.k / score_div: sqrt(head_dim), or sqrt(query_pre_attn_scalar) (Gemma) */
    int window;       /* 0: the query at position p sees keys 0..p; W > 0: keys p-W+1..p (sliding window) */
    int cache_rows;   /* the key of position t is cache row t % cache_rows: a ring when smaller than the context */
} kern_att_shape;

/* Causal attention of n queries at positions start_pos .. start_pos+n-1 over a KV cache, for the
 * query heads of KV heads g_begin .. g_end-1 (threads split the KV heads; the query heads of a group
 * share every K and V row read).
 *   out[n, n_heads*head_dim], q[n, n_heads*head_dim]
 *   k_cache, v_cache: [cache_rows, n_kv_heads*head_dim]; every key a query sees must be in its row
 *   scores: scratch [4 * (start_pos+n)]
 * Keys are summed in position order whatever the ring's rotation, so a query's result depends only on
 * its own keys: batched and one-token prefill agree exactly, windowed or not. */
void kern_attention(float *out, const float *q, const float *k_cache, const float *v_cache, int n, int start_pos,
                    const kern_att_shape *a, float *scores, int g_begin, int g_end);
void kern_attention_ref(float *out, const float *q, const float *k_cache, const float *v_cache, int n,
                        int start_pos, const kern_att_shape *a, float *scores, int g_begin, int g_end);

/* The machine's limits, measured: fused multiply-add throughput of one thread (GFLOP/s, counting
 * a multiply-add as 2) over about `seconds`, and the read bandwidth of summing buf (GB/s). */
double kern_fma_peak(double seconds);
double kern_read_bandwidth(const float *buf, size_t n);

/* h[i] = silu(g[i]) * h[i], for i < n. */
void kern_swiglu(float *h, const float *g, size_t n);
/* h[i] = gelu_tanh(g[i]) * h[i], for i < n: GELU with the tanh approximation (Gemma's GeGLU),
 * 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). */
void kern_geglu(float *h, const float *g, size_t n);
/* x[i] = cap * tanh(x[i] / cap), for i < n (Gemma's final logit soft-capping). */
void kern_softcap(float *x, size_t n, float cap);

/* x[i] = exp(x[i] - max) / sum, in place. */
void kern_softmax(float *x, int n);

/* The index of the largest value (the first one on ties). */
int kern_argmax(const float *x, int n);

#endif
