/* Conversations: turns that prefill only their new part and give the tokens a fresh run on the whole
 * transcript gives; the longest common prefix reused; rewinding; stop strings across token
 * boundaries; the SHIFT policy past the context; session files; end-of-turn ids. On stories260K
 * exported with the chatml template (its tokenizer spells the markers as text) and on a synthetic
 * Qwen3 (real special tokens). A turn's reference is a fresh session fed the same ids at once: the
 * answers stay in the cache as generated, so tokenizing the transcript's text again may split a
 * boundary differently (which is why etch does not). */
#include "stories.h"

/* REQUIRE for void functions: records the failure and returns. */
#define REQUIRE_VOID(cond)                                                                  \
    do {                                                                                    \
        if (!check_record(!!(cond), #cond, __FILE__, __LINE__, "%s", "precondition")) return; \
    } while (0)

enum { N_NEW = 12 };

static etch_program *open_chatml(const char *name, int32_t ctx) {
    char model[512], tok[512], out[600];
    snprintf(model, sizeof model, "%s/stories260K/stories260K.bin", models_dir());
    snprintf(tok, sizeof tok, "%s/stories260K/tok512.bin", models_dir());
    snprintf(out, sizeof out, "%s/%s", ETCH_TEST_TMP, name);
    etch_export_options opt = {ctx, 0, NULL, "chatml", NULL, NULL, NULL, NULL};
    etch_error err;
    etch_program *p = NULL;
    if (etch_export_llama2c(model, tok, out, &opt, &err) != ETCH_OK || etch_program_open(out, &p, &err) != ETCH_OK)
        fprintf(stderr, "setup: %s\n", err.message);
    return p;
}

/* Runs a started generation to its end; the text into buf[cap]. */
static void drain(etch_session *s, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = '\0';
    for (;;) {
        int32_t tok;
        const char *t;
        size_t n;
        if (etch_generate_next(s, &tok, &t, &n) != ETCH_OK) {
            fprintf(stderr, "generate_next: %s\n", etch_session_error(s));
            return;
        }
        if (n && at + n < cap) memcpy(buf + at, t, n), at += n, buf[at] = '\0';
        if (tok < 0) return;
    }
}

/* Greedy tokens after prefilling ids[n] in a fresh session (the reference for a turn). */
static void fresh_greedy(etch_program *p, const int32_t *ids, int32_t n, int32_t *out, int count) {
    etch_session *f;
    etch_error err;
    int V = etch_program_meta(p)->vocab_size;
    float *logits = malloc((size_t)V * sizeof *logits);
    if (etch_session_new(p, &f, &err) != ETCH_OK || etch_prefill(f, ids, n, 0, 0, logits, 0) != ETCH_OK) {
        CHECK(0, "fresh prefill");
        free(logits);
        return;
    }
    for (int i = 0; i < count; i++) {
        int best = 0;
        for (int v = 1; v < V; v++) best = logits[v] > logits[best] ? v : best;
        out[i] = best;
        if (i + 1 < count) etch_forward(f, &out[i], 1, n + i, logits, 0);
    }
    free(logits);
    etch_session_free(f);
}

/* Three turns. Each turn prefills only what is new (its reused positions are the whole earlier
 * conversation, answers as generated); the cache then holds ids whose text is the rendered
 * transcript, and the answer equals a fresh session's greedy answer to those ids prefilled at once. */
static void test_turns(etch_program *p) {
    etch_session *s;
    etch_error err;
    REQUIRE_VOID(etch_session_new(p, &s, &err) == ETCH_OK);
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = N_NEW;
    static const char *users[] = {"Tell me a story about a cat.", "What did the cat eat?", "And then?"};
    etch_chat_message msgs[8] = {{"system", "You tell short stories.", NULL}};
    int n = 1;
    static char answers[3][1024];
    for (int turn = 0; turn < 3; turn++) {
        msgs[n++] = (etch_chat_message){"user", users[turn], NULL};
        int32_t cached = etch_session_position(s);
        CHECK(etch_chat_start(s, msgs, n, NULL, &cfg) == ETCH_OK, "turn %d: %s", turn, etch_session_error(s));
        const etch_stats *st = etch_session_stats(s);
        int64_t prefilled = st->prompt_tokens, reused = st->reused_tokens;
        int32_t n_prompt_ids = etch_session_position(s); /* after prefill: the whole transcript so far */
        int32_t *prompt_ids = malloc((size_t)n_prompt_ids * sizeof *prompt_ids);
        memcpy(prompt_ids, etch_session_cache_ids(s, NULL), (size_t)n_prompt_ids * sizeof *prompt_ids);
        drain(s, answers[turn], sizeof answers[turn]);
        int32_t ng, ref[N_NEW];
        const int32_t *gen = etch_session_generated_ids(s, &ng);
        CHECK(reused == cached && prefilled == n_prompt_ids - cached,
              "turn %d prefills only its new part: %lld new after %lld reused (cache held %d)", turn,
              (long long)prefilled, (long long)reused, cached);
        if (turn) CHECK(prefilled < n_prompt_ids / 2, "turn %d: %lld new tokens of %d, not the history again", turn,
                        (long long)prefilled, n_prompt_ids);
        /* the ids' text is the rendered transcript: nothing lost or added between the turns */
        char *text, *back;
        size_t back_len;
        CHECK(etch_chat_render_messages(p, msgs, n, 1, NULL, &text, &err) == ETCH_OK, "%s", err.message);
        CHECK(prompt_ids[0] == etch_program_meta(p)->bos_id, "BOS first");
        CHECK(etch_detokenize(p, prompt_ids + 1, n_prompt_ids - 1, &back, &back_len, &err) == ETCH_OK, "%s",
              err.message);
        CHECK(back_len == strlen(text) && !memcmp(back, text, back_len),
              "turn %d: the cache's text is the transcript:\n[%.*s]\n[%s]", turn, (int)back_len, back, text);
        fresh_greedy(p, prompt_ids, n_prompt_ids, ref, ng);
        CHECK(ng == N_NEW && !memcmp(gen, ref, (size_t)ng * sizeof *ref), "turn %d: the answer equals a fresh run's",
              turn);
        etch_free(text);
        etch_free(back);
        free(prompt_ids);
        msgs[n++] = (etch_chat_message){"assistant", answers[turn], NULL};
    }
    /* A conversation that does not continue the one held (an edited answer) is prefilled again from
     * where it differs: the longest common prefix is kept. */
    msgs[n - 1].content = "Something else entirely.";
    msgs[n++] = (etch_chat_message){"user", "Go on.", NULL};
    CHECK(etch_chat_start(s, msgs, n, NULL, &cfg) == ETCH_OK, "%s", etch_session_error(s));
    CHECK(etch_session_stats(s)->reused_tokens > 20, "an edited history keeps its common prefix (%lld)",
          (long long)etch_session_stats(s)->reused_tokens);
    char buf[1024];
    drain(s, buf, sizeof buf);
    etch_session_free(s);
}

static void test_reuse_rewind_stop(etch_program *p) {
    etch_session *s;
    etch_error err;
    REQUIRE_VOID(etch_session_new(p, &s, &err) == ETCH_OK);
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = 30;
    const char *prompt = "Once upon a time, there was a little girl named Lily.";
    char first[2048];
    CHECK(etch_generate_start(s, prompt, &cfg) == ETCH_OK, "%s", etch_session_error(s));
    drain(s, first, sizeof first);
    int32_t n_prompt, n, g1[30];
    etch_session_prompt_ids(s, &n_prompt);
    memcpy(g1, etch_session_generated_ids(s, &n), sizeof g1);

    /* REUSE of the same prompt: all but its last token kept, the same tokens again */
    cfg.cache = ETCH_CACHE_REUSE;
    CHECK(etch_generate(s, prompt, &cfg, NULL, NULL) == ETCH_OK, "%s", etch_session_error(s));
    CHECK(etch_session_stats(s)->reused_tokens == n_prompt - 1 && etch_session_stats(s)->prompt_tokens == 1,
          "reuse keeps %lld of %d", (long long)etch_session_stats(s)->reused_tokens, n_prompt);
    CHECK(!memcmp(etch_session_generated_ids(s, &n), g1, sizeof g1), "reused: the same tokens");
    /* A longer prompt that starts with the same text: only the rest is prefilled. */
    char longer[512];
    snprintf(longer, sizeof longer, "%s She loved to play.", prompt);
    CHECK(etch_generate(s, longer, &cfg, NULL, NULL) == ETCH_OK, "%s", etch_session_error(s));
    int64_t reused = etch_session_stats(s)->reused_tokens;
    int32_t g_long[30];
    memcpy(g_long, etch_session_generated_ids(s, &n), sizeof g_long);
    cfg.cache = ETCH_CACHE_RESET;
    CHECK(etch_generate(s, longer, &cfg, NULL, NULL) == ETCH_OK, "fresh");
    CHECK(reused >= n_prompt - 1 && !memcmp(etch_session_generated_ids(s, &n), g_long, sizeof g_long),
          "longest common prefix (%lld kept): the tokens a fresh run gives", (long long)reused);

    /* Rewind, then generate again: the first generation's tokens. */
    CHECK(etch_generate(s, prompt, &cfg, NULL, NULL) == ETCH_OK, "%s", etch_session_error(s));
    CHECK(etch_session_rewind(s, 3) == ETCH_OK && etch_session_position(s) == 3, "rewind to 3");
    CHECK(etch_session_rewind(s, 1000) == ETCH_ERR_ARG, "rewind past the cache is refused");
    cfg.cache = ETCH_CACHE_REUSE;
    CHECK(etch_generate(s, prompt, &cfg, NULL, NULL) == ETCH_OK && etch_session_stats(s)->reused_tokens == 3 &&
              !memcmp(etch_session_generated_ids(s, &n), g1, sizeof g1),
          "rewound and generated again: the same tokens");
    /* CONTINUE appends after the cache: the answer's last token first. */
    int32_t pos = etch_session_position(s);
    cfg.cache = ETCH_CACHE_CONTINUE;
    CHECK(etch_generate(s, " The end.", &cfg, NULL, NULL) == ETCH_OK &&
              etch_session_stats(s)->reused_tokens == pos && etch_session_prompt_ids(s, &n)[0] == g1[29],
          "continue: after %d cached positions, the unfed token first", pos);
    etch_session_reset(s);
    CHECK(etch_session_position(s) == 0, "reset empties the cache");

    /* Stop strings: one spanning two tokens, one that is never completed (held back, then let go). */
    cfg = (etch_generate_config){0};
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = 30;
    CHECK(etch_generate_start(s, prompt, &cfg) == ETCH_OK, "start");
    char pieces[30][64];
    size_t plen[30], at = 0;
    for (int i = 0; i < 30; i++) {
        int32_t tok;
        const char *t;
        size_t l;
        etch_generate_next(s, &tok, &t, &l);
        memcpy(pieces[i], t, l < 63 ? l : 63), plen[i] = l < 63 ? l : 63, pieces[i][plen[i]] = '\0';
    }
    int k = 5; /* the last character of piece k and the first of piece k+1 */
    while (k < 28 && (plen[k] == 0 || plen[k + 1] == 0)) k++;
    char stop[8] = {pieces[k][plen[k] - 1], pieces[k + 1][0], 0};
    for (int i = 0; i < k; i++) at += plen[i];
    const char *stops[] = {stop, "zzzq"};
    cfg.stop = stops, cfg.n_stop = 2;
    char out[2048];
    CHECK(etch_generate_start(s, prompt, &cfg) == ETCH_OK, "start");
    drain(s, out, sizeof out);
    char want[2048] = "";
    for (int i = 0; i < 30 && strlen(want) < sizeof want - 64; i++) strcat(want, pieces[i]);
    char *hit = strstr(want, stop);
    REQUIRE_VOID(hit != NULL);
    *hit = '\0';
    CHECK(!strcmp(out, want) && etch_session_stats(s)->stop_reason == 5,
          "stop string '%s' across two tokens: '%s' (want '%s'), reason %d", stop, out, want,
          etch_session_stats(s)->stop_reason);
    (void)at;
    char tail[8];
    snprintf(tail, sizeof tail, "%.3sQ", first + strlen(first) - 3); /* the text's end, then a letter it lacks */
    const char *stops2[] = {tail};
    cfg.stop = stops2, cfg.n_stop = 1;
    CHECK(etch_generate_start(s, prompt, &cfg) == ETCH_OK, "start");
    drain(s, out, sizeof out);
    CHECK(!strcmp(out, first) && etch_session_stats(s)->stop_reason == 0,
          "a stop string that begins at the output's end holds it back, then lets it go: '%s'", out);
    etch_session_free(s);
}

static void test_shift_and_files(void) {
    etch_program *p = open_chatml("conv-ctx64.etch", 64);
    REQUIRE_VOID(p != NULL);
    etch_session *s, *t;
    etch_error err;
    REQUIRE_VOID(etch_session_new(p, &s, &err) == ETCH_OK && etch_session_new(p, &t, &err) == ETCH_OK);
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = 150;
    CHECK(etch_generate(s, "Once upon a time", &cfg, NULL, NULL) == ETCH_OK &&
              etch_session_stats(s)->stop_reason == 2 && etch_session_stats(s)->generated_tokens == 60,
          "STOP: the context ends it (%lld tokens)", (long long)etch_session_stats(s)->generated_tokens);
    cfg.context = ETCH_CONTEXT_SHIFT;
    cfg.n_keep = 5;
    CHECK(etch_generate(s, "Once upon a time", &cfg, NULL, NULL) == ETCH_OK, "%s", etch_session_error(s));
    const etch_stats *st = etch_session_stats(s);
    CHECK(st->generated_tokens == 150 && st->context_shifts >= 3 && st->stop_reason == 0,
          "SHIFT: 150 tokens past a context of 64 (%lld tokens, %d shifts)", (long long)st->generated_tokens,
          st->context_shifts);
    int32_t n;
    const int32_t *ids = etch_session_cache_ids(s, &n);
    CHECK(n <= 64 && ids[0] == 1 && ids[4] == etch_session_prompt_ids(s, &n)[4], "the first n_keep positions stay");

    /* Save, load into another session, go on: as if never saved. */
    cfg = (etch_generate_config){0};
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = 10;
    CHECK(etch_generate(s, "Lily had a red ball.", &cfg, NULL, NULL) == ETCH_OK, "gen");
    char path[600];
    snprintf(path, sizeof path, "%s/conv.session", ETCH_TEST_TMP);
    CHECK(etch_session_save(s, path) == ETCH_OK, "save: %s", etch_session_error(s));
    CHECK(etch_session_load(t, path) == ETCH_OK, "load: %s", etch_session_error(t));
    cfg.cache = ETCH_CACHE_CONTINUE;
    int32_t a[10], b[10];
    CHECK(etch_generate(s, " She", &cfg, NULL, NULL) == ETCH_OK, "go on");
    memcpy(a, etch_session_generated_ids(s, &n), sizeof a);
    CHECK(etch_generate(t, " She", &cfg, NULL, NULL) == ETCH_OK, "go on after load: %s", etch_session_error(t));
    memcpy(b, etch_session_generated_ids(t, &n), sizeof b);
    CHECK(!memcmp(a, b, sizeof a), "save then load equals never having saved");
    /* The same with an int8 cache (its values and scales saved as they are); a session keeping
     * another type refuses the file by name. */
    etch_session *q, *u;
    etch_session_options q8 = {0, "q8"};
    REQUIRE_VOID(etch_session_new_opts(p, &q8, &q, &err) == ETCH_OK && etch_session_new_opts(p, &q8, &u, &err) == ETCH_OK);
    cfg.cache = ETCH_CACHE_RESET;
    CHECK(etch_generate(q, "Lily had a red ball.", &cfg, NULL, NULL) == ETCH_OK, "gen q8");
    CHECK(etch_session_save(q, path) == ETCH_OK && etch_session_load(u, path) == ETCH_OK, "q8 save and load: %s",
          etch_session_error(u));
    cfg.cache = ETCH_CACHE_CONTINUE;
    CHECK(etch_generate(q, " She", &cfg, NULL, NULL) == ETCH_OK, "go on q8");
    memcpy(a, etch_session_generated_ids(q, &n), sizeof a);
    CHECK(etch_generate(u, " She", &cfg, NULL, NULL) == ETCH_OK, "go on q8 after load: %s", etch_session_error(u));
    memcpy(b, etch_session_generated_ids(u, &n), sizeof b);
    CHECK(!memcmp(a, b, sizeof a), "q8: save then load equals never having saved");
    CHECK(etch_session_load(t, path) == ETCH_ERR_INPUT && strstr(etch_session_error(t), "q8 KV cache"),
          "an f32 session refuses a q8 file: %s", etch_session_error(t));
    etch_session_free(q), etch_session_free(u);
    etch_session_free(t);
    /* A file from another program is refused by name. */
    etch_program *other = open_chatml("conv-ctx128.etch", 128);
    REQUIRE_VOID(other != NULL && etch_session_new(other, &t, &err) == ETCH_OK);
    CHECK(etch_session_load(t, path) == ETCH_ERR_INPUT && strstr(etch_session_error(t), "conv.session") &&
              strstr(etch_session_error(t), "another program"),
          "%s", etch_session_error(t));
    etch_session_free(t);
    etch_program_close(other);
    etch_session_free(s);
    etch_program_close(p);
}

/* End-of-turn ids: the template's end token joins the EOS ids at export (Qwen3's <|im_end|>). */
static void test_end_of_turn(void) {
    char tok[1100], gguf[600], prog[600];
    snprintf(tok, sizeof tok, "%s/qwen3/tokenizer.json", tokenizers_dir());
    snprintf(gguf, sizeof gguf, "%s/conv-qwen3.gguf", ETCH_TEST_TMP);
    snprintf(prog, sizeof prog, "%s/conv-qwen3.etch", ETCH_TEST_TMP);
    etch_synth_options so = {0};
    so.arch = "qwen3", so.tokenizer = tok, so.format = "gguf", so.seed = 3;
    etch_error err;
    REQUIRE_VOID(etch_synth(&so, gguf, &err) == ETCH_OK);
    REQUIRE_VOID(etch_export_gguf(gguf, prog, NULL, &err) == ETCH_OK);
    etch_program *p;
    REQUIRE_VOID(etch_program_open(prog, &p, &err) == ETCH_OK);
    const etch_method_meta *m = etch_program_meta(p);
    int im_end = 0;
    for (int32_t i = 0; i < m->n_eos; i++) im_end |= m->eos_ids[i] == 151645;
    CHECK(im_end && !strcmp(m->chat_template, "qwen3"), "<|im_end|> (151645) ends a turn");
    /* A turn that ends at <|im_end|>: the next turn feeds that id, then the rest of the marker. */
    etch_session *s;
    REQUIRE_VOID(etch_session_new(p, &s, &err) == ETCH_OK);
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = 4;
    etch_chat_message msgs[3] = {{"user", "Hi", NULL}, {"assistant", "", NULL}, {"user", "Again", NULL}};
    char ans[512];
    CHECK(etch_chat_start(s, msgs, 1, NULL, &cfg) == ETCH_OK, "%s", etch_session_error(s));
    drain(s, ans, sizeof ans);
    msgs[1].content = ans;
    int32_t n_before = etch_session_position(s);
    CHECK(etch_chat_start(s, msgs, 3, NULL, &cfg) == ETCH_OK, "%s", etch_session_error(s));
    int32_t np;
    const int32_t *pid = etch_session_prompt_ids(s, &np);
    /* fed: the answer's last token (not EOS here: max_new_tokens ended it), then <|im_end|>, "\n", ... */
    CHECK(etch_session_stats(s)->reused_tokens == n_before && np > 3 && pid[1] == 151645,
          "the new turn follows the answer: %d %d", np > 1 ? pid[0] : -1, np > 1 ? pid[1] : -1);
    drain(s, ans, sizeof ans);
    etch_session_free(s);
    etch_program_close(p);
}

int main(void) {
    etch_program *p = open_chatml("conv.etch", 0);
    REQUIRE(p != NULL, "export stories260K with chatml");
    test_turns(p);
    test_reuse_rewind_stop(p);
    etch_program_close(p);
    test_shift_and_files();
    test_end_of_turn();
    return check_done();
}
