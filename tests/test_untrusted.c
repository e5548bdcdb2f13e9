/* What a stranger's input may cost (the untrusted-input issue): tokenizing grows linearly with the
 * text, a session's work can be cancelled mid-tokenization, mid-prefill and mid-decode and the session
 * then generates as a fresh one does, a memory budget refuses sessions past it, limits refuse prompts
 * and requests before any work, numeric edges (a temperature whose scaled logits overflow, non-finite
 * logits) give greedy tokens or a clear error, and more threads than processors are capped. */
#define _POSIX_C_SOURCE 200809L
#include "stories.h"

#include "model/model.h"
#include "runtime/runtime.h"

#include <math.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The least CPU time of three encodings of text[n]. */
static double encode_cost(const etch_tokenizer *t, const char *text, size_t n) {
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        int32_t *ids, n_ids;
        etch_error err;
        double t0 = cpu_seconds();
        etch_status st = etch_tokenizer_encode(t, text, n, 0, &ids, &n_ids, &err);
        double dt = cpu_seconds() - t0;
        CHECK(st == ETCH_OK, "encode: %s", err.message);
        if (st == ETCH_OK) etch_free(ids);
        best = dt < best ? dt : best;
    }
    return best;
}

/* A 10x longer input must not cost 100x (quadratic): the bound is 30x, with room for the heap's log
 * factor and a cache level left behind. Ratios of CPU time in one run, the least of three each. */
static void test_linear_tokenizing(void) {
    char path[1100];
    snprintf(path, sizeof path, "%s/qwen3/tokenizer.json", tokenizers_dir());
    etch_tokenizer *t;
    etch_error err;
    if (!check_record(etch_tokenizer_open(path, &t, &err) == ETCH_OK, "open", __FILE__, __LINE__, "%s", err.message))
        return;
    static const char *units[] = {"The quick brown fox jumps over the lazy dog. ", "0101010101", "a"};
    size_t big = 200000;
    char *buf = malloc(big + 64);
    for (size_t u = 0; u < sizeof units / sizeof *units; u++) {
        size_t len = strlen(units[u]), n = 0;
        while (n + len <= big) memcpy(buf + n, units[u], len), n += len;
        double small = encode_cost(t, buf, n / 10), large = encode_cost(t, buf, n);
        printf("tokenizing '%.12s...': %zu bytes %.2f ms, %zu bytes %.2f ms: %.1fx\n", units[u], n / 10, small * 1e3, n,
               large * 1e3, large / small);
        CHECK(large / small < 30, "'%s' x10 costs %.1fx (quadratic would be 100x)", units[u], large / small);
    }
    free(buf);
    etch_tokenizer_close(t);
}

/* Cancels the session once the observer has seen `after` forward calls. */
typedef struct cancel_at {
    etch_session *s;
    int calls, after;
} cancel_at;
static void count_calls(void *user, int layer, int site, const float *x, int n, int k) {
    (void)layer, (void)x, (void)n, (void)k;
    cancel_at *c = user;
    if (site == MODEL_SITE_OUTPUT && ++c->calls == c->after) etch_session_cancel(c->s);
}

typedef struct spinner {
    etch_session *s;
    int stop;
} spinner;
static void *spin_cancel(void *arg) {
    spinner *sp = arg;
    while (!__atomic_load_n(&sp->stop, __ATOMIC_RELAXED)) {
        etch_session_cancel(sp->s);
        struct timespec d = {0, 200000};
        nanosleep(&d, NULL);
    }
    return NULL;
}

static void test_cancel(void) {
    const char *path = export_stories("untrusted-8.etch", 8, 0);
    etch_program *p;
    etch_session *s;
    etch_error err;
    if (!path || etch_program_open(path, &p, &err) != ETCH_OK || etch_session_new(p, &s, &err) != ETCH_OK) {
        CHECK(0, "setup");
        return;
    }
    char prompt[4096] = "";
    for (int i = 0; i < 20; i++) strcat(prompt, "Once upon a time there was a little girl. ");
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = 20;
    int32_t fresh[20], n;
    CHECK(etch_generate(s, prompt, &cfg, NULL, NULL) == ETCH_OK, "%s", etch_session_error(s));
    memcpy(fresh, etch_session_generated_ids(s, &n), sizeof fresh);
    int n_prompt = (int)etch_session_stats(s)->prompt_tokens;

    /* Mid-prefill, at a known chunk: after three forward calls of 8 tokens. */
    cancel_at c = {s, 0, 3};
    rt_set_observer(s, count_calls, &c);
    etch_status st = etch_generate(s, prompt, &cfg, NULL, NULL);
    rt_set_observer(s, NULL, NULL);
    char want[96];
    snprintf(want, sizeof want, "after 24 of %d tokens", n_prompt);
    CHECK(st == ETCH_ERR_CANCELLED && strstr(etch_session_error(s), want), "cancelled mid-prefill: %d %s", st,
          etch_session_error(s));
    CHECK(etch_session_stats(s)->stop_reason == 4 && etch_session_stats(s)->generated_tokens == 0, "stats say cancelled");
    CHECK(etch_generate(s, prompt, &cfg, NULL, NULL) == ETCH_OK &&
              memcmp(etch_session_generated_ids(s, &n), fresh, sizeof fresh) == 0 && n == 20,
          "after a cancel the session generates what a fresh one does");

    /* Mid-decode: the observer cancels at the fifth forward call after prefill's chunks; generation
     * ends normally with what it had, stop reason 4. */
    int chunks = (n_prompt + 7) / 8;
    c = (cancel_at){s, 0, chunks + 5};
    rt_set_observer(s, count_calls, &c);
    st = etch_generate(s, prompt, &cfg, NULL, NULL);
    rt_set_observer(s, NULL, NULL);
    const etch_stats *ss = etch_session_stats(s);
    CHECK(st == ETCH_OK && ss->stop_reason == 4 && ss->generated_tokens == 6 &&
              memcmp(etch_session_generated_ids(s, &n), fresh, 6 * sizeof *fresh) == 0,
          "cancelled mid-decode: status %d, stop %d, %lld tokens", st, ss->stop_reason, (long long)ss->generated_tokens);

    /* A request made while no call runs is dropped: the next call starts afresh. */
    etch_session_cancel(s);
    CHECK(etch_generate(s, prompt, &cfg, NULL, NULL) == ETCH_OK && etch_session_stats(s)->stop_reason == 0,
          "a stale cancel does not stop the next call");

    /* From another thread, at whatever point it lands: cancelled, then usable. */
    cfg.prefill = ETCH_PREFILL_SEQUENTIAL;
    spinner sp = {s, 0};
    pthread_t th;
    pthread_create(&th, NULL, spin_cancel, &sp);
    int cancelled = 0;
    for (int i = 0; i < 20 && !cancelled; i++) {
        st = etch_generate(s, prompt, &cfg, NULL, NULL);
        cancelled = st == ETCH_ERR_CANCELLED || etch_session_stats(s)->stop_reason == 4;
    }
    __atomic_store_n(&sp.stop, 1, __ATOMIC_RELAXED);
    pthread_join(th, NULL);
    CHECK(cancelled, "a cancel from another thread stops the session (%s)", etch_session_error(s));
    cfg.prefill = ETCH_PREFILL_AUTO;
    CHECK(etch_generate(s, prompt, &cfg, NULL, NULL) == ETCH_OK &&
              memcmp(etch_session_generated_ids(s, &n), fresh, sizeof fresh) == 0,
          "usable after a cancel from another thread");

    /* etch_prefill checks it too. */
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = 1 + i;
    c = (cancel_at){s, 0, 2};
    rt_set_observer(s, count_calls, &c);
    CHECK(etch_prefill(s, ids, 64, 0, 0, NULL, 0) == ETCH_ERR_CANCELLED && strstr(etch_session_error(s), "16 of 64"),
          "etch_prefill cancelled: %s", etch_session_error(s));
    rt_set_observer(s, NULL, NULL);
    etch_session_free(s);
    etch_program_close(p);
}

static void test_memory_budget(void) {
    const char *path = export_stories("untrusted-budget.etch", 0, 0);
    etch_program *p;
    etch_error err;
    if (!path || etch_program_open(path, &p, &err) != ETCH_OK) {
        CHECK(0, "setup");
        return;
    }
    int64_t before = etch_memory_in_use();
    etch_session *a, *b;
    CHECK(etch_session_new(p, &a, &err) == ETCH_OK, "%s", err.message);
    int64_t one = etch_session_memory_bytes(a);
    const etch_method_meta *m = etch_program_meta(p);
    CHECK(one >= m->kv_cache_bytes && etch_memory_in_use() == before + one, "a session counts %lld bytes (KV %lld)",
          (long long)one, (long long)m->kv_cache_bytes);
    CHECK(etch_set_memory_budget(one + one / 2) == ETCH_OK, "set the budget");
    etch_status st = etch_session_new(p, &b, &err);
    CHECK(st == ETCH_ERR_LIMIT && strstr(err.message, "memory budget") && strstr(err.message, "MiB"),
          "a second session past the budget is refused: %s", err.message);
    etch_session_free(a);
    CHECK(etch_session_new(p, &b, &err) == ETCH_OK, "after freeing one, it fits: %s", err.message);
    etch_session_free(b);
    CHECK(etch_memory_in_use() == before, "every byte given back");
    CHECK(etch_set_memory_budget(-1) == ETCH_ERR_ARG, "a negative budget is refused");
    etch_set_memory_budget(0);
    etch_program_close(p);
}

static void test_limits_and_numbers(void) {
    const char *path = export_stories("untrusted.etch", 0, 0);
    etch_program *p;
    etch_session *s;
    etch_error err;
    if (!path || etch_program_open(path, &p, &err) != ETCH_OK || etch_session_new(p, &s, &err) != ETCH_OK) {
        CHECK(0, "setup");
        return;
    }
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = 16;
    int32_t greedy[16], n;
    CHECK(etch_generate(s, "Once upon a time", &cfg, NULL, NULL) == ETCH_OK, "greedy");
    memcpy(greedy, etch_session_generated_ids(s, &n), sizeof greedy);

    /* Limits: refused before any work, with what was asked and what is allowed. */
    etch_limits lim = {10, 0, 0};
    CHECK(etch_session_set_limits(s, &lim) == ETCH_OK, "set limits");
    CHECK(etch_generate(s, "Once upon a time", &cfg, NULL, NULL) == ETCH_ERR_LIMIT &&
              strstr(etch_session_error(s), "16 bytes") && strstr(etch_session_error(s), "at most 10") &&
              etch_session_stats(s)->prompt_tokens == 0,
          "prompt bytes: %s", etch_session_error(s));
    lim = (etch_limits){0, 3, 0};
    etch_session_set_limits(s, &lim);
    CHECK(etch_generate(s, "Once upon a time", &cfg, NULL, NULL) == ETCH_ERR_LIMIT &&
              strstr(etch_session_error(s), "tokens") && etch_session_stats(s)->n_chunks == 0,
          "prompt tokens: %s", etch_session_error(s));
    lim = (etch_limits){0, 0, 8};
    etch_session_set_limits(s, &lim);
    CHECK(etch_generate(s, "Once upon a time", &cfg, NULL, NULL) == ETCH_ERR_LIMIT &&
              strstr(etch_session_error(s), "at most 8"),
          "new tokens: %s", etch_session_error(s));
    lim = (etch_limits){-1, 0, 0};
    CHECK(etch_session_set_limits(s, &lim) == ETCH_ERR_ARG, "negative limits refused");
    etch_session_set_limits(s, NULL);

    /* A temperature whose scaled logits overflow samples greedily (it was the last id, every time). */
    cfg.temperature = 1e-38f;
    CHECK(etch_generate(s, "Once upon a time", &cfg, NULL, NULL) == ETCH_OK &&
              memcmp(etch_session_generated_ids(s, &n), greedy, sizeof greedy) == 0,
          "temperature 1e-38 is greedy");
    cfg.temperature = 0;

    /* More threads than processors: capped. */
    etch_session *many;
    CHECK(etch_session_new_threads(p, 256, &many, &err) == ETCH_OK, "%s", err.message);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(etch_session_threads(many) <= online, "256 threads asked, %d run on %ld processors", etch_session_threads(many),
          online);
    etch_session_free(many);
    etch_session_free(s);
    etch_program_close(p);

    /* Non-finite logits: a program whose final norm weights are NaN (its data is not under the
     * header's checksum) gives an error naming the position, not a stream of one id. */
    const char *bad = export_stories("untrusted-nan.etch", 0, 0);
    CHECK(bad && etch_program_open(bad, &p, &err) == ETCH_OK, "open");
    etch_program_info info;
    etch_program_info_get(p, &info);
    uint64_t off = 0, bytes = 0;
    for (int32_t i = 0; i < info.n_tensors; i++) {
        etch_tensor_info t;
        if (etch_program_tensor(p, i, &t) == ETCH_OK && !strcmp(t.name, "output_norm.weight"))
            off = t.offset, bytes = t.nbytes;
    }
    etch_program_close(p);
    CHECK(off && bytes, "found output_norm.weight");
    FILE *f = fopen(bad, "r+b");
    float nan = NAN;
    for (uint64_t i = 0; f && i < bytes / 4; i++) {
        fseek(f, (long)(off + 4 * i), SEEK_SET);
        fwrite(&nan, 4, 1, f);
    }
    if (f) fclose(f);
    CHECK(etch_program_open(bad, &p, &err) == ETCH_OK && etch_session_new(p, &s, &err) == ETCH_OK, "%s", err.message);
    etch_status st = etch_generate(s, "Once upon a time", &cfg, NULL, NULL);
    CHECK(st == ETCH_ERR_NUMERIC && strstr(etch_session_error(s), "position") && strstr(etch_session_error(s), "not finite"),
          "NaN logits: %d %s", st, etch_session_error(s));
    etch_session_free(s);
    etch_program_close(p);
}

int main(void) {
    test_linear_tokenizing();
    test_cancel();
    test_memory_budget();
    test_limits_and_numbers();
    return check_done();
}
