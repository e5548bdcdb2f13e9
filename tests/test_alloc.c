/* Allocation failure: with an allocator installed through etch_set_allocator that fails its k-th
 * call, for every k from the first until an operation completes without reaching k, each operation
 * either succeeds or returns an error (never crashes), and afterwards every byte it allocated has been
 * freed. Operations: export from llama2.c, from a Hugging Face folder and from GGUF; open, session,
 * generation (batched and sequential prefill), detokenize, chat rendering; a tokenizer.json on its
 * own. The models are small so that every k can be tried (a few thousand allocations each).
 * Every error must be ETCH_ERR_NOMEM, and a failure an operation absorbs (PCRE2's optional JIT
 * compilation) must leave its result unchanged: the same output file, tokens and text. */
#include "base/base.h"
#include "check.h"
#include "etch.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

static struct {
    long calls, fail_at, live, failed;
} A;
static pthread_mutex_t A_lock = PTHREAD_MUTEX_INITIALIZER;

/* Counts calls and live blocks, and fails call number fail_at. Sessions' worker threads call it too. */
static void *counting_alloc(void *ud, void *p, size_t n) {
    (void)ud;
    pthread_mutex_lock(&A_lock);
    void *q = NULL;
    if (n == 0) {
        if (p) A.live--;
        free(p);
    } else if (++A.calls == A.fail_at) {
        A.failed = 1;
    } else {
        q = realloc(p, n);
        if (q && !p) A.live++;
    }
    pthread_mutex_unlock(&A_lock);
    return q;
}

/* What an operation produced, hashed (FNV-1a), to compare runs. */
static uint64_t sig;
static void sig_add(const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) sig = (sig ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
}
static void sig_file(const char *path) {
    size_t n = 0;
    char *d = check_read_file(path, &n);
    if (d) sig_add(d, n);
    free(d);
}

static char stories_bin[1100], stories_tok[1100], hf_dir[700], gguf[1100], tok_json[1100], out[700], prog[700];
static char calib[700], qprog[700];

static int on_token(void *user, int32_t id, const char *text, size_t len) {
    (void)user;
    sig_add(&id, sizeof id), sig_add(text, len);
    return 0;
}

static etch_status op_export_llama2c(void) {
    etch_error err;
    etch_status st = etch_export_llama2c(stories_bin, stories_tok, out, NULL, &err);
    if (!st) sig_file(out);
    return st;
}

static etch_status op_export_hf(void) {
    etch_error err;
    etch_export_options o = {64, 8, NULL, NULL, NULL, NULL, NULL, NULL};
    etch_status st = etch_export_hf(hf_dir, out, &o, &err);
    if (!st) sig_file(out);
    return st;
}

static etch_status op_export_gguf(void) {
    etch_error err;
    etch_export_options o = {64, 8, "f16", NULL, NULL, NULL, NULL, NULL};
    etch_status st = etch_export_gguf(gguf, out, &o, &err);
    if (!st) sig_file(out);
    return st;
}

static char last_error[4096];

/* a8w8 with calibration on a chat sample and a text (JSON Lines), and 8da4w with a q4 table. */
static etch_status op_quantize(void) {
    etch_error err;
    const char *files[] = {calib};
    etch_quantize_options o = {.scheme = "a8w8", .calib_files = files, .n_calib_files = 1, .observer = "percentile",
                               .threads = 2};
    etch_status st = etch_quantize(prog, out, &o, &err);
    if (!st) sig_file(out);
    etch_quantize_options d = {.scheme = "8da4w", .qembedding = "4w"};
    if (!st) st = etch_quantize(prog, out, &d, &err);
    if (!st) sig_file(out);
    if (st) snprintf(last_error, sizeof last_error, "%s", err.message);
    return st;
}

static const char *run_path;

static etch_status op_run(void) {
    etch_error err;
    etch_program *p;
    etch_status st = etch_program_open(run_path, &p, &err);
    if (st) return snprintf(last_error, sizeof last_error, "%s", err.message), st;
    etch_session *s;
    st = etch_session_new_threads(p, 2, &s, &err);
    if (!st) {
        etch_generate_config cfg;
        etch_generate_config_default(&cfg);
        cfg.max_new_tokens = 6;
        st = etch_generate(s, "Once upon a time", &cfg, on_token, NULL);
        cfg.prefill = ETCH_PREFILL_SEQUENTIAL;
        if (!st) st = etch_generate(s, "The cat", &cfg, on_token, NULL);
        char *text = NULL;
        int32_t ids[3] = {1, 403, 407};
        if (!st) st = etch_detokenize(p, ids, 3, &text, NULL, &err);
        if (!st) sig_add(text, strlen(text));
        etch_free(text);
        etch_chat_options co = {"Be brief.", -1, "chatml"};
        if (!st) st = etch_chat_render(p, "Hi", &co, &text, &err);
        if (!st) sig_add(text, strlen(text)), etch_free(text);
        if (st) snprintf(last_error, sizeof last_error, "%s / %s", etch_session_error(s), err.message);
        etch_session_free(s);
    }
    etch_program_close(p);
    return st;
}

static etch_status op_tokenizer(void) {
    etch_error err;
    etch_tokenizer *t;
    etch_status st = etch_tokenizer_open(tok_json, &t, &err);
    if (st) return st;
    int32_t *ids = NULL, n = 0;
    const char *text = "Caf\xc3\xa9 <|im_start|>user the then";
    st = etch_tokenizer_encode(t, text, strlen(text), 0, &ids, &n, &err);
    char *back = NULL;
    if (!st) st = etch_tokenizer_decode(t, ids, n, &back, NULL, &err);
    if (!st) sig_add(ids, (size_t)n * sizeof *ids), sig_add(back, strlen(back));
    etch_free(ids), etch_free(back);
    etch_tokenizer_close(t);
    return st;
}

/* base_calloc_lines through the installed allocator: on a cache line, zeroed, one block freed by
 * base_free_lines, NULL when its one allocation fails or the size overflows. Sizes of every residue
 * mod 64 move the allocator's addresses about. */
static void lines_alloc(void) {
    long misaligned = 0, dirty = 0;
    for (size_t n = 1; n <= 200; n++) {
        A.calls = 0, A.live = 0, A.fail_at = 0;
        uint8_t *p = base_calloc_lines(n, 3);
        if (!p) {
            CHECK(0, "base_calloc_lines(%zu, 3) failed", n);
            continue;
        }
        misaligned += (uintptr_t)p % 64 != 0;
        for (size_t i = 0; i < 3 * n; i++) dirty += p[i] != 0;
        memset(p, 0xAB, 3 * n); /* the whole size is writable (ASan checks the bounds) */
        CHECK(A.live == 1 && A.calls == 1, "base_calloc_lines(%zu): %ld blocks from %ld calls", n, A.live, A.calls);
        base_free_lines(p);
        CHECK(A.live == 0, "base_free_lines(%zu bytes) left %ld blocks", 3 * n, A.live);
    }
    CHECK(misaligned == 0, "%ld of 200 base_calloc_lines blocks are not on a 64-byte line", misaligned);
    CHECK(dirty == 0, "%ld bytes of base_calloc_lines blocks not zeroed", dirty);
    A.calls = 0, A.live = 0, A.fail_at = 1;
    CHECK(base_calloc_lines(100, 4) == NULL && A.live == 0, "base_calloc_lines with its allocation failing");
    A.fail_at = 0;
    CHECK(base_calloc_lines(SIZE_MAX / 2, 4) == NULL && A.live == 0, "base_calloc_lines with an overflowing size");
    base_free_lines(NULL);
    printf("base_calloc_lines: 200 sizes on 64-byte lines, zeroed, freed; failures return NULL\n");
}

/* Fails the k-th allocation for k = 1, 2, ... until the operation no longer reaches k. */
static void every_k(const char *name, etch_status (*op)(void)) {
    A.fail_at = 0, A.calls = 0, A.live = 0, sig = 0;
    etch_status clean = op();
    long total = A.calls;
    uint64_t clean_sig = sig;
    CHECK(clean == ETCH_OK && A.live == 0, "%s without failures: status %d (%s), %ld blocks left", name, clean,
          last_error, A.live);
    long errors = 0, nomem = 0, absorbed = 0, leaks = 0, changed = 0;
    for (long k = 1;; k++) {
        A.calls = 0, A.live = 0, A.failed = 0, A.fail_at = k, sig = 0;
        etch_status st = op();
        if (!A.failed) break; /* the operation made fewer than k allocations: every k is done */
        if (st == ETCH_OK) absorbed++, changed += sig != clean_sig;
        else errors++, nomem += st == ETCH_ERR_NOMEM;
        if (A.live != 0 && leaks++ < 5) CHECK(0, "%s: failing allocation %ld leaves %ld blocks", name, k, A.live);
    }
    CHECK(leaks == 0, "%s: %ld of the failure points leak", name, leaks);
    CHECK(nomem == errors, "%s: %ld of %ld errors are not ETCH_ERR_NOMEM", name, errors - nomem, errors);
    CHECK(changed == 0, "%s: %ld absorbed failures changed the result", name, changed);
    CHECK(errors + absorbed == total, "%s: %ld failure points tried of %ld allocations", name, errors + absorbed, total);
    printf("%s: %ld allocations; failing each in turn: %ld errors (all ETCH_ERR_NOMEM: %s), %ld absorbed with the "
           "same result, no crash, %s\n",
           name, total, errors, nomem == errors ? "yes" : "no", absorbed, leaks ? "LEAKS" : "nothing leaked");
    fflush(stdout);
}

int main(void) {
    snprintf(stories_bin, sizeof stories_bin, "%s/stories260K/stories260K.bin", models_dir());
    snprintf(stories_tok, sizeof stories_tok, "%s/stories260K/tok512.bin", models_dir());
    snprintf(hf_dir, sizeof hf_dir, "%s/alloc-hf", ETCH_TEST_TMP);
    snprintf(gguf, sizeof gguf, "%s/fuzz/seeds/gguf/gemma3.gguf", ETCH_SOURCE_DIR);
    snprintf(tok_json, sizeof tok_json, "%s/fuzz/seeds/tokenizer_json/tokenizer.json", ETCH_SOURCE_DIR);
    snprintf(out, sizeof out, "%s/alloc-out.etch", ETCH_TEST_TMP);
    snprintf(prog, sizeof prog, "%s/alloc-stories.etch", ETCH_TEST_TMP);
    etch_error err;
    /* Inputs, made with the C library's allocator. */
    etch_export_options o = {128, 16, NULL, "chatml", NULL, NULL, NULL, NULL};
    REQUIRE(etch_export_llama2c(stories_bin, stories_tok, prog, &o, &err) == ETCH_OK, "%s", err.message);
    etch_synth_options so = {"qwen3", "tiny", 1, 16, 32, 2, 1, 8, 64, 3, 0.1f, tok_json, "hf", "f32", 0};
    REQUIRE(etch_synth(&so, hf_dir, &err) == ETCH_OK, "synth: %s", err.message);
    snprintf(calib, sizeof calib, "%s/alloc-calib.jsonl", ETCH_TEST_TMP);
    snprintf(qprog, sizeof qprog, "%s/alloc-a8w8.etch", ETCH_TEST_TMP);
    FILE *cf = fopen(calib, "w");
    REQUIRE(cf, "write %s", calib);
    fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story.\"}, {\"role\": \"assistant\", "
          "\"content\": \"Once upon a time, there was a cat.\"}]}\n\"The dog ran to the park.\"\n", cf);
    fclose(cf);
    const char *files[] = {calib};
    etch_quantize_options qo = {.scheme = "a8w8", .calib_files = files, .n_calib_files = 1};
    REQUIRE(etch_quantize(prog, qprog, &qo, &err) == ETCH_OK, "%s", err.message);

    etch_set_allocator(counting_alloc, NULL);
    every_k("export llama2.c", op_export_llama2c);
    every_k("export Hugging Face", op_export_hf);
    every_k("export GGUF", op_export_gguf);
    run_path = prog;
    every_k("open, session, generate, detokenize, chat", op_run);
    every_k("quantize: a8w8 calibrated on chat and text, 8da4w", op_quantize);
    run_path = qprog;
    every_k("open, session, generate on an a8w8 program", op_run);
    every_k("tokenizer.json encode and decode", op_tokenizer);
    lines_alloc();
    etch_set_allocator(NULL, NULL);
    /* Back on malloc: everything still works. */
    CHECK(op_run() == ETCH_OK, "after restoring the C library's allocator");
    unlink(out);
    return check_done();
}
