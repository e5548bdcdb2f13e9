/* etch against llama.cpp on the same GGUF, and etch's Hugging Face import against its GGUF import.
 * usage: test_llamacpp GGUF.etch HF.etch prompts_ids.json llamacpp_out.json N_TOKENS [QUANT_TOL [HF_TOL]]
 *
 * With QUANT_TOL the GGUF holds Q8_0 or Q4_0 weights, which etch keeps as they are, and HF.etch is
 * the same GGUF exported with --dtype f32 (dequantized): the two programs hold the same weights and
 * differ only in the order of sums (the quantized kernel adds each group of 32 unscaled, then scales
 * it), so they agree within HF_TOL. For Q4 the caller passes a wider HF_TOL: its kernels sum x times
 * a low row's whole byte (its nibble plus 16 times the high nibble beside it) and take the high
 * nibble's sum off at the group's end (one instruction fewer per 16 weights, 1.2x faster decode), so a
 * group sum's rounding follows summands up to 255 where the nibbles are at most 15 (measured: 1.8e-4
 * on these logits, against 1e-4 before). llama.cpp is held to QUANT_TOL instead of
 * LOGIT_TOL, because it rounds every block of 32 activations to int8 (Q8_0, an error up to 2^-8
 * of the block's largest value) before each quantized dot product, where etch keeps them f32.
 *
 * For each prompt (token ids, BOS included when the model adds one):
 *   - along llama.cpp's greedy continuation of N_TOKENS tokens (or up to an end-of-generation token),
 *     etch (GGUF program) predicts each of llama.cpp's tokens from the same prefix: its argmax is that
 *     token, or (a near-tie, counted and printed) that token's logit is within LOGIT_TOL of the argmax.
 *     Random weights make near-ties: the Gemma-3 model meets one where the top two logits are 4e-5
 *     apart, far inside the two implementations' rounding differences, and free-running greedy
 *     decoding would diverge there for good and compare nothing after it;
 *   - at the last prompt position, etch's logits agree with llama.cpp's log-probabilities over its
 *     K most probable tokens: logit differences to the top token, |(l_i - l_top) - (lp_i - lp_top)|,
 *     within LOGIT_TOL (softmax is shift-invariant, so differences are what both determine);
 *   - the Hugging Face program gives the same greedy tokens and logits within HF_TOL of the GGUF one.
 *
 * Tolerances. Both sides run f32 weights with an f32 KV cache and llama.cpp's flash attention off (its
 * CPU kernel rounds to f16 whatever the cache type: measured, it moves these logits by ~1e-2 and
 * flips near-ties within 40 tokens). They then differ only in the order of
 * floating-point sums (SIMD widths, tiling, llama.cpp's attention) and in transcendental function
 * implementations. A dot product of length k carries a relative error of about k * 2^-24 ~ 3e-5
 * for k = 512; through a few layers and a final norm this stays well under 1e-3 of logits of order
 * 1..10, hence LOGIT_TOL = 2e-3. Gemma-3 adds llama.cpp's GELU, which looks its result up in a table
 * indexed by the input rounded to f16 (relative error ~2^-11 per activation, where etch computes
 * tanh in f32): measured, 2.1e-4 at most, still inside LOGIT_TOL. The HF and GGUF programs share every weight bit; only Llama's
 * Q/K row permutation (adjacent vs half-split RoPE pairs) reorders the q.k sums, hence HF_TOL = 1e-4. */
#include "check.h"
#include "etch.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

static double LOGIT_TOL = 2e-3, HF_TOL = 1e-4;

static cJSON *read_json(const char *path) {
    char *buf = check_read_file(path, NULL);
    cJSON *j = buf ? cJSON_Parse(buf) : NULL;
    free(buf);
    return j;
}

/* Greedy continuation of n tokens after ids[n_ids]; logits of the last prompt position into first. */
static int greedy(etch_session *s, const int32_t *ids, int32_t n_ids, int n, int32_t *out, float *first,
                  const etch_method_meta *m) {
    float *logits = malloc((size_t)m->vocab_size * sizeof *logits);
    int pos = n_ids, ok = etch_prefill(s, ids, n_ids, 0, 0, logits, 0) == ETCH_OK;
    if (ok) memcpy(first, logits, (size_t)m->vocab_size * sizeof *first);
    for (int i = 0; i < n && ok; i++) {
        int best = 0;
        for (int v = 1; v < m->vocab_size; v++)
            if (logits[v] > logits[best]) best = v;
        out[i] = best;
        ok = etch_forward(s, &out[i], 1, pos++, logits, 0) == ETCH_OK;
    }
    free(logits);
    return ok;
}

int main(int argc, char **argv) {
    if (argc < 6 || argc > 8) {
        fprintf(stderr, "usage: test_llamacpp GGUF.etch HF.etch prompts_ids.json llamacpp_out.json N [QUANT_TOL [HF_TOL]]\n");
        return 2;
    }
    if (argc >= 7) LOGIT_TOL = atof(argv[6]);
    if (argc == 8) HF_TOL = atof(argv[7]);
    int n_tok = atoi(argv[5]);
    etch_error err;
    etch_program *pg, *ph;
    etch_session *sg, *sh;
    REQUIRE(etch_program_open(argv[1], &pg, &err) == ETCH_OK, "%s", err.message);
    REQUIRE(etch_program_open(argv[2], &ph, &err) == ETCH_OK, "%s", err.message);
    REQUIRE(etch_session_new(pg, &sg, &err) == ETCH_OK && etch_session_new(ph, &sh, &err) == ETCH_OK, "%s", err.message);
    cJSON *ref = read_json(argv[4]);
    REQUIRE(ref, "cannot read llama.cpp's output %s", argv[4]);
    const cJSON *results = cJSON_GetObjectItem(ref, "results");
    const etch_method_meta *m = etch_program_meta(pg);
    REQUIRE(etch_program_meta(ph)->vocab_size == m->vocab_size, "HF and GGUF vocabularies differ");
    int32_t *gen = malloc((size_t)n_tok * sizeof *gen), *gen_h = malloc((size_t)n_tok * sizeof *gen_h);
    float *lg = malloc((size_t)m->vocab_size * sizeof *lg), *lh = malloc((size_t)m->vocab_size * sizeof *lh);
    double worst_ref = 0, worst_hf = 0, worst_tie = 0;
    int prompts = 0, tokens = 0, n_ties = 0;
    for (const cJSON *r = results ? results->child : NULL; r; r = r->next) {
        const cJSON *pj = cJSON_GetObjectItem(r, "prompt"), *gj = cJSON_GetObjectItem(r, "generated");
        const cJSON *tj = cJSON_GetObjectItem(r, "top_logprobs");
        int32_t n_ids = cJSON_GetArraySize(pj);
        int32_t *ids = malloc((size_t)n_ids * sizeof *ids);
        for (int i = 0; i < n_ids; i++) ids[i] = cJSON_GetArrayItem(pj, i)->valueint;
        REQUIRE(greedy(sg, ids, n_ids, n_tok, gen, lg, m), "etch (GGUF) forward failed: %s", etch_session_error(sg));
        /* Along llama.cpp's continuation, up to an end-of-generation token it stopped at. */
        int n_ref = cJSON_GetArraySize(gj), need = n_ref < n_tok ? n_ref : n_tok, agree = 0, ties = 0;
        REQUIRE(greedy(sg, ids, n_ids, 0, NULL, lh, m), "etch forward failed: %s", etch_session_error(sg));
        for (int i = 0; i < need; i++) {
            int32_t best = 0, want = cJSON_GetArrayItem(gj, i)->valueint;
            for (int v = 1; v < m->vocab_size; v++)
                if (lh[v] > lh[best]) best = v;
            if (best == want) agree++;
            else if (lh[best] - lh[want] <= LOGIT_TOL) ties++, worst_tie = fmax(worst_tie, (double)(lh[best] - lh[want]));
            else CHECK(0, "prompt %d, token %d: llama.cpp chose %d, etch %d (logit %g above it)", prompts, i, want, best,
                       (double)(lh[best] - lh[want]));
            REQUIRE(etch_forward(sg, &want, 1, n_ids + i, lh, 0) == ETCH_OK, "%s", etch_session_error(sg));
        }
        CHECK(need >= (n_ref < n_tok ? 1 : n_tok), "prompt %d: llama.cpp generated %d tokens", prompts, n_ref);
        if (ties) printf("prompt %d: %d of %d tokens at near-ties (top logits within %g)\n", prompts, ties, need, LOGIT_TOL);
        REQUIRE(greedy(sh, ids, n_ids, n_tok, gen_h, lh, etch_program_meta(ph)), "etch (HF) forward failed: %s",
                etch_session_error(sh));
        CHECK(memcmp(gen, gen_h, (size_t)n_tok * sizeof *gen) == 0, "prompt %d: HF and GGUF programs generate differently", prompts);
        n_ties += ties;
        tokens += agree;
        /* Logits: differences to the top token against llama.cpp's log-probabilities. */
        int top = cJSON_GetArrayItem(cJSON_GetArrayItem(tj, 0), 0)->valueint;
        double lp_top = cJSON_GetArrayItem(cJSON_GetArrayItem(tj, 0), 1)->valuedouble, d_ref = 0;
        for (const cJSON *e = tj->child; e; e = e->next) {
            int id = cJSON_GetArrayItem(e, 0)->valueint;
            double lp = cJSON_GetArrayItem(e, 1)->valuedouble;
            double d = fabs(((double)lg[id] - lg[top]) - (lp - lp_top));
            if (d > d_ref) d_ref = d;
        }
        double d_hf = 0;
        for (int v = 0; v < m->vocab_size; v++) d_hf = fmax(d_hf, fabs((double)lg[v] - lh[v]));
        CHECK(d_ref <= LOGIT_TOL, "prompt %d: logit differences differ from llama.cpp's by %g", prompts, d_ref);
        CHECK(d_hf <= HF_TOL, "prompt %d: HF and GGUF logits differ by %g", prompts, d_hf);
        worst_ref = fmax(worst_ref, d_ref);
        worst_hf = fmax(worst_hf, d_hf);
        prompts++;
        free(ids);
    }
    CHECK(prompts >= 10, "only %d prompts", prompts);
    printf("%s vs llama.cpp %s: %d prompts, %d greedy tokens agree (%d more at near-ties, gaps up to %.3g); max logit difference %.3g over the top %d tokens; "
           "HF vs GGUF import: max logit difference %.3g\n",
           argv[1], cJSON_GetStringValue(cJSON_GetObjectItem(ref, "llama_cpp")), prompts, tokens, n_ties, worst_tie, worst_ref,
           cJSON_GetArraySize(cJSON_GetObjectItem(results->child, "top_logprobs")), worst_hf);
    cJSON_Delete(ref);
    free(gen), free(gen_h), free(lg), free(lh);
    etch_session_free(sg), etch_session_free(sh);
    etch_program_close(pg), etch_program_close(ph);
    return check_done();
}
