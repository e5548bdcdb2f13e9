/* kernels/ops: the element-wise and row-wise operations of a decoder layer (norms, RoPE, softmax,
 * gated activations, soft-capping, argmax). Plain C: each costs a small part of a forward call. */
#include "kernels.h"

#include <math.h>
#include <string.h>

void kern_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps) {
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        float *orow = out + (size_t)r * dim;
        float ss = 0.0f;
        for (int i = 0; i < dim; i++) ss += xr[i] * xr[i];
        ss = 1.0f / sqrtf(ss / (float)dim + eps);
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

void kern_rope(float *v, int n, int n_heads, int head_dim, int start_pos, const float *inv_freq, int style) {
    int half = head_dim / 2;
    for (int r = 0; r < n; r++) {
        float pos = (float)(start_pos + r);
        for (int i = 0; i < half; i++) {
            float a = pos * inv_freq[i], c = cosf(a), s = sinf(a);
            int i0 = style == KERN_ROPE_ADJACENT ? 2 * i : i;
            int i1 = style == KERN_ROPE_ADJACENT ? 2 * i + 1 : i + half;
            for (int h = 0; h < n_heads; h++) {
                float *x = v + ((size_t)r * n_heads + h) * head_dim;
                float x0 = x[i0], x1 = x[i1];
                x[i0] = x0 * c - x1 * s;
                x[i1] = x0 * s + x1 * c;
            }
        }
    }
}

void kern_softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    for (int i = 0; i < n; i++) x[i] /= sum;
}


void kern_swiglu(float *h, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = g[i];
        h[i] *= v * (1.0f / (1.0f + expf(-v)));
    }
}

void kern_geglu(float *h, const float *g, size_t n) {
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (size_t i = 0; i < n; i++) {
        float v = g[i];
        h[i] *= 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
    }
}

void kern_softcap(float *x, size_t n, float cap) {
    for (size_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

int kern_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}
