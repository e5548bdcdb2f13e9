/* Batched and sequential prefill agree: logits at every prompt position within 1e-4 (max abs), for
 * every prompt length 1..300 and forward bounds 1, 7, 64 and 128 (chunk edges included). */
#include "stories.h"

#include <math.h>

enum { MAX_LEN = 300 };

int main(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/stories260K/reference/greedy_once_upon_a_time.txt", models_dir());
    FILE *f = fopen(path, "rb");
    REQUIRE(f, "cannot read %s", path);
    char story[2048];
    size_t n = fread(story, 1, 1000, f);
    fclose(f);
    story[n] = '\0';
    char text[4096];
    snprintf(text, sizeof text, "%s %s", story, story); /* about 400 tokens of real text */

    const char *seq_path = export_stories("prefill-1.etch", 1, 0);
    REQUIRE(seq_path, "export");
    etch_program *p;
    etch_session *s;
    etch_error err;
    REQUIRE(etch_program_open(seq_path, &p, &err) == ETCH_OK, "%s", err.message);
    int32_t *ids, n_ids;
    REQUIRE(etch_tokenize(p, text, strlen(text), 1, &ids, &n_ids, &err) == ETCH_OK && n_ids >= MAX_LEN,
            "need %d tokens, have %d", MAX_LEN, n_ids);
    int V = etch_program_meta(p)->vocab_size;

    /* The reference: one token per call, the logits of each position. */
    float *ref = malloc((size_t)MAX_LEN * V * sizeof *ref), *got = malloc((size_t)MAX_LEN * V * sizeof *got);
    float *last = malloc((size_t)V * sizeof *last);
    REQUIRE(etch_session_new(p, &s, &err) == ETCH_OK, "%s", err.message);
    for (int i = 0; i < MAX_LEN; i++)
        REQUIRE(etch_forward(s, ids + i, 1, i, ref + (size_t)i * V, 0) == ETCH_OK, "%s", etch_session_error(s));
    etch_session_free(s);
    etch_program_close(p);

    static const int bounds[] = {1, 7, 64, 128};
    for (size_t b = 0; b < sizeof bounds / sizeof *bounds; b++) {
        char name[64];
        snprintf(name, sizeof name, "prefill-%d.etch", bounds[b]);
        const char *pp = export_stories(name, bounds[b], 0);
        REQUIRE(pp, "export bound %d", bounds[b]);
        REQUIRE(etch_program_open(pp, &p, &err) == ETCH_OK, "%s", err.message);
        REQUIRE(etch_program_meta(p)->max_seq_len == bounds[b], "bound recorded");
        REQUIRE(etch_session_new(p, &s, &err) == ETCH_OK, "%s", err.message);
        double worst = 0;
        int worst_len = 0, last_ok = 1, failed_calls = 0;
        /* Every prompt length 1..300. For length L the runner's chunks are min(bound, left): the full
         * chunks before the last one are the same calls for every L that shares them, so lengths are
         * taken in increasing order and only the last chunk of each is run, over the cache the earlier
         * full chunks left (exactly what a fresh run of length L computes). Its rows are compared with
         * the reference; the rows before it were compared when those full chunks ran. */
        for (int len = 1; len <= MAX_LEN; len++) {
            int start = (len - 1) / bounds[b] * bounds[b], c = len - start;
            if (etch_forward(s, ids + start, c, start, got + (size_t)start * V, 1) != ETCH_OK) failed_calls++;
            if (etch_forward(s, ids + start, c, start, last, 0) != ETCH_OK) failed_calls++;
            if (memcmp(last, got + (size_t)(len - 1) * V, (size_t)V * sizeof *last) != 0) last_ok = 0;
            for (size_t i = (size_t)start * V; i < (size_t)len * V; i++) {
                double d = fabs((double)got[i] - (double)ref[i]);
                if (!(d <= worst)) worst = d, worst_len = len;
            }
        }
        /* And from scratch, with a fresh session, at the chunk edges. */
        int edges[] = {1, bounds[b] - 1, bounds[b], bounds[b] + 1, 2 * bounds[b] + 1, MAX_LEN};
        for (size_t e = 0; e < sizeof edges / sizeof *edges; e++) {
            int len = edges[e];
            if (len < 1 || len > MAX_LEN) continue;
            etch_session *fresh;
            REQUIRE(etch_session_new(p, &fresh, &err) == ETCH_OK, "%s", err.message);
            /* the runtime's prefill loop: chunks of the program's bound, or of 1 (any program) */
            if (etch_prefill(fresh, ids, len, 0, e % 2 ? 1 : 0, got, 1) != ETCH_OK) failed_calls++;
            for (size_t i = 0; i < (size_t)len * V; i++) {
                double d = fabs((double)got[i] - (double)ref[i]);
                if (!(d <= worst)) worst = d, worst_len = len;
            }
            etch_session_free(fresh);
        }
        CHECK(failed_calls == 0, "bound %d: %d forward calls failed", bounds[b], failed_calls);
        printf("bound %3d: max |batched - sequential| over lengths 1..%d = %.3g\n", bounds[b], MAX_LEN, worst);
        CHECK(worst <= 1e-4, "bound %d: logits differ by %g (prompt length %d)", bounds[b], worst, worst_len);
        CHECK(last_ok, "bound %d: last-position logits differ from the all-positions row", bounds[b]);
        if (bounds[b] == 128) { /* the prefill loop's own errors: before any work, with the inputs */
            CHECK(etch_prefill(s, ids, 10, 0, 129, last, 0) == ETCH_ERR_ARG, "a bound past max_seq_len is refused");
            int32_t bad[200];
            memcpy(bad, ids, sizeof bad);
            bad[150] = V; /* past the first chunk: still refused before the first forward call */
            CHECK(etch_prefill(s, bad, 200, 0, 0, last, 0) == ETCH_ERR_INPUT &&
                      strstr(etch_session_error(s), "index 150"),
                  "an id outside the vocabulary in a later chunk: %s", etch_session_error(s));
            int ctx = etch_program_meta(p)->max_context_len;
            CHECK(etch_prefill(s, ids, 10, ctx - 5, 0, last, 0) == ETCH_ERR_INPUT &&
                      strstr(etch_session_error(s), "max_context_len") && strstr(etch_session_error(s), "inputs:"),
                  "a span past the context shows the method metadata and inputs: %s", etch_session_error(s));
        }
        etch_session_free(s);
        etch_program_close(p);
    }
    free(ref), free(got), free(last);
    etch_free(ids);
    return check_done();
}
