/* kernels/reference: the plain-C twins every instruction-set variant is tested against (matmul,
 * integer-dot matmul, attention), and the portable float matmul used where the CPU has no FMA. */
#include "kern_impl.h"

#include <math.h>
#include <string.h>

void kern_matmul_ref(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int o_begin,
                     int o_end) {
    (void)d;
    int q = kern_is_quantized(w->type), group = q ? w->group : k, n_groups = q ? kern_q_groups(k, group) : 1;
    for (int r = 0; r < n; r++)
        for (int o = o_begin; o < o_end; o++) {
            const float *xr = x + (size_t)r * k;
            float acc = 0.0f;
            if (!q)
                for (int kk = 0; kk < k; kk++) acc = fmaf(xr[kk], kern_mat_at(w, o, kk, k), acc);
            for (int g = 0; q && g < n_groups; g++) { /* each group's sum of x * value, then times its scale */
                int b = g * group, e = group_end_at(g, group, k);
                float sum = 0.0f, xs = 0.0f; /* xs: the group's sum of x, in order (Q4 and mins) */
                if (w->type == KERN_Q4) { /* x * stored nibble (value + 8), less 8 (0 with mins) times the sum of
                                           * x. A low nibble (rows 0..7 of a panel) as itself; a high one
                                           * (rows 8..15) as its whole byte (16 times it + row o - 8's
                                           * nibble), row o - 8's sum taken off and the rest times 1/16 in
                                           * the FMA that takes the offset off: the kernels' order (q4_step) */
                    float sl = 0.0f;
                    int high = o % KERN_PANEL >= 8;
                    for (int kk = b; kk < e; kk++) {
                        float lo = (float)(qvalue(w, high ? o - 8 : o, kk, k) + 8);
                        sum = fmaf(xr[kk], high ? 16.0f * (float)(qvalue(w, o, kk, k) + 8) + lo : lo, sum);
                        if (high) sl = fmaf(xr[kk], lo, sl);
                        xs += xr[kk];
                    }
                    float off = -kern_q4_offset(w) * xs; /* exact: -8 or -0 times xs */
                    sum = high ? fmaf(sum - sl, 0.0625f, off) : sum + off;
                } else {
                    for (int kk = b; kk < e; kk++) sum = fmaf(xr[kk], (float)qvalue(w, o, kk, k), sum);
                    for (int kk = b; w->mins && kk < e; kk++) xs += xr[kk];
                }
                size_t at = kern_packed_index(o, g, n_groups);
                acc = fmaf(sum, kern_scale_at(w, at), acc);
                if (w->mins) acc = fmaf(kern_min_at(w, at), xs, acc); /* + min * sum of x */
            }
            y[(size_t)r * ldy + o] = acc;
        }
}

/* The int16 pair (x[r, 2i], x[r, 2i+1]) out of its word. */
static inline int32_t pair_lo(int32_t w) { return (int16_t)(uint16_t)((uint32_t)w & 0xFFFF); }
static inline int32_t pair_hi(int32_t w) { return (int16_t)(uint16_t)((uint32_t)w >> 16); }

void kern_matmul_i_ref(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int o_begin,
                       int o_end) {
    (void)d;
    int n_groups = kern_q_groups(k, w->group);
    for (int r = 0; r < n; r++)
        for (int o = o_begin; o < o_end; o++) {
            const int32_t *xr = x->pairs + (size_t)r * (k / 2);
            float acc = 0.0f;
            /* with mins the weight's unsigned value: I4's nibble (value + 8), I8's value */
            int u = w->mins && w->type == KERN_I4 ? 8 : 0;
            for (int g = 0; g < n_groups; g++) {
                int b = g * w->group, e = group_end_at(g, w->group, k);
                int32_t dot = 0, xs = 0; /* xs: the inputs' sum over the group (mins) */
                for (int kk = b; kk < e; kk += 2) {
                    dot += pair_lo(xr[kk / 2]) * (qvalue(w, o, kk, k) + u) + pair_hi(xr[kk / 2]) * (qvalue(w, o, kk + 1, k) + u);
                    xs += pair_lo(xr[kk / 2]) + pair_hi(xr[kk / 2]);
                }
                size_t si = kern_packed_index(o, g, n_groups);
                if (x->zero[r]) dot -= x->zero[r] * (int32_t)w->wsum[si];
                float sc = kern_scale_at(w, si), mn = w->mins ? kern_min_at(w, si) : 0.0f;
                if (x->group) { /* the row's input scale of this group, on the weights' side */
                    float xg = kern_qx_scale(x, w->group, r, g);
                    sc *= xg, mn *= xg;
                }
                acc = fmaf((float)dot, sc, acc);
                if (w->mins) acc = fmaf(mn, (float)xs, acc); /* + min * the inputs' sum */
            }
            y[(size_t)r * ldy + o] = x->group ? acc : acc * x->scale[r];
        }
}

/* Portable variant (no FMA hardware assumed): the same loop order as the AVX2 kernel for float
 * weights, 16 outputs at a time, with separate multiply and add; it agrees with the twin to
 * rounding, not bit for bit. Quantized weights take the twin itself. */
void kern_matmul_portable(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k,
                            int o_begin, int o_end) {
    if (kern_is_quantized(w->type)) {
        kern_matmul_ref(y, ldy, x, w, n, d, k, o_begin, o_end);
        return;
    }
    for (int p0 = o_begin; p0 < o_end; p0 += KERN_PANEL) {
        int cols = o_end - p0 < KERN_PANEL ? o_end - p0 : KERN_PANEL;
        for (int r = 0; r < n; r++) {
            float acc[KERN_PANEL] = {0};
            const float *xr = x + (size_t)r * k;
            for (int kk = 0; kk < k; kk++)
                for (int j = 0; j < KERN_PANEL; j++) acc[j] += xr[kk] * kern_mat_at(w, p0 + j, kk, k);
            for (int j = 0; j < cols; j++) y[(size_t)r * ldy + p0 + j] = acc[j];
        }
    }
}

/* Cached value i of a cache of type `type`, widened (a Q8 value without its scale). */
static float kv_at(int type, const void *base, size_t i) {
    if (type == KERN_KV_F16) return kern_f16_to_f32(((const uint16_t *)base)[i]);
    if (type == KERN_KV_Q8) return (float)((const int8_t *)base)[i];
    return ((const float *)base)[i];
}

void kern_attention_ref(float *out, const float *q, const kern_kv *kv, int n, int start_pos, const kern_att_shape *a,
                        float *scores, int h_begin, int h_end) {
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, q8 = kv->type == KERN_KV_Q8;
    for (int r = 0; r < n; r++) {
        int p = start_pos + r, lo = att_first_key(a, p), len = p - lo + 1;
        for (int h = h_begin; h < h_end; h++) {
            const float *qh = q + ((size_t)r * a->n_heads + h) * hd;
            int kvh = h / group;
            for (int t = 0; t < len; t++) {
                size_t row = (size_t)kvh * a->cache_rows + (size_t)((lo + t) % a->cache_rows);
                float s = 0.0f;
                for (int i = 0; i < hd; i++) s += qh[i] * kv_at(kv->type, kv->k, row * hd + i);
                if (q8) s *= kv->k_scale[row];
                scores[t] = s / a->score_div;
            }
            kern_softmax(scores, len);
            float *oh = out + ((size_t)r * a->n_heads + h) * hd;
            memset(oh, 0, (size_t)hd * sizeof *oh);
            for (int t = 0; t < len; t++) {
                size_t row = (size_t)kvh * a->cache_rows + (size_t)((lo + t) % a->cache_rows);
                float w = scores[t];
                if (q8) w *= kv->v_scale[row];
                for (int i = 0; i < hd; i++) oh[i] += w * kv_at(kv->type, kv->v, row * hd + i);
            }
        }
    }
}

void kern_kv_f16_row_ref(uint16_t *dst, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = kern_f32_to_f16(x[i]);
}

void kern_kv_q8_head_ref(int8_t *dst, float *scale, const float *x, int hd) {
    float amax = 0.0f;
    for (int i = 0; i < hd; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    *scale = amax / 127.0f;
    for (int i = 0; i < hd; i++) dst[i] = (int8_t)lrintf(x[i] * inv);
}

void kern_kv_store_rows(const kern_kv *kv, const float *k, const float *v, int n, int start_pos, const kern_att_shape *a,
                        kv_f16_row_fn f16_row, kv_q8_head_fn q8_head) {
    size_t hd = (size_t)a->head_dim, kv_dim = (size_t)a->n_kv_heads * hd, es = kern_kv_size(kv->type);
    for (int r = 0; r < n; r++)
        for (int h = 0; h < a->n_kv_heads; h++) {
            size_t row = (size_t)h * a->cache_rows + (size_t)((start_pos + r) % a->cache_rows);
            const float *src[2] = {k + r * kv_dim + h * hd, v + r * kv_dim + h * hd};
            char *dst[2] = {(char *)kv->k + row * hd * es, (char *)kv->v + row * hd * es};
            for (int m = 0; m < 2; m++) {
                if (kv->type == KERN_KV_F32) memcpy(dst[m], src[m], hd * sizeof(float));
                if (kv->type == KERN_KV_F16) f16_row((uint16_t *)dst[m], src[m], hd);
                if (kv->type == KERN_KV_Q8) q8_head((int8_t *)dst[m], (m ? kv->v_scale : kv->k_scale) + row, src[m], (int)hd);
            }
        }
}

void kern_kv_store_ref(const kern_kv *kv, const float *k, const float *v, int n, int start_pos, const kern_att_shape *a) {
    kern_kv_store_rows(kv, k, v, n, start_pos, a, kern_kv_f16_row_ref, kern_kv_q8_head_ref);
}
