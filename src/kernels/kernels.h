/* kernels: math on raw fp32 buffers. Each optimized kernel has a plain-C reference twin
 * (suffix _ref) that tests compare it with; kern_init picks the variants once from the CPU. */
#ifndef ETCH_KERNELS_H
#define ETCH_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Picks AVX2/FMA variants when the CPU has them, vpdpbusd for integer-dot GEMMs (kern_matmul_i with
 * more than one row) where it also has AVX-VNNI, and 512-bit float matmuls where it has AVX-512F.
 * Idempotent and thread-safe in effect (every caller computes the same choice). Returns the name of
 * the variant set: "avx512+amx", "avx512+vnni+vbmi", "avx512+vnni", "avx512", "avx2+vnni", "avx2" or
 * "portable". The environment variable ETCH_KERNELS=avx512+vnni+vbmi (no AMX), =avx512+vnni (no VBMI
 * either), =avx2+vnni (no AVX-512), =avx2 (no VNNI either) or =portable caps it. */
const char *kern_init(void);
/* Caps the variants kern_init may pick (tests use it to compare every path with the twins) and
 * picks again; returns the new set's name. */
enum { KERN_BEST = 0, KERN_NO_AMX = 1, KERN_NO_VBMI = 2, KERN_NO_AVX512 = 3, KERN_NO_VNNI = 4, KERN_PORTABLE = 5 };
const char *kern_limit(int level);

/* Weight element types. Q8 and Q4 are quantized: int8, or 4-bit values -8..7, with one scale per
 * group of values along k (a weight is value * scale); activations stay f32. Scales are f32 or f16
 * (as GGML's Q8_0 and Q4_0 store theirs), an f16 widened exactly to f32 where it is read. I8 and I4 hold
 * the same values in the layout of integer dot products with int8 activations (kern_matmul_i). */
enum { KERN_F32 = 0, KERN_F16 = 1, KERN_BF16 = 2, KERN_Q8 = 3, KERN_Q4 = 4, KERN_I8 = 5, KERN_I4 = 6 };
/* A scale type only (kern_mat.scale_type, beside KERN_F32 and KERN_F16): two levels, an int8 per group
 * times an f16 shared by kern_mat.sub_groups consecutive groups of a row, as GGUF's K-quants and
 * IQ4_XS store theirs (d times a sub-block's 6- or 8-bit scale). An f16 times an int8 has at most 19
 * significant bits: the kernels form exactly the f32 scale a table of f32 would hold, from a fifth
 * of its bytes. */
enum { KERN_SCALE_S8 = 7 };
static inline int kern_is_quantized(int type) { return type >= KERN_Q8; }
static inline int kern_is_int_dot(int type) { return type == KERN_I8 || type == KERN_I4; }
/* Bytes per element of a float weight type (f32, f16, bf16), or of a scale type (KERN_SCALE_S8: 1). */
size_t kern_wsize(int wtype);

/* IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN). */
float kern_f16_to_f32(uint16_t h);
uint16_t kern_f32_to_f16(float f);
float kern_bf16_to_f32(uint16_t b);
uint16_t kern_f32_to_bf16(float f);
/* Packed matrices. A weight matrix W[d, k] (one row per output, as PyTorch's Linear stores it) is
 * packed at export into ceil(d/16) panels of 16 rows; panel p holds, for each kk in 0..k-1, the 16
 * values W[16p + j][kk], j = 0..15, next to each other (rows past d are zero). Element (o, kk) is at
 * ((o / 16) * k + kk) * 16 + o % 16. One step of the micro-kernel reads 16 consecutive weights.
 * Q4 packs the 16 values of a step into 8 bytes: byte j holds row j in its low nibble and row j + 8
 * in its high nibble, each stored as value + 8 (0..15).
 * I8 and I4 (k even) step over pairs of kk instead: pair step s of panel p holds, for j = 0..15, the
 * values (16p + j, 2s) and (16p + j, 2s + 1) next to each other: element (o, kk) is value number
 * ((o / 16) * k/2 + kk/2) * 32 + (o % 16) * 2 + kk % 2. I8 stores it as a byte; I4 packs a step's 32
 * values into 16 bytes, value i of the step in the low nibble of byte i % 16 when i < 16, else in
 * the high nibble, as value + 8. */
#define KERN_PANEL 16
static inline size_t kern_packed_index(int o, int kk, int k) {
    return ((size_t)(o / KERN_PANEL) * (size_t)k + (size_t)kk) * KERN_PANEL + (size_t)(o % KERN_PANEL);
}
/* Rows of a packed matrix with d outputs: d rounded up to a whole panel. */
static inline int kern_packed_rows(int d) { return (d + KERN_PANEL - 1) / KERN_PANEL * KERN_PANEL; }

/* A packed weight matrix as the kernels read it. */
typedef struct kern_mat {
    const void *w;        /* values of `type`, packed */
    const void *scales;   /* quantized: [packed rows, n_groups] of scale_type, packed the same way:
                           * scale (o, g) at kern_packed_index(o, g, n_groups); NULL otherwise */
    int type;             /* KERN_* */
    int group;            /* quantized: values per scale along k: group g covers kk in [g*group, (g+1)*group) */
    const float *act;     /* I8, I4: NULL for activations quantized per row at run time, or [2] the
                           * static scale and zero point of the input (calibrated) */
    const float *wsum;    /* I8, I4 with act: [packed rows, n_groups] each group's sum of values */
    int scale_type;       /* KERN_F32 (0) or KERN_F16 */
    const void *mins;     /* quantized: NULL, or [packed rows, n_groups] of scale_type, packed as the scales:
                           * a weight is then u * scale + min, u the stored value taken unsigned (Q4's and
                           * I4's nibble 0..15, value + 8; Q8's and I8's value as it is), as GGUF's
                           * Q4_1/Q4_K/Q5_1/Q5_K (I8, I4: not with static activations, act) */
    const uint16_t *scale_d; /* KERN_SCALE_S8: [packed rows, n_groups / sub_groups] f16, packed as the
                              * scales: scale (o, g) = scale_d(o, g / sub_groups) * int8 scales(o, g) */
    const uint16_t *min_d;   /* KERN_SCALE_S8 with mins: the mins' f16 factors, as scale_d */
    int sub_groups;          /* KERN_SCALE_S8: groups per f16 factor, a power of two dividing n_groups */
    int act_group;           /* I8, I4 without act: 0 for inputs quantized per row, or G (a multiple of
                              * group) for one input scale per G values of a row (kern_qx.group) */
} kern_mat;
/* Where the f16 factor of scale entry i (kern_packed_index(o, g, n_groups)) of a KERN_SCALE_S8 table
 * is: the entries of a panel's group are 16 apart, and sub_groups, a power of two (a shift, not a
 * division, where the kernels read a group's scales), divides n_groups. */
static inline size_t kern_scale_d_index(size_t i, int sub_groups) {
    return (i / KERN_PANEL >> __builtin_ctz((unsigned)sub_groups)) * KERN_PANEL + i % KERN_PANEL;
}
/* The offset of a Q4 value in its nibble that the kernels take off (8), or 0 with mins (kern_mat). */
static inline float kern_q4_offset(const kern_mat *m) { return m->mins ? 0.0f : 8.0f; }

/* Integer-dot matrices sum at most this many products per group in int32 (2^15 * 2^15 * 2^15/2). */
#define KERN_INT_GROUP_MAX 32768

/* Index of value (o, kk) of an I8 matrix (the I4 value number: its byte is computed from it). */
static inline size_t kern_pair_index(int o, int kk, int k) {
    return (((size_t)(o / KERN_PANEL) * (size_t)(k / 2) + (size_t)(kk / 2)) * KERN_PANEL + (size_t)(o % KERN_PANEL)) * 2 +
           (size_t)(kk % 2);
}

/* Groups of a quantized row of k values, and the group size they get. A requested group size
 * that does not divide k becomes ceil(k / ceil(k / requested)), so every group but the last is
 * full and the size follows from k and the number of scales alone: the file stores no sizes. */
static inline int kern_q_groups(int k, int group) { return (k + group - 1) / group; }
static inline int kern_q_group_of(int k, int n_groups) { return (k + n_groups - 1) / n_groups; }

/* The group size to use for a request: the largest size <= want (and even when `even`, as integer-dot
 * matrices need whole pairs) that kern_q_group_of gives back from its own group count. */
int kern_q_group_fit(int k, int want, int even);
/* wsum[kern_packed_index(o, g, n_groups)] = the sum of group g's stored values of row o, for the
 * packed rows of a quantized matrix m [d, k] (the zero-point correction of static activations). */
void kern_group_sums(float *wsum, const kern_mat *m, int d, int k);

/* Weight (o, kk) as f32: for Q8 and Q4 the float product value * scale (one rounding), with mins
 * u * scale + min (two roundings; none for GGUF's types, whose u * scale is exact). */
float kern_mat_at(const kern_mat *m, int o, int kk, int k);
/* dst[kk] = W[row][kk] as f32 (an embedding lookup in a packed table). */
void kern_packed_row(float *dst, const kern_mat *m, int row, int k);

/* Quantizes src[d, k] (row-major f32) into a packed Q8 or Q4 matrix with groups of `group`
 * (kern_q_groups): q [kern_packed_rows(d) * k] bytes for Q8, half that for Q4, scales
 * [kern_packed_rows(d) * n_groups] of scale_type (KERN_F32 or KERN_F16), padding rows zero. Symmetric,
 * values -127..127 (Q8) or -8..7 (Q4). The scale starts from the group's largest magnitude (to 127,
 * or its value to -8 as GGML's Q4_0 does) and is shrunk by up to 5% (Q8) or 20% (Q4) when clipping
 * the largest values lowers the group's squared error; for f16 scales every candidate is rounded to
 * f16 first, so the values are rounded with the scale the file stores. Returns the group size used. */
int kern_quantize(void *q, void *scales, int scale_type, int type, const float *src, int d, int k, int group);
/* Scale i of a quantized matrix as f32, and its min (0 without mins). */
float kern_scale_at(const kern_mat *m, size_t i);
float kern_min_at(const kern_mat *m, size_t i);
/* The stored value (o, kk) of a quantized matrix (-128..127 for Q8/I8, -8..7 for Q4/I4). */
int kern_qvalue(const kern_mat *m, int o, int kk, int k);
/* Moves a Q8 or Q4 matrix (values and scales, as kern_quantize wrote them) into the I8 or I4
 * layout: dst holds as many bytes as q. k must be even. */
void kern_to_int_dot(void *dst, const void *q, int type, int d, int k);

/* int8 activations of an integer-dot matrix: x[r, kk] ~ scale[r] * (value - zero[r]), or with
 * groups x[r, kk] ~ scale[r, kk / group] * value. */
typedef struct kern_qx {
    int32_t *pairs; /* [n, k/2]: values (r, 2i) and (r, 2i+1) as the low and high int16 of one word */
    float *scale;   /* [n], or with groups [n, n_groups] */
    int32_t *zero;  /* [n] (0 with groups) */
    uint16_t *bytes; /* [n, k/2]: the same pairs as two int8 (low byte first), for vpmaddubsw (I4) */
    int32_t *psum;  /* [n, k/2 + 1]: psum[r][i] = sum of values (r, 0 .. 2i-1) (I4's offset of 8) */
    int group;      /* set by the caller: 0 for one scale per row, or G (even) for one per G values of a
                     * row, as llama.cpp's Q8_0 activations (G = 32); a matrix multiplied by it must
                     * have groups that G is a multiple of, so each of its groups has one input scale */
    int n_groups;   /* with groups: kern_q_groups(k, group), set by kern_quantize_x */
} kern_qx;
/* Quantizes x[n, k] (k even): per row (qx->group 0) or per group of qx->group values of a row, with
 * scale max|x|/127 and zero point 0 (values -127..127) when stat is NULL, else (per row only) with
 * stat[0] as the scale and stat[1] as the zero point (values clamped to -128..127). Rounds to
 * nearest, halves away from zero. A group's scale is then stored rounded to f16, as GGML's Q8_0
 * block stores it (one f32 can't hold stays f32), so a GGUF multiplies llama.cpp's own activations. */
/* With groups: row r's input scale over the weights' group g (groups of wgroup values). Equal groups,
 * the usual case, take no division (the kernels ask once per row and group). */
static inline float kern_qx_scale(const kern_qx *x, int wgroup, int r, int g) {
    int col = x->group == wgroup ? g : g * wgroup / x->group;
    return x->scale[(size_t)r * (size_t)x->n_groups + (size_t)col];
}
void kern_quantize_x(kern_qx *qx, const float *x, int n, int k, const float *stat);
void kern_quantize_x_ref(kern_qx *qx, const float *x, int n, int k, const float *stat);
/* y[r, o] = scale[r] * sum over groups g of scale(o, g) * (dot_g - zero[r] * wsum(o, g)), where dot_g
 * is the exact int32 sum of value(r, kk) * value(o, kk) over the group; the groups' terms join one
 * FMA chain in order, and the last multiply by scale[r] rounds once more. With input groups
 * (kern_qx.group) each group's weight scale (and min) is first multiplied by the row's input scale
 * of that group, and nothing multiplies the sum after. With mins (activations
 * per row, zero 0) dot_g is over the weights' unsigned values (kern_mat.mins), and each group's
 * term is followed by one more FMA, min(o, g) times the inputs' sum over the group (an integer,
 * exact in f32). W is I8 or I4; the other arguments are as kern_matmul's. The AVX2 and AVX-VNNI
 * kernels equal the twin bit for bit. */
void kern_matmul_i(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int o_begin, int o_end);
void kern_matmul_i_ref(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int o_begin,
                       int o_end);
/* Stores one Q4 value (-8..7) of a packed matrix. */
static inline void kern_q4_put(uint8_t *q, int o, int kk, int k, int v) {
    size_t step = (size_t)(o / KERN_PANEL) * (size_t)k + (size_t)kk;
    int j = o % KERN_PANEL;
    uint8_t *b = q + step * 8 + (j & 7), u = (uint8_t)(v + 8);
    *b = j < 8 ? (uint8_t)((*b & 0xF0) | u) : (uint8_t)((*b & 0x0F) | u << 4);
}

/* y[r, o] = sum over kk of x[r, kk] * W[o, kk], for r < n and o in [o_begin, o_end) (o_begin a
 * multiple of 16; o_end a multiple of 16 or d). x is [n, k] row-major, y has row stride ldy, W is
 * packed (widened in registers: F16C for f16, a shift for bf16, value * scale for Q8 and Q4).
 * Every element is one fused multiply-add chain over kk in order, whatever n and the tiling are;
 * for Q8 one chain per group over x * value, for Q4 over x * stored nibble (value + 8; 16 times it
 * for rows 8..15 of a panel, the chain then times 1/16), less kern_q4_offset times the group's sum of x
 * (summed in order); each group's sum then added to the element by one more FMA with its scale, and
 * with mins one more with the min times that sum of x, group after group. The AVX2 kernel equals the
 * reference twin bit for bit, and a row's result does not depend on the other rows of the call
 * (batched and one-token prefill agree exactly). Quantized matrices with more than one row are
 * widened block by block into f32 on the stack and multiplied there. */
void kern_matmul(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int o_begin, int o_end);
/* Whether kern_matmul with these arguments equals the twin bit for bit (as above). The one exception:
 * on AMX-BF16 (the avx512+amx variant) Q4 without mins, groups of whole 32-value tiles up to 256, takes
 * its rows in multiples of 16 on tiles whose products are exact but whose sums are added in the
 * tile's own order (x86/amx_bf16.c): those rows differ from the twin, and from the same rows
 * computed one at a time, in their last bits, within a bound test_kernels checks. */
int kern_matmul_exact(const kern_mat *w, int n, int k);
void kern_matmul_ref(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int o_begin,
                     int o_end);

/* out[r, :] = w * (x[r, :] / sqrt(mean(x[r, :]^2) + eps)), for r < n. out may equal x. The sum of
 * squares is KERN_SUM_LANES fused multiply-add chains (element i into chain i % KERN_SUM_LANES)
 * joined by kern_sum_lanes, in every variant. */
void kern_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps);
void kern_rmsnorm_ref(float *out, const float *x, const float *w, int n, int dim, float eps);

enum { KERN_ROPE_ADJACENT = 0, KERN_ROPE_HALF = 1 };
/* inv_freq[i] = base^(-2i/head_dim) for i < head_dim/2 (as llama2.c computes it, so its reference
 * outputs match). */
void kern_rope_freqs(float *inv_freq, int head_dim, float base);
/* Llama 3 rope scaling of a frequency table: long wavelengths divided by factor, short ones kept,
 * a smooth blend between (Hugging Face's _compute_llama3_parameters). */
void kern_rope_llama3(float *inv_freq, int head_dim, float factor, float low_freq_factor, float high_freq_factor,
                      float original_context_len);
/* The turns of n rows at positions start_pos + r, cs[n, head_dim]: cs[r, 2i] = cos(a) and
 * cs[r, 2i + 1] = sin(a), a = position * inv_freq[i], for i < head_dim / 2. A forward call makes it
 * once for all its layers' q and k, which would otherwise each compute the same sines and cosines. */
void kern_rope_table(float *cs, int n, int head_dim, int start_pos, const float *inv_freq);
/* Rotates v[r, h*head_dim ...] for n rows by the turns of cs (kern_rope_table's rows for them), for
 * n_heads heads: ADJACENT rotates pairs (x[2i], x[2i+1]) (llama2.c, GGUF llama); HALF rotates
 * (x[i], x[i+d/2]) (Hugging Face rotate_half). Pair i turns by position * inv_freq[i]. */
void kern_rope(float *v, int n, int n_heads, int head_dim, const float *cs, int style);

/* The geometry of one attention layer. */
typedef struct kern_att_shape {
    int n_heads, n_kv_heads, head_dim;
    float score_div;  /* a score is q.k / score_div: sqrt(head_dim), or sqrt(query_pre_attn_scalar) (Gemma) */
    int window;       /* 0: the query at position p sees keys 0..p; W > 0: keys p-W+1..p (sliding window) */
    int cache_rows;   /* the key of position t is cache row t % cache_rows: a ring when smaller than the context */
} kern_att_shape;

/* KV cache element types. Q8 is int8 with one f32 scale per row and KV head: the head's largest
 * magnitude / 127, each value round(x * 127 / largest) (to nearest even), so a key or value is q * scale. */
enum { KERN_KV_F32 = 0, KERN_KV_F16 = 1, KERN_KV_Q8 = 2 };
/* Bytes per cached value of a KV type (scales apart). */
size_t kern_kv_size(int kv_type);
/* "f32", "f16", "q8" and back; -1 for another name. */
int kern_kv_type_of(const char *name);
const char *kern_kv_type_name(int kv_type);

/* One layer's KV cache as the attention kernels read it, head-major: each KV head's rows are
 * contiguous, so attention streams a head's keys and values instead of taking head_dim values out of
 * every n_kv_heads*head_dim (over a long context that stride defeats the hardware prefetchers, which
 * stop at 4 KiB pages, and decode waited on memory latency). */
typedef struct kern_kv {
    int type;                 /* KERN_KV_* */
    void *k, *v;              /* [n_kv_heads, cache_rows, head_dim] values of `type` */
    float *k_scale, *v_scale; /* Q8: [n_kv_heads, cache_rows]; NULL otherwise */
} kern_kv;

/* Writes k[n, kv_dim] and v[n, kv_dim], the keys and values of positions start_pos .. start_pos+n-1,
 * into cache rows (start_pos + r) % a->cache_rows, converted to the cache's type. */
void kern_kv_store(const kern_kv *kv, const float *k, const float *v, int n, int start_pos, const kern_att_shape *a);
void kern_kv_store_ref(const kern_kv *kv, const float *k, const float *v, int n, int start_pos, const kern_att_shape *a);

/* Causal attention of n queries at positions start_pos .. start_pos+n-1 over a KV cache, for the
 * query heads h_begin .. h_end-1. Threads split the heads along KV heads where there are enough of them
 * (the query heads of a group share every K and V row read), or else within a group (each thread
 * then reads the group's K and V rows for its own heads).
 *   out[n, n_heads*head_dim], q[n, n_heads*head_dim]
 *   kv: [n_kv_heads, cache_rows, head_dim]; every key a query sees must be in its row
 *   scores: scratch [KERN_ATT_BLOCK * (start_pos+n)]
 * A Q8 score is (q . k_int) * k_scale / score_div, and a value row weighs softmax weight * v_scale.
 * Keys are summed in position order whatever the ring's rotation, so a query's result depends only on
 * its own keys: batched and one-token prefill agree exactly, windowed or not. */
#define KERN_ATT_BLOCK 16 /* queries of one KV head that attention takes together (its scratch rows) */
void kern_attention(float *out, const float *q, const kern_kv *kv, int n, int start_pos, const kern_att_shape *a,
                    float *scores, int h_begin, int h_end);
void kern_attention_ref(float *out, const float *q, const kern_kv *kv, int n, int start_pos, const kern_att_shape *a,
                        float *scores, int h_begin, int h_end);

/* The machine's limits, measured: fused multiply-add throughput of one thread (GFLOP/s, counting
 * a multiply-add as 2) over about `seconds`, and the read bandwidth of summing buf (GB/s). */
double kern_fma_peak(double seconds);
double kern_read_bandwidth(const float *buf, size_t n);

/* h[i] = silu(g[i]) * h[i] = h[i] * (g[i] * (1 / (1 + kern_exp(-g[i])))), for i < n. */
void kern_swiglu(float *h, const float *g, size_t n);
void kern_swiglu_ref(float *h, const float *g, size_t n);
/* e^x as etch computes it wherever a kernel needs it (softmax, SwiGLU), the same bits in every
 * variant: Cephes' expf polynomial on fused multiply-adds, within 2 ulp of e^x; 0 below -86, +inf
 * above 88.7, NaN for NaN. (glibc's expf is not reproducible in vector registers.) */
float kern_exp(float x);
/* h[i] = gelu_tanh(g[i]) * h[i], for i < n: GELU with the tanh approximation (Gemma's GeGLU),
 * 0.5 g (1 + tanh(z)), z = sqrt(2/pi) (g + 0.044715 g^3), computed as g / (1 + e^(-2z)) (the same
 * function: 1 + tanh(z) = 2 / (1 + e^(-2z))) with kern_exp, so vectors give the twin's bits. */
#define KERN_GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
void kern_geglu(float *h, const float *g, size_t n);
void kern_geglu_ref(float *h, const float *g, size_t n);
/* x[i] = cap * tanh(x[i] / cap), for i < n (Gemma's final logit soft-capping). */
void kern_softcap(float *x, size_t n, float cap);

/* x[i] = kern_exp(x[i] - max) / sum, in place. The sum is KERN_SUM_LANES partial sums (element i
 * into sum i % KERN_SUM_LANES, in order), then halved pairwise (sum j + sum j+8, then j+4, ...): the
 * order of a vector's lanes, the same in every variant. */
#define KERN_SUM_LANES 16
/* part[0] + ... + part[15] as a vector's lanes add up: part[j] += part[j + 8], then j + 4, 2, 1. */
float kern_sum_lanes(float *part);
void kern_softmax(float *x, int n);
void kern_softmax_ref(float *x, int n);

/* The index of the largest value (the first one on ties), as a scan with `>` finds it: a NaN is
 * skipped, unless it is x[0]. */
int kern_argmax(const float *x, int n);

#endif
