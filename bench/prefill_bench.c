/* etch-bench-prefill: time to first token with batched and with sequential prefill, prompt and
 * decode rates, as medians of several runs alternating the two modes. A program that prints
 * figures, not a test.
 *
 * usage: etch-bench-prefill PROGRAM.etch [-p PROMPT | --prompt-file F] [-n DECODE_TOKENS] [-r RUNS] */
#define _POSIX_C_SOURCE 200809L
#include "etch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A TinyStories-like prompt of about 98 tokens with the stories260K vocabulary. */
static const char default_prompt[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
    "friends. One day, she saw a big red ball near the tree. She ran to get it, but a dog took the ball and "
    "ran away. Lily was sad and went home to tell her mom.";

int main(int argc, char **argv) {
    const char *path = NULL, *prompt = default_prompt;
    int runs = 9, n_decode = 64;
    static char file_buf[1 << 16];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-p") && i + 1 < argc) prompt = argv[++i];
        else if (!strcmp(argv[i], "--prompt-file") && i + 1 < argc) {
            FILE *f = fopen(argv[++i], "rb");
            if (!f) {
                fprintf(stderr, "etch-bench-prefill: %s: cannot open\n", argv[i]);
                return 1;
            }
            size_t n = fread(file_buf, 1, sizeof file_buf - 1, f);
            fclose(f);
            file_buf[n] = '\0';
            prompt = file_buf;
        } else if (!strcmp(argv[i], "-r") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n_decode = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !path) path = argv[i];
        else {
            fprintf(stderr, "usage: etch-bench-prefill PROGRAM.etch [-p PROMPT | --prompt-file F] [-n N] [-r RUNS]\n");
            return 2;
        }
    }
    if (!path || runs < 1 || runs > 1000 || n_decode < 1) {
        fprintf(stderr, "usage: etch-bench-prefill PROGRAM.etch [-p PROMPT | --prompt-file F] [-n N] [-r RUNS]\n");
        return 2;
    }
    etch_error err;
    etch_program *p;
    etch_session *s;
    double t_open = 0;
    if (etch_program_open(path, &p, &err) != ETCH_OK || etch_session_new(p, &s, &err) != ETCH_OK) {
        fprintf(stderr, "etch-bench-prefill: %s\n", err.message);
        return 1;
    }
    etch_program_info info;
    etch_program_info_get(p, &info);
    t_open = info.load_end_ms - info.load_start_ms;
    const etch_method_meta *m = etch_program_meta(p);
    double *ttft_b = calloc((size_t)runs, sizeof(double)), *ttft_s = calloc((size_t)runs, sizeof(double));
    double *pre_b = calloc((size_t)runs, sizeof(double)), *pre_s = calloc((size_t)runs, sizeof(double));
    double *dec = calloc((size_t)runs, sizeof(double));
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    int64_t n_prompt = 0, n_gen = 0;
    /* One warm-up run of each, then alternate so that both modes see the same machine state. */
    for (int r = -1; r < runs; r++) {
        for (int mode = 0; mode < 2; mode++) {
            cfg.prefill = mode == 0 ? ETCH_PREFILL_BATCHED : ETCH_PREFILL_SEQUENTIAL;
            cfg.max_new_tokens = mode == 0 ? n_decode : 1;
            if (etch_generate(s, prompt, &cfg, NULL, NULL) != ETCH_OK) {
                fprintf(stderr, "etch-bench-prefill: %s\n", etch_session_error(s));
                return 1;
            }
            const etch_stats *st = etch_session_stats(s);
            if (r < 0) continue;
            double ttft = st->first_token_ms - st->inference_start_ms;
            double prefill = st->prompt_eval_end_ms - st->model_execution_start_ms;
            n_prompt = st->prompt_tokens;
            if (mode == 0) {
                ttft_b[r] = ttft;
                pre_b[r] = (double)st->prompt_tokens / prefill * 1000.0;
                /* Decode rate: tokens after the first over the time after the first. */
                n_gen = st->generated_tokens;
                dec[r] = n_gen > 1 ? (double)(n_gen - 1) / (st->inference_end_ms - st->first_token_ms) * 1000.0 : 0;
            } else {
                ttft_s[r] = ttft;
                pre_s[r] = (double)st->prompt_tokens / prefill * 1000.0;
            }
        }
    }
    double tb = median(ttft_b, runs), ts = median(ttft_s, runs);
    printf("program: %s (max_seq_len %d, max_context_len %d, load %.2f ms)\n", path, m->max_seq_len,
           m->max_context_len, t_open);
    printf("prompt: %lld tokens; medians of %d runs, modes alternating\n\n", (long long)n_prompt, runs);
    printf("| prefill    | time to first token (ms) | prompt tokens/s |\n");
    printf("|------------|--------------------------|-----------------|\n");
    printf("| batched    | %24.3f | %15.0f |\n", tb, median(pre_b, runs));
    printf("| sequential | %24.3f | %15.0f |\n", ts, median(pre_s, runs));
    printf("\nsequential / batched time to first token: %.2fx\n", tb > 0 ? ts / tb : 0.0);
    printf("decode: %.0f tokens/s (median, %lld tokens per run)\n", median(dec, runs), (long long)n_gen);
    free(ttft_b), free(ttft_s), free(pre_b), free(pre_s), free(dec);
    etch_session_free(s);
    etch_program_close(p);
    return 0;
}
