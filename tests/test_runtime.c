/* The runtime's contract: forward-call input errors (with method metadata and inputs), context
 * limits, sampling options, stats (valid JSON, ordered times), bad files. */
#include "stories.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <unistd.h>

static int stop_after;
static int stop_cb(void *user, int32_t token, const char *text, size_t len) {
    (void)user, (void)token, (void)text, (void)len;
    return --stop_after <= 0;
}

static void copy_file(const char *from, const char *to, long keep, long flip) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    int c;
    long i = 0;
    while ((c = fgetc(in)) != EOF && (keep < 0 || i < keep)) {
        fputc(i == flip ? c ^ 0x10 : c, out);
        i++;
    }
    fclose(in);
    fclose(out);
}

/* Exports stories260K with a context (0: the model's) and opens a session on it. */
static int open_stories(const char *name, int32_t ctx, etch_program **p, etch_session **s) {
    const char *path = export_stories(name, 0, ctx);
    etch_error err;
    int ok = path && etch_program_open(path, p, &err) == ETCH_OK && etch_session_new(*p, s, &err) == ETCH_OK;
    CHECK(ok, "setup of %s", name);
    return ok;
}

static void test_forward_errors(void) {
    etch_program *p;
    etch_session *s;
    if (!open_stories("rt.etch", 0, &p, &s)) return;
    int32_t toks[200];
    for (int i = 0; i < 200; i++) toks[i] = 1 + i;
    CHECK(etch_forward(s, toks, 200, 0, NULL, 0) == ETCH_ERR_INPUT, "n above the bound");
    const char *msg = etch_session_error(s);
    CHECK(strstr(msg, "max_seq_len = 128") && strstr(msg, "method_meta") && strstr(msg, "max_context_len=512") &&
              strstr(msg, "inputs: tokens int32[1, 200] = [1, 2, 3") && strstr(msg, "start_pos = 0"),
          "message shows metadata and inputs:\n%s", msg);
    CHECK(etch_forward(s, toks, 0, 0, NULL, 0) == ETCH_ERR_INPUT, "n = 0");
    CHECK(etch_forward(s, toks, 10, 505, NULL, 0) == ETCH_ERR_INPUT &&
              strstr(etch_session_error(s), "positions 505..514"),
          "past the context: %s", etch_session_error(s));
    CHECK(etch_forward(s, toks, 1, -1, NULL, 0) == ETCH_ERR_INPUT, "negative start_pos");
    /* Found by fuzz_forward: the message's last position overflowed int (UBSan). */
    CHECK(etch_forward(s, toks, 7, INT32_MAX, NULL, 0) == ETCH_ERR_INPUT &&
              strstr(etch_session_error(s), "positions 2147483647..2147483653"),
          "start_pos INT32_MAX: %s", etch_session_error(s));
    int32_t bad[3] = {1, 512, 5};
    CHECK(etch_forward(s, bad, 3, 0, NULL, 0) == ETCH_ERR_INPUT &&
              strstr(etch_session_error(s), "token id 512 at index 1") && strstr(etch_session_error(s), "[1, 512, 5]"),
          "id out of range: %s", etch_session_error(s));
    bad[1] = -3;
    CHECK(etch_forward(s, bad, 3, 0, NULL, 0) == ETCH_ERR_INPUT, "negative id");
    CHECK(etch_forward(s, NULL, 3, 0, NULL, 0) == ETCH_ERR_INPUT, "NULL tokens");
    CHECK(etch_forward(s, toks, 128, 0, NULL, 0) == ETCH_OK, "n at the bound works: %s", etch_session_error(s));

    /* Sampling parameters out of range are refused before any work. */
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.top_p = 0.0f;
    CHECK(etch_generate(s, "x", &cfg, NULL, NULL) == ETCH_ERR_ARG && strstr(etch_session_error(s), "top_p"), "top_p 0");
    etch_generate_config_default(&cfg);
    cfg.temperature = -1.0f;
    CHECK(etch_generate(s, "x", &cfg, NULL, NULL) == ETCH_ERR_ARG, "negative temperature");
    etch_generate_config_default(&cfg);
    CHECK(etch_generate(s, "bad \xff byte", &cfg, NULL, NULL) == ETCH_ERR_TEXT &&
              strstr(etch_session_error(s), "offset 4"),
          "invalid UTF-8 prompt: %s", etch_session_error(s));
    cfg.add_bos = 0;
    CHECK(etch_generate(s, "", &cfg, NULL, NULL) == ETCH_ERR_ARG, "empty prompt without BOS");

    /* Sampling: reproducible for a seed; top-k 1 and a tiny top-p are greedy. */
    int32_t greedy[40], a[40], b[40], n;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = 40;
    etch_generate(s, "Once upon a time", &cfg, NULL, NULL);
    memcpy(greedy, etch_session_generated_ids(s, &n), sizeof greedy);
    cfg.temperature = 1.0f;
    cfg.seed = 7;
    etch_generate(s, "Once upon a time", &cfg, NULL, NULL);
    memcpy(a, etch_session_generated_ids(s, &n), sizeof a);
    CHECK(n == 40, "40 sampled tokens (%d)", n);
    etch_generate(s, "Once upon a time", &cfg, NULL, NULL);
    memcpy(b, etch_session_generated_ids(s, &n), sizeof b);
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed, same tokens");
    CHECK(memcmp(a, greedy, sizeof a) != 0, "temperature 1 departs from greedy somewhere in 40 tokens");
    cfg.top_k = 1;
    etch_generate(s, "Once upon a time", &cfg, NULL, NULL);
    CHECK(memcmp(etch_session_generated_ids(s, &n), greedy, sizeof greedy) == 0, "top-k 1 is greedy");
    cfg.top_k = 0;
    cfg.top_p = 1e-6f;
    etch_generate(s, "Once upon a time", &cfg, NULL, NULL);
    CHECK(memcmp(etch_session_generated_ids(s, &n), greedy, sizeof greedy) == 0, "top-p 1e-6 is greedy");
    /* top-k with top-p: each sampled token is among the 20 most probable at its step, and inside the
     * 0.9 nucleus of those 20 (the mass of the better ones, renormalized over the 20, is below 0.9),
     * checked against the logits of the whole sequence prefilled again. */
    cfg.top_k = 20;
    cfg.top_p = 0.9f;
    CHECK(etch_generate(s, "Once upon a time", &cfg, NULL, NULL) == ETCH_OK, "top-k with top-p runs");
    int32_t np, seq[300];
    const int32_t *pid = etch_session_prompt_ids(s, &np), *gid = etch_session_generated_ids(s, &n);
    memcpy(seq, pid, (size_t)np * sizeof *seq);
    memcpy(seq + np, gid, (size_t)n * sizeof *seq);
    int V = etch_program_meta(p)->vocab_size, outside = 0;
    float *all = malloc((size_t)(np + n) * V * sizeof *all);
    CHECK(etch_prefill(s, seq, np + n, 0, 0, all, 1) == ETCH_OK, "prefill again: %s", etch_session_error(s));
    for (int i = 0; i < n; i++) {
        const float *l = all + (size_t)(np - 1 + i) * V;
        float pick = l[gid[i]], top[20];
        int better = 0;
        for (int v = 0; v < V; v++) better += l[v] > pick;
        if (better >= 20) {
            outside++;
            continue;
        }
        for (int j = 0; j < 20; j++) top[j] = -INFINITY; /* the 20 largest logits, descending */
        for (int v = 0; v < V; v++)
            for (int j = 0; j < 20; j++)
                if (l[v] > top[j]) {
                    memmove(top + j + 1, top + j, (size_t)(19 - j) * sizeof *top);
                    top[j] = l[v];
                    break;
                }
        double z = 0, above = 0;
        for (int j = 0; j < 20; j++) z += exp((double)top[j] - top[0]);
        for (int j = 0; j < 20 && top[j] > pick; j++) above += exp((double)top[j] - top[0]) / z;
        if (above >= 0.9 + 1e-4) outside++;
    }
    CHECK(n == 40 && outside == 0, "%d of %d tokens outside top-k 20 / top-p 0.9", outside, n);
    free(all);
    cfg.top_p = 1e-6f;
    etch_generate(s, "Once upon a time", &cfg, NULL, NULL);
    CHECK(memcmp(etch_session_generated_ids(s, &n), greedy, sizeof greedy) == 0, "top-k 20 with top-p 1e-6 is greedy");

    /* The callback can stop generation. */
    etch_generate_config_default(&cfg);
    stop_after = 3;
    CHECK(etch_generate(s, "Once", &cfg, stop_cb, NULL) == ETCH_OK && etch_session_stats(s)->generated_tokens == 3 &&
              etch_session_stats(s)->stop_reason == 3,
          "callback stop");

    /* Stats: the observer line is valid JSON with every field, and the times are in order. */
    cfg.max_new_tokens = 20;
    etch_generate(s, "Once upon a time", &cfg, NULL, NULL);
    char line[2048];
    etch_stats_observer_line(etch_session_stats(s), line, sizeof line);
    CHECK(strncmp(line, "PyTorchObserver {", 17) == 0, "prefix: %s", line);
    cJSON *j = cJSON_Parse(line + strlen("PyTorchObserver "));
    CHECK(j != NULL, "stats JSON parses: %s", line);
    static const char *order[] = {"model_load_start_ms", "model_load_end_ms", "inference_start_ms",
                                  "token_encode_end_ms", "model_execution_start_ms", "prompt_eval_end_ms",
                                  "first_token_ms", "inference_end_ms"};
    static const char *other[] = {"prompt_tokens", "generated_tokens", "model_execution_end_ms",
                                  "aggregate_sampling_time_ms", "SCALING_FACTOR_UNITS_PER_SECOND"};
    double prev = 0;
    for (size_t i = 0; j && i < sizeof order / sizeof *order; i++) {
        cJSON *v = cJSON_GetObjectItem(j, order[i]);
        CHECK(cJSON_IsNumber(v), "field %s", order[i]);
        if (v) {
            CHECK(v->valuedouble >= prev, "%s (%.0f) comes before the field preceding it (%.0f)", order[i],
                  v->valuedouble, prev);
            prev = v->valuedouble;
        }
    }
    for (size_t i = 0; j && i < sizeof other / sizeof *other; i++)
        CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, other[i])), "field %s", other[i]);
    if (j) {
        CHECK(cJSON_GetObjectItem(j, "prompt_tokens")->valueint == 5 &&
                  cJSON_GetObjectItem(j, "generated_tokens")->valueint == 20,
              "token counts");
        double exec_end = cJSON_GetObjectItem(j, "model_execution_end_ms")->valuedouble;
        double exec_start = cJSON_GetObjectItem(j, "model_execution_start_ms")->valuedouble;
        CHECK(exec_start <= exec_end && exec_end <= cJSON_GetObjectItem(j, "inference_end_ms")->valuedouble,
              "model execution lies inside inference");
        CHECK(cJSON_GetObjectItem(j, "SCALING_FACTOR_UNITS_PER_SECOND")->valueint == 1000, "scaling factor");
    }
    cJSON_Delete(j);
    char report[2048];
    etch_stats_report(etch_session_stats(s), report, sizeof report);
    CHECK(strstr(report, "\tPrompt Tokens: 5 Generated Tokens: 20\n") && strstr(report, "Time to first generated token:") &&
              strstr(report, "Sampling time over 25 tokens:") && strstr(report, "Generated 20 tokens:"),
          "report:\n%s", report);
    etch_session_free(s);
    etch_program_close(p);
}

static void test_context(void) {
    etch_program *p;
    etch_session *s;
    if (!open_stories("rt-ctx16.etch", 16, &p, &s)) return;
    CHECK(etch_program_meta(p)->max_seq_len == 16, "the bound is clamped to the context (%d)",
          etch_program_meta(p)->max_seq_len);
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    const char *longp = "Once upon a time, there was a little girl named Lily. She loved to play outside.";
    CHECK(etch_generate(s, longp, &cfg, NULL, NULL) == ETCH_ERR_CONTEXT &&
              strstr(etch_session_error(s), "context holds 16"),
          "prompt past the context: %s", etch_session_error(s));
    CHECK(etch_session_stats(s)->n_chunks == 0, "refused before any forward call");
    cfg.max_new_tokens = 100;
    CHECK(etch_generate(s, "Once upon a time", &cfg, NULL, NULL) == ETCH_OK, "%s", etch_session_error(s));
    CHECK(etch_session_stats(s)->generated_tokens == 16 - 5 + 1 && etch_session_stats(s)->stop_reason == 2,
          "generation stops when the context is full (%lld tokens)", (long long)etch_session_stats(s)->generated_tokens);
    etch_session_free(s);
    etch_program_close(p);
}

static void test_bad_files(void) {
    char model[512], tok[512], bad[512], out[512];
    snprintf(model, sizeof model, "%s/stories260K/stories260K.bin", models_dir());
    snprintf(tok, sizeof tok, "%s/stories260K/tok512.bin", models_dir());
    snprintf(bad, sizeof bad, "%s/bad-input.bin", ETCH_TEST_TMP);
    snprintf(out, sizeof out, "%s/never-written.etch", ETCH_TEST_TMP);
    unlink(out);
    etch_error err;
    copy_file(model, bad, 500000, -1);
    CHECK(etch_export_llama2c(bad, tok, out, NULL, &err) == ETCH_ERR_FORMAT && strstr(err.message, "truncated"),
          "truncated checkpoint: %s", err.message);
    copy_file(model, bad, -1, 2); /* dim 64 -> 80: sizes no longer add up */
    CHECK(etch_export_llama2c(bad, tok, out, NULL, &err) == ETCH_ERR_FORMAT, "corrupt header: %s", err.message);
    copy_file(tok, bad, 3000, -1);
    CHECK(etch_export_llama2c(model, bad, out, NULL, &err) == ETCH_ERR_FORMAT && strstr(err.message, "truncated at token"),
          "truncated tokenizer: %s", err.message);
    CHECK(etch_export_llama2c(model, "/nonexistent/tok.bin", out, NULL, &err) == ETCH_ERR_IO &&
              strstr(err.message, "/nonexistent/tok.bin"),
          "missing tokenizer: %s", err.message);
    CHECK(access(out, F_OK) != 0, "nothing written after failed exports");
    etch_export_options o = {0, -1, NULL, NULL, NULL, NULL, NULL, NULL};
    CHECK(etch_export_llama2c(model, tok, out, &o, &err) == ETCH_ERR_ARG, "negative bound refused");

    const char *good = export_stories("rt-good.etch", 0, 0);
    etch_program *p;
    CHECK(good != NULL, "export");
    if (!good) return;
    copy_file(good, bad, -1, 300);
    CHECK(etch_program_open(bad, &p, &err) == ETCH_ERR_FORMAT && strstr(err.message, "checksum"), "flip: %s",
          err.message);
    copy_file(good, bad, 100000, -1);
    CHECK(etch_program_open(bad, &p, &err) == ETCH_ERR_FORMAT && strstr(err.message, "truncated"), "truncated: %s",
          err.message);
    CHECK(etch_program_open(model, &p, &err) == ETCH_ERR_FORMAT && strstr(err.message, "not an etch program"),
          "a checkpoint is not a program: %s", err.message);
    CHECK(p == NULL, "no handle on failure");
    etch_session_free(NULL);
    etch_program_close(NULL);
    etch_decoder_free(NULL);
}

/* The public greedy pick: generation's own (kern_argmax, tested against a scan in test_kernels). */
static void test_argmax(void) {
    const float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, NAN, 2.0f};
    CHECK(etch_argmax(l, 6) == 1, "etch_argmax: the first of two equal maxima, NaN skipped");
    CHECK(etch_argmax(l + 2, 3) == 1 && etch_argmax(l, 0) == 0 && etch_argmax(l, -3) == 0, "etch_argmax: offsets, n < 1");
}

int main(void) {
    test_argmax();
    test_forward_errors();
    test_context();
    test_bad_files();
    return check_done();
}
