/* Quantized programs (etch_quantize): stories260K with 8w keeps the reference greedy output for its
 * first 50 tokens; every scheme gives bit-identical logits in batched and one-token prefill and in
 * a static program; the file holds what the scheme says (types, scales, tying); bad requests fail
 * with a clear error and leave no file. */
#include "stories.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

enum { LEN = 200 };

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static const char *tmp_path(const char *name) {
    static char out[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(out[k], sizeof out[k], "%s/%s", ETCH_TEST_TMP, name);
    return out[k];
}

static const char *quantize(const char *in, const char *name, const char *scheme, int group, const char *qembd) {
    const char *out = tmp_path(name);
    etch_quantize_options o = {scheme, group, qembd};
    etch_error err;
    if (etch_quantize(in, out, &o, &err) != ETCH_OK) {
        fprintf(stderr, "quantize %s -> %s: %s\n", scheme, name, err.message);
        return NULL;
    }
    return out;
}

/* The dtype of a tensor by name, or NULL. */
static const char *tensor_dtype(const etch_program *p, const char *name) {
    etch_program_info info;
    etch_program_info_get(p, &info);
    for (int32_t i = 0; i < info.n_tensors; i++) {
        etch_tensor_info t;
        if (etch_program_tensor(p, i, &t) == ETCH_OK && !strcmp(t.name, name)) return t.dtype;
    }
    return NULL;
}

/* Logits of every position of ids[0..LEN), one call per token, or in chunks of the program's bound. */
static int all_logits(const char *path, const int32_t *ids, int one_by_one, float *out) {
    etch_program *p;
    etch_session *s;
    etch_error err;
    if (etch_program_open(path, &p, &err) != ETCH_OK) return fprintf(stderr, "%s\n", err.message), 0;
    if (etch_session_new(p, &s, &err) != ETCH_OK) return etch_program_close(p), 0;
    int V = etch_program_meta(p)->vocab_size, step = one_by_one ? 1 : etch_program_meta(p)->max_seq_len, ok = 1;
    for (int i = 0; i < LEN && ok; i += step) {
        int n = LEN - i < step ? LEN - i : step;
        ok = etch_forward(s, ids + i, n, i, out + (size_t)i * V, 1) == ETCH_OK;
    }
    etch_session_free(s);
    etch_program_close(p);
    return ok;
}

/* Leading generated ids that equal the reference's, greedy from prompt. */
static int greedy_prefix(const char *path, const char *prompt, cJSON *want) {
    etch_program *p;
    etch_session *s;
    etch_error err;
    if (etch_program_open(path, &p, &err) != ETCH_OK || etch_session_new(p, &s, &err) != ETCH_OK) return -1;
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = cJSON_GetArraySize(want);
    int m = -1;
    if (etch_generate(s, prompt, &cfg, NULL, NULL) == ETCH_OK) {
        int32_t n;
        const int32_t *got = etch_session_generated_ids(s, &n);
        for (m = 0; m < n && m < cJSON_GetArraySize(want) && got[m] == cJSON_GetArrayItem(want, m)->valueint;) m++;
    }
    etch_session_free(s);
    etch_program_close(p);
    return m;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

int main(void) {
    const char *f32 = export_stories("q-f32.etch", 64, 0), *f32_static = export_stories("q-f32-static.etch", 1, 0);
    REQUIRE(f32 && f32_static, "export");

    /* --- the reference greedy output, 8w */
    char path[600];
    snprintf(path, sizeof path, "%s/stories260K/reference/greedy_ids.json", models_dir());
    char *json = read_text(path);
    REQUIRE(json, "cannot read %s", path);
    cJSON *ref = cJSON_Parse(json);
    REQUIRE(ref, "reference JSON");
    const char *q8 = quantize(f32, "q-8w.etch", "8w", 0, NULL);
    REQUIRE(q8, "8w");
    struct { const char *name, *prompt; } cases[] = {{"once_upon_a_time", "Once upon a time"}, {"empty", ""}};
    for (int c = 0; c < 2; c++) {
        cJSON *want = cJSON_GetObjectItem(cJSON_GetObjectItem(ref, cases[c].name), "generated_ids");
        int m8 = greedy_prefix(q8, cases[c].prompt, want), mf = greedy_prefix(f32, cases[c].prompt, want);
        printf("%s: 8w keeps %d of %d reference tokens (f32: %d)\n", cases[c].name, m8, cJSON_GetArraySize(want), mf);
        CHECK(mf == cJSON_GetArraySize(want), "the f32 program keeps all of them");
        CHECK(m8 >= 50, "8w keeps the reference greedy output for 50 tokens, %d here", m8);
    }
    cJSON_Delete(ref);
    free(json);

    /* --- every scheme: batched, one-token and static prefill give the same logits, bit for bit */
    etch_program *p;
    etch_error err;
    REQUIRE(etch_program_open(f32, &p, &err) == ETCH_OK, "%s", err.message);
    char *text = read_text(ETCH_SOURCE_DIR "/tests/data/heldout.txt");
    REQUIRE(text, "heldout.txt");
    int32_t *ids, n_ids;
    REQUIRE(etch_tokenize(p, text, strlen(text), 1, &ids, &n_ids, &err) == ETCH_OK && n_ids >= LEN, "tokens");
    int V = etch_program_meta(p)->vocab_size;
    etch_program_close(p);
    free(text);
    struct { const char *name, *scheme; int group; const char *qembd; } schemes[] = {
        {"q-8w.etch", "8w", 0, NULL},     {"q-8w-g32.etch", "8w", 32, NULL}, {"q-4w.etch", "4w", 0, NULL},
        {"q-4w-g16.etch", "4w", 16, NULL}, {"q-8w-e8.etch", "8w", 0, "8w"},  {"q-4w-e4.etch", "4w", 0, "4w"},
        {"q-8da8w.etch", "8da8w", 0, NULL}, {"q-8da4w.etch", "8da4w", 0, NULL}, {"q-8da4w-g16-e8.etch", "8da4w", 16, "8w"},
    };
    size_t bytes = (size_t)LEN * V * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes), *fl = malloc(bytes);
    REQUIRE(all_logits(f32, ids, 0, fl), "f32 logits");
    for (size_t i = 0; i < sizeof schemes / sizeof *schemes; i++) {
        const char *q = quantize(f32, schemes[i].name, schemes[i].scheme, schemes[i].group, schemes[i].qembd);
        char sname[64];
        snprintf(sname, sizeof sname, "s-%s", schemes[i].name);
        const char *qs = quantize(f32_static, sname, schemes[i].scheme, schemes[i].group, schemes[i].qembd);
        REQUIRE(q && qs, "%s", schemes[i].name);
        REQUIRE(all_logits(q, ids, 0, a) && all_logits(q, ids, 1, b) && all_logits(qs, ids, 1, c), "%s logits", q);
        CHECK(memcmp(a, b, bytes) == 0, "%s: batched and one-token prefill differ", schemes[i].name);
        CHECK(memcmp(a, c, bytes) == 0, "%s: the static program differs", schemes[i].name);
        double diff = 0, mag = 0;
        for (size_t j = 0; j < (size_t)LEN * V; j++) diff += fabs(a[j] - fl[j]), mag += fabs(fl[j]);
        printf("%-14s %7ld bytes (f32 %ld), mean |logit - f32 logit| / mean |f32 logit| = %.4f\n", schemes[i].name,
               file_size(q), file_size(f32), diff / mag);
        /* Not a copy of the float program, and not noise either. */
        CHECK(diff > 0 && diff / mag < (strstr(schemes[i].scheme, "4w") ? 0.3 : 0.03), "%s: relative logit error %g",
              schemes[i].name, diff / mag);
    }
    free(a), free(b), free(c), free(fl), free(ids);

    /* --- what the files hold */
    REQUIRE(etch_program_open(tmp_path("q-8w.etch"), &p, &err) == ETCH_OK, "%s", err.message);
    const char *dt = tensor_dtype(p, "blk.0.attn_q.weight"), *emb = tensor_dtype(p, "token_embd.weight"),
               *outw = tensor_dtype(p, "output.weight");
    CHECK(dt && !strcmp(dt, "q8") && tensor_dtype(p, "blk.0.attn_q.weight.scale"), "8w: q8 with scales (%s)", dt);
    CHECK(emb && !strcmp(emb, "f32"), "8w: the embedding table stays f32 (%s)", emb);
    CHECK(outw && !strcmp(outw, "q8") && etch_program_meta(p)->tied_embeddings == 0,
          "8w: the tied table gives the output layer its own q8 copy (%s)", outw);
    CHECK(!strcmp(tensor_dtype(p, "blk.0.attn_norm.weight"), "f32"), "norms stay f32");
    etch_program_close(p);
    REQUIRE(etch_program_open(tmp_path("q-4w-e4.etch"), &p, &err) == ETCH_OK, "%s", err.message);
    emb = tensor_dtype(p, "token_embd.weight");
    CHECK(emb && !strcmp(emb, "q4") && etch_program_meta(p)->tied_embeddings == 1 && !tensor_dtype(p, "output.weight"),
          "4w --qembedding 4w: the table is q4 and stays tied (%s)", emb);
    etch_program_close(p);
    REQUIRE(etch_program_open(tmp_path("q-8da4w-g16-e8.etch"), &p, &err) == ETCH_OK, "%s", err.message);
    dt = tensor_dtype(p, "blk.1.ffn_down.weight"), emb = tensor_dtype(p, "token_embd.weight");
    CHECK(dt && !strcmp(dt, "i4") && emb && !strcmp(emb, "q8") && etch_program_meta(p)->tied_embeddings == 1,
          "8da4w --qembedding 8w: i4 layers, a q8 table serving as the output (%s, %s)", dt, emb);
    etch_program_close(p);
    long s32 = file_size(f32), s8 = file_size(tmp_path("q-8w-e8.etch")), s4 = file_size(tmp_path("q-4w-e4.etch"));
    CHECK(s8 < s32 * 0.3 && s4 < s32 * 0.2, "sizes: f32 %ld, 8w %ld, 4w %ld", s32, s8, s4);

    /* --- bad requests: a clear error, nothing written */
    struct { const char *in, *scheme; int group; const char *qembd; etch_status want; const char *says; } bad[] = {
        {tmp_path("q-8w.etch"), "8w", 0, NULL, ETCH_ERR_UNSUPPORTED, "already q8"},
        {f32, "3w", 0, NULL, ETCH_ERR_ARG, "scheme '3w'"},
        {f32, "8w", 0, "2w", ETCH_ERR_ARG, "embedding scheme '2w'"},
        {f32, "4w", -1, NULL, ETCH_ERR_ARG, "group size -1"},
        {tmp_path("missing.etch"), "8w", 0, NULL, ETCH_ERR_IO, "missing.etch"},
    };
    const char *out = tmp_path("q-bad.etch");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        remove(out);
        etch_quantize_options o = {bad[i].scheme, bad[i].group, bad[i].qembd};
        etch_status st = etch_quantize(bad[i].in, out, &o, &err);
        CHECK(st == bad[i].want && strstr(err.message, bad[i].says), "case %zu: status %d, '%s'", i, st, err.message);
        CHECK(access(out, F_OK) != 0, "case %zu left a file", i);
    }
    etch_quantize_options same = {"8w", 0, NULL};
    CHECK(etch_quantize(f32, f32, &same, &err) == ETCH_ERR_ARG && strstr(err.message, "replace the input"),
          "in place refused: %s", err.message);
    CHECK(file_size(f32) == s32, "the input is intact");
    return check_done();
}
