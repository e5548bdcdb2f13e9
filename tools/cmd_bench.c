/* etch bench: a llama-bench-like table of medians for a program: prefill and decode tokens/s, time
 * to first token with batched and with sequential prefill, achieved GFLOP/s and GB/s as fractions
 * of the machine's measured peaks, load time (cold and warm page cache), peak RSS.
 * A program that prints figures; nothing here is a test. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


/* Bytes of weights one decode step reads: every tensor of the program (with scales, quantized or
 * not) but the embedding table, of which it reads one row, unless the output layer is tied to it. */
static double decode_weight_bytes(const etch_program *p) {
    etch_program_info info;
    etch_program_info_get(p, &info);
    double total = 0, table = 0;
    int tied = 1;
    for (int32_t i = 0; i < info.n_tensors; i++) {
        etch_tensor_info t;
        if (etch_program_tensor(p, i, &t) != ETCH_OK) continue;
        total += (double)t.nbytes;
        if (!strncmp(t.name, "token_embd.weight", 17)) table += (double)t.nbytes; /* the table and its .scale */
        if (!strcmp(t.name, "output.weight")) tied = 0;
    }
    return tied ? total : total - table;
}

static const char bench_help[] =
    "usage: etch bench PROGRAM.etch [-p 128,512] [-n 64] [-t 1,2] [-r 5] [--json] [--roofline]\n"
    "\n"
    "Runs each (prompt length, threads) case r times after a warm-up, alternating batched and\n"
    "sequential prefill, and prints medians: prompt tokens/s (batched), decode tokens/s, time to first\n"
    "token with batched and with sequential prefill, achieved GFLOP/s in prefill and GB/s in decode as\n"
    "fractions of the machine's FMA peak and read bandwidth (measured here first), load time with a\n"
    "cold and a warm page cache, and peak RSS. The prompt is real text tokenized by the program.\n"
    "\n"
    "  -p LIST        prompt lengths in tokens (default 128,512)\n"
    "  -n N           tokens to decode after the prompt (default 64)\n"
    "  -t LIST        thread counts (default: the physical cores)\n"
    "  -r N           repetitions (default 5)\n"
    "  --no-sequential  skip the sequential-prefill measurement (it takes one forward call per token)\n"
    "  --json         one JSON object per case instead of the table\n"
    "  --roofline     only measure and print the machine's peaks\n"
    "  -h, --help     this text\n";

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Resident memory now, in MB (getrusage's maximum would count the roofline's 1 GiB buffer). */
static double rss_mb(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1000000) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Prefills ids[n] in chunks of `bound` (the runtime's etch_prefill); returns the time in ms and
 * leaves the last logits. */
static double prefill(etch_session *s, const int32_t *ids, int n, int bound, float *logits, int *ok) {
    double t0 = now_ms();
    *ok = *ok && etch_prefill(s, ids, n, 0, bound, logits, 0) == ETCH_OK;
    return now_ms() - t0;
}

int cmd_bench(int argc, char **argv) {
    const char *path = NULL;
    int prompts[16] = {128, 512}, n_prompts = 2, threads[16] = {0}, n_threads = 1, reps = 5, n_gen = 64;
    int json = 0, roofline_only = 0, sequential = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(bench_help, stdout);
            return 0;
        } else if (!strcmp(a, "-p") && i + 1 < argc) {
            if ((n_prompts = parse_list(argv[++i], prompts, 16)) < 1) goto usage;
        } else if (!strcmp(a, "-t") && i + 1 < argc) {
            if ((n_threads = parse_list(argv[++i], threads, 16)) < 1) goto usage;
        } else if (!strcmp(a, "-n") && i + 1 < argc) {
            n_gen = atoi(argv[++i]);
            if (n_gen < 1 || n_gen > 100000) goto usage;
        } else if (!strcmp(a, "-r") && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1 || reps > 1000) goto usage;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--roofline")) {
            roofline_only = 1;
        } else if (!strcmp(a, "--no-sequential")) {
            sequential = 0;
        } else if (a[0] != '-' && !path) {
            path = a;
        } else {
            goto usage;
        }
    }
    if (!path && !roofline_only) goto usage;

    etch_error err;
    double peak[16], bw[16];
    for (int ti = 0; ti < n_threads; ti++) {
        if (etch_roofline(threads[ti], &peak[ti], &bw[ti], &err) != ETCH_OK) {
            fprintf(stderr, "etch bench: %s\n", err.message);
            return 1;
        }
        if (!json)
            printf("machine, %d thread(s): FMA peak %.1f GFLOP/s, read bandwidth %.1f GB/s\n",
                   threads[ti] ? threads[ti] : 0, peak[ti], bw[ti]);
    }
    if (roofline_only) return 0;

    /* Load: cold (the file's pages dropped from the page cache first, where the kernel allows) and warm. */
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    etch_program *p;
    double t0 = now_ms();
    if (etch_program_open(path, &p, &err) != ETCH_OK) {
        fprintf(stderr, "etch bench: %s\n", err.message);
        return 1;
    }
    double load_cold = now_ms() - t0;
    etch_program_close(p);
    t0 = now_ms();
    if (etch_program_open(path, &p, &err) != ETCH_OK) {
        fprintf(stderr, "etch bench: %s\n", err.message);
        return 1;
    }
    double load_warm = now_ms() - t0;
    const etch_method_meta *m = etch_program_meta(p);
    /* Work per token, from the shapes: multiply-adds of the matrices, bytes of the weights. */
    double q_dim = (double)m->n_heads * m->head_dim, kv_dim = (double)m->n_kv_heads * m->head_dim;
    double layer_macs = m->dim * (q_dim + 2 * kv_dim) + q_dim * m->dim + 3.0 * m->dim * m->hidden_dim;
    double body_macs = m->n_layers * layer_macs, head_macs = (double)m->vocab_size * m->dim;
    double weight_bytes = decode_weight_bytes(p);

    /* Real text as the prompt: enough of it for the longest case. */
    int max_p = 0;
    for (int i = 0; i < n_prompts; i++) max_p = prompts[i] > max_p ? prompts[i] : max_p;
    if (max_p + n_gen > m->max_context_len) {
        fprintf(stderr, "etch bench: %s: prompt %d + %d generated tokens exceed max_context_len %d\n", path, max_p, n_gen,
                m->max_context_len);
        etch_program_close(p);
        return 1;
    }
    static const char text[] =
        "The history of computing is a story of ideas that took decades to become practical. Early machines "
        "filled rooms, consumed enormous power, and were programmed by rewiring panels. Over time, engineers "
        "learned to store programs in memory, to write compilers, and to share libraries of code. ";
    size_t cap = (size_t)max_p * 8 + sizeof text, len = 0;
    char *prompt_text = malloc(cap);
    int32_t *ids = NULL, n_ids = 0;
    while (prompt_text && n_ids < max_p) {
        if (len + sizeof text >= cap) break;
        memcpy(prompt_text + len, text, sizeof text);
        len += sizeof text - 1;
        etch_free(ids);
        if (etch_tokenize(p, prompt_text, len, 1, &ids, &n_ids, &err) != ETCH_OK) break;
    }
    free(prompt_text);
    if (!ids || n_ids < max_p) {
        fprintf(stderr, "etch bench: could not make a %d-token prompt\n", max_p);
        etch_program_close(p);
        return 1;
    }
    float *logits = malloc((size_t)m->vocab_size * sizeof *logits);
    double *pf = calloc((size_t)reps, sizeof(double)), *dc = calloc((size_t)reps, sizeof(double));
    double *tb = calloc((size_t)reps, sizeof(double)), *ts = calloc((size_t)reps, sizeof(double));
    if (!json) {
        printf("program %s: %s, %s, %d layers, dim %d, vocab %d, max_seq_len %d; load %.1f ms cold, %.1f ms warm\n", path,
               m->model_type, m->dtype, m->n_layers, m->dim, m->vocab_size, m->max_seq_len, load_cold, load_warm);
        printf("KV cache per session: %.2f MiB", m->kv_cache_bytes / 1048576.0);
        if (m->sliding_window)
            printf(" (window %d in %d of %d layers; %.2f MiB with a full cache in every layer)", m->sliding_window,
                   m->n_window_layers, m->n_layers, m->kv_cache_full_bytes / 1048576.0);
        printf("\n\n");
        printf("| threads | prompt | gen | prefill tok/s | decode tok/s | TTFT batched ms | TTFT sequential ms | seq/batched "
               "| prefill GFLOP/s (of peak) | decode GB/s (of read bw) | peak RSS MB |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    int ok = 1;
    double peak_rss = 0; /* sampled after every prefill and decode: the high-water mark of the runs */
    for (int ti = 0; ti < n_threads && ok; ti++) {
        etch_session *s;
        if (etch_session_new_threads(p, threads[ti], &s, &err) != ETCH_OK) {
            fprintf(stderr, "etch bench: %s\n", err.message);
            ok = 0;
            break;
        }
        int nt = etch_session_threads(s);
        for (int pi = 0; pi < n_prompts && ok; pi++) {
            int np = prompts[pi];
            for (int r = -1; r < reps && ok; r++) { /* r = -1: warm-up */
                /* Batched prefill, first token, then decode. */
                double t_pre = prefill(s, ids, np, m->max_seq_len, logits, &ok);
                double t_tok = now_ms();
                int32_t tok = argmax(logits, m->vocab_size);
                double ttft = t_pre + (now_ms() - t_tok);
                double d0 = now_ms();
                for (int g = 0; g < n_gen && ok; g++) {
                    ok = etch_forward(s, &tok, 1, np + g, logits, 0) == ETCH_OK;
                    tok = argmax(logits, m->vocab_size);
                }
                double t_dec = now_ms() - d0;
                double now_rss = rss_mb();
                peak_rss = now_rss > peak_rss ? now_rss : peak_rss;
                double t_seq = 0;
                if (sequential) {
                    t_seq = prefill(s, ids, np, 1, logits, &ok);
                    t_tok = now_ms();
                    tok = argmax(logits, m->vocab_size);
                    t_seq += now_ms() - t_tok;
                }
                if (r < 0) continue;
                pf[r] = np / t_pre * 1e3, dc[r] = n_gen / t_dec * 1e3, tb[r] = ttft, ts[r] = t_seq;
            }
            if (!ok) {
                fprintf(stderr, "etch bench: %s\n", etch_session_error(s));
                break;
            }
            double mp = median(pf, reps), md = median(dc, reps), mtb = median(tb, reps), mts = median(ts, reps);
            /* Prefill work: the matrices for every token, attention over the causal triangle, the
             * classifier once. Decode traffic: every weight byte plus the K/V rows read. */
            double att_macs = 0, kv_bytes = 0;
            for (int l = 0; l < m->n_layers; l++) { /* a windowed layer's query sees at most its window */
                double w = m->layer_window[l] ? m->layer_window[l] : 1e18, keys = 0, mid = np + n_gen / 2.0;
                for (int q = 1; q <= np; q++) keys += q < w ? q : w;
                att_macs += q_dim * 2.0 * keys;
                kv_bytes += 2.0 * (mid < w ? mid : w) * kv_dim * 4;
            }
            double gflops = 2.0 * (np * body_macs + att_macs + head_macs) / (np / mp) / 1e9;
            double gbps = (weight_bytes + kv_bytes) * md / 1e9;
            double rss = peak_rss;
            if (json) {
                char seq_json[32] = "null";
                if (sequential) snprintf(seq_json, sizeof seq_json, "%.2f", mts);
                printf("{\"n_prompt\": %d, \"n_gen\": %d, \"threads\": %d, \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, "
                       "\"ttft_batched_ms\": %.2f, \"ttft_sequential_ms\": %s, \"load_ms\": %.2f, \"load_cold_ms\": %.2f, "
                       "\"peak_rss_mb\": %.1f, \"prefill_gflops\": %.1f, \"fma_peak_gflops\": %.1f, \"decode_gbps\": %.2f, "
                       "\"read_bw_gbps\": %.2f, \"kv_cache_mb\": %.2f, \"kv_cache_full_mb\": %.2f, \"reps\": %d}\n",
                       np, n_gen, nt, mp, md, mtb, seq_json, load_warm, load_cold, rss, gflops, peak[ti], gbps,
                       bw[ti], m->kv_cache_bytes / 1048576.0, m->kv_cache_full_bytes / 1048576.0, reps);
            } else {
                char seq[32] = "-", ratio[32] = "-";
                if (sequential) {
                    snprintf(seq, sizeof seq, "%.1f", mts);
                    snprintf(ratio, sizeof ratio, "%.1fx", mts / mtb);
                }
                printf("| %d | %d | %d | %.1f | %.2f | %.1f | %s | %s | %.1f (%.0f%%) | %.1f (%.0f%%) | %.0f |\n", nt, np, n_gen, mp,
                       md, mtb, seq, ratio, gflops, 100 * gflops / peak[ti], gbps, 100 * gbps / bw[ti], rss);
            }
            fflush(stdout);
        }
        etch_session_free(s);
    }
    free(pf), free(dc), free(tb), free(ts), free(logits);
    etch_free(ids);
    etch_program_close(p);
    return ok ? 0 : 1;
usage:
    fprintf(stderr, "etch bench: bad arguments (see 'etch bench --help')\n");
    return 2;
}
