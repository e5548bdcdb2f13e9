/* Kernels against their plain-C reference twins and against double-precision formulas. */
#include "check.h"
#include "kernels/kernels.h"

#include <alloca.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

static uint64_t rng = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}
static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = frand();
}

/* Max |a - b| / (1 + |b|): relative for large values, absolute near zero. */
static double max_err(const float *a, const float *b, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i]));
        if (!(d <= e)) e = d; /* NaN counts as the worst */
    }
    return e;
}

/* Weight types of test_matmul: the kernel types, then Q8 and Q4 with mins (GGUF's Q5_1/Q5_K, Q4_1/Q4_K). */
enum { WT_Q8_MIN = KERN_Q4 + 1, WT_Q4_MIN, WT_COUNT };
static const char *wt_names[] = {"f32", "f16", "bf16", "q8", "q4", "q8+min", "q4+min"};

/* A packed matrix of each type from the same f32 values [d, k] rounded (or quantized with groups
 * of `group`, scales of scale_type) to that type; with mins (mn, as many as the scales) random ones,
 * the values then read unsigned. w and sc hold 4 bytes per packed element. */
static kern_mat make_weights(void *w, void *sc, void *mn, const float *src, int d, int k, int wtype, int group, int scale_type) {
    kern_mat m = {.w = w, .type = wtype, .scale_type = scale_type};
    if (wtype >= WT_Q8_MIN) {
        m = make_weights(w, sc, NULL, src, d, k, wtype == WT_Q8_MIN ? KERN_Q8 : KERN_Q4, group, scale_type);
        size_t n = (size_t)kern_packed_rows(d) * (size_t)kern_q_groups(k, m.group);
        for (size_t i = 0; i < n; i++) {
            float v = 0.1f * frand();
            if (scale_type == KERN_F16) ((uint16_t *)mn)[i] = kern_f32_to_f16(v);
            else ((float *)mn)[i] = v;
        }
        m.mins = mn;
        return m;
    }
    if (wtype == KERN_Q8 || wtype == KERN_Q4) {
        m.scales = sc;
        m.group = kern_quantize(w, sc, scale_type, wtype, src, d, k, group);
        return m;
    }
    memset(w, 0, (size_t)kern_packed_rows(d) * (size_t)k * kern_wsize(wtype));
    for (int o = 0; o < d; o++)
        for (int kk = 0; kk < k; kk++) {
            size_t i = kern_packed_index(o, kk, k);
            float f = src[(size_t)o * k + kk];
            if (wtype == KERN_F32) ((float *)w)[i] = f;
            else if (wtype == KERN_F16) ((uint16_t *)w)[i] = kern_f32_to_f16(f);
            else ((uint16_t *)w)[i] = kern_f32_to_bf16(f);
        }
    return m;
}

/* Gives quantized m two-level scales (KERN_SCALE_S8) in place of its own, and its mins too when it has
 * them: random int8 factors (0, negatives and -128 among them) in sc / mn and f16 factors per
 * sub_groups groups (a power of two dividing the group count) in sd / md, about the size of the scales
 * kern_quantize picks. fsc / fmn get the same scales and mins as tables of f32 products. */
static void make_two_level(kern_mat *m, int d, int k, void *sc, uint16_t *sd, void *mn, uint16_t *md, float *fsc, float *fmn) {
    int n_groups = kern_q_groups(k, m->group), sub = n_groups % 8 == 0 ? 8 : n_groups % 4 == 0 ? 4 : n_groups % 2 == 0 ? 2 : 1;
    size_t n = (size_t)kern_packed_rows(d) * (size_t)n_groups;
    for (size_t i = 0; i < n / (size_t)sub; i++) {
        sd[i] = kern_f32_to_f16((frand() < -0.8f ? -1.0f : 1.0f) * 0.001f * (1.5f + frand()));
        md[i] = kern_f32_to_f16(0.0005f * frand());
    }
    for (size_t i = 0; i < n; i++) {
        int8_t v = i % 97 == 0 ? -128 : i % 89 == 0 ? 0 : (int8_t)(frand() * 127.0f), u = (int8_t)(frand() * 63.0f);
        ((int8_t *)sc)[i] = v, ((int8_t *)mn)[i] = u;
        fsc[i] = kern_f16_to_f32(sd[kern_scale_d_index(i, sub)]) * (float)v;
        fmn[i] = kern_f16_to_f32(md[kern_scale_d_index(i, sub)]) * (float)u;
    }
    m->scales = sc, m->scale_d = sd, m->scale_type = KERN_SCALE_S8, m->sub_groups = sub;
    if (m->mins) m->mins = mn, m->min_d = md;
}

/* The worst error of y[n, d] = x[n, k] W^T, W Q4 without mins, against the exact product (every
 * term value * scale * x and their sums in double), as a fraction of the bound a kernel whose
 * products are exact owes it: a tile of a group of G values adds 3G/2 pairs of bf16 products (one per
 * part of x, amx_bf16.c), and the FMAs after it add the n_groups groups, each at most one rounding of
 * 2^-24 times the sum of the terms' magnitudes. Above 1: more error than exact products allow (a
 * lost part of x alone is 2^-16 of its terms). */
static double q4_exact_ratio(const float *y, const float *x, const kern_mat *m, int n, int d, int k) {
    int n_groups = kern_q_groups(k, m->group);
    double worst = 0, steps = 1.5 * m->group + n_groups + 1;
    for (int r = 0; r < n; r++)
        for (int o = 0; o < d; o++) {
            double sum = 0, mag = 0;
            for (int kk = 0; kk < k; kk++) {
                double p = (double)x[(size_t)r * k + kk] * kern_qvalue(m, o, kk, k) *
                           kern_scale_at(m, kern_packed_index(o, kk / m->group, n_groups));
                sum += p, mag += fabs(p);
            }
            double e = fabs(y[(size_t)r * d + o] - sum) / (steps * 0x1p-24 * mag + 1e-30);
            if (!(e <= worst)) worst = e; /* NaN counts as the worst */
        }
    return worst;
}

static void test_matmul(const char *variant, int exact) {
    static const int ks[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 100, 172, 300, 520};
    static const int ds[] = {1, 5, 16, 17, 33, 64, 80, 130};
    const char **names = wt_names;
    static const int groups[] = {32, 5, 1 << 20}; /* GGUF's 32, one that divides nothing, one per row */
    float *x = malloc(17 * 520 * sizeof *x), *wf = malloc(130 * 520 * sizeof *wf);
    void *sc = malloc(144 * 520 * sizeof(float)), *mn = malloc(144 * 520 * sizeof(float));
    void *w = malloc(144 * 520 * sizeof(float));
    float *y = malloc(17 * 130 * sizeof *y), *r = malloc(17 * 130 * sizeof *r), *one = malloc(130 * sizeof *one);
    float *fsc = malloc(144 * 520 * sizeof *fsc), *fmn = malloc(144 * 520 * sizeof *fmn);
    uint16_t *sd = malloc(144 * 520 * sizeof *sd), *md = malloc(144 * 520 * sizeof *md);
    int mismatched = 0, two_level = 0, bf16_shapes = 0;
    double worst_bf16 = 0;
    for (int wt = 0; wt < WT_COUNT; wt++)
        for (int n = 1; n <= 17; n++)
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
                for (size_t di = 0; di < sizeof ds / sizeof *ds; di++) {
                    int k = ks[ki], d = ds[di], group = groups[(n + ki + di) % 3];
                    if (k > 172 && n % 4 != 1) continue; /* long rows (several widening blocks): fewer shapes */
                    fill(x, (size_t)n * k);
                    fill(wf, (size_t)d * k);
                    int st = (int[]){KERN_F32, KERN_F16, KERN_SCALE_S8}[(n + ki) % 3];
                    kern_mat m = make_weights(w, sc, mn, wf, d, k, wt, group, st == KERN_F16 ? KERN_F16 : KERN_F32);
                    if (st == KERN_SCALE_S8 && kern_is_quantized(m.type)) {
                        make_two_level(&m, d, k, sc, sd, mn, md, fsc, fmn);
                        /* the same scales as f32 tables: the same results, bit for bit */
                        kern_mat f = m;
                        f.scales = fsc, f.mins = m.mins ? fmn : NULL, f.scale_type = KERN_F32;
                        kern_matmul(y, d, x, &m, n, d, k, 0, d);
                        kern_matmul(r, d, x, &f, n, d, k, 0, d);
                        CHECK(memcmp(y, r, (size_t)n * d * sizeof *y) == 0, "%s %s matmul n=%d d=%d k=%d: two-level scales "
                              "differ from their f32 products", variant, names[wt], n, d, k);
                        two_level++;
                    }
                    kern_matmul(y, d, x, &m, n, d, k, 0, d);
                    kern_matmul_ref(r, d, x, &m, n, d, k, 0, d);
                    double e = max_err(y, r, (size_t)n * d);
                    if (!kern_matmul_exact(&m, n, k)) { /* AMX-BF16's Q4 tiles: exact products, the tile's sums */
                        double q = q4_exact_ratio(y, x, &m, n, d, k);
                        if (q > worst_bf16) worst_bf16 = q;
                        CHECK(q <= 1.0, "%s %s matmul n=%d d=%d k=%d: %g of the exact products' bound", variant,
                              names[wt], n, d, k, q);
                        bf16_shapes++;
                        continue; /* its rows differ from one row alone in their last bits, by design */
                    }
                    if (exact) {
                        if (memcmp(y, r, (size_t)n * d * sizeof *y) != 0 && mismatched++ < 3)
                            CHECK(0, "%s %s matmul n=%d d=%d k=%d differs from its twin (%g)", variant, names[wt], n, d, k, e);
                    } else {
                        CHECK(e < 1e-5, "%s %s matmul n=%d d=%d k=%d: error %g", variant, names[wt], n, d, k, e);
                    }
                    /* A row's result must not depend on the other rows of the call (bit for bit):
                     * this is what makes batched and sequential prefill agree. */
                    int row = n - 1;
                    kern_matmul(one, d, x + (size_t)row * k, &m, 1, d, k, 0, d);
                    CHECK(memcmp(one, y + (size_t)row * d, (size_t)d * sizeof *one) == 0,
                          "%s %s matmul n=%d d=%d k=%d: row %d differs when computed alone", variant, names[wt], n, d, k, row);
                    /* Output ranges (as threads split them) give the same values. */
                    if (d > 16) {
                        memset(one, 0, (size_t)d * sizeof *one);
                        kern_matmul(one, d, x + (size_t)row * k, &m, 1, d, k, 16, d);
                        kern_matmul(one, d, x + (size_t)row * k, &m, 1, d, k, 0, 16);
                        CHECK(memcmp(one, y + (size_t)row * d, (size_t)d * sizeof *one) == 0, "%s ranges n=%d d=%d k=%d",
                              names[wt], n, d, k);
                    }
                }
    CHECK(mismatched == 0, "%s: %d shapes differ from the twin", variant, mismatched);
    CHECK(two_level > 1000, "%s: only %d shapes with two-level scales", variant, two_level);
    if (bf16_shapes) printf("  %s: %d Q4 shapes on AMX-BF16 tiles, at most %.3g of the exact products' bound\n", variant,
                            bf16_shapes, worst_bf16);
    free(x), free(wf), free(w), free(sc), free(mn), free(y), free(r), free(one), free(fsc), free(fmn), free(sd), free(md);
}

/* Quantize with f32 and with f16 scales, then read back: every weight within half a step of its
 * group's scale inside the range the scale represents, clipped values at its end, each scale within
 * the searched range (and an f16 where asked), a total error no worse than the largest-magnitude
 * scale's (for f16 rounded to f16, as every candidate is), the outlier exact (to its scale's f16
 * rounding), zero and padding rows zero. */
static void test_quantize_roundtrip(void) {
    enum { D = 37, K = 100 };
    static float src[D * K];
    static float sc[48 * K]; /* f32 scales, or f16 in its first half */
    static uint8_t q[48 * K];
    fill(src, D * K);
    for (int i = 0; i < K; i++) src[3 * K + i] = 0.0f; /* an all-zero row: scale 0, values 0 */
    src[5 * K + 7] = 40.0f;                            /* an outlier in one group */
    for (int type = KERN_Q8; type <= KERN_Q4; type++)
        for (int gi = 0; gi < 6; gi++) {
            int want = (int[]){32, 7, K}[gi % 3], st = gi < 3 ? KERN_F32 : KERN_F16;
            double tol = st == KERN_F16 ? 0x1p-11 : 1e-6; /* f16 rounds to within 2^-11 of the value */
            int group = kern_quantize(q, sc, st, type, src, D, K, want), n_groups = kern_q_groups(K, group);
            CHECK(group <= want && kern_q_groups(K, want) == n_groups && kern_q_group_of(K, n_groups) == group,
                  "group %d for %d: %d groups", group, want, n_groups);
            kern_mat m = {.w = q, .scales = sc, .type = type, .group = group, .scale_type = st};
            double worst = 0, err2 = 0, err2_absmax = 0;
            int bad = 0;
            for (int o = 0; o < D; o++)
                for (int g = 0; g < n_groups; g++) {
                    int b = g * group, e = b + group < K ? b + group : K;
                    float s = fabsf(kern_scale_at(&m, kern_packed_index(o, g, n_groups))), amax = 0, vmax = 0;
                    for (int kk = b; kk < e; kk++)
                        if (fabsf(src[o * K + kk]) > amax) amax = fabsf(src[o * K + kk]), vmax = src[o * K + kk];
                    /* the representable range: -127..127 steps (Q8), -8..7 steps (Q4, either sign of scale) */
                    double top = type == KERN_Q8 ? 127.0 * s : 7.0 * s;
                    /* the largest-magnitude scale (Q4: signed, its value maps to -8), and as stored */
                    double s0 = type == KERN_Q8 ? amax / 127.0 : vmax / -8.0;
                    double s0h = st == KERN_F16 ? kern_f16_to_f32(kern_f32_to_f16((float)s0)) : s0;
                    for (int kk = b; kk < e; kk++) {
                        double x = src[o * K + kk], e1 = fabs((double)kern_mat_at(&m, o, kk, K) - x);
                        /* half a step inside the range; outside it, the distance to the range's end
                         * (which a clipped scale or Q4's one-sided range leaves) */
                        double bound = fabs(x) <= top ? 0.5 * s : fabs(x) - top + (type == KERN_Q4 ? s : 0.0);
                        if (e1 > bound * (1 + 1e-5) + 1e-6 * fabs(x) + 1e-9) bad++; /* f32 rounding of value * scale */
                        if (s > 0 && e1 / s > worst) worst = e1 / s;
                        err2 += e1 * e1;
                        double v = s0h != 0 ? fmin(fmax(round(x / s0h), type == KERN_Q8 ? -127 : -8), type == KERN_Q8 ? 127 : 7) * s0h : 0;
                        err2_absmax += (x - v) * (x - v);
                    }
                    CHECK((st == KERN_F32 || s == kern_f16_to_f32(kern_f32_to_f16(s))) && s <= fabs(s0) * (1 + tol) &&
                              s >= fabs(s0) * (type == KERN_Q8 ? 0.95 : 0.8) * (1 - tol),
                          "scale %g (%s) within the searched range of %g", s, st == KERN_F16 ? "f16" : "f32", s0);
                }
            CHECK(bad == 0, "%s group %d: %d weights off by more than their bound (worst %.3f steps)",
                  type == KERN_Q8 ? "q8" : "q4", group, bad, worst);
            /* the search never does worse than the largest-magnitude scale */
            CHECK(err2 <= err2_absmax * (1 + 1e-5), "%s group %d: squared error %g above the absmax scale's %g",
                  type == KERN_Q8 ? "q8" : "q4", group, err2, err2_absmax);
            CHECK(fabsf(kern_mat_at(&m, 5, 7, K) - 40.0f) <= (st == KERN_F16 ? 40.0f * 0x1p-11f : 1e-5f),
                  "the outlier survives (to its scale's f16 rounding): %g", kern_mat_at(&m, 5, 7, K));
            for (int kk = 0; kk < K; kk++) CHECK(kern_mat_at(&m, 3, kk, K) == 0.0f, "zero row stays zero");
            for (int kk = 0; kk < K; kk++) CHECK(kern_mat_at(&m, 40, kk, K) == 0.0f, "padding rows are zero");
        }
}

/* Integer-dot matrices: the AVX2 kernel against its twin bit for bit, rows alone, output ranges;
 * and the twin against the same sum in double from the dequantized values. */
static void test_matmul_int(const char *variant, int exact) {
    static const int ks[] = {2, 8, 16, 64, 100, 172, 300, 520, 1088, 1100}; /* 1088: a long group of whole 64s */
    static const int ds[] = {1, 5, 16, 17, 64, 80, 130};
    float *x = malloc(33 * 1100 * sizeof *x), *wf = malloc(130 * 1100 * sizeof *wf);
    void *sc = malloc(144 * 1100 * sizeof(float));
    float *ws = malloc(144 * 1100 * sizeof *ws), *mn = malloc(144 * 1100 * sizeof *mn);
    uint8_t *q = malloc(144 * 1100), *qi = malloc(144 * 1100);
    int32_t *pairs = malloc(33 * 550 * sizeof *pairs), zero[33], *psum = malloc(33 * 551 * sizeof *psum);
    uint16_t *bytes = malloc(33 * 550 * sizeof *bytes), *sd = malloc(144 * 1100 * sizeof *sd), *md = malloc(144 * 1100 * sizeof *md);
    float *fsc = malloc(144 * 1100 * sizeof *fsc), *fmn = malloc(144 * 1100 * sizeof *fmn), *y2 = malloc(33 * 130 * sizeof *y2);
    void *mn8 = malloc(144 * 1100);
    float *xs = malloc(33 * 550 * sizeof *xs), *y = malloc(33 * 130 * sizeof *y), *r = malloc(33 * 130 * sizeof *r);
    float *one = malloc(130 * sizeof *one);
    kern_qx qx = {pairs, xs, zero, bytes, psum, 0, 0};
    int mismatched = 0;
    double worst = 0;
    for (int type = KERN_Q8; type <= KERN_Q4; type++)
        for (int n = 1; n <= 33; n += n < 9 ? 1 : n < 13 ? 4 : 20) /* every tail of an eight-row tile; two 16-row tiles and one row */
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
                for (size_t di = 0; di < sizeof ds / sizeof *ds; di++)
                    for (int stat = 0; stat < 5; stat++) { /* dynamic, static, dynamic with mins; 3, 4: as 0 and 2
                                                            * with a scale per group of inputs */
                        int k = ks[ki], d = ds[di], want = (int[]){32, 6, 1 << 20}[(n + ki + di) % 3];
                        fill(x, (size_t)n * k);
                        fill(wf, (size_t)d * k);
                        int group = kern_q_group_fit(k, want, 1);
                        int st = (int[]){KERN_F32, KERN_F16, KERN_SCALE_S8}[(ki + stat + n) % 3];
                        kern_quantize(q, sc, st == KERN_F16 ? KERN_F16 : KERN_F32, type, wf, d, k, group);
                        kern_to_int_dot(qi, q, type, d, k);
                        kern_mat m = {.w = qi, .scales = sc, .type = type == KERN_Q8 ? KERN_I8 : KERN_I4, .group = group,
                                      .wsum = ws, .scale_type = st};
                        kern_mat mq = {.w = q, .scales = sc, .type = type, .group = group, .scale_type = st};
                        float act[2] = {1.0f / 120, 7}; /* a static scale and zero point */
                        m.act = stat == 1 ? act : NULL;
                        if (stat == 2 || stat == 4) { /* mins, as GGUF's Q4_1/Q4_K/Q5_1/Q5_K: a weight is u * scale + min */
                            for (int i = 0; i < kern_packed_rows(d) * kern_q_groups(k, group); i++) {
                                float v = 0.05f * frand();
                                if (st == KERN_F16) ((uint16_t *)mn)[i] = kern_f32_to_f16(v);
                                else mn[i] = v;
                            }
                            m.mins = mq.mins = mn;
                        }
                        kern_mat f = m; /* two-level scales, and the same as f32 tables */
                        if (st == KERN_SCALE_S8 && stat != 1) {
                            make_two_level(&m, d, k, sc, sd, mn8, md, fsc, fmn);
                            mq.scales = m.scales, mq.scale_d = m.scale_d, mq.scale_type = m.scale_type;
                            mq.sub_groups = m.sub_groups, mq.mins = m.mins, mq.min_d = m.min_d;
                            f = m, f.scales = fsc, f.mins = m.mins ? fmn : NULL, f.scale_type = KERN_F32;
                        } else if (st == KERN_SCALE_S8) { /* static activations: f32 scales */
                            m.scale_type = mq.scale_type = f.scale_type = KERN_F32;
                        }
                        kern_group_sums(ws, &m, d, k);
                        /* input groups of the weights' size or twice it (the weights' groups are even) */
                        qx.group = stat >= 3 ? group * (1 + (int)(n + ki) % 2) : 0;
                        kern_quantize_x(&qx, x, n, k, m.act);
                        for (int o = 0; o < d; o++) /* the layouts hold the same values */
                            for (int kk = 0; kk < k; kk += 7)
                                if (kern_qvalue(&m, o, kk, k) != kern_qvalue(&mq, o, kk, k)) mismatched++;
                        kern_matmul_i(y, d, &qx, &m, n, d, k, 0, d);
                        kern_matmul_i_ref(r, d, &qx, &m, n, d, k, 0, d);
                        if (m.scale_type == KERN_SCALE_S8) {
                            kern_matmul_i(y2, d, &qx, &f, n, d, k, 0, d);
                            CHECK(memcmp(y, y2, (size_t)n * d * sizeof *y) == 0, "%s int n=%d d=%d k=%d: two-level "
                                  "scales differ from their f32 products", variant, n, d, k);
                        }
                        if (exact ? memcmp(y, r, (size_t)n * d * sizeof *y) != 0 : max_err(y, r, (size_t)n * d) > 1e-5)
                            if (mismatched++ < 3) CHECK(0, "%s int n=%d d=%d k=%d group=%d stat=%d differs from its twin", variant, n, d, k, group, stat);
                        /* the twin's meaning: sum of (x scale * (value - zero)) * (weight) in double */
                        for (int row = 0; row < n; row++)
                            for (int o = 0; o < d; o++) {
                                double sum = 0, mag = 0;
                                for (int kk = 0; kk < k; kk++) {
                                    int32_t w = qx.pairs[(size_t)row * (k / 2) + kk / 2];
                                    int xv = kk % 2 ? (int16_t)(uint16_t)((uint32_t)w >> 16) : (int16_t)(uint16_t)(w & 0xFFFF);
                                    double xsc = qx.group ? kern_qx_scale(&qx, 1, row, kk) : xs[row];
                                    double xt = xsc * (xv - zero[row]), wt = kern_mat_at(&mq, o, kk, k);
                                    /* with mins the twin adds u * scale and the min apart, and |u * scale| +
                                     * |min| <= |weight| + 2 |min|: the magnitude its roundings are relative to */
                                    double wm = fabs(wt) + (mq.mins ? 2 * fabs(kern_min_at(&mq, kern_packed_index(o, kk / group, kern_q_groups(k, group)))) : 0);
                                    sum += xt * wt, mag += fabs(xt) * wm;
                                }
                                double e = fabs(sum - r[(size_t)row * d + o]) / (mag + 1e-30);
                                if (e > worst) worst = e;
                            }
                        int row = n - 1;
                        kern_quantize_x(&qx, x + (size_t)row * k, 1, k, m.act);
                        kern_matmul_i(one, d, &qx, &m, 1, d, k, 0, d);
                        CHECK(memcmp(one, y + (size_t)row * d, (size_t)d * sizeof *one) == 0,
                              "%s int n=%d d=%d k=%d: row %d differs when computed alone", variant, n, d, k, row);
                        if (d > 16) {
                            memset(one, 0, (size_t)d * sizeof *one);
                            kern_matmul_i(one, d, &qx, &m, 1, d, k, 16, d);
                            kern_matmul_i(one, d, &qx, &m, 1, d, k, 0, 16);
                            CHECK(memcmp(one, y + (size_t)row * d, (size_t)d * sizeof *one) == 0, "int ranges n=%d d=%d k=%d", n, d, k);
                        }
                    }
    CHECK(mismatched == 0, "%s: %d integer-dot cases differ", variant, mismatched);
    CHECK(worst < 1e-5, "%s: the integer twin is off the double sum by %g of the magnitude", variant, worst);
    free(x), free(wf), free(sc), free(ws), free(mn), free(q), free(qi), free(pairs), free(y), free(r), free(one), free(psum), free(bytes);
    free(sd), free(md), free(fsc), free(fmn), free(y2), free(mn8), free(xs);
}

/* The AVX2 activation quantizer equals the scalar one exactly: halves (0.5, 1.5, -2.5 steps), NaN,
 * infinities, huge and tiny values, rows longer than a chunk, dynamic and static; in groups, scales
 * whose f16 rounding is normal, subnormal, zero or infinite (row 4's groups of 6 halve from one to
 * the next). */
static void test_quantize_x_twin(void) {
    enum { N = 5, K = 600 };
    static float x[N * K];
    static int32_t p1[N * K / 2], p2[N * K / 2], s1[N * (K / 2 + 1)], s2[N * (K / 2 + 1)], z1[N], z2[N];
    static uint16_t b1[N * K / 2], b2[N * K / 2];
    static float f1[N * K / 2], f2[N * K / 2];
    fill(x, N * K);
    for (int i = 0; i < K; i++) x[K + i] = (float)(i % 9 - 4) * 0.5f * (1.0f / 127); /* halves of a step */
    x[2 * K + 3] = NAN, x[2 * K + 4] = INFINITY, x[2 * K + 5] = -INFINITY, x[3 * K + 7] = 1e30f, x[3 * K + 8] = -1e-30f;
    x[1 * K + 0] = 1.0f; /* row 1's max: a step of 1/127, its halves exact */
    for (int i = 0; i < K; i++) x[4 * K + i] = ldexpf(x[4 * K + i], -(i / 6));
    for (int st = 0; st < 4; st++) { /* dynamic, static, dynamic in groups of 64 (the last of 24) and of 6 */
        float stat[2] = {0.013f, -5};
        int G = (int[]){0, 0, 64, 6}[st];
        memset(f1, 0, sizeof f1), memset(f2, 0xFF, sizeof f2);
        kern_qx a = {p1, f1, z1, b1, s1, G, 0}, b = {p2, f2, z2, b2, s2, G, 0};
        kern_quantize_x(&a, x, N, K, st == 1 ? stat : NULL);
        kern_quantize_x_ref(&b, x, N, K, st == 1 ? stat : NULL);
        size_t scales = (size_t)N * (G ? (size_t)kern_q_groups(K, G) : 1);
        CHECK(!memcmp(p1, p2, sizeof p1) && !memcmp(b1, b2, sizeof b1) && !memcmp(s1, s2, sizeof s1) &&
                  !memcmp(z1, z2, sizeof z1) && !memcmp(f1, f2, scales * sizeof *f1),
              "%s: the AVX2 activation quantizer differs from the scalar one", (const char *[]){"dynamic", "static", "groups of 64", "groups of 6"}[st]);
    }
}

/* Activation quantization: values in range, per-row scale, static zero point and clamping. */
static void test_quantize_x(void) {
    float x[2 * 6] = {0.5f, -1.0f, 0.25f, 0.0f, 1.0f, -0.5f, 100.0f, -100.0f, 0.0f, 0.01f, -0.004f, 0.006f};
    int32_t pairs[6], zero[2], psum[2 * 4];
    uint16_t bytes[6];
    float s[6];
    kern_qx qx = {pairs, s, zero, bytes, psum, 0, 0};
    kern_quantize_x(&qx, x, 2, 6, NULL);
    CHECK(s[0] == 1.0f / 127 && zero[0] == 0 && (int16_t)(pairs[0] & 0xFFFF) == 64 && (int16_t)(pairs[0] >> 16) == -127,
          "dynamic: scale %g, values %d %d", s[0], (int16_t)(pairs[0] & 0xFFFF), (int16_t)(pairs[0] >> 16));
    float stat[2] = {0.5f, -3};
    kern_quantize_x(&qx, x, 2, 6, stat);
    CHECK(s[1] == 0.5f && zero[1] == -3 && (int16_t)(pairs[3] & 0xFFFF) == 127 && (int16_t)(pairs[3] >> 16) == -128,
          "static: clamped to 127 and -128 (%d %d)", (int16_t)(pairs[3] & 0xFFFF), (int16_t)(pairs[3] >> 16));
    CHECK((int16_t)(pairs[0] & 0xFFFF) == -2 && (int16_t)(pairs[2] >> 16) == -4, "static: 0.5/0.5 - 3 = -2, -0.5/0.5 - 3 = -4");
    CHECK(bytes[0] == (uint16_t)((uint8_t)-2 | (uint8_t)-5 << 8) && psum[0] == 0 && psum[1] == -7,
          "the byte pairs and prefix sums: %04x, %d %d", bytes[0], psum[0], psum[1]);
    qx.group = 2; /* a scale per pair: row 0's pairs (0.5, -1), (0.25, 0), (1, -0.5) */
    kern_quantize_x(&qx, x, 2, 6, NULL);
    /* a group's scale is stored as f16, as GGML's Q8_0 blocks store theirs; the values were rounded with the f32 one */
    float h127 = kern_f16_to_f32(kern_f32_to_f16(1.0f / 127)), h4 = kern_f16_to_f32(kern_f32_to_f16(0.25f / 127));
    CHECK(qx.n_groups == 3 && s[0] == h127 && s[1] == h4 && s[2] == h127 && h127 != 1.0f / 127 && zero[0] == 0,
          "groups: %d scales %g %g %g (f16: %g %g)", qx.n_groups, s[0], s[1], s[2], h127, h4);
    CHECK((int16_t)(pairs[0] & 0xFFFF) == 64 && (int16_t)(pairs[0] >> 16) == -127 && (int16_t)(pairs[1] & 0xFFFF) == 127 &&
              (int16_t)(pairs[1] >> 16) == 0 && (int16_t)(pairs[2] >> 16) == -64 && psum[3] == 64 - 127 + 127 + 127 - 64,
          "groups: each pair on its own scale (%d %d %d %d %d), prefix sums across groups (%d)", (int16_t)(pairs[0] & 0xFFFF),
          (int16_t)(pairs[0] >> 16), (int16_t)(pairs[1] & 0xFFFF), (int16_t)(pairs[1] >> 16), (int16_t)(pairs[2] >> 16), psum[3]);
    /* scales f16 cannot hold stay f32: past 65504 (it would be infinite) and below its subnormals (zero) */
    float far[6] = {1e7f, 1.0f, 1e-9f, 0.0f, 0.0f, 0.0f};
    kern_quantize_x(&qx, far, 1, 6, NULL);
    CHECK(s[0] == 1e7f / 127 && s[1] == 1e-9f / 127 && s[2] == 0.0f && (int16_t)(pairs[1] & 0xFFFF) == 127,
          "groups: scales out of f16's range stay f32 (%g %g %g)", s[0], s[1], s[2]);
}

static void test_conversions(void) {
    /* Known encodings. */
    CHECK(kern_f32_to_f16(1.0f) == 0x3C00 && kern_f32_to_f16(-2.0f) == 0xC000 && kern_f32_to_f16(65504.0f) == 0x7BFF,
          "f16 of 1, -2, 65504");
    CHECK(kern_f32_to_f16(1e6f) == 0x7C00 && kern_f32_to_f16(5.9604645e-8f) == 0x0001, "f16 overflow and smallest subnormal");
    CHECK(kern_f32_to_f16(1.0f + 1.0f / 2048) == 0x3C00 && kern_f32_to_f16(1.0f + 3.0f / 2048) == 0x3C02,
          "f16 rounds to nearest even");
    CHECK(kern_f16_to_f32(0x3555) == 0.333251953125f && kern_f16_to_f32(0x0001) == 5.9604645e-8f &&
              kern_f16_to_f32(0xFC00) == -INFINITY && isnan(kern_f16_to_f32(0x7E00)),
          "f16 decoding of 1/3, a subnormal, -inf, NaN");
    CHECK(kern_f32_to_bf16(1.0f) == 0x3F80 && kern_bf16_to_f32(0x4049) == 3.140625f &&
              kern_f32_to_bf16(1.00390625f) == 0x3F80 && kern_f32_to_bf16(1.01171875f) == 0x3F82 &&
              isnan(kern_bf16_to_f32(kern_f32_to_bf16(NAN))),
          "bf16 encodings, rounding to even, NaN");
    /* Every finite f16 survives f16 -> f32 -> f16. */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7C00) == 0x7C00) continue;
        if (kern_f32_to_f16(kern_f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK(bad == 0, "%d f16 values do not round-trip", bad);
}

static void test_rmsnorm(void) {
    float x[3 * 37], w[37], out[3 * 37];
    fill(x, 3 * 37);
    fill(w, 37);
    kern_rmsnorm(out, x, w, 3, 37, 1e-5f);
    /* the variant against its twin bit for bit at lengths around a vector's, in place too */
    static float xs[1100], ws[1100], o1[1100], o2[2200];
    fill(xs, 1100);
    fill(ws, 1100);
    int bad = 0;
    for (int d = 1; d <= 1100; d += d < 40 ? 1 : 353) {
        kern_rmsnorm(o1, xs, ws, 1, d, 1e-6f);
        kern_rmsnorm_ref(o2, xs, ws, 1, d, 1e-6f);
        memcpy(o2 + d, xs, (size_t)d * sizeof *xs);
        kern_rmsnorm(o2 + d, o2 + d, ws, 1, d, 1e-6f);
        if (memcmp(o1, o2, (size_t)d * sizeof *o1) || memcmp(o1, o2 + d, (size_t)d * sizeof *o1)) bad++;
    }
    CHECK(bad == 0, "rmsnorm differs from its twin (or in place) at %d lengths", bad);
    for (int r = 0; r < 3; r++) {
        double ss = 0;
        for (int i = 0; i < 37; i++) ss += (double)x[r * 37 + i] * x[r * 37 + i];
        double inv = 1.0 / sqrt(ss / 37 + 1e-5);
        for (int i = 0; i < 37; i++) {
            double want = w[i] * x[r * 37 + i] * inv;
            CHECK(fabs(out[r * 37 + i] - want) < 1e-5, "rmsnorm row %d col %d: %g vs %g", r, i, out[r * 37 + i], want);
        }
    }
}

static void rope_double(double *v, int head_dim, int pos, double base, int style) {
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        double a = pos * pow(base, -2.0 * i / head_dim);
        int i0 = style == KERN_ROPE_ADJACENT ? 2 * i : i, i1 = style == KERN_ROPE_ADJACENT ? 2 * i + 1 : i + half;
        double x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * cos(a) - x1 * sin(a);
        v[i1] = x0 * sin(a) + x1 * cos(a);
    }
}

static void test_rope(void) {
    enum { N = 5, H = 3, D = 16 };
    for (int style = 0; style < 2; style++) {
        float v[N * H * D];
        fill(v, N * H * D);
        double ref[N * H * D];
        for (int i = 0; i < N * H * D; i++) ref[i] = v[i];
        float freqs[D / 2];
        kern_rope_freqs(freqs, D, 10000.0f);
        float cs[N * D];
        kern_rope_table(cs, N, D, 7, freqs);
        kern_rope(v, N, H, D, cs, style);
        for (int r = 0; r < N; r++)
            for (int h = 0; h < H; h++) rope_double(ref + (r * H + h) * D, D, 7 + r, 10000.0, style);
        double e = 0;
        for (int i = 0; i < N * H * D; i++) e = fmax(e, fabs(v[i] - ref[i]));
        CHECK(e < 1e-4, "rope style %d: error %g", style, e);
    }
    /* Pin the conventions: a unit vector on x[1] rotates with pair (0,1) under ADJACENT and with
     * pair (1, 1 + D/2) under HALF. */
    float a[D] = {0}, b[D] = {0};
    a[1] = b[1] = 1.0f;
    float fr[D / 2];
    kern_rope_freqs(fr, D, 10000.0f);
    float cs3[D];
    kern_rope_table(cs3, 1, D, 3, fr);
    kern_rope(a, 1, 1, D, cs3, KERN_ROPE_ADJACENT);
    kern_rope(b, 1, 1, D, cs3, KERN_ROPE_HALF);
    /* Llama 3 scaling: short wavelengths kept, long ones divided by the factor, a blend between. */
    float l3[64];
    kern_rope_freqs(l3, 128, 500000.0f);
    float plain0 = l3[0], plain63 = l3[63];
    kern_rope_llama3(l3, 128, 32.0f, 1.0f, 4.0f, 8192.0f);
    CHECK(l3[0] == plain0 && fabsf(l3[63] - plain63 / 32.0f) < 1e-12f, "llama3 scaling keeps high, divides low frequencies");
    CHECK(fabsf(a[0] + sinf(3.0f)) < 1e-6f && fabsf(a[1] - cosf(3.0f)) < 1e-6f, "adjacent pins pair (0,1)");
    float f1 = 3.0f * powf(10000.0f, -2.0f / D);
    CHECK(fabsf(b[1] - cosf(f1)) < 1e-6f && fabsf(b[1 + D / 2] - sinf(f1)) < 1e-6f && b[0] == 0.0f,
          "half pins pair (1, 1+D/2)");
}

/* A cached value as attention reads it (head-major: kern_kv): widened, times its scale (Q8). */
static double kv_value(const kern_kv *kv, const void *base, const float *scale, int row, int kvh, int i, int rows, int hd) {
    size_t at = ((size_t)kvh * rows + row) * hd + i;
    if (kv->type == KERN_KV_F16) return kern_f16_to_f32(((const uint16_t *)base)[at]);
    if (kv->type == KERN_KV_Q8) return ((const int8_t *)base)[at] * (double)scale[kvh * rows + row];
    return ((const float *)base)[at];
}

/* Attention with a full cache, a sliding window over a full cache, and a sliding window over a ring
 * (the key of position t in row t % rows), for each KV cache type, against the reference twin and a
 * double-precision sum over the cached values. */
static void test_attention_case(int kv_type, int window, int ring, float score_div, int START, int N) {
    enum { NH = 4, NKV = 2, HD = 32 };
    const int CTX = START + N;
    float *q = malloc(sizeof(float) * N * NH * HD), *kc = malloc(sizeof(float) * CTX * NKV * HD);
    float *vc = malloc(sizeof(float) * CTX * NKV * HD), *out = malloc(sizeof(float) * N * NH * HD);
    float *scores = malloc(sizeof(float) * KERN_ATT_BLOCK * CTX);
    fill(q, N * NH * HD);
    fill(kc, CTX * NKV * HD);
    fill(vc, CTX * NKV * HD);
    /* The cache the kernel reads: every position written in order, later ones over earlier ones in a ring. */
    int rows = ring ? window + N - 1 : CTX;
    float *kr = malloc(sizeof(float) * CTX * NKV * HD), *vr = malloc(sizeof(float) * CTX * NKV * HD);
    float *ks = malloc(sizeof(float) * CTX * NKV), *vs = malloc(sizeof(float) * CTX * NKV);
    kern_kv kv = {kv_type, kr, vr, kv_type == KERN_KV_Q8 ? ks : NULL, kv_type == KERN_KV_Q8 ? vs : NULL};
    kern_att_shape as = {NH, NKV, HD, score_div, window, rows};
    for (int t = 0; t < CTX; t++) kern_kv_store(&kv, kc + t * NKV * HD, vc + t * NKV * HD, 1, t, &as);
    kern_attention(out, q, &kv, N, START, &as, scores, 0, NH);
    size_t n_out = (size_t)N * NH * HD, out_bytes = n_out * sizeof(float);
    float *out_ref = malloc(out_bytes), *out_split = malloc(out_bytes), *out_rows = malloc(out_bytes);
    kern_attention_ref(out_ref, q, &kv, N, START, &as, scores, 0, NH);
    /* head ranges as threads split them: by KV heads (0..1, 2..3), and within a KV head's group and
     * across groups (0, 1..2, 3) */
    float *out_heads = malloc(out_bytes);
    kern_attention(out_split, q, &kv, N, START, &as, scores, 0, NH / NKV);
    kern_attention(out_split, q, &kv, N, START, &as, scores, NH / NKV, NH);
    kern_attention(out_heads, q, &kv, N, START, &as, scores, 0, 1);
    kern_attention(out_heads, q, &kv, N, START, &as, scores, 1, 3);
    kern_attention(out_heads, q, &kv, N, START, &as, scores, 3, NH);
    CHECK(max_err(out, out_ref, n_out) < 1e-6, "attention (%s cache, window %d, ring %d) vs its twin",
          kern_kv_type_name(kv_type), window, ring);
    CHECK(memcmp(out, out_split, out_bytes) == 0, "attention over KV-head ranges (%s cache, window %d, ring %d)",
          kern_kv_type_name(kv_type), window, ring);
    CHECK(memcmp(out, out_heads, out_bytes) == 0, "attention over query-head ranges (%s cache, window %d, ring %d)",
          kern_kv_type_name(kv_type), window, ring);
    /* Each row alone (as sequential prefill computes it) equals the row in the block, bit for bit. */
    for (int r = 0; r < N; r++)
        kern_attention(out_rows + r * NH * HD, q + r * NH * HD, &kv, 1, START + r, &as, scores, 0, NH);
    CHECK(memcmp(out, out_rows, out_bytes) == 0,
          "attention rows computed alone equal the batched ones (%s cache, window %d, ring %d)", kern_kv_type_name(kv_type),
          window, ring);
    double e = 0, e_f32 = 0;
    for (int r = 0; r < N; r++)
        for (int h = 0; h < NH; h++) {
            int kvh = h / (NH / NKV), p = START + r, lo = window && p - window + 1 > 0 ? p - window + 1 : 0;
            double *s = malloc(sizeof(double) * CTX), mx = -1e30, sum = 0, *s32 = malloc(sizeof(double) * CTX), mx32 = -1e30, sum32 = 0;
            for (int t = lo; t <= p; t++) {
                s[t] = s32[t] = 0;
                for (int i = 0; i < HD; i++) {
                    s[t] += (double)q[(r * NH + h) * HD + i] * kv_value(&kv, kr, ks, t % rows, kvh, i, rows, HD);
                    s32[t] += (double)q[(r * NH + h) * HD + i] * kc[(t * NKV + kvh) * HD + i];
                }
                s[t] /= score_div, s32[t] /= score_div;
                mx = fmax(mx, s[t]), mx32 = fmax(mx32, s32[t]);
            }
            for (int t = lo; t <= p; t++) sum += (s[t] = exp(s[t] - mx)), sum32 += (s32[t] = exp(s32[t] - mx32));
            for (int i = 0; i < HD; i++) {
                double o = 0, o32 = 0;
                for (int t = lo; t <= p; t++) {
                    o += s[t] / sum * kv_value(&kv, vr, vs, t % rows, kvh, i, rows, HD);
                    o32 += s32[t] / sum32 * vc[(t * NKV + kvh) * HD + i];
                }
                e = fmax(e, fabs(o - out[(r * NH + h) * HD + i]));
                e_f32 = fmax(e_f32, fabs(o32 - out[(r * NH + h) * HD + i]));
            }
            free(s), free(s32);
        }
    CHECK(e < 1e-5, "attention (%s cache, window %d, ring %d): error %g", kern_kv_type_name(kv_type), window, ring, e);
    /* and against the f32 keys and values the cache rounded: f16 keeps 11 bits, Q8 about 7 */
    double bound = kv_type == KERN_KV_F32 ? 1e-5 : kv_type == KERN_KV_F16 ? 2e-3 : 3e-2;
    CHECK(e_f32 < bound, "attention (%s cache, window %d, ring %d) vs the unrounded values: error %g",
          kern_kv_type_name(kv_type), window, ring, e_f32);
    free(q), free(kc), free(vc), free(out), free(scores), free(kr), free(vr), free(ks), free(vs);
    free(out_ref), free(out_split), free(out_rows), free(out_heads);
}

static void test_attention(void) {
    for (int t = KERN_KV_F32; t <= KERN_KV_Q8; t++) {
        /* 11 rows after 9, two heads per KV head: a block of 16 queries (four micro-blocks of four)
         * and one of six (four and two) */
        test_attention_case(t, 0, 0, sqrtf(32.0f), 9, 11);
        test_attention_case(t, 4, 0, sqrtf(32.0f), 9, 11);
        test_attention_case(t, 4, 1, 3.0f, 9, 11);  /* a ring of 14 rows that the 20 positions wrap around */
        test_attention_case(t, 1, 1, 2.0f, 9, 11);  /* each query sees only itself */
        test_attention_case(t, 7, 1, 4.0f, 9, 11);
        /* 45 rows after 150: spans of up to 195 keys, past the micro-kernels' KS keys at a time with
         * keys left over, and a micro-block of two queries at the end */
        test_attention_case(t, 0, 0, sqrtf(32.0f), 150, 45);
        test_attention_case(t, 70, 0, sqrtf(32.0f), 150, 45); /* long windows */
        test_attention_case(t, 70, 1, 3.0f, 150, 45);         /* a ring of 114 rows: two runs of many keys */
        /* spans of up to 1,121 keys: past a tile of keys (32 KiB of rows: 256 to 1,024 keys at
         * head_dim 32) for every cache type, and a ring whose two runs each span tiles */
        test_attention_case(t, 0, 0, sqrtf(32.0f), 1100, 21);
        test_attention_case(t, 700, 1, 3.0f, 1100, 21);
    }
}

/* The KV store of the active variant against its twin, bit for bit, for head sizes with and without
 * a vector tail, values over many magnitudes (f16 subnormals and overflow among them), a row of zeros
 * and a ring; and Q8 within half a step of each value. */
static void test_kv_store(const char *v) {
    enum { NKV = 3, MAXHD = 80, N = 5, ROWS = 4 };
    const int hds[] = {32, 64, 40, 80, 2};
    for (int ti = 0; ti < 3; ti++)
        for (int hi = 0; hi < 5; hi++) {
            int hd = hds[hi], kvd = NKV * hd;
            static float k[N * NKV * MAXHD], vv[N * NKV * MAXHD];
            for (int i = 0; i < N * kvd; i++) {
                k[i] = frand() * powf(2.0f, (float)(i % 41) - 25.0f);
                vv[i] = frand() * (i % 7 == 0 ? 70000.0f : 1.0f);
            }
            memset(k + kvd, 0, (size_t)kvd * sizeof *k); /* position 1: all zeros */
            static uint8_t kb[2][ROWS * NKV * MAXHD * 4], vb[2][ROWS * NKV * MAXHD * 4];
            static float ksc[2][ROWS * NKV], vsc[2][ROWS * NKV];
            kern_att_shape as = {NKV, NKV, hd, 1.0f, 0, ROWS};
            for (int twin = 0; twin < 2; twin++) {
                memset(kb[twin], 0xAB, sizeof kb[twin]), memset(vb[twin], 0xCD, sizeof vb[twin]);
                kern_kv kv = {ti, kb[twin], vb[twin], ksc[twin], vsc[twin]};
                (twin ? kern_kv_store_ref : kern_kv_store)(&kv, k, vv, N, 3, &as); /* positions 3..7: rows 3, 0, 1, 2, 3 */
            }
            size_t nb = (size_t)ROWS * kvd * kern_kv_size(ti);
            CHECK(!memcmp(kb[0], kb[1], nb) && !memcmp(vb[0], vb[1], nb) &&
                      (ti != KERN_KV_Q8 || (!memcmp(ksc[0], ksc[1], sizeof ksc[0]) && !memcmp(vsc[0], vsc[1], sizeof vsc[0]))),
                  "%s kv store (%s, head %d) equals its twin", v, kern_kv_type_name(ti), hd);
            if (ti != KERN_KV_Q8) continue;
            double worst = 0; /* the last position (7) is in row 3, over the first (the ring wrapped) */
            for (int h = 0; h < NKV; h++)
                for (int i = 0; i < hd; i++) {
                    double x = vv[4 * kvd + h * hd + i], s = vsc[0][h * ROWS + 3];
                    worst = fmax(worst, fabs(x - ((int8_t *)vb[0])[(h * ROWS + 3) * hd + i] * s) / s);
                }
            CHECK(worst <= 0.5 + 1e-3, "q8 store rounds to the nearest step (worst %g steps)", worst);
            CHECK(ksc[0][0] == 0.0f && ((int8_t *)kb[0])[0] == 0, "a row of zeros (position 4, row 0) has scale 0");
        }
}

static void test_small(void) {
    float x[9] = {1, 2, 3, -1, 0, 5, 5, 2, 1};
    CHECK(kern_argmax(x, 9) == 5, "argmax takes the first maximum");
    { /* against a scan, over lengths around the eight chains, ties, NaN and signed zeros */
        float v[41];
        int ok = 1;
        for (int n = 1; n <= 41; n++)
            for (int c = 0; c < 6; c++) {
                for (int i = 0; i < n; i++) v[i] = (float)((i * 7 + c * 3) % 5) - 2.0f;
                if (c == 1) v[n - 1] = 9.0f;                 /* the maximum in the tail */
                if (c == 2) v[n / 2] = NAN;                  /* skipped */
                if (c == 3) v[0] = NAN;                      /* first: nothing beats it */
                if (c == 4) for (int i = 0; i < n; i++) v[i] = i % 2 ? 0.0f : -0.0f;
                if (c == 5) v[n - 1] = INFINITY, v[n / 3] = INFINITY;
                int scan = 0;
                for (int i = 1; i < n; i++)
                    if (v[i] > v[scan]) scan = i;
                ok &= kern_argmax(v, n) == scan;
            }
        CHECK(ok, "argmax equals a scan's first maximum (ties, NaN, signed zeros, infinities, tails)");
    }
    float sm[4] = {1, 2, 3, 4};
    kern_softmax(sm, 4);
    double s = 0;
    for (int i = 0; i < 4; i++) s += sm[i];
    CHECK(fabs(s - 1) < 1e-6 && sm[3] > sm[2], "softmax sums to 1 and keeps order");
    CHECK(fabs(sm[0] - exp(-3) / (1 + exp(-1) + exp(-2) + exp(-3))) < 1e-6, "softmax value");
    float h[3] = {2, 3, 4}, g[3] = {0, 1, -2};
    kern_swiglu(h, g, 3);
    CHECK(h[0] == 0.0f && fabs(h[1] - 3 / (1 + exp(-1))) < 1e-6 && fabs(h[2] - 4 * -2 / (1 + exp(2))) < 1e-6,
          "swiglu values");
    float h2[3] = {2, 3, 4}, g2[3] = {0, 1, -2};
    kern_geglu(h2, g2, 3);
    double c = sqrt(2 / 3.14159265358979323846), ge1 = 0.5 * (1 + tanh(c * (1 + 0.044715))), ge2 = -0.5 * 2 * (1 + tanh(c * (-2 - 0.044715 * 8)));
    CHECK(h2[0] == 0.0f && fabs(h2[1] - 3 * ge1) < 1e-6 && fabs(h2[2] - 4 * ge2) < 1e-6, "geglu values");
    float sc[3] = {0, 30, -1e6};
    kern_softcap(sc, 3, 30.0f);
    CHECK(sc[0] == 0.0f && fabs(sc[1] - 30 * tanh(1.0)) < 1e-5 && fabs(sc[2] + 30) < 1e-5, "softcap values");
}

/* kern_exp: within 2 ulp of e^x over its whole range, its clamps, NaN; and the variant's softmax
 * and SwiGLU equal the twins bit for bit at every length around a vector's (special values too). */
static void test_exp_ops(const char *variant) {
    double worst = 0;
    for (float x = -86.0f; x <= 88.7f; x = nextafterf(x, INFINITY) + 1e-4f * fabsf(x)) {
        double want = exp((double)x), got = kern_exp(x), ulp = (double)nextafterf((float)want, INFINITY) - (float)want;
        double e = fabs(got - want) / ulp;
        if (e > worst) worst = e;
    }
    CHECK(worst <= 2.0, "kern_exp is %g ulp from e^x", worst);
    CHECK(kern_exp(-87.0f) == 0.0f && isinf(kern_exp(89.0f)) && isnan(kern_exp(NAN)) && kern_exp(0.0f) == 1.0f,
          "kern_exp's clamps");
    static float a[1100], b[1100], h1[1100], h2[1100];
    int bad = 0;
    for (int n = 1; n <= 1100; n += n < 40 ? 1 : 353) {
        for (int i = 0; i < n; i++) a[i] = b[i] = (float)(rand() % 20000 - 10000) / 100.0f;
        if (n > 5) a[3] = b[3] = -INFINITY, a[4] = b[4] = 0.0f, a[5] = b[5] = -0.0f;
        kern_softmax(a, n);
        kern_softmax_ref(b, n);
        if (memcmp(a, b, (size_t)n * sizeof *a)) bad++;
        for (int i = 0; i < n; i++) h1[i] = h2[i] = (float)(rand() % 2000) / 100.0f, a[i] = b[i] * 300 - 150;
        if (n > 3) a[0] = NAN, a[1] = INFINITY, a[2] = -INFINITY, a[3] = 100.0f;
        memcpy(b, a, (size_t)n * sizeof *a);
        kern_swiglu(h1, a, (size_t)n);
        kern_swiglu_ref(h2, a, (size_t)n);
        if (memcmp(h1, h2, (size_t)n * sizeof *h1)) bad++;
        for (int i = 0; i < n; i++) h1[i] = h2[i] = (float)(rand() % 2000) / 100.0f - 10.0f, a[i] = b[i] / 20;
        if (n > 3) a[0] = NAN, a[1] = INFINITY, a[2] = -INFINITY, a[3] = 100.0f;
        kern_geglu(h1, a, (size_t)n);
        kern_geglu_ref(h2, a, (size_t)n);
        if (memcmp(h1, h2, (size_t)n * sizeof *h1)) bad++;
    }
    CHECK(bad == 0, "%s: softmax, swiglu or geglu differs from its twin in %d cases", variant, bad);
    /* GeGLU as g / (1 + e^(-2z)) against 0.5 g (1 + tanh(z)) in double, over Gemma's activations' range */
    double gw = 0;
    for (float v = -12.0f; v <= 12.0f; v += 0.00731f) {
        float one = 1.0f, vv = v;
        kern_geglu(&one, &vv, 1);
        double z = sqrt(2 / 3.14159265358979323846) * (v + 0.044715 * (double)v * v * v), want = 0.5 * v * (1 + tanh(z));
        double e = fabs(one - want) / (fabs(want) + 1e-6);
        if (e > gw) gw = e;
    }
    CHECK(gw < 2e-6, "%s: geglu is %g (relative) from the tanh formula", variant, gw);
}

/* What mins mean, apart from the kernels: a Q4 matrix built from chosen nibbles u (0..15), scales and
 * mins reads back as u * scale + min (kern_mat_at), and the twin's product is within float rounding of
 * a double-precision sum over those weights (the kernels are held to the twin by test_matmul). */
static void test_mins(void) {
    enum { D = 20, K = 96, G = 32 };
    uint8_t q[32 * K / 2];
    float sc[32 * 3], mn[32 * 3], x[2 * K], y[2 * D];
    memset(q, 0x88, sizeof q);
    int u[D][K], bad = 0;
    for (int o = 0; o < 32; o++)
        for (int g = 0; g < 3; g++) sc[kern_packed_index(o, g, 3)] = 0.01f * (1 + o + g), mn[kern_packed_index(o, g, 3)] = -0.05f * (1 + g) + 0.003f * o;
    for (int o = 0; o < D; o++)
        for (int kk = 0; kk < K; kk++) u[o][kk] = (o * 7 + kk * 5) % 16, kern_q4_put(q, o, kk, K, u[o][kk] - 8);
    kern_mat m = {.w = q, .scales = sc, .type = KERN_Q4, .group = G, .scale_type = KERN_F32, .mins = mn};
    for (int o = 0; o < D; o++)
        for (int kk = 0; kk < K; kk++) {
            size_t at = kern_packed_index(o, kk / G, 3);
            bad += kern_mat_at(&m, o, kk, K) != (float)u[o][kk] * sc[at] + mn[at];
        }
    CHECK(bad == 0, "q4 with mins: %d weights are not u * scale + min", bad);
    fill(x, 2 * K);
    kern_matmul_ref(y, D, x, &m, 2, D, K, 0, D);
    double worst = 0;
    for (int r = 0; r < 2; r++)
        for (int o = 0; o < D; o++) {
            double sum = 0, mag = 0;
            for (int kk = 0; kk < K; kk++) {
                double p = (double)x[r * K + kk] * kern_mat_at(&m, o, kk, K);
                sum += p, mag += fabs(p);
            }
            double e = fabs(y[r * D + o] - sum) / mag;
            if (e > worst) worst = e;
        }
    CHECK(worst < 1e-5, "q4 with mins: the twin is %g (relative to the sum of magnitudes) from the exact product", worst);
}

/* test_matmul again with the stack 32 bytes further down: the kernels' stack blocks are 32-byte
 * aligned, so whether one is also 64-byte aligned depends on the caller; a 512-bit aligned load from
 * one crashed `etch bench` once while this test, its stack then 64-byte aligned, passed. */
static void test_matmul_shifted(const char *variant, int exact) {
    volatile char *pad = alloca(32);
    pad[0] = 0;
    test_matmul(variant, exact);
}

/* A long prompt's prefill, every weight type, against the twin bit for bit: x [150, 1100] is 660 KB,
 * more than the float tiles take in one block of rows (x_rows_per_block), so the rows run in two
 * blocks, each over several blocks of k steps; 40 outputs are a pair of panels and a part of one.
 * The last row alone (in the second block when batched) must equal its batched result. */
static void test_matmul_long_prompt(const char *variant) {
    enum { N = 150, D = 40, K = 1100 };
    float *x = malloc((size_t)N * K * sizeof *x), *wf = malloc((size_t)D * K * sizeof *wf);
    float *y = malloc((size_t)N * D * sizeof *y), *r = malloc((size_t)N * D * sizeof *r);
    void *w = malloc((size_t)48 * K * sizeof(float)), *sc = malloc((size_t)48 * K * sizeof(float)),
         *mn = malloc((size_t)48 * K * sizeof(float));
    fill(x, (size_t)N * K);
    fill(wf, (size_t)D * K);
    for (int wt = 0; wt < WT_COUNT; wt++) {
        kern_mat m = make_weights(w, sc, mn, wf, D, K, wt, 32, KERN_F16);
        kern_matmul(y, D, x, &m, N, D, K, 0, D);
        kern_matmul_ref(r, D, x, &m, N, D, K, 0, D);
        CHECK(memcmp(y, r, sizeof(float) * N * D) == 0, "%s %s: a %d-row prefill differs from the twin (%g)", variant,
              wt_names[wt], N, max_err(y, r, (size_t)N * D));
        kern_matmul(r, D, x + (size_t)(N - 1) * K, &m, 1, D, K, 0, D);
        CHECK(memcmp(r, y + (size_t)(N - 1) * D, sizeof(float) * D) == 0, "%s %s: the last row alone differs", variant,
              wt_names[wt]);
    }
    free(x), free(wf), free(y), free(r), free(w), free(sc), free(mn);
}

/* Weight-only Q4 on AMX-BF16 tiles at a prefill's shapes: 150 rows (two chunks of split activations
 * and part of a third, six rows left to the FMA tiles), k = 1024 (four widened blocks), groups of 32
 * and 128, f16 and two-level scales. Every row within the exact products' bound; output ranges (as
 * threads split them) the same bits; a tile's rows the same bits whatever the other rows of the call
 * (rows 16..31 alone); the six rows left over the twin's bits. */
static void test_q4_amx_bf16(const char *variant) {
    enum { N = 150, D = 40, K = 1024 };
    float *x = malloc((size_t)N * K * sizeof *x), *wf = malloc((size_t)D * K * sizeof *wf);
    float *y = malloc((size_t)N * D * sizeof *y), *r = malloc((size_t)N * D * sizeof *r);
    void *w = malloc((size_t)48 * K * sizeof(float)), *sc = malloc((size_t)48 * K * sizeof(float)),
         *mn = malloc((size_t)48 * K * sizeof(float));
    float *fsc = malloc((size_t)48 * K * sizeof *fsc), *fmn = malloc((size_t)48 * K * sizeof *fmn);
    uint16_t *sd = malloc((size_t)48 * K * sizeof *sd), *md = malloc((size_t)48 * K * sizeof *md);
    fill(x, (size_t)N * K);
    fill(wf, (size_t)D * K);
    for (int i = 0; i < 4; i++) {
        kern_mat m = make_weights(w, sc, mn, wf, D, K, KERN_Q4, i % 2 ? 128 : 32, KERN_F16);
        if (i >= 2) make_two_level(&m, D, K, sc, sd, mn, md, fsc, fmn);
        CHECK(!kern_matmul_exact(&m, N, K), "%s: Q4 with groups of %d not on the AMX-BF16 tiles", variant, m.group);
        kern_matmul(y, D, x, &m, N, D, K, 0, D);
        double q = q4_exact_ratio(y, x, &m, N, D, K);
        CHECK(q <= 1.0, "%s q4 groups of %d: %g of the exact products' bound", variant, m.group, q);
        printf("  %s: q4, %d rows, groups of %d: at most %.3g of the exact products' bound\n", variant, N, m.group, q);
        memset(r, 0, (size_t)N * D * sizeof *r);
        kern_matmul(r, D, x, &m, N, D, K, 16, D);
        kern_matmul(r, D, x, &m, N, D, K, 0, 16);
        CHECK(memcmp(y, r, (size_t)N * D * sizeof *y) == 0, "%s q4 groups of %d: output ranges differ", variant, m.group);
        kern_matmul(r, D, x + (size_t)16 * K, &m, 16, D, K, 0, D);
        CHECK(memcmp(r, y + (size_t)16 * D, (size_t)16 * D * sizeof *y) == 0, "%s q4 groups of %d: rows 16..31 alone differ",
              variant, m.group);
        kern_matmul_ref(r, D, x + (size_t)144 * K, &m, 6, D, K, 0, D);
        CHECK(memcmp(r, y + (size_t)144 * D, (size_t)6 * D * sizeof *y) == 0, "%s q4 groups of %d: the last six rows "
              "differ from the twin", variant, m.group);
    }
    free(x), free(wf), free(y), free(r), free(w), free(sc), free(mn), free(fsc), free(fmn), free(sd), free(md);
}

/* Prefill and decode of every weight type on a thread whose stack is 96 KiB (musl gives threads 128
 * KiB, and a session runs part of each forward call on its caller's thread): the kernels' large blocks
 * (99 KiB for the weight-only matmul) live in kern_scratch. Before they did, this crashed. */
static void *small_stack_matmuls(void *arg) {
    enum { N = 17, D = 64, K = 520 };
    int *bad = arg;
    float *x = malloc(N * K * sizeof *x), *wf = malloc(D * K * sizeof *wf), *y = malloc(N * D * sizeof *y),
          *r = malloc(N * D * sizeof *r);
    void *w = malloc(D * K * sizeof(float)), *sc = malloc(D * K * sizeof(float)), *mn = malloc(D * K * sizeof(float));
    fill(x, N * K);
    fill(wf, D * K);
    for (int wt = 0; wt < WT_COUNT; wt++)
        for (int n = 1; n <= N; n += N - 1) { /* decode, and prefill with widened blocks */
            kern_mat m = make_weights(w, sc, mn, wf, D, K, wt, 32, KERN_F32);
            kern_matmul(y, D, x, &m, n, D, K, 0, D);
            kern_matmul_ref(r, D, x, &m, n, D, K, 0, D);
            *bad += memcmp(y, r, (size_t)n * D * sizeof *y) != 0;
        }
    free(x), free(wf), free(y), free(r), free(w), free(sc), free(mn);
    return NULL;
}

static void test_small_stack(const char *variant) {
    pthread_attr_t attr;
    pthread_t t;
    int bad = 0;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 96 * 1024);
    CHECK(pthread_create(&t, &attr, small_stack_matmuls, &bad) == 0, "a thread with a 96 KiB stack");
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
    CHECK(bad == 0, "%s: %d matmuls on a 96 KiB stack differ from the twin", variant, bad);
}

int main(void) {
    const char *v = kern_init();
    printf("kernels: %s\n", v);
    test_quantize_roundtrip();
    test_mins();
    test_quantize_x();
    test_quantize_x_twin();
    int simd = strcmp(v, "portable") != 0;
    test_matmul(v, simd); /* with FMA hardware: equal to the fmaf twin bit for bit */
    test_matmul_shifted(v, simd);
    if (simd) test_matmul_long_prompt(v);
    if (strstr(v, "amx")) test_q4_amx_bf16(v);
    test_small_stack(v);
    test_matmul_int(v, 1);
    if (strstr(v, "amx")) { /* the zmm vpdpbusd tiles too, and the weight-only Q4 tiles AMX-BF16 replaces */
        test_matmul_int(kern_limit(KERN_NO_AMX), 1);
        test_matmul(kern_limit(KERN_NO_AMX), 1);
    }
    if (strstr(v, "vnni") || strstr(v, "amx")) test_matmul_int(kern_limit(KERN_NO_VNNI), 1); /* the AVX2 integer tiles too */
    if (strstr(v, "vbmi") || strstr(v, "amx")) test_matmul(kern_limit(KERN_NO_VBMI), 1); /* the Q4 GEMV without VBMI too */
    if (strstr(v, "avx512")) { /* the 256-bit float tiles too, and the ymm vpdpbusd where the CPU has it */
        const char *narrow = kern_limit(KERN_NO_AVX512);
        test_matmul(narrow, 1);
        test_matmul_long_prompt(narrow);
        if (strstr(narrow, "vnni")) test_matmul_int(narrow, 1);
        test_attention(); /* the 256-bit attention */
        test_kv_store(narrow);
        test_exp_ops(narrow); /* the 8-lane softmax, SwiGLU and GeGLU */
    }
    kern_limit(KERN_PORTABLE);
    test_matmul("portable", 0);
    test_matmul_int("portable", 1);
    kern_limit(KERN_BEST);
    test_conversions();
    test_rmsnorm();
    test_rope();
    test_attention();
    test_kv_store(v);
    test_small();
    test_exp_ops(v);
    return check_done();
}
