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
/* dst[i] = w[row * k + i] widened to f32, for i < k. */
void kern_row_to_f32(float *dst, const void *w, int wtype, size_t row, int k);

/* y[n, d] = x[n, k] . w[d, k]^T  (w row-major: one row per output, as PyTorch's Linear stores it),
 * w of type wtype (widened in registers: F16C for f16, a shift for bf16).
 * Every y element is reduced over k in the same order whatever n is, so a row's result does not
 * depend on which other rows share the call (batched and one-row calls agree bit for bit). */
void kern_matmul(float *y, const float *x, const void *w, int wtype, int n, int d, int k);
void kern_matmul_ref(float *y, const float *x, const void *w, int wtype, int n, int d, int k);
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

/* Causal attention of n queries at positions start_pos .. start_pos+n-1 over a KV cache.
 *   out[n, n_heads*head_dim], q[n, n_heads*head_dim]
 *   k_cache, v_cache: [>= start_pos+n, n_kv_heads*head_dim] (rows are positions)
 *   scores: scratch [start_pos+n]
 * Query r sees keys 0 .. start_pos+r. Heads share KV heads in groups (GQA). */
void kern_attention(float *out, const float *q, const float *k_cache, const float *v_cache, int n,
                    int start_pos, int n_heads, int n_kv_heads, int head_dim, float *scores);

/* h[i] = silu(g[i]) * h[i], for i < n. */
void kern_swiglu(float *h, const float *g, size_t n);

/* x[i] = exp(x[i] - max) / sum, in place. */
void kern_softmax(float *x, int n);

/* The index of the largest value (the first one on ties). */
int kern_argmax(const float *x, int n);

#endif
