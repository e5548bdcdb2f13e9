/* kernels/kern_impl.h: what the kernel files share and the rest of etch does not see: element
 * readers, group bounds, the activation quantizer's row loop, and the table of variants that
 * dispatch.c chooses from. One variant per instruction set (x86/), each a set of entry points. */
#ifndef ETCH_KERN_IMPL_H
#define ETCH_KERN_IMPL_H

#include "kernels.h"

#include <math.h>

/* Weight i of a float matrix (f32, f16 or bf16) as f32. */
static inline float wload(const void *w, int wtype, size_t i) {
    if (wtype == KERN_F32) return ((const float *)w)[i];
    uint16_t h = ((const uint16_t *)w)[i];
    return wtype == KERN_F16 ? kern_f16_to_f32(h) : kern_bf16_to_f32(h);
}

/* The stored value (o, kk) of a quantized matrix: int8, or the nibble less 8. */
static inline int qvalue(const kern_mat *m, int o, int kk, int k) {
    if (m->type == KERN_I8) return ((const int8_t *)m->w)[kern_pair_index(o, kk, k)];
    if (m->type == KERN_I4) {
        size_t i = kern_pair_index(o, kk, k), step = i / 32, v = i % 32;
        uint8_t b = ((const uint8_t *)m->w)[step * 16 + v % 16];
        return (v < 16 ? b & 0x0F : b >> 4) - 8;
    }
    size_t i = kern_packed_index(o, kk, k);
    if (m->type == KERN_Q8) return ((const int8_t *)m->w)[i];
    int j = o % KERN_PANEL;
    uint8_t b = ((const uint8_t *)m->w)[(i - (size_t)j) / 2 + (size_t)(j & 7)];
    return (j < 8 ? b & 0x0F : b >> 4) - 8;
}

/* The end (exclusive) of group g of a row of k values in groups of `group`: only the last is short. */
static inline int group_end_at(int g, int group, int k) { return g * group + group < k ? g * group + group : k; }

/* The keys query position p sees: lo .. p. */
static inline int att_first_key(const kern_att_shape *a, int p) {
    return a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
}

/* The activation quantizer's row loop, shared by every variant: amax_of finds a row's (or group's)
 * largest magnitude; values quantizes xr[0..len) (len even) with scale 1/inv and the zero point and
 * stores them as kern_qx's pairs (pr), byte pairs (pb) and prefix sums ps[1..len/2] going on from sum
 * (ps[0], passed in a register: read back, it would wait on the last group's store), and returns the
 * last of them; f16_round is a value rounded to f16 (to nearest, ties to even) and back. Inlined into
 * each variant's entry point, so its hooks are direct calls the optimizer inlines (plain `inline`:
 * an always-inline hook cannot be called through the pointer an unoptimized build keeps): called
 * through pointers once per group of 32 values, with the scale rounded to f16 in software, the loop
 * had cost more than the values. */
typedef int32_t (*qx_values_fn)(int32_t *pr, uint16_t *pb, int32_t *ps, const float *xr, int len, float inv,
                                int32_t zero, int32_t lo, int32_t sum);
typedef float (*qx_amax_fn)(const float *xr, int k);
typedef float (*qx_f16_round_fn)(float s);

/* One row's scale, zero point and lowest value (dynamic: symmetric over max|x|; static: stat). */
static inline float qx_params(const float *stat, float amax, int32_t *zero, int32_t *lo) {
    if (stat) return *zero = (int32_t)stat[1], *lo = -128, stat[0];
    return *zero = 0, *lo = -127, amax / 127.0f;
}

/* A group's input scale as GGML's Q8_0 block stores it: rounded to f16 after the values were rounded
 * with the f32 one, so a GGUF's products take llama.cpp's own activations (docs/DESIGN.md, "A GGUF's
 * defaults"). A scale f16 cannot hold (past 65504, or below its smallest subnormal) stays f32. */
static inline float act_scale_f16(float s, qx_f16_round_fn f16_round) {
    float h = f16_round(s);
    return isfinite(h) && (h > 0.0f || s == 0.0f) ? h : s;
}

static inline __attribute__((always_inline)) void kern_quantize_x_rows(kern_qx *qx, const float *x, int n, int k,
                                                                       const float *stat, qx_amax_fn amax_of,
                                                                       qx_values_fn values, qx_f16_round_fn f16_round) {
    /* a row is one group (its scale at [r]) or groups of qx->group (at [r, g]), quantized in order,
     * each group's prefix sums going on from the last's */
    int G = qx->group ? qx->group : k > 0 ? k : 1, ng = kern_q_groups(k, G), half = k / 2;
    const float *st = qx->group ? NULL : stat; /* static parameters are per row only */
    if (qx->group) qx->n_groups = ng;
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * k;
        int32_t *ps = qx->psum + (size_t)r * (half + 1), zero = 0, lo, sum = 0;
        ps[0] = 0;
        for (int g = 0; g < ng; g++) {
            int b = g * G, len = (b + G < k ? b + G : k) - b;
            float s = qx_params(st, st ? 0.0f : amax_of(xr + b, len), &zero, &lo), inv = s > 0.0f ? 1.0f / s : 0.0f;
            qx->scale[(size_t)r * ng + g] = qx->group ? act_scale_f16(s, f16_round) : s;
            sum = values(qx->pairs + (size_t)r * half + b / 2, qx->bytes + (size_t)r * half + b / 2, ps + b / 2, xr + b,
                         len, inv, zero, lo, sum);
        }
        qx->zero[r] = zero;
    }
}
/* The plain-C `values`: a variant's tail after its last whole vector. */
int32_t kern_values_ref(int32_t *pr, uint16_t *pb, int32_t *ps, const float *xr, int len, float inv, int32_t zero,
                        int32_t lo, int32_t sum);

/* The KV store's row loop (reference.c), shared by every variant: f16_row converts n values, q8_head
 * one head's values to int8 and its scale (kernels.h: KERN_KV_Q8); NaN has no int8 value. */
typedef void (*kv_f16_row_fn)(uint16_t *dst, const float *x, size_t n);
typedef void (*kv_q8_head_fn)(int8_t *dst, float *scale, const float *x, int hd);
void kern_kv_store_rows(const kern_kv *kv, const float *k, const float *v, int n, int start_pos, const kern_att_shape *a,
                        kv_f16_row_fn f16_row, kv_q8_head_fn q8_head);
void kern_kv_f16_row_ref(uint16_t *dst, const float *x, size_t n);
void kern_kv_q8_head_ref(int8_t *dst, float *scale, const float *x, int hd);

/* Seconds on the monotonic clock (the roofline probes). */
double kern_seconds(void);

/* This thread's block of KERN_SCRATCH_BYTES (64-byte aligned) for a kernel's working blocks, or NULL
 * when it cannot be had (the kernel then takes a path without it: the same results). One user at a
 * time: a kernel does not call another while it holds it. scratch.c. */
#define KERN_SCRATCH_BYTES (128 * 1024)
void *kern_scratch(void);
/* This thread's second block, of at least `bytes` (64-byte aligned), grown (its contents lost) when a
 * call asks for more than it holds and kept until the thread exits; NULL when it cannot be had. For
 * working sets that grow with the call's shape (amx_bf16.c's split activations). */
void *kern_scratch_grown(size_t bytes);

/* One instruction set's kernels. matmul is indexed by the float and weight-only types (KERN_F32 ..
 * KERN_Q4); matmul_i takes I8 and I4. Every entry equals its twin in reference.c bit for bit, except
 * the portable float matmul and the probes, which are not twins of anything. */
typedef void (*kern_matmul_fn)(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int o_begin,
                               int o_end);
typedef void (*kern_matmul_i_fn)(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k,
                                 int o_begin, int o_end);
typedef void (*kern_attention_fn)(float *out, const float *q, const kern_kv *kv, int n, int start_pos,
                                  const kern_att_shape *a, float *scores, int h_begin, int h_end);
typedef void (*kern_kv_store_fn)(const kern_kv *kv, const float *k, const float *v, int n, int start_pos,
                                 const kern_att_shape *a);
typedef struct kern_variant {
    const char *name;
    kern_matmul_fn matmul[KERN_Q4 + 1];
    kern_matmul_i_fn matmul_i;
    void (*quantize_x)(kern_qx *qx, const float *x, int n, int k, const float *stat);
    kern_attention_fn attention;
    kern_kv_store_fn kv_store;
    void (*softmax)(float *x, int n);
    void (*rmsnorm)(float *out, const float *x, const float *w, int n, int dim, float eps);
    void (*swiglu)(float *h, const float *g, size_t n);
    void (*geglu)(float *h, const float *g, size_t n);
    double (*fma_peak)(double seconds);
    double (*read_bandwidth)(const float *buf, size_t n);
} kern_variant;

/* Portable C (reference.c, peak.c). */
void kern_matmul_portable(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int o_begin,
                          int o_end);
double kern_fma_peak_portable(double seconds);
double kern_read_bandwidth_portable(const float *buf, size_t n);

#ifdef KERN_X86
/* x86/avx2_float.c: float weights widened in registers, and weight-only Q8/Q4 (AVX2, FMA, F16C). */
void kern_avx2_matmul_f32(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
void kern_avx2_matmul_f16(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
void kern_avx2_matmul_bf16(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
void kern_avx2_matmul_q8(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
void kern_avx2_matmul_q4(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
/* x86/avx2_int.c: integer dot products by vpmaddwd/vpmaddubsw, and the activation quantizer. */
void kern_avx2_matmul_i(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
void kern_avx2_quantize_x(kern_qx *qx, const float *x, int n, int k, const float *stat);
/* x86/vnni.c: integer-dot GEMM by vpdpbusd (AVX-VNNI); decode keeps the AVX2 GEMV. */
void kern_vnni_matmul_i(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
/* x86/avx512_vnni.c: vnni.c's GEMM with its dot loop on zmm registers (AVX512-VNNI). */
void kern_avx512_vnni_matmul_i(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
/* The same with its whole-group blocks on AMX-INT8 tiles (amx.c). */
void kern_amx_matmul_i(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
/* x86/amx_bf16.c: weight-only Q4 prefill on AMX-BF16 tiles, rows in multiples of 16 where
 * kern_amx_q4_takes says so, the rest by avx512_vbmi.c's kernel. */
int kern_amx_q4_takes(const kern_mat *w, int n, int k);
void kern_amx_matmul_q4(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
/* x86/avx2_attention.c (heads whose size is not a multiple of 8 take the twin). */
void kern_avx2_attention(float *out, const float *q, const kern_kv *kv, int n, int start_pos, const kern_att_shape *a,
                         float *scores, int h_begin, int h_end);
/* x86/avx2_ops.c: softmax and SwiGLU with kern_exp eight lanes at a time, rmsnorm, and the KV store
 * (F16C conversion, int8 rounding by cvtps). */
void kern_avx2_softmax(float *x, int n);
void kern_avx2_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps);
void kern_avx2_swiglu(float *h, const float *g, size_t n);
void kern_avx2_geglu(float *h, const float *g, size_t n);
void kern_avx2_kv_store(const kern_kv *kv, const float *k, const float *v, int n, int start_pos, const kern_att_shape *a);
/* x86/avx512_float.c: the float and weight-only Q8/Q4 matmuls with 512-bit vectors (AVX-512F), and the FMA peak with them. */
void kern_avx512_matmul_f32(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
void kern_avx512_matmul_f16(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
void kern_avx512_matmul_bf16(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
void kern_avx512_matmul_q8(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
void kern_avx512_matmul_q4(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
double kern_avx512_fma_peak(double seconds);
/* x86/avx512_vbmi.c: avx512_float.c's Q4 matmul whose decode takes eight steps per byte permute (AVX512-VBMI). */
void kern_avx512_vbmi_matmul_q4(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int ob, int oe);
/* x86/avx512_attention.c: avx2_attention.c on 16 lanes (heads whose size is not a multiple of 16 take the twin). */
void kern_avx512_attention(float *out, const float *q, const kern_kv *kv, int n, int start_pos, const kern_att_shape *a,
                           float *scores, int h_begin, int h_end);
/* x86/avx512_ops.c: avx2_ops.c's softmax, SwiGLU and GeGLU on 16 lanes. */
void kern_avx512_softmax(float *x, int n);
void kern_avx512_swiglu(float *h, const float *g, size_t n);
void kern_avx512_geglu(float *h, const float *g, size_t n);
/* x86/avx2_peak.c: the machine's FMA peak and read bandwidth with 256-bit vectors. */
double kern_avx2_fma_peak(double seconds);
double kern_avx2_read_bandwidth(const float *buf, size_t n);
#endif

#endif
