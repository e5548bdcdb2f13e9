/* import: calibration of static activation ranges (a8w8). The program's own session runs the
 * calibration samples, each in batched prefill chunks (or, in generate mode, followed by greedy
 * tokens one at a time), while observers on every linear layer's input record what they see. */
#include "quantize.h"

#include "../kernels/kernels.h"
#include "../runtime/runtime.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ observers */

enum { OBS_MINMAX, OBS_MOVING, OBS_PERCENTILE, OBS_MSE };
#define HIST_BINS 2048 /* over [-range, range]; the range doubles (bins merge pairwise) to hold a value */

typedef struct observer {
    int seen;
    double lo, hi;       /* minmax: overall; moving-average: the running averages */
    double range;        /* histogram half-width (percentile, mse) */
    double *hist;        /* [HIST_BINS] or NULL */
} observer;

typedef struct calib {
    int kind, n_layers;
    observer *obs;        /* [n_layers * 4 + 1]: layer l's sites at l*4 .., the classifier's last */
    int64_t tokens, generated;
    int failed;           /* an allocation failed inside an observer */
} calib;

static int site_index(const calib *c, int layer, int site) {
    return layer == c->n_layers ? c->n_layers * 4 : layer * 4 + site;
}

static void hist_grow(observer *o, double need) {
    while (o->range < need) { /* merge bin pairs into the middle half: the range doubles */
        double merged[HIST_BINS] = {0};
        for (int i = 0; i < HIST_BINS; i++) merged[HIST_BINS / 4 + i / 2] += o->hist[i];
        memcpy(o->hist, merged, sizeof merged);
        o->range *= 2;
    }
}

static void observe(void *user, int layer, int site, const float *x, int n, int k) {
    calib *c = user;
    observer *o = &c->obs[site_index(c, layer, site)];
    if (layer == 0 && site == MODEL_SITE_QKV) c->tokens += n; /* every row passes here once */
    double lo = INFINITY, hi = -INFINITY;
    size_t count = (size_t)n * k;
    for (size_t i = 0; i < count; i++) {
        double v = x[i];
        if (v < lo) lo = v;
        if (v > hi) hi = v;
    }
    if (!(lo <= hi)) return; /* NaN: nothing to learn from this call */
    if (c->kind == OBS_MOVING && o->seen) {
        o->lo += 0.01 * (lo - o->lo), o->hi += 0.01 * (hi - o->hi);
    } else if (!o->seen || c->kind != OBS_MOVING) {
        o->lo = o->seen && o->lo < lo ? o->lo : lo;
        o->hi = o->seen && o->hi > hi ? o->hi : hi;
    }
    if (c->kind == OBS_PERCENTILE || c->kind == OBS_MSE) {
        if (!o->hist && !(o->hist = base_calloc(HIST_BINS, sizeof *o->hist))) {
            c->failed = 1;
            return;
        }
        double m = fmax(fabs(lo), fabs(hi));
        if (!o->seen) o->range = m > 0 ? exp2(ceil(log2(m))) : 1.0;
        hist_grow(o, m);
        double per = HIST_BINS / (2 * o->range);
        for (size_t i = 0; i < count; i++) {
            int b = (int)((x[i] + o->range) * per);
            o->hist[b < 0 ? 0 : b >= HIST_BINS ? HIST_BINS - 1 : b]++;
        }
    }
    o->seen = 1;
}

/* The value below which a fraction q of the histogram lies (linear inside a bin). */
static double hist_quantile(const observer *o, double q) {
    double total = 0, acc = 0, w = 2 * o->range / HIST_BINS;
    for (int i = 0; i < HIST_BINS; i++) total += o->hist[i];
    double want = q * total;
    for (int i = 0; i < HIST_BINS; i++) {
        if (acc + o->hist[i] >= want && o->hist[i] > 0) return -o->range + w * (i + (want - acc) / o->hist[i]);
        acc += o->hist[i];
    }
    return o->range;
}

/* Expected squared error of quantizing the histogram to 256 levels over [lo, hi]: rounding inside
 * (step^2 / 12 per value), the distance to the edge outside. */
static double hist_mse(const observer *o, double lo, double hi) {
    double step = (hi - lo) / 255, w = 2 * o->range / HIST_BINS, e = 0;
    for (int i = 0; i < HIST_BINS; i++) {
        if (o->hist[i] == 0) continue;
        double v = -o->range + w * (i + 0.5);
        double d = v < lo ? lo - v : v > hi ? v - hi : 0;
        e += o->hist[i] * (d * d + step * step / 12);
    }
    return e;
}

/* The observer's range [lo, hi] (zero inside) as an int8 scale and zero point. */
static void params_of(const calib *c, const observer *o, float *out) {
    double lo = o->lo, hi = o->hi;
    if (c->kind == OBS_PERCENTILE && o->hist) lo = hist_quantile(o, 1e-4), hi = hist_quantile(o, 1 - 1e-4);
    if (c->kind == OBS_MSE && o->hist) {
        double best = INFINITY, blo = lo, bhi = hi;
        for (int i = 0; i <= 100; i++) { /* shrink the range toward zero, keep the best */
            double f = 1.0 - 0.009 * i, e = hist_mse(o, lo * f, hi * f);
            if (e < best) best = e, blo = lo * f, bhi = hi * f;
        }
        lo = blo, hi = bhi;
    }
    lo = fmin(lo, 0), hi = fmax(hi, 0);
    double scale = (hi - lo) / 255;
    if (!(scale > 1e-12)) scale = 1e-12;
    double zero = round(-128 - lo / scale);
    out[0] = (float)scale;
    out[1] = (float)fmin(127, fmax(-128, zero));
}

/* ------------------------------------------------------------------ samples */

typedef struct sample_ids {
    int32_t *ids;
    int32_t n;
} sample_ids;

typedef struct samples {
    sample_ids *v;
    int32_t n, cap;
} samples;

static etch_status add_ids(samples *s, int32_t *ids, int32_t n, etch_error *err) {
    if (n == 0) {
        etch_free(ids);
        return ETCH_OK;
    }
    if (s->n == s->cap) {
        int32_t cap = s->cap ? s->cap * 2 : 16;
        sample_ids *nv = base_realloc(s->v, (size_t)cap * sizeof *nv);
        if (!nv) {
            etch_free(ids);
            return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the calibration samples");
        }
        s->v = nv, s->cap = cap;
    }
    s->v[s->n++] = (sample_ids){ids, n};
    return ETCH_OK;
}

/* Text as one sample per chunk of at most `chunk` tokens (a BOS before each when the model has one). */
static etch_status add_text(samples *s, const etch_program *p, const char *text, int32_t chunk, const char *where,
                            etch_error *err) {
    int32_t *ids, n;
    etch_status st = etch_tokenize(p, text, strlen(text), 0, &ids, &n, err);
    if (st) return base_fail(err, st, "%s: %s", where, err->message);
    int32_t bos = etch_program_meta(p)->bos_id, extra = bos >= 0;
    for (int32_t i = 0; i < n && !st; i += chunk - extra) {
        int32_t len = n - i < chunk - extra ? n - i : chunk - extra;
        int32_t *part = base_malloc((size_t)(len + extra) * sizeof *part);
        if (!part) st = base_fail(err, ETCH_ERR_NOMEM, "cannot allocate a calibration sample");
        else {
            if (extra) part[0] = bos;
            memcpy(part + extra, ids + i, (size_t)len * sizeof *part);
            st = add_ids(s, part, len + extra, err);
        }
    }
    etch_free(ids);
    return st;
}

/* A chat sample: the whole conversation in the program's template, answers included, so one prefill
 * sees the template's special tokens (and Qwen3's think block when a turn has reasoning). */
static etch_status render_chat(const etch_program *p, const cJSON *msgs, const char *where, char **out, etch_error *err) {
    const char *tpl = etch_program_meta(p)->chat_template;
    if (!rt_chat_template_known(tpl))
        return base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: chat samples need a program with a chat template (%s); this one "
                         "has %s", where, rt_chat_template_list, tpl[0] ? tpl : "none");
    int n = cJSON_GetArraySize(msgs), i = 0;
    rt_chat_turn *turns = base_malloc((size_t)(n ? n : 1) * sizeof *turns);
    if (!turns) return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate a chat sample");
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        const cJSON *c = cJSON_GetObjectItem(m, "content"), *r = cJSON_GetObjectItem(m, "role");
        const cJSON *t = cJSON_GetObjectItem(m, "reasoning_content");
        if (!cJSON_IsString(c) || !cJSON_IsString(r) ||
            (strcmp(r->valuestring, "system") && strcmp(r->valuestring, "user") && strcmp(r->valuestring, "assistant"))) {
            base_free(turns);
            return base_fail(err, ETCH_ERR_FORMAT, "%s: each message needs a role (system, user, assistant) and a "
                             "string content", where);
        }
        turns[i] = (rt_chat_turn){r->valuestring, c->valuestring, cJSON_IsString(t) ? t->valuestring : NULL};
    }
    etch_status st = rt_chat_render_turns(tpl, turns, n, 0, -1, out, err);
    base_free(turns);
    return st;
}

/* One JSON value of a calibration file: a string, {"text": ...} or {"messages": [...]}. */
static etch_status add_json_sample(samples *s, const etch_program *p, const cJSON *v, int32_t chunk, const char *where,
                                   etch_error *err) {
    const cJSON *msgs = cJSON_GetObjectItem(v, "messages"), *text = cJSON_GetObjectItem(v, "text");
    if (cJSON_IsString(v)) return add_text(s, p, v->valuestring, chunk, where, err);
    if (cJSON_IsString(text)) return add_text(s, p, text->valuestring, chunk, where, err);
    if (!cJSON_IsArray(msgs))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: a sample is a string, {\"text\": ...} or {\"messages\": [...]}", where);
    char *rendered = NULL;
    etch_status st = render_chat(p, msgs, where, &rendered, err);
    if (st) return st;
    /* the rendered conversation is one sample when it fits, else chunked like text */
    st = add_text(s, p, rendered, chunk, where, err);
    base_free(rendered);
    return st;
}

static etch_status read_samples(samples *s, const etch_program *p, const char *path, int32_t chunk, etch_error *err) {
    uint8_t *data;
    uint64_t size;
    etch_status st = base_read_file(path, &data, &size, err);
    if (st) return st;
    char *buf = base_realloc(data, (size_t)size + 1); /* NUL-terminated */
    if (!buf) {
        base_free(data);
        return base_fail(err, ETCH_ERR_NOMEM, "cannot read %s", path);
    }
    buf[size] = '\0';
    size_t bad = base_utf8_check((const uint8_t *)buf, (size_t)size);
    if (bad != (size_t)size || strlen(buf) != (size_t)size) {
        base_free(buf);
        return base_fail(err, ETCH_ERR_TEXT, "%s: calibration data is not valid UTF-8 text (byte %zu)", path,
                         bad < (size_t)size ? bad : strlen(buf));
    }
    size_t n = strlen(path);
    int jsonl = n > 6 && !strcmp(path + n - 6, ".jsonl"), json = n > 5 && !strcmp(path + n - 5, ".json");
    char where[600];
    if (!json && !jsonl) {
        snprintf(where, sizeof where, "%s", path);
        st = add_text(s, p, buf, chunk, where, err);
    } else if (json) {
        cJSON *root = cJSON_ParseWithLength(buf, size);
        if (!root || !cJSON_IsArray(root)) st = base_fail(err, ETCH_ERR_FORMAT, "%s: expected a JSON array of samples", path);
        int i = 0;
        for (const cJSON *v = root ? root->child : NULL; v && !st; v = v->next, i++) {
            snprintf(where, sizeof where, "%s: sample %d", path, i);
            st = add_json_sample(s, p, v, chunk, where, err);
        }
        cJSON_Delete(root);
    } else {
        int line = 0;
        for (char *l = buf, *e; l && *l && !st; l = e ? e + 1 : NULL) {
            e = strchr(l, '\n');
            if (e) *e = '\0';
            line++;
            if (strspn(l, " \t\r") == strlen(l)) continue;
            cJSON *v = cJSON_Parse(l);
            snprintf(where, sizeof where, "%s:%d", path, line);
            st = v ? add_json_sample(s, p, v, chunk, where, err) : base_fail(err, ETCH_ERR_FORMAT, "%s: not JSON", where);
            cJSON_Delete(v);
        }
    }
    base_free(buf);
    return st;
}

/* ------------------------------------------------------------------ the run */

/* Which special and added tokens the samples contain, named in the report. */
static void coverage(const etch_program *p, const samples *s, etch_calib_report *r) {
    int32_t V = p->meta.vocab_size;
    uint8_t *seen = base_calloc((size_t)V, 1);
    if (!seen) return;
    for (int32_t i = 0; i < s->n; i++)
        for (int32_t j = 0; j < s->v[i].n; j++) seen[s->v[i].ids[j]] = 1;
    size_t len = 0;
    for (int32_t id = 0; id < V; id++) {
        int type = p->tok.s.types[id];
        if (type != TOK_CONTROL && type != TOK_USER) continue;
        r->n_special++;
        if (seen[id]) {
            r->n_special_seen++;
            continue;
        }
        size_t plen;
        const char *piece = tok_piece(&p->tok, -1, id, 0, &plen);
        if (len + plen + 5 < sizeof r->missing) {
            len += (size_t)snprintf(r->missing + len, sizeof r->missing - len, "%s%.*s", len ? " " : "", (int)plen, piece);
        } else if (len + 4 < sizeof r->missing && !strstr(r->missing, "...")) {
            len += (size_t)snprintf(r->missing + len, sizeof r->missing - len, " ...");
        }
    }
    base_free(seen);
}

etch_status imp_calibrate(const char *path, const etch_quantize_options *o, float *params, etch_error *err) {
    static const char *kinds[] = {"minmax", "moving-average", "percentile", "mse"};
    calib c = {0};
    c.kind = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(o->observer ? o->observer : "minmax", kinds[i])) c.kind = i;
    if (c.kind < 0)
        return base_fail(err, ETCH_ERR_ARG, "observer '%s' is not one of minmax, moving-average, percentile, mse", o->observer);
    int generate = o->calib_mode && !strcmp(o->calib_mode, "generate");
    if (o->calib_mode && !generate && strcmp(o->calib_mode, "prefill"))
        return base_fail(err, ETCH_ERR_ARG, "calibration mode '%s' is not prefill or generate", o->calib_mode);
    if (o->calib_limit < 0 || o->gen_tokens < 0 || o->n_calib_files < 1 || !o->calib_files)
        return base_fail(err, ETCH_ERR_ARG, "calibration needs files, a limit >= 0 and gen_tokens >= 0");
    int32_t gen = generate ? (o->gen_tokens ? o->gen_tokens : 128) : 0;

    etch_program *p;
    etch_session *sess = NULL;
    samples sm = {0};
    etch_status st = etch_program_open(path, &p, err);
    if (st) return st;
    int32_t held = 0, ctx = p->meta.max_context_len, chunk = ctx - gen;
    if (chunk < 2) {
        etch_program_close(p);
        return base_fail(err, ETCH_ERR_ARG, "%d generated tokens leave no room in a context of %d", gen, ctx);
    }
    for (int32_t f = 0; f < o->n_calib_files && !st; f++) { /* a parse that failed for memory says so */
        unsigned failures = base_alloc_failures();
        st = base_nomem_since(read_samples(&sm, p, o->calib_files[f], chunk, err), failures, err, o->calib_files[f]);
    }
    held = sm.n; /* samples to free; the limit only shortens the run */
    if (!st && o->calib_limit && sm.n > o->calib_limit) sm.n = o->calib_limit;
    if (!st && sm.n == 0) st = base_fail(err, ETCH_ERR_ARG, "the calibration files hold no tokens");
    c.n_layers = p->meta.n_layers;
    c.obs = st ? NULL : base_calloc((size_t)c.n_layers * 4 + 1, sizeof *c.obs);
    if (!st && !c.obs) st = base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the observers");
    if (!st) st = etch_session_new_threads(p, o->threads, &sess, err);
    float *logits = st ? NULL : base_malloc((size_t)p->meta.vocab_size * sizeof *logits);
    if (!st && !logits) st = base_fail(err, ETCH_ERR_NOMEM, "cannot allocate the logits");
    if (!st) {
        etch_calib_report r = {0};
        int64_t total = 0;
        for (int32_t i = 0; i < sm.n; i++) total += sm.v[i].n + gen;
        rt_set_observer(sess, observe, &c);
        double t0 = (base_now_us() / 1000.0);
        for (int32_t i = 0; i < sm.n && !st; i++) {
            const int32_t *ids = sm.v[i].ids;
            int32_t n = sm.v[i].n, pos = n;
            /* the runtime's batched prefill: chunks of the program's bound */
            if (etch_prefill(sess, ids, n, 0, 0, generate ? logits : NULL, 0))
                st = base_fail(err, ETCH_ERR_INPUT, "calibration sample %d: %s", i, etch_session_error(sess));
            for (int32_t g = 0; g < gen && !st && pos < ctx; g++, pos++) { /* generate mode: one token per call */
                int32_t next = kern_argmax(logits, p->meta.vocab_size);
                if (etch_forward(sess, &next, 1, pos, logits, 0))
                    st = base_fail(err, ETCH_ERR_INPUT, "calibration sample %d: %s", i, etch_session_error(sess));
                c.generated++;
                int eos = 0;
                for (int32_t e = 0; e < p->meta.n_eos; e++) eos |= next == p->meta.eos_ids[e];
                if (eos) break;
            }
            if (o->progress) o->progress(o->user, "calibrating", c.tokens, total);
        }
        r.seconds = ((base_now_us() / 1000.0) - t0) / 1000.0;
        rt_set_observer(sess, NULL, NULL);
        if (!st && c.failed) st = base_fail(err, ETCH_ERR_NOMEM, "cannot allocate an observer's histogram");
        r.samples = sm.n, r.tokens = c.tokens, r.generated = c.generated;
        coverage(p, &sm, &r);
        for (int i = 0; i <= c.n_layers * 4 && !st; i++) {
            if (i < c.n_layers * 4 || c.obs[i].seen) params_of(&c, &c.obs[i], params + 2 * i);
            if (o->report_line) {
                static const char *names[] = {"q/k/v in", "out-proj in", "gate/up in", "down in"};
                char line[160];
                const float *q = params + 2 * i;
                snprintf(line, sizeof line, "%-10s %-12s observed [%10.4g, %10.4g]  scale %.4g  zero point %d",
                         i == c.n_layers * 4 ? "output" : "", i == c.n_layers * 4 ? "classifier in" : names[i % 4],
                         c.obs[i].lo, c.obs[i].hi, q[0], (int)q[1]);
                if (i < c.n_layers * 4 && i % 4 == 0) {
                    char tag[24];
                    snprintf(tag, sizeof tag, "layer %d", i / 4);
                    memcpy(line, tag, strlen(tag));
                }
                o->report_line(o->user, line);
            }
        }
        if (o->report) *o->report = r;
    }
    base_free(logits);
    etch_session_free(sess);
    for (int i = 0; c.obs && i <= c.n_layers * 4; i++) base_free(c.obs[i].hist);
    base_free(c.obs);
    for (int32_t i = 0; i < held; i++) etch_free(sm.v[i].ids);
    base_free(sm.v);
    etch_program_close(p);
    return st;
}
