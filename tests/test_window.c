/* Sliding-window attention and the hybrid KV cache.
 *
 * A synthetic Gemma-3 (six layers: five with a window of 16 keys, one global; one KV head, so two
 * threads split attention by rows or by query heads rather than by KV heads) is exported with
 * forward calls of at most 1, 7, 15, 16, 17 and 64 tokens. Each program keeps rings of
 * 16 + max_seq_len - 1 rows in its windowed layers, so the rings rotate differently in each; prompts
 * shorter than, equal to and several times longer than the window must still give the same logits
 * at every position, bit for bit (keys are summed in position order whatever the ring's rotation),
 * and the same 32 greedy tokens after them. llama.cpp's agreement on the same weights is checked by
 * the conformance test; here the chunking and the ring are.
 *
 * Also: rewinding inside what a ring still holds gives the same logits again, rewinding past it is
 * refused with a message, Mistral's and Qwen2's config.json windows are read, and how threads split
 * decode (query heads, claimed matmul calls) does not change a bit. */
#include "check.h"
#include "etch.h"

#include <string.h>

#define WINDOW 16
#define CTX 256
#define N_GEN 32
/* REQUIRE for the test functions: records the failure and leaves the function. */
#define NEED(cond, ...)                                                                     \
    do {                                                                                    \
        if (!check_record(!!(cond), #cond, __FILE__, __LINE__, __VA_ARGS__)) return;        \
    } while (0)

static char tok_mistral[1100], tmp[1024];

/* Logits of every prompt position (chunks of max_seq_len) into all[n, vocab], then N_GEN greedy
 * tokens into gen, on a session of `threads` threads. */
static int run_threads(etch_program *p, int threads, const int32_t *ids, int n, float *all, int32_t *gen) {
    const etch_method_meta *m = etch_program_meta(p);
    etch_session *s;
    etch_error err;
    if (etch_session_new_threads(p, threads, &s, &err) != ETCH_OK) return 0;
    int ok = 1, pos = 0;
    float *scratch = malloc((size_t)m->max_seq_len * m->vocab_size * sizeof *scratch);
    while (ok && pos < n) {
        int c = n - pos < m->max_seq_len ? n - pos : m->max_seq_len;
        ok = etch_forward(s, ids + pos, c, pos, scratch, 1) == ETCH_OK;
        if (ok) memcpy(all + (size_t)pos * m->vocab_size, scratch, (size_t)c * m->vocab_size * sizeof *all);
        pos += c;
    }
    const float *last = all + (size_t)(n - 1) * m->vocab_size;
    for (int i = 0; i < N_GEN && ok; i++) {
        int best = 0;
        for (int v = 1; v < m->vocab_size; v++)
            if (last[v] > last[best]) best = v;
        gen[i] = best;
        ok = etch_forward(s, &gen[i], 1, pos++, scratch, 0) == ETCH_OK;
        last = scratch;
    }
    if (!ok) fprintf(stderr, "forward failed: %s\n", etch_session_error(s));
    free(scratch);
    etch_session_free(s);
    return ok;
}

static int run(etch_program *p, const int32_t *ids, int n, float *all, int32_t *gen) {
    return run_threads(p, 2, ids, n, all, gen);
}

/* n random ids of the vocabulary above its first three (special) ones. */
static void random_ids(int32_t *ids, int n, int vocab) {
    uint64_t r = 12345;
    for (int i = 0; i < n; i++) r = r * 6364136223846793005ull + 1442695040888963407ull, ids[i] = (int32_t)(3 + (r >> 33) % (vocab - 3));
}

static void test_chunk_sizes(const char *hf) {
    static const int seqs[] = {1, 7, WINDOW - 1, WINDOW, WINDOW + 1, 4 * WINDOW};
    enum { N_SEQ = sizeof seqs / sizeof *seqs };
    static const int lens[] = {5, WINDOW, 3 * WINDOW + 2, 150};
    etch_program *progs[N_SEQ];
    etch_error err;
    for (int i = 0; i < N_SEQ; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/gemma3-seq%d.etch", tmp, seqs[i]);
        etch_export_options o = {CTX, seqs[i], NULL, NULL, NULL, NULL, NULL, NULL};
        if (etch_export_hf(hf, path, &o, &err) != ETCH_OK || etch_program_open(path, &progs[i], &err) != ETCH_OK) {
            CHECK(0, "export with max_seq_len %d: %s", seqs[i], err.message);
            return;
        }
        const etch_method_meta *m = etch_program_meta(progs[i]);
        /* a K and a V row of the program's cache type (q8: a byte per value and a scale per head) */
        int64_t width = !strcmp(m->kv_type, "f32") ? 4 * m->head_dim : !strcmp(m->kv_type, "f16") ? 2 * m->head_dim
                                                                                                : m->head_dim + 4;
        int64_t ring = (int64_t)WINDOW + seqs[i] - 1, row = 2LL * m->n_kv_heads * width;
        CHECK(m->sliding_window == WINDOW && m->n_window_layers == 5 && m->layer_window[5] == 0,
              "window %d in %d layers", m->sliding_window, m->n_window_layers);
        CHECK(m->kv_cache_bytes == (5 * ring + CTX) * row && m->kv_cache_full_bytes == 6LL * CTX * row,
              "max_seq_len %d: KV cache %lld bytes (full: %lld)", seqs[i], (long long)m->kv_cache_bytes,
              (long long)m->kv_cache_full_bytes);
    }
    const etch_method_meta *m = etch_program_meta(progs[0]);
    size_t vocab = (size_t)m->vocab_size;
    int32_t ids[150], gen0[N_GEN], gen[N_GEN];
    random_ids(ids, 150, (int)vocab);
    float *ref = malloc(150 * vocab * sizeof *ref), *all = malloc(150 * vocab * sizeof *all);
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        int n = lens[li];
        if (!run(progs[0], ids, n, ref, gen0)) {
            CHECK(0, "sequential run of %d tokens", n);
            continue;
        }
        for (int i = 1; i < N_SEQ; i++) {
            if (!run(progs[i], ids, n, all, gen)) {
                CHECK(0, "run with max_seq_len %d", seqs[i]);
                continue;
            }
            CHECK(memcmp(ref, all, (size_t)n * vocab * sizeof *ref) == 0,
                  "prompt of %d tokens: logits with chunks of %d differ from one token at a time", n, seqs[i]);
            CHECK(memcmp(gen0, gen, sizeof gen) == 0, "prompt of %d tokens: greedy tokens with chunks of %d differ", n,
                  seqs[i]);
        }
    }

    /* Rewinding: positions 0..149 written with chunks of 64, rings of 79 rows hold 71..149. */
    etch_program *p = progs[N_SEQ - 1];
    etch_session *s;
    NEED(etch_session_new(p, &s, &err) == ETCH_OK, "%s", err.message);
    float *lg = malloc(64 * vocab * sizeof *lg);
    run(progs[0], ids, 150, ref, gen0);
    for (int pos = 0; pos < 150; pos += 64) etch_forward(s, ids + pos, 150 - pos < 64 ? 150 - pos : 64, pos, lg, 1);
    CHECK(etch_forward(s, ids + 140, 10, 140, lg, 1) == ETCH_OK, "rewind to 140: %s", etch_session_error(s));
    CHECK(memcmp(lg, ref + 140 * vocab, 10 * vocab * sizeof *lg) == 0, "logits after a rewind inside the ring");
    CHECK(etch_forward(s, ids + 60, 10, 60, lg, 0) == ETCH_ERR_INPUT && strstr(etch_session_error(s), "sliding-window"),
          "rewind past the ring is refused: %s", etch_session_error(s));
    CHECK(etch_forward(s, ids, 10, 0, lg, 1) == ETCH_OK && memcmp(lg, ref, 10 * vocab * sizeof *lg) == 0,
          "starting again at 0 after a refused rewind");
    etch_session_free(s);
    free(lg), free(ref), free(all);
    for (int i = 0; i < N_SEQ; i++) etch_program_close(progs[i]);
}

/* Decode with one KV head and a long enough context for attention to run over the pool: the two
 * threads split the query heads (each reads all of the head's keys). Heads of 256 values make the
 * global layer's attention that large from 256 keys (model.c's MM_PARALLEL_MIN). The logits of
 * every position, one token per call, must equal one thread's and those of chunks of 64 (which
 * split rows), and so must the greedy tokens after them. */
static void test_query_head_split(void) {
    enum { N = 300, CTX_LONG = 512 };
    char hf[1200], path[1300];
    snprintf(hf, sizeof hf, "%s/gemma3-hd256-hf", tmp);
    etch_synth_options so = {"gemma3", "tiny", 6, 64, 128, 4, 1, 256, 1024, 7, 0.125f, tok_mistral, "hf", "f32", WINDOW};
    etch_error err;
    NEED(etch_synth(&so, hf, &err) == ETCH_OK, "synth: %s", err.message);
    etch_program *one = NULL, *chunks = NULL;
    snprintf(path, sizeof path, "%s/gemma3-hd256-seq1.etch", tmp);
    etch_export_options o = {CTX_LONG, 1, NULL, NULL, NULL, NULL, NULL, NULL};
    NEED(etch_export_hf(hf, path, &o, &err) == ETCH_OK && etch_program_open(path, &one, &err) == ETCH_OK, "%s",
         err.message);
    snprintf(path, sizeof path, "%s/gemma3-hd256-seq64.etch", tmp);
    o.max_seq_len = 64;
    if (etch_export_hf(hf, path, &o, &err) != ETCH_OK || etch_program_open(path, &chunks, &err) != ETCH_OK) {
        CHECK(0, "%s", err.message);
        etch_program_close(one);
        return;
    }
    size_t vocab = (size_t)etch_program_meta(one)->vocab_size, bytes = N * vocab * sizeof(float);
    int32_t ids[N], gen_ref[N_GEN], gen[N_GEN];
    random_ids(ids, N, (int)vocab);
    float *ref = malloc(bytes), *all = malloc(bytes);
    CHECK(run_threads(one, 1, ids, N, ref, gen_ref), "one thread, one token per call");
    CHECK(run_threads(one, 2, ids, N, all, gen) && !memcmp(ref, all, bytes) && !memcmp(gen_ref, gen, sizeof gen),
          "two threads, one token per call: the logits and greedy tokens of one thread");
    CHECK(run_threads(chunks, 2, ids, N, all, gen) && !memcmp(ref, all, bytes) && !memcmp(gen_ref, gen, sizeof gen),
          "two threads, chunks of 64: the logits and greedy tokens of one token per call");
    free(ref), free(all);
    etch_program_close(one), etch_program_close(chunks);
}

/* Decode's integer-dot and float matmuls, and attention's KV heads: each worker starts on an even
 * share of the four-panel calls (of the heads) and takes calls from the back of another's share once
 * its own is done (model.c, claim). A Qwen3 of two layers whose feed-forward has 97 panels (a last
 * call of one panel), exported one token per call, as f32 and quantized to 8da4w and 8da8w, must
 * give one thread's logits at every position and its greedy tokens on two and on three threads
 * (three workers: more than one share to take from). */
static void test_decode_claims(void) {
    enum { N = 40 };
    char hf[1200], f32[1300], q[1300];
    snprintf(hf, sizeof hf, "%s/qwen3-claims-hf", tmp);
    etch_synth_options so = {"qwen3", "tiny", 2, 512, 97 * 16, 8, 4, 64, 256, 11, 0.125f, tok_mistral, "hf", "f32", 0};
    etch_error err;
    NEED(etch_synth(&so, hf, &err) == ETCH_OK, "synth: %s", err.message);
    snprintf(f32, sizeof f32, "%s/qwen3-claims.etch", tmp);
    etch_export_options o = {256, 1, NULL, NULL, NULL, NULL, NULL, NULL};
    NEED(etch_export_hf(hf, f32, &o, &err) == ETCH_OK, "export: %s", err.message);
    static const char *schemes[] = {"f32", "8da4w", "8da8w"};
    for (int i = 0; i < 3; i++) {
        snprintf(q, sizeof q, "%s/qwen3-claims-%s.etch", tmp, schemes[i]);
        etch_quantize_options qo = {.scheme = schemes[i]};
        etch_program *p = NULL;
        if ((i && etch_quantize(f32, q, &qo, &err) != ETCH_OK) || etch_program_open(i ? q : f32, &p, &err) != ETCH_OK) {
            CHECK(0, "%s: %s", schemes[i], err.message);
            continue;
        }
        size_t vocab = (size_t)etch_program_meta(p)->vocab_size, bytes = N * vocab * sizeof(float);
        int32_t ids[N], gen_ref[N_GEN], gen[N_GEN];
        random_ids(ids, N, (int)vocab);
        float *ref = malloc(bytes), *all = malloc(bytes);
        CHECK(run_threads(p, 1, ids, N, ref, gen_ref), "%s, one thread", schemes[i]);
        for (int threads = 2; threads <= 3; threads++)
            CHECK(run_threads(p, threads, ids, N, all, gen) && !memcmp(ref, all, bytes) &&
                      !memcmp(gen_ref, gen, sizeof gen),
                  "%s, %d threads, one token per call: the logits and greedy tokens of one thread", schemes[i],
                  threads);
        free(ref), free(all);
        etch_program_close(p);
    }
}

/* Appends keys (JSON text) to config.json's object; the keys must not be there already. */
static int set_config(const char *dir, const char *json_tail) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *c = check_read_file(path, NULL);
    if (!c) return 0;
    char *end = strrchr(c, '}');
    if (!end) return free(c), 0;
    *end = '\0';
    FILE *f = fopen(path, "wb");
    int ok = f && fprintf(f, "%s, %s}\n", c, json_tail) > 0;
    if (f) fclose(f);
    free(c);
    return ok;
}

static void test_other_families(void) {
    etch_error err;
    char dir[1200], out[1200];
    /* Mistral: a window on every layer. */
    snprintf(dir, sizeof dir, "%s/mistral-hf", tmp);
    etch_synth_options so = {"llama", "tiny", 3, 64, 128, 4, 2, 16, 512, 5, 0.125f, tok_mistral, "hf", "f32", 0};
    NEED(etch_synth(&so, dir, &err) == ETCH_OK, "synth: %s", err.message);
    /* cJSON keeps the first of duplicate keys, so the architecture is renamed in place. */
    char path[1300];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *c = check_read_file(path, NULL);
    NEED(c && strstr(c, "LlamaForCausalLM"), "config.json");
    char *at = strstr(c, "LlamaForCausalLM");
    FILE *f = fopen(path, "wb");
    fprintf(f, "%.*sMistralForCausalLM%s", (int)(at - c), c, at + strlen("LlamaForCausalLM"));
    fclose(f);
    free(c);
    NEED(set_config(dir, "\"sliding_window\": 8"), "config.json");
    snprintf(out, sizeof out, "%s/mistral.etch", tmp);
    etch_export_options o = {128, 5, NULL, NULL, NULL, NULL, NULL, NULL};
    NEED(etch_export_hf(dir, out, &o, &err) == ETCH_OK, "mistral export: %s", err.message);
    etch_program *p;
    NEED(etch_program_open(out, &p, &err) == ETCH_OK, "%s", err.message);
    const etch_method_meta *m = etch_program_meta(p);
    CHECK(!strcmp(m->model_type, "mistral") && m->n_window_layers == 3 && m->layer_window[0] == 8 &&
              m->layer_window[2] == 8, "mistral: %s, %d windowed layers", m->model_type, m->n_window_layers);
    /* Batched against one at a time on a prompt four windows long. */
    size_t vocab = (size_t)m->vocab_size;
    int32_t ids[40], g1[N_GEN], g2[N_GEN];
    for (int i = 0; i < 40; i++) ids[i] = 100 + 37 * i;
    float *a = malloc(40 * vocab * sizeof *a), *b = malloc(40 * vocab * sizeof *b);
    etch_export_options o1 = {128, 1, NULL, NULL, NULL, NULL, NULL, NULL};
    char out1[1300];
    snprintf(out1, sizeof out1, "%s/mistral-seq1.etch", tmp);
    etch_program *p1;
    NEED(etch_export_hf(dir, out1, &o1, &err) == ETCH_OK && etch_program_open(out1, &p1, &err) == ETCH_OK, "%s",
            err.message);
    CHECK(run(p, ids, 40, a, g1) && run(p1, ids, 40, b, g2) && memcmp(a, b, 40 * vocab * sizeof *a) == 0 &&
              memcmp(g1, g2, sizeof g1) == 0,
          "mistral: batched and sequential prefill agree");
    free(a), free(b);
    etch_program_close(p), etch_program_close(p1);

    /* Qwen2: use_sliding_window from max_window_layers on. */
    snprintf(dir, sizeof dir, "%s/qwen2-hf", tmp);
    so.arch = "qwen2";
    NEED(etch_synth(&so, dir, &err) == ETCH_OK, "synth: %s", err.message);
    NEED(set_config(dir, "\"use_sliding_window\": true, \"sliding_window\": 8, \"max_window_layers\": 1"), "config");
    snprintf(out, sizeof out, "%s/qwen2.etch", tmp);
    NEED(etch_export_hf(dir, out, &o, &err) == ETCH_OK && etch_program_open(out, &p, &err) == ETCH_OK, "qwen2: %s",
            err.message);
    m = etch_program_meta(p);
    CHECK(m->n_window_layers == 2 && m->layer_window[0] == 0 && m->layer_window[1] == 8 && m->layer_window[2] == 8,
          "qwen2: %d windowed layers", m->n_window_layers);
    etch_program_close(p);
    /* A window as large as the context is no window. */
    NEED(etch_synth(&so, dir, &err) == ETCH_OK, "synth: %s", err.message);
    NEED(set_config(dir, "\"use_sliding_window\": true, \"sliding_window\": 4096"), "config");
    NEED(etch_export_hf(dir, out, &o, &err) == ETCH_OK && etch_program_open(out, &p, &err) == ETCH_OK, "%s", err.message);
    CHECK(etch_program_meta(p)->n_window_layers == 0, "a window past the context");
    etch_program_close(p);
}

int main(void) {
    snprintf(tok_mistral, sizeof tok_mistral, "%s/mistral/tokenizer.json", tokenizers_dir());
    snprintf(tmp, sizeof tmp, "%s/window", ETCH_TEST_TMP);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tmp);
    REQUIRE(system(cmd) == 0, "mkdir %s", tmp);
    char hf[1200];
    snprintf(hf, sizeof hf, "%s/gemma3-hf", tmp);
    etch_synth_options so = {"gemma3", "tiny", 6, 64, 128, 4, 1, 16, 1024, 7, 0.125f, tok_mistral, "hf", "f32", WINDOW};
    etch_error err;
    REQUIRE(etch_synth(&so, hf, &err) == ETCH_OK, "synth: %s", err.message);
    test_chunk_sizes(hf);
    test_query_head_split();
    test_decode_claims();
    test_other_families();
    return check_done();
}
