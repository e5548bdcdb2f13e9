/* etch eval: perplexity of a program over a text, and with --ref its divergence from a reference
 * program's next-token distributions, in the manner of llama.cpp's `llama-perplexity
 * --kl-divergence`. The text is tokenized once (BOS first when the program has one) and cut into
 * windows of --ctx tokens; each window is prefilled in chunks of the program's max_seq_len with the
 * logits of every position, and the second half of each window is scored (the first half is its
 * context), as llama-perplexity scores. Both programs must share the tokenizer's vocabulary. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const char eval_help[] =
    "usage: etch eval PROGRAM.etch --text FILE [--ref REF.etch] [--ctx N] [-t N] [--json]\n"
    "\n"
    "Perplexity over the text, in windows of --ctx tokens (default 512, at most the context) prefilled\n"
    "in batches, scoring the second half of each window. With --ref, the reference program runs on the\n"
    "same windows and the report adds its perplexity, the mean and 99th percentile of the KL divergence\n"
    "KL(reference || program) of the next-token distributions, and the fraction of positions where both\n"
    "pick the same most likely token.\n"
    "\n"
    "  --text FILE    the text (UTF-8)\n"
    "  --ref FILE     a reference program with the same vocabulary (for example the unquantized one)\n"
    "  --ctx N        window length in tokens (2 or more)\n"
    "  -t N           threads (default: the physical cores)\n"
    "  --kv-type T    the program's KV cache: f32, f16 or q8 (default: the program's)\n"
    "  --ref-kv-type T  the reference's (default: its program's); --ref P --ref-kv-type f32 on P itself\n"
    "                 with --kv-type q8 measures what the cache alone costs\n"
    "  --json         one JSON object: tokens, perplexity, and with --ref ref_perplexity, kl_mean, kl_p99,\n"
    "                 top1_agreement\n"
    "  -h, --help     this text\n";


/* log-softmax of logits[vocab] at index i, and the argmax. */
static double log_prob(const float *l, int vocab, int i, int *argmax) {
    int best = 0;
    for (int v = 1; v < vocab; v++)
        if (l[v] > l[best]) best = v;
    double sum = 0;
    for (int v = 0; v < vocab; v++) sum += exp((double)l[v] - l[best]);
    *argmax = best;
    return (double)l[i] - l[best] - log(sum);
}

/* KL(p || q) for logits lp (reference) and lq. */
static double kl_div(const float *lp, const float *lq, int vocab) {
    double mp = lp[0], mq = lq[0], sp = 0, sq = 0, kl = 0;
    for (int v = 1; v < vocab; v++) mp = lp[v] > mp ? lp[v] : mp, mq = lq[v] > mq ? lq[v] : mq;
    for (int v = 0; v < vocab; v++) sp += exp((double)lp[v] - mp), sq += exp((double)lq[v] - mq);
    double lsp = log(sp), lsq = log(sq);
    for (int v = 0; v < vocab; v++) {
        double a = (double)lp[v] - mp - lsp, b = (double)lq[v] - mq - lsq;
        kl += exp(a) * (a - b);
    }
    return kl > 0 ? kl : 0;
}

/* Logits of every position of ids[n] into out[n, vocab], in chunks of max_seq_len from position 0. */
static int window_logits(etch_session *s, const int32_t *ids, int n, float *out) {
    return etch_prefill(s, ids, n, 0, 0, out, 1) == ETCH_OK;
}


static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int cmd_eval(int argc, char **argv) {
    cli_name = "etch eval";
    const char *path = NULL, *text_path = NULL, *ref_path = NULL;
    int ctx = 512, threads = 0, json = 0;
    const char *kv_type = NULL, *ref_kv_type = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long x;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(eval_help, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--text")) {
            if (!(text_path = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--ref")) {
            if (!(ref_path = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--ctx")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 2, 1 << 20, &x)) return 2;
            ctx = (int)x;
        } else if (!strcmp(a, "-t")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 256, &x)) return 2;
            threads = (int)x;
        } else if (!strcmp(a, "--kv-type")) {
            if (!(kv_type = cli_take_kv_type(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--ref-kv-type")) {
            if (!(ref_kv_type = cli_take_kv_type(argc, argv, &i))) return 2;
        } else if (a[0] == '-') {
            return cli_usage("unknown option '%s'", a);
        } else if (!path) {
            path = a;
        } else {
            return cli_usage("one program only ('%s' is extra)", a);
        }
    }
    if (!path || !text_path) return cli_usage("PROGRAM.etch and --text FILE are required");

    etch_error err;
    etch_program *p = NULL, *r = NULL;
    etch_session *s = NULL, *rs = NULL;
    char *text = NULL;
    int32_t *ids = NULL, n_ids = 0;
    float *lg = NULL, *lr = NULL;
    double *kls = NULL;
    int rc = 1;
    FILE *f = fopen(text_path, "rb");
    if (!f) return cli_failf("%s: cannot open", text_path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = malloc(size > 0 ? (size_t)size + 1 : 1);
    size_t got = text && size > 0 ? fread(text, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!text) return cli_failf("out of memory");
    if (etch_program_open(path, &p, &err) != ETCH_OK) {
        rc = cli_failf("%s", err.message);
        goto done;
    }
    if (ref_path && etch_program_open(ref_path, &r, &err) != ETCH_OK) {
        rc = cli_failf("%s", err.message);
        goto done;
    }
    const etch_method_meta *m = etch_program_meta(p);
    if (r && etch_program_meta(r)->vocab_size != m->vocab_size) {
        rc = cli_failf("%s and %s have different vocabularies", path, ref_path);
        goto done;
    }
    if (ctx > m->max_context_len) ctx = m->max_context_len;
    if (r && ctx > etch_program_meta(r)->max_context_len) ctx = etch_program_meta(r)->max_context_len;
    if (etch_tokenize(p, text, got, 1, &ids, &n_ids, &err) != ETCH_OK) {
        rc = cli_failf("%s: %s", text_path, err.message);
        goto done;
    }
    int n_windows = n_ids / ctx, first = ctx / 2, scored_per = ctx - 1 - first;
    if (n_windows < 1) {
        cli_failf("%s: %d tokens, fewer than one window of %d", text_path, n_ids, ctx);
        goto done;
    }
    etch_session_options so = {threads, kv_type}, ref_so = {threads, ref_kv_type};
    if (etch_session_new_opts(p, &so, &s, &err) != ETCH_OK || (r && etch_session_new_opts(r, &ref_so, &rs, &err) != ETCH_OK)) {
        rc = cli_failf("%s", err.message);
        goto done;
    }
    size_t vocab = (size_t)m->vocab_size;
    lg = malloc((size_t)ctx * vocab * sizeof *lg);
    lr = r ? malloc((size_t)ctx * vocab * sizeof *lr) : NULL;
    kls = r ? malloc((size_t)n_windows * scored_per * sizeof *kls) : NULL;
    if (!lg || (r && (!lr || !kls))) {
        rc = cli_failf("out of memory");
        goto done;
    }
    double nll = 0, ref_nll = 0;
    long scored = 0, agree = 0;
    int done_windows = 0;
    /* Ctrl-C: the window being computed stops at its next chunk; the windows scored are reported. */
    cli_interrupt_begin(1);
    cli_interrupt_watch(s, rs);
    for (int w = 0; w < n_windows && !cli_interrupted(); w++) {
        const int32_t *win = ids + (size_t)w * ctx;
        etch_session *failed = !window_logits(s, win, ctx, lg) ? s : r && !window_logits(rs, win, ctx, lr) ? rs : NULL;
        if (failed) {
            if (cli_interrupted()) break; /* the window that was cut is not scored */
            cli_interrupt_end();
            rc = cli_failf("%s", etch_session_error(failed));
            goto done;
        }
        for (int i = first; i < ctx - 1; i++) {
            int top, rtop;
            nll -= log_prob(lg + (size_t)i * vocab, (int)vocab, win[i + 1], &top);
            if (r) {
                ref_nll -= log_prob(lr + (size_t)i * vocab, (int)vocab, win[i + 1], &rtop);
                kls[scored] = kl_div(lr + (size_t)i * vocab, lg + (size_t)i * vocab, (int)vocab);
                agree += top == rtop;
            }
            scored++;
        }
        done_windows = w + 1;
        cli_progress(NULL, "evaluating", w + 1, n_windows);
    }
    cli_interrupt_end();
    int interrupted = cli_interrupted();
    if (interrupted && !done_windows) {
        fprintf(stderr, "%s: interrupted before the first window was scored\n", cli_name);
        rc = 130;
        goto done;
    }
    n_windows = done_windows;
    double ppl = exp(nll / (double)scored);
    if (r) {
        double kl_mean = 0;
        for (long i = 0; i < scored; i++) kl_mean += kls[i];
        kl_mean /= (double)scored;
        qsort(kls, (size_t)scored, sizeof *kls, cmp_double);
        double kl_p99 = kls[(size_t)((double)(scored - 1) * 0.99)];
        double ref_ppl = exp(ref_nll / (double)scored), top1 = (double)agree / (double)scored;
        if (json)
            printf("{\"tokens\": %ld, \"windows\": %d, \"ctx\": %d, \"perplexity\": %.6f, \"ref_perplexity\": %.6f, "
                   "\"kl_mean\": %.6g, \"kl_p99\": %.6g, \"top1_agreement\": %.6f}\n",
                   scored, n_windows, ctx, ppl, ref_ppl, kl_mean, kl_p99, top1);
        else
            printf("%s on %s: %ld tokens scored in %d window%s of %d\n  perplexity %.4f (reference %.4f)\n"
                   "  KL(reference || program): mean %.6g, 99th percentile %.6g\n  top-1 agreement %.2f%%\n",
                   path, text_path, scored, n_windows, n_windows == 1 ? "" : "s", ctx, ppl, ref_ppl, kl_mean, kl_p99,
                   100 * top1);
    } else if (json) {
        printf("{\"tokens\": %ld, \"windows\": %d, \"ctx\": %d, \"perplexity\": %.6f}\n", scored, n_windows, ctx, ppl);
    } else {
        printf("%s on %s: %ld tokens scored in %d window%s of %d\n  perplexity %.4f\n", path, text_path, scored,
               n_windows, n_windows == 1 ? "" : "s", ctx, ppl);
    }
    rc = 0;
    if (interrupted) {
        fprintf(stderr, "%s: interrupted: the figures cover the %d window%s scored\n", cli_name, n_windows,
                n_windows == 1 ? "" : "s");
        rc = 130;
    }
done:
    free(text), free(lg), free(lr), free(kls);
    etch_free(ids);
    etch_session_free(s), etch_session_free(rs);
    etch_program_close(p), etch_program_close(r);
    return rc;
}
