/* runtime/sample: the next token from the logits: greedy, or by temperature with top-k or top-p,
 * from the session's seeded generator. */
#include "runtime.h"

#include "../kernels/kernels.h"

#include <math.h>
#include <stdlib.h>

/* xorshift64*, as llama2.c samples: a seed gives the same tokens on every machine. */
static uint32_t rng_u32(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

static float rng_unit(uint64_t *state) { return (float)(rng_u32(state) >> 8) / 16777216.0f; }

static int cand_desc(const void *a, const void *b) {
    float pa = ((const rt_cand *)a)->p, pb = ((const rt_cand *)b)->p;
    if (pa != pb) return pa < pb ? 1 : -1;
    int32_t ia = ((const rt_cand *)a)->id, ib = ((const rt_cand *)b)->id;
    return (ia > ib) - (ia < ib);
}

/* Keeps the k most probable tokens of probs[n] in c[0..k) as a min-heap, then sorts them. */
static int top_k_select(const float *probs, int n, int k, rt_cand *c) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        rt_cand x = {probs[i], i};
        if (m < k) {
            int j = m++;
            while (j > 0 && c[(j - 1) / 2].p > x.p) {
                c[j] = c[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            c[j] = x;
        } else if (x.p > c[0].p) {
            int j = 0;
            for (;;) {
                int l = 2 * j + 1, r = l + 1, s = j;
                float ps = x.p;
                if (l < m && c[l].p < ps) s = l, ps = c[l].p;
                if (r < m && c[r].p < ps) s = r;
                if (s == j) break;
                c[j] = c[s];
                j = s;
            }
            c[j] = x;
        }
    }
    qsort(c, (size_t)m, sizeof *c, cand_desc);
    return m;
}

int32_t etch_argmax(const float *logits, int32_t n) { return kern_argmax(logits, n); }

int32_t rt_sample(etch_session *s, const etch_generate_config *cfg, float *logits) {
    int n = s->prog->meta.vocab_size;
    if (cfg->temperature <= 0.0f) return kern_argmax(logits, n);
    /* A temperature so small that a logit over it overflows to infinity leaves softmax nothing but
     * NaN: the limit of sampling as the temperature falls is greedy, so that is what it gets. */
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fabsf(logits[i]) > amax ? fabsf(logits[i]) : amax;
    if (isinf(amax / cfg->temperature)) return kern_argmax(logits, n);
    for (int i = 0; i < n; i++) logits[i] /= cfg->temperature;
    kern_softmax(logits, n);
    rt_cand *c = s->cand;
    int m;
    if (cfg->top_k > 0 && cfg->top_k < n) {
        m = top_k_select(logits, n, cfg->top_k, c);
    } else if (cfg->top_p < 1.0f) {
        /* Tokens below this cannot be in the nucleus (llama2.c's cut, which keeps the sort short). */
        float cutoff = (1.0f - cfg->top_p) / (float)(n - 1);
        m = 0;
        for (int i = 0; i < n; i++)
            if (logits[i] >= cutoff) c[m++] = (rt_cand){logits[i], i};
        qsort(c, (size_t)m, sizeof *c, cand_desc);
    } else {
        float r = rng_unit(&s->rng), acc = 0.0f;
        for (int i = 0; i < n; i++) {
            acc += logits[i];
            if (r < acc) return i;
        }
        return n - 1;
    }
    /* The nucleus of the candidates: after top-k, of their own mass renormalized (as Hugging Face's
     * and llama.cpp's samplers chain them); after the top-p cut alone, of the whole distribution. */
    float total = 1.0f;
    if (cfg->top_k > 0 && cfg->top_k < n) {
        total = 0.0f;
        for (int i = 0; i < m; i++) total += c[i].p;
    }
    float mass = 0.0f;
    int keep = m;
    for (int i = 0; i < m; i++) {
        mass += c[i].p;
        if (cfg->top_p < 1.0f && mass > cfg->top_p * total) {
            keep = i + 1;
            break;
        }
    }
    float r = rng_unit(&s->rng) * mass, acc = 0.0f;
    for (int i = 0; i < keep; i++) {
        acc += c[i].p;
        if (r < acc) return c[i].id;
    }
    return c[keep - 1].id;
}

