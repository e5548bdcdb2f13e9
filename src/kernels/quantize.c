/* kernels/quantize: packing and quantizing. Weight matrices into Q8/Q4 groups (export time),
 * Q8/Q4 into the integer-dot layouts, weights read back one by one, and the plain-C quantizer of
 * int8 activations that the instruction-set variants share their row loop with. */
#include "kern_impl.h"

#include <math.h>
#include <string.h>

int kern_qvalue(const kern_mat *m, int o, int kk, int k) { return qvalue(m, o, kk, k); }

int kern_q_group_fit(int k, int want, int even) {
    if (want > k) want = k;
    for (int g = want; g > 1; g--)
        if ((!even || g % 2 == 0) && kern_q_group_of(k, kern_q_groups(k, g)) == g) return g;
    return even ? 2 : 1;
}

void kern_group_sums(float *wsum, const kern_mat *m, int d, int k) {
    int n_groups = kern_q_groups(k, m->group), rows = kern_packed_rows(d);
    for (int o = 0; o < rows; o++)
        for (int g = 0; g < n_groups; g++) {
            int b = g * m->group, e = group_end_at(g, m->group, k);
            int32_t sum = 0;
            for (int kk = b; kk < e; kk++) sum += qvalue(m, o, kk, k);
            wsum[kern_packed_index(o, g, n_groups)] = (float)sum;
        }
}

void kern_to_int_dot(void *dst, const void *q, int type, int d, int k) {
    int rows = kern_packed_rows(d);
    kern_mat src = {.w = q, .type = type, .group = k};
    if (type == KERN_Q8) {
        for (int o = 0; o < rows; o++)
            for (int kk = 0; kk < k; kk++) ((int8_t *)dst)[kern_pair_index(o, kk, k)] = (int8_t)qvalue(&src, o, kk, k);
        return;
    }
    uint8_t *b = dst;
    memset(b, 0, (size_t)rows * k / 2);
    for (int o = 0; o < rows; o++)
        for (int kk = 0; kk < k; kk++) {
            size_t i = kern_pair_index(o, kk, k), step = i / 32, v = i % 32;
            uint8_t u = (uint8_t)(qvalue(&src, o, kk, k) + 8);
            b[step * 16 + v % 16] |= v < 16 ? u : (uint8_t)(u << 4);
        }
}

static float amax_ref(const float *xr, int k) {
    float amax = 0.0f;
    for (int i = 0; i < k; i++) amax = fabsf(xr[i]) > amax ? fabsf(xr[i]) : amax; /* NaN is skipped */
    return amax;
}

/* One value: rounded half away from zero, shifted by the zero point, clamped (NaN and huge values too). */
static inline int32_t qx_value(float x, float inv, int32_t zero, int32_t lo) {
    float f = roundf(x * inv) + (float)zero;
    return f >= 127.0f ? 127 : f > (float)lo ? (int32_t)f : lo;
}

/* The running sum stays in a local: read back from ps after the stores to pr and pb (which may alias
 * it, for all the compiler knows), each step waits on the last one's store, and where the buffers sit
 * a multiple of 4 KiB apart the loads stall behind the other stores (4K aliasing). */
int32_t kern_values_ref(int32_t *pr, uint16_t *pb, int32_t *ps, const float *xr, int len, float inv, int32_t zero,
                        int32_t lo, int32_t sum) {
    for (int i = 0; i < len; i += 2) {
        int32_t v0 = qx_value(xr[i], inv, zero, lo), v1 = qx_value(xr[i + 1], inv, zero, lo);
        pr[i / 2] = (int32_t)((uint32_t)(uint16_t)v0 | (uint32_t)(uint16_t)v1 << 16);
        pb[i / 2] = (uint16_t)((uint8_t)v0 | (uint16_t)((uint8_t)v1) << 8);
        sum += v0 + v1;
        ps[i / 2 + 1] = sum;
    }
    return sum;
}

static float f16_round_ref(float s) { return kern_f16_to_f32(kern_f32_to_f16(s)); }

void kern_quantize_x_ref(kern_qx *qx, const float *x, int n, int k, const float *stat) {
    kern_quantize_x_rows(qx, x, n, k, stat, amax_ref, kern_values_ref, f16_round_ref);
}

float kern_mat_at(const kern_mat *m, int o, int kk, int k) {
    if (kern_is_quantized(m->type)) {
        int n_groups = kern_q_groups(k, m->group);
        size_t at = kern_packed_index(o, kk / m->group, n_groups);
        int u = m->type == KERN_Q4 || m->type == KERN_I4 ? 8 : 0; /* a nibble is the unsigned value */
        if (m->mins) return (float)(qvalue(m, o, kk, k) + u) * kern_scale_at(m, at) + kern_min_at(m, at);
        return (float)qvalue(m, o, kk, k) * kern_scale_at(m, at);
    }
    return wload(m->w, m->type, kern_packed_index(o, kk, k));
}

void kern_packed_row(float *dst, const kern_mat *m, int row, int k) {
    for (int kk = 0; kk < k; kk++) dst[kk] = kern_mat_at(m, row, kk, k);
}

/* The value stored for x with scale 1/inv, clamped to the type's range. */
static inline float quant_value(int type, float x, float inv) {
    float v = roundf(x * inv);
    if (type == KERN_Q8) return v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
    return v > 7.0f ? 7.0f : v < -8.0f ? -8.0f : v;
}

static float scale_load(const kern_mat *m, const void *tab, const uint16_t *d, size_t i) {
    if (m->scale_type == KERN_SCALE_S8) /* exact: an f16 times an int8 */
        return kern_f16_to_f32(d[kern_scale_d_index(i, m->sub_groups)]) * (float)((const int8_t *)tab)[i];
    return m->scale_type == KERN_F16 ? kern_f16_to_f32(((const uint16_t *)tab)[i]) : ((const float *)tab)[i];
}
float kern_scale_at(const kern_mat *m, size_t i) { return scale_load(m, m->scales, m->scale_d, i); }
float kern_min_at(const kern_mat *m, size_t i) { return m->mins ? scale_load(m, m->mins, m->min_d, i) : 0.0f; }

/* s as an f16 scale stores it: rounded, a magnitude past f16's largest (65504) clamped to it. */
static float f16_scale(int scale_type, float s) {
    if (scale_type != KERN_F16) return s;
    float h = kern_f16_to_f32(kern_f32_to_f16(s));
    return isinf(h) ? copysignf(65504.0f, s) : h;
}

/* The scale for a group's n values: of the largest-magnitude scale s0 and the ones that clip its
 * top 1%, 2%, ... (to 20% for Q4, 5% for Q8), each as the scale type stores it, the one with the
 * least squared error. Clipping a few outliers buys finer steps for everything else: for int4
 * groups of 32 the error falls by a quarter (KL on stories260K: 0.125 -> 0.092). An f16 scale
 * below half f16's smallest step (3e-8) becomes 0, and its group's values 0. */
static float quant_scale(int scale_type, int type, const float *x, int n, float s0) {
    float best_s = f16_scale(scale_type, s0);
    if (best_s == 0.0f) return 0.0f;
    double best = INFINITY;
    for (int t = 0; t <= (type == KERN_Q8 ? 5 : 20); t++) {
        float s = f16_scale(scale_type, s0 * (1.0f - 0.01f * (float)t));
        if (s == 0.0f) break;
        float inv = 1.0f / s;
        double err = 0;
        for (int i = 0; i < n && err < best; i++) {
            double d = (double)x[i] - (double)(quant_value(type, x[i], inv) * s);
            err += d * d;
        }
        if (err < best) best = err, best_s = s;
    }
    return best_s;
}

int kern_quantize(void *q, void *scales, int scale_type, int type, const float *src, int d, int k, int group) {
    int n_groups = kern_q_groups(k, group), rows = kern_packed_rows(d);
    group = kern_q_group_of(k, n_groups);
    memset(q, 0, type == KERN_Q8 ? (size_t)rows * k : (size_t)rows * k / 2);
    memset(scales, 0, (size_t)rows * n_groups * kern_wsize(scale_type));
    if (type == KERN_Q4) /* zero is stored as 8 */
        for (int o = d; o < rows; o++)
            for (int kk = 0; kk < k; kk++) kern_q4_put(q, o, kk, k, 0);
    for (int o = 0; o < d; o++)
        for (int g = 0; g < n_groups; g++) {
            const float *x = src + (size_t)o * k;
            int b = g * group, e = group_end_at(g, group, k);
            float amax = 0.0f, vmax = 0.0f; /* largest magnitude, and the value that has it */
            for (int kk = b; kk < e; kk++)
                if (fabsf(x[kk]) > amax) amax = fabsf(x[kk]), vmax = x[kk];
            float s = quant_scale(scale_type, type, x + b, e - b, type == KERN_Q8 ? amax / 127.0f : vmax / -8.0f);
            float inv = s != 0.0f ? 1.0f / s : 0.0f;
            size_t si = kern_packed_index(o, g, n_groups);
            if (scale_type == KERN_F16) ((uint16_t *)scales)[si] = kern_f32_to_f16(s); /* exact: s is an f16 */
            else ((float *)scales)[si] = s;
            for (int kk = b; kk < e; kk++) {
                float v = quant_value(type, x[kk], inv);
                if (type == KERN_Q8) ((int8_t *)q)[kern_packed_index(o, kk, k)] = (int8_t)v;
                else kern_q4_put(q, o, kk, k, (int)v);
            }
        }
    return group;
}
