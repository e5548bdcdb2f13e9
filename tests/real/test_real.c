/* Teacher-forced next-token agreement of etch with llama.cpp on a real model: for each prompt, the
 * sequence is the prompt followed by llama.cpp's greedy continuation; etch prefills it whole (logits
 * of every position) and its argmax at each continuation position is compared with the token
 * llama.cpp chose there. A disagreement where etch's top two logits are within 0.5 of each other is
 * a near-tie, counted and printed apart: llama.cpp rounds the activations of its quantized products
 * to 8 bits (etch multiplies the dequantized weights by f32 activations), which moves logits by tenths.
 * The check: exact agreement of at least MIN_EXACT, and of at least MIN_WITH_TIES once near-ties are
 * counted as agreeing (any other disagreement is a real one).
 * usage: test_real PROGRAM.etch llamacpp.json MIN_EXACT MIN_WITH_TIES */
#include "check.h"
#include "etch.h"

#include <cjson/cJSON.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: test_real PROGRAM.etch llamacpp.json MIN_EXACT MIN_WITH_TIES\n");
        return 2;
    }
    double min_exact = atof(argv[3]), min_ties = atof(argv[4]);
    etch_program *p;
    etch_session *s;
    etch_error err;
    REQUIRE(etch_program_open(argv[1], &p, &err) == ETCH_OK, "%s", err.message);
    REQUIRE(etch_session_new(p, &s, &err) == ETCH_OK, "%s", err.message);
    char *text = check_read_file(argv[2], NULL);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    REQUIRE(j != NULL, "cannot read %s", argv[2]);
    int V = etch_program_meta(p)->vocab_size;
    long total = 0, agree = 0, ties = 0;
    int prompt_no = 0;
    for (cJSON *r = cJSON_GetObjectItem(j, "results")->child; r; r = r->next, prompt_no++) {
        cJSON *pr = cJSON_GetObjectItem(r, "prompt"), *gen = cJSON_GetObjectItem(r, "generated");
        int np = cJSON_GetArraySize(pr), ng = cJSON_GetArraySize(gen), n = np + ng, i = 0;
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        for (cJSON *e = pr->child; e; e = e->next) ids[i++] = e->valueint;
        for (cJSON *e = gen->child; e; e = e->next) ids[i++] = e->valueint;
        float *logits = malloc((size_t)n * V * sizeof *logits);
        CHECK(etch_prefill(s, ids, n, 0, 0, logits, 1) == ETCH_OK, "prefill: %s", etch_session_error(s));
        for (int t = 0; t < ng; t++) {
            const float *l = logits + (size_t)(np - 1 + t) * V;
            int best = 0, second = -1;
            for (int v = 1; v < V; v++)
                if (l[v] > l[best]) second = best, best = v;
                else if (second < 0 || l[v] > l[second]) second = v;
            int want = ids[np + t];
            total++;
            if (best == want) agree++;
            else if (l[best] - l[want] < 0.5f) {
                ties++;
                printf("near-tie: prompt %d, token %d: etch %d, llama.cpp %d (logits %.3f vs %.3f)\n", prompt_no, t, best,
                       want, l[best], l[want]);
            } else {
                printf("disagreement: prompt %d, token %d: etch %d, llama.cpp %d (logits %.3f vs %.3f)\n", prompt_no, t, best,
                       want, l[best], l[want]);
            }
            (void)second;
        }
        free(logits);
        free(ids);
    }
    double rate = total ? (double)agree / (double)total : 0;
    printf("%s: %ld of %ld next tokens agree with llama.cpp (%.2f%%), %ld near-ties, %ld other disagreements\n", argv[1],
           agree, total, 100 * rate, ties, total - agree - ties);
    double with_ties = total ? (double)(agree + ties) / (double)total : 0;
    CHECK(total >= 20 * 32 && rate >= min_exact, "exact agreement %.4f below %.4f", rate, min_exact);
    CHECK(with_ties >= min_ties, "agreement with near-ties %.4f below %.4f", with_ties, min_ties);
    cJSON_Delete(j);
    free(text);
    etch_session_free(s);
    etch_program_close(p);
    return check_done();
}
