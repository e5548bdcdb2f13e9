/* kernels/ops: the element-wise and row-wise operations of a decoder layer (norms, RoPE, softmax,
 * gated activations, soft-capping, argmax). Plain C: each costs a small part of a forward call;
 * softmax, SwiGLU and rmsnorm are also in x86/avx2_ops.c, and these are their twins. */
#include "kern_impl.h"

#include <math.h>
#include <string.h>

float kern_sum_lanes(float *part) {
    for (int w = KERN_SUM_LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) part[j] += part[j + w];
    return part[0];
}

void kern_rmsnorm_ref(float *out, const float *x, const float *w, int n, int dim, float eps) {
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        float *orow = out + (size_t)r * dim;
        float part[KERN_SUM_LANES] = {0};
        for (int i = 0; i < dim; i++) part[i % KERN_SUM_LANES] = fmaf(xr[i], xr[i], part[i % KERN_SUM_LANES]);
        float ss = 1.0f / sqrtf(kern_sum_lanes(part) / (float)dim + eps);
        for (int i = 0; i < dim; i++) orow[i] = w[i] * (ss * xr[i]);
    }
}

void kern_rope_freqs(float *inv_freq, int head_dim, float base) {
    for (int i = 0; i < head_dim / 2; i++) inv_freq[i] = 1.0f / powf(base, (float)(2 * i) / (float)head_dim);
}

void kern_rope_llama3(float *inv_freq, int head_dim, float factor, float low_freq_factor, float high_freq_factor,
                      float original_context_len) {
    const double pi = 3.14159265358979323846;
    double low_wavelen = original_context_len / low_freq_factor, high_wavelen = original_context_len / high_freq_factor;
    for (int i = 0; i < head_dim / 2; i++) {
        double f = inv_freq[i], wavelen = 2.0 * pi / f;
        if (wavelen > low_wavelen) f /= factor;
        else if (wavelen >= high_wavelen) {
            double smooth = (original_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            f = (1.0 - smooth) * f / factor + smooth * f;
        }
        inv_freq[i] = (float)f;
    }
}

void kern_rope_table(float *cs, int n, int head_dim, int start_pos, const float *inv_freq) {
    for (int r = 0; r < n; r++) {
        float pos = (float)(start_pos + r), *row = cs + (size_t)r * head_dim;
        for (int i = 0; i < head_dim / 2; i++) {
            float a = pos * inv_freq[i];
            row[2 * i] = cosf(a), row[2 * i + 1] = sinf(a);
        }
    }
}

void kern_rope(float *v, int n, int n_heads, int head_dim, const float *cs, int style) {
    /* head by head, each over its own contiguous values */
    int half = head_dim / 2;
    for (int r = 0; r < n; r++) {
        const float *row = cs + (size_t)r * head_dim;
        for (int h = 0; h < n_heads; h++) {
            float *x = v + ((size_t)r * n_heads + h) * head_dim;
            if (style == KERN_ROPE_ADJACENT) {
                for (int i = 0; i < half; i++) {
                    float c = row[2 * i], s = row[2 * i + 1], x0 = x[2 * i], x1 = x[2 * i + 1];
                    x[2 * i] = x0 * c - x1 * s;
                    x[2 * i + 1] = x0 * s + x1 * c;
                }
            } else {
                for (int i = 0; i < half; i++) {
                    float c = row[2 * i], s = row[2 * i + 1], x0 = x[i], x1 = x[i + half];
                    x[i] = x0 * c - x1 * s;
                    x[i + half] = x0 * s + x1 * c;
                }
            }
        }
    }
}

/* The clamps of kern_exp: below EXP_LO the result is 0 (exp(-86) is 4.5e-38, so 2^n stays normal),
 * above EXP_HI it is +inf. */
#define EXP_LO (-86.0f)
#define EXP_HI 88.7f

float kern_exp(float x) {
    if (x != x) return x;
    if (x < EXP_LO) return 0.0f;
    if (x > EXP_HI) return INFINITY;
    /* x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts, Cody and Waite), exp(r) by Cephes' expf
     * polynomial, then times 2^(n-1) and 2 (n may be 128). */
    float n = rintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float y = fmaf(p, r * r, r) + 1.0f, scale;
    int32_t bits = ((int32_t)n + 126) * (1 << 23);
    memcpy(&scale, &bits, sizeof scale);
    return y * scale * 2.0f;
}

void kern_softmax_ref(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float part[KERN_SUM_LANES] = {0};
    for (int i = 0; i < n; i++) {
        x[i] = kern_exp(x[i] - mx);
        part[i % KERN_SUM_LANES] += x[i];
    }
    float sum = kern_sum_lanes(part);
    for (int i = 0; i < n; i++) x[i] /= sum;
}

void kern_swiglu_ref(float *h, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = g[i];
        h[i] *= v * (1.0f / (1.0f + kern_exp(-v)));
    }
}

void kern_geglu_ref(float *h, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = g[i], z = KERN_GELU_C * (v + 0.044715f * v * v * v);
        h[i] *= v * (1.0f / (1.0f + kern_exp(-2.0f * z)));
    }
}

void kern_softcap(float *x, size_t n, float cap) {
    for (size_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

int kern_argmax(const float *x, int n) {
    /* The largest value over eight independent chains (one chain waits on every compare: a greedy
     * token over Gemma's 262,144 logits took most of a millisecond), then its first index. NaN never
     * wins a compare, so it is skipped, unless it comes first: nothing then beats it, as in a scan. */
    if (n <= 0 || isnan(x[0])) return 0;
    float m[8];
    for (int j = 0; j < 8; j++) m[j] = x[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
    float mx = m[0];
    for (int j = 1; j < 8; j++) mx = m[j] > mx ? m[j] : mx;
    for (i = 0; i < n; i++)
        if (x[i] == mx) return i;
    return 0;
}
