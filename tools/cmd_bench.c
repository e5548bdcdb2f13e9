/* etch bench: a llama-bench-like table of medians for a program: prefill and decode tokens/s, time
 * to first token with batched and with sequential prefill (and the most their ratio can be here),
 * achieved GFLOP/s and GB/s as fractions of the machine's measured peaks, load time (cold and warm page
 * cache), peak RSS.
 * A program that prints figures; nothing here is a test. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


/* The weights a forward call reads, from the program's tensors (scales and mins included). */
typedef struct weight_reads {
    double decode;  /* one decode step: every tensor but the embedding table, of which it reads one row,
                     * unless the output layer is tied to it */
    double head;    /* of those, the classifier's (the table when tied) */
    int integer;    /* some matrix multiplies int8 activations (i8, i4): prefill is not bound by the FMAs */
} weight_reads;

static weight_reads program_weight_reads(const etch_program *p) {
    etch_program_info info;
    etch_program_info_get(p, &info);
    double total = 0, table = 0, output = 0;
    int tied = 1, integer = 0;
    for (int32_t i = 0; i < info.n_tensors; i++) {
        etch_tensor_info t;
        if (etch_program_tensor(p, i, &t) != ETCH_OK) continue;
        total += (double)t.nbytes;
        if (!strncmp(t.name, "token_embd.weight", 17)) table += (double)t.nbytes; /* the table and its .scale */
        if (!strncmp(t.name, "output.weight", 13)) output += (double)t.nbytes;
        if (!strcmp(t.name, "output.weight")) tied = 0;
        integer |= !strcmp(t.dtype, "i8") || !strcmp(t.dtype, "i4");
    }
    return (weight_reads){tied ? total : total - table, tied ? table : output, integer};
}

/* ttft_ceiling: the most that time to first token with sequential prefill can exceed it with batched
 * prefill on this machine. Sequential prefill at best reads the weights at the read bandwidth once per
 * token (the classifier only for the last) and each earlier position's K/V rows; batched prefill at
 * best runs its multiply-adds (flops = 2 x those) at the FMA peak. For 16-bit weights this is about
 * peak x 2 bytes / (2 x bandwidth). 0 (unknown) without the peaks, or where int8 activations carry
 * prefill past the FMA peak. */
static double ttft_ceiling(weight_reads w, int n_prompt, double seq_kv_bytes, double flops, double peak_gflops,
                           double read_gbps) {
    if (w.integer || peak_gflops <= 0 || read_gbps <= 0 || flops <= 0) return 0;
    double seq_bytes = n_prompt * (w.decode - w.head) + w.head + seq_kv_bytes;
    return (seq_bytes / read_gbps) / (flops / peak_gflops);
}

static const char bench_help[] =
    "usage: etch bench PROGRAM.etch [-p 128,512] [-n 64] [-t 1,2] [-r 5] [-o md|csv|json|jsonl] [options]\n"
    "\n"
    "Runs each (prompt length, generated tokens, threads) case r times after a warm-up, alternating\n"
    "batched and sequential prefill, and prints medians: prompt tokens/s (batched), decode tokens/s,\n"
    "time to first token with batched and with sequential prefill, their ratio beside its ceiling on this\n"
    "machine (sequential reading the weights at the read bandwidth, batched at the FMA peak; float and\n"
    "weight-only programs), and with batched prefill in a session\n"
    "made for it (its threads and first KV pages included, as `etch run` pays them), achieved GFLOP/s in prefill and GB/s\n"
    "in decode as fractions of the machine's FMA peak and read bandwidth (measured here first, about\n"
    "half a second per thread count), load time with a cold and a warm page cache, and peak RSS. The\n"
    "prompt is real text tokenized by the program. Ctrl-C prints the cases measured so far.\n"
    "\n"
    "  -p LIST        prompt lengths in tokens (default 128,512)\n"
    "  -n LIST        tokens to decode after the prompt (default 64)\n"
    "  -t LIST        thread counts (default: the physical cores)\n"
    "  -r N           repetitions (default 5)\n"
    "  --kv-type T    the sessions' KV cache: f32, f16 or q8 (default: the program's)\n"
    "  -o FORMAT      md (a table, default), csv, json (one array) or jsonl (an object per line)\n"
    "  --json         the same as -o jsonl\n"
    "  --no-sequential  skip the sequential-prefill measurement (it takes one forward call per token)\n"
    "  --no-roofline  skip measuring the machine's peaks (no fractions of peak then)\n"
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

/* Resident memory now, in MB (getrusage's maximum would count the roofline's 256 MiB buffer). */
static double rss_mb(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

/* Prefills ids[n] in chunks of `bound` (the runtime's etch_prefill); returns the time in ms and
 * leaves the last logits. */
static double prefill(etch_session *s, const int32_t *ids, int n, int bound, float *logits, int *ok) {
    double t0 = now_ms();
    *ok = *ok && etch_prefill(s, ids, n, 0, bound, logits, 0) == ETCH_OK;
    return now_ms() - t0;
}

/* Time to first token in a new session: its creation (its threads, its KV cache's first pages) and a
 * batched prefill, as `etch run` and a server's new conversation pay them, where the bench's own
 * session, reused from rep to rep, has both warm. Ctrl-C stops the prefill as it stops `s`'s. */
static double new_session_ttft(etch_program *p, const etch_session_options *so, etch_session *s, const int32_t *ids,
                               int n, int bound, float *logits, int vocab, int *ok) {
    etch_session *f;
    etch_error err;
    double t0 = now_ms();
    if (etch_session_new_opts(p, so, &f, &err) != ETCH_OK) {
        fprintf(stderr, "%s: %s\n", cli_name, err.message);
        *ok = 0;
        return 0;
    }
    cli_interrupt_watch(f, NULL);
    prefill(f, ids, n, bound, logits, ok);
    etch_argmax(logits, vocab);
    double t = now_ms() - t0;
    cli_interrupt_watch(s, NULL);
    etch_session_free(f);
    return t;
}

/* Bytes a cached key or value element takes, its share of a Q8 scale included. */
static double kv_value_bytes(const char *kv_type, int head_dim) {
    return !strcmp(kv_type, "f32") ? 4.0 : !strcmp(kv_type, "f16") ? 2.0 : 1.0 + 4.0 / head_dim;
}

/* One measured case, as every format prints it. */
typedef struct bench_row {
    int n_prompt, n_gen, threads, reps;
    double prefill_tok_s, decode_tok_s, ttft_batched_ms, ttft_sequential_ms; /* sequential < 0: not measured */
    double load_ms, load_cold_ms, peak_rss_mb, prefill_gflops, decode_gbps;
    double fma_peak_gflops, read_bw_gbps; /* 0: not measured */
    double kv_cache_mb, kv_cache_full_mb;
    const char *kv_type;
    double ttft_new_session_ms; /* new_session_ttft */
    double ttft_ceiling;        /* the most seq/batched can be on this machine (ttft_ceiling); 0: unknown */
} bench_row;

enum { OUT_MD, OUT_CSV, OUT_JSON, OUT_JSONL };

static const char *const csv_cols =
    "n_prompt,n_gen,threads,reps,prefill_tok_s,decode_tok_s,ttft_batched_ms,ttft_sequential_ms,load_ms,load_cold_ms,"
    "peak_rss_mb,prefill_gflops,fma_peak_gflops,decode_gbps,read_bw_gbps,kv_cache_mb,kv_cache_full_mb,ttft_new_session_ms,"
    "ttft_ratio_ceiling";

/* A fraction of a measured peak, or "-" when the peak was not measured; decode past 100% of the read
 * bandwidth means the weights were served from cache (a model that fits it), marked with "*". */
static void of_peak(char *buf, size_t cap, double v, double peak) {
    if (peak <= 0) snprintf(buf, cap, "%.1f", v);
    else snprintf(buf, cap, "%.1f (%.0f%%%s)", v, 100 * v / peak, v > peak ? "*" : "");
}

static void print_row(const bench_row *r, int format, int first) {
    char seq[32] = "null", pk[32] = "null", bw[32] = "null", ceil[32] = "null";
    if (r->ttft_sequential_ms >= 0) snprintf(seq, sizeof seq, "%.2f", r->ttft_sequential_ms);
    if (r->fma_peak_gflops > 0) snprintf(pk, sizeof pk, "%.1f", r->fma_peak_gflops);
    if (r->read_bw_gbps > 0) snprintf(bw, sizeof bw, "%.2f", r->read_bw_gbps);
    if (r->ttft_ceiling > 0) snprintf(ceil, sizeof ceil, "%.2f", r->ttft_ceiling);
    if (format == OUT_MD) {
        char s1[32] = "-", s2[32] = "-", c[32] = "-", g[48], d[48];
        if (r->ttft_sequential_ms >= 0) {
            snprintf(s1, sizeof s1, "%.1f", r->ttft_sequential_ms);
            snprintf(s2, sizeof s2, "%.1fx", r->ttft_sequential_ms / r->ttft_batched_ms);
        }
        if (r->ttft_ceiling > 0) snprintf(c, sizeof c, "%.1fx", r->ttft_ceiling);
        of_peak(g, sizeof g, r->prefill_gflops, r->fma_peak_gflops);
        of_peak(d, sizeof d, r->decode_gbps, r->read_bw_gbps);
        printf("| %d | %d | %d | %.1f | %.2f | %.1f | %.1f | %s | %s | %s | %s | %s | %.0f |\n", r->threads,
               r->n_prompt, r->n_gen, r->prefill_tok_s, r->decode_tok_s, r->ttft_batched_ms, r->ttft_new_session_ms, s1,
               s2, c, g, d, r->peak_rss_mb);
    } else if (format == OUT_CSV) {
        printf("%d,%d,%d,%d,%.2f,%.2f,%.2f,%s,%.2f,%.2f,%.1f,%.1f,%s,%.2f,%s,%.2f,%.2f,%.2f,%s\n", r->n_prompt, r->n_gen,
               r->threads, r->reps, r->prefill_tok_s, r->decode_tok_s, r->ttft_batched_ms,
               r->ttft_sequential_ms >= 0 ? seq : "", r->load_ms, r->load_cold_ms, r->peak_rss_mb, r->prefill_gflops,
               r->fma_peak_gflops > 0 ? pk : "", r->decode_gbps, r->read_bw_gbps > 0 ? bw : "", r->kv_cache_mb,
               r->kv_cache_full_mb, r->ttft_new_session_ms, r->ttft_ceiling > 0 ? ceil : "");
    } else {
        printf("%s{\"n_prompt\": %d, \"n_gen\": %d, \"threads\": %d, \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, "
               "\"ttft_batched_ms\": %.2f, \"ttft_sequential_ms\": %s, \"ttft_new_session_ms\": %.2f, "
               "\"ttft_ratio_ceiling\": %s, "
               "\"load_ms\": %.2f, \"load_cold_ms\": %.2f, "
               "\"peak_rss_mb\": %.1f, \"prefill_gflops\": %.1f, \"fma_peak_gflops\": %s, \"decode_gbps\": %.2f, "
               "\"read_bw_gbps\": %s, \"kv_cache_mb\": %.2f, \"kv_cache_full_mb\": %.2f, \"kv_type\": \"%s\", "
               "\"reps\": %d}%s",
               format == OUT_JSON ? (first ? "[\n  " : ",\n  ") : "", r->n_prompt, r->n_gen, r->threads,
               r->prefill_tok_s, r->decode_tok_s, r->ttft_batched_ms, seq, r->ttft_new_session_ms, ceil, r->load_ms,
               r->load_cold_ms, r->peak_rss_mb,
               r->prefill_gflops, pk, r->decode_gbps, bw, r->kv_cache_mb, r->kv_cache_full_mb, r->kv_type, r->reps,
               format == OUT_JSONL ? "\n" : "");
    }
    fflush(stdout);
}

int cmd_bench(int argc, char **argv) {
    cli_name = "etch bench";
    const char *path = NULL;
    const char *kv_type = NULL;
    int prompts[16] = {128, 512}, n_prompts = 2, gens[16] = {64}, n_gens = 1, threads[16] = {0}, n_threads = 1, reps = 5;
    int format = OUT_MD, roofline_only = 0, roofline = 1, sequential = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(bench_help, stdout);
            return 0;
        } else if (!strcmp(a, "-p")) {
            if (!(v = cli_take(argc, argv, &i)) || !(n_prompts = cli_parse_list(a, v, 1, 1 << 20, prompts, 16))) return 2;
        } else if (!strcmp(a, "-n")) {
            if (!(v = cli_take(argc, argv, &i)) || !(n_gens = cli_parse_list(a, v, 1, 1 << 20, gens, 16))) return 2;
        } else if (!strcmp(a, "-t")) {
            if (!(v = cli_take(argc, argv, &i)) || !(n_threads = cli_parse_list(a, v, 1, 256, threads, 16))) return 2;
        } else if (!strcmp(a, "--kv-type")) {
            if (!(kv_type = cli_take_kv_type(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-r")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1000, &n)) return 2;
            reps = (int)n;
        } else if (!strcmp(a, "-o")) {
            if (!(v = cli_take(argc, argv, &i))) return 2;
            if (!strcmp(v, "md")) format = OUT_MD;
            else if (!strcmp(v, "csv")) format = OUT_CSV;
            else if (!strcmp(v, "json")) format = OUT_JSON;
            else if (!strcmp(v, "jsonl")) format = OUT_JSONL;
            else return cli_usage("-o expects md, csv, json or jsonl, got '%s'", v);
        } else if (!strcmp(a, "--json")) {
            format = OUT_JSONL;
        } else if (!strcmp(a, "--roofline")) {
            roofline_only = 1;
        } else if (!strcmp(a, "--no-roofline")) {
            roofline = 0;
        } else if (!strcmp(a, "--no-sequential")) {
            sequential = 0;
        } else if (a[0] == '-') {
            return cli_usage("unknown option '%s'", a);
        } else if (path) {
            return cli_usage("one PROGRAM only (got '%s' and '%s')", path, a);
        } else {
            path = a;
        }
    }
    if (roofline_only && !roofline) return cli_usage("--roofline and --no-roofline exclude each other");
    if (!path && !roofline_only) return cli_usage("PROGRAM.etch is required");

    etch_error err;
    if (roofline_only) {
        for (int ti = 0; ti < n_threads; ti++) {
            double peak, bw;
            if (etch_roofline(threads[ti], &peak, &bw, &err) != ETCH_OK) return cli_fail(err.message);
            if (threads[ti] == 0) printf("machine, one thread per physical core"); /* -t not given */
            else printf("machine, %d thread%s", threads[ti], threads[ti] == 1 ? "" : "s");
            printf(": FMA peak %.1f GFLOP/s, read bandwidth %.1f GB/s\n", peak, bw);
        }
        return 0;
    }

    /* Load: cold (the file's pages dropped from the page cache first, where the kernel allows) and warm. */
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    etch_program *p;
    double t0 = now_ms();
    if (etch_program_open(path, &p, &err) != ETCH_OK) return cli_fail(err.message);
    double load_cold = now_ms() - t0;
    etch_program_close(p);
    t0 = now_ms();
    if (etch_program_open(path, &p, &err) != ETCH_OK) return cli_fail(err.message);
    double load_warm = now_ms() - t0;
    const etch_method_meta *m = etch_program_meta(p);
    /* the program's KV figures are for its own cache type: scaled to the one the sessions keep */
    if (!kv_type) kv_type = m->kv_type;
    const double kv_scale = kv_value_bytes(kv_type, m->head_dim) / kv_value_bytes(m->kv_type, m->head_dim);
    /* Work per token, from the shapes: multiply-adds of the matrices, bytes of the weights. */
    double q_dim = (double)m->n_heads * m->head_dim, kv_dim = (double)m->n_kv_heads * m->head_dim;
    double layer_macs = m->dim * (q_dim + 2 * kv_dim) + q_dim * m->dim + 3.0 * m->dim * m->hidden_dim;
    double body_macs = m->n_layers * layer_macs, head_macs = (double)m->vocab_size * m->dim;
    weight_reads wr = program_weight_reads(p);

    /* Real text as the prompt: enough of it for the longest case. */
    int max_p = 0, max_g = 0;
    for (int i = 0; i < n_prompts; i++) max_p = prompts[i] > max_p ? prompts[i] : max_p;
    for (int i = 0; i < n_gens; i++) max_g = gens[i] > max_g ? gens[i] : max_g;
    if (max_p + max_g > m->max_context_len) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s: prompt %d + %d generated tokens exceed max_context_len %d", path, max_p, max_g,
                 m->max_context_len);
        etch_program_close(p);
        return cli_fail(msg);
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
        etch_program_close(p);
        return cli_fail("could not make a prompt that long from the sample text");
    }
    float *logits = malloc((size_t)m->vocab_size * sizeof *logits);
    double *pf = calloc((size_t)reps, sizeof(double)), *dc = calloc((size_t)reps, sizeof(double));
    double *tb = calloc((size_t)reps, sizeof(double)), *ts = calloc((size_t)reps, sizeof(double));
    double *tn = calloc((size_t)reps, sizeof(double));
    if (!logits || !pf || !dc || !tb || !ts || !tn) {
        free(pf), free(dc), free(tb), free(ts), free(tn), free(logits);
        etch_free(ids);
        etch_program_close(p);
        return cli_fail("out of memory");
    }
    if (format == OUT_MD) {
        char types[128];
        cli_weight_types(p, types, sizeof types);
        printf("program %s: %s, weights %s, %d layers, dim %d, vocab %d, max_seq_len %d; load %.1f ms cold, %.1f ms warm\n",
               path, m->model_type, types, m->n_layers, m->dim, m->vocab_size, m->max_seq_len, load_cold, load_warm);
        printf("KV cache per session: %.2f MiB, %s", kv_scale * m->kv_cache_bytes / 1048576.0, kv_type);
        if (m->sliding_window)
            printf(" (window %d in %d of %d layers; %.2f MiB with a full cache in every layer)", m->sliding_window,
                   m->n_window_layers, m->n_layers, kv_scale * m->kv_cache_full_bytes / 1048576.0);
        printf("\n");
    } else if (format == OUT_CSV) {
        printf("%s\n", csv_cols);
    }
    /* Ctrl-C: the running call stops at its next check, that case is dropped, the cases measured stay
     * printed and the format is closed (the JSON array ends). */
    cli_interrupt_begin(1);
    int ok = 1, rows = 0, over_bw = 0;
    double peak_rss = 0; /* sampled after every prefill and decode: the high-water mark of the runs */
    for (int ti = 0; ti < n_threads && ok && !cli_interrupted(); ti++) {
        etch_session *s;
        etch_session_options so = {threads[ti], kv_type};
        if (etch_session_new_opts(p, &so, &s, &err) != ETCH_OK) {
            fprintf(stderr, "%s: %s\n", cli_name, err.message);
            ok = 0;
            break;
        }
        int nt = etch_session_threads(s);
        double peak = 0, bw = 0;
        if (roofline && etch_roofline(nt, &peak, &bw, &err) != ETCH_OK) {
            fprintf(stderr, "%s: %s\n", cli_name, err.message);
            etch_session_free(s);
            ok = 0;
            break;
        }
        if (format == OUT_MD) {
            if (roofline) printf("machine, %d thread%s: FMA peak %.1f GFLOP/s, read bandwidth %.1f GB/s\n", nt,
                                 nt == 1 ? "" : "s", peak, bw);
            if (threads[ti] > nt) printf("(%d threads asked: this machine has %d processors online)\n", threads[ti], nt);
            printf("\n| threads | prompt | gen | prefill tok/s | decode tok/s | TTFT batched ms | TTFT new session ms "
                   "| TTFT sequential ms | seq/batched | ceiling | prefill GFLOP/s (of peak) | decode GB/s (of read bw) | peak RSS MB |\n");
            printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        }
        cli_interrupt_watch(s, NULL);
        for (int pi = 0; pi < n_prompts && ok && !cli_interrupted(); pi++)
            for (int gi = 0; gi < n_gens && ok && !cli_interrupted(); gi++) {
                int np = prompts[pi], n_gen = gens[gi];
                for (int r = -1; r < reps && ok && !cli_interrupted(); r++) { /* r = -1: warm-up */
                    /* Batched prefill, first token, then decode. */
                    double t_pre = prefill(s, ids, np, m->max_seq_len, logits, &ok);
                    double t_tok = now_ms();
                    int32_t tok = etch_argmax(logits, m->vocab_size);
                    double ttft = t_pre + (now_ms() - t_tok);
                    double d0 = now_ms();
                    for (int g = 0; g < n_gen && ok && !cli_interrupted(); g++) {
                        ok = etch_forward(s, &tok, 1, np + g, logits, 0) == ETCH_OK;
                        tok = etch_argmax(logits, m->vocab_size);
                    }
                    double t_dec = now_ms() - d0;
                    double now_rss = rss_mb();
                    peak_rss = now_rss > peak_rss ? now_rss : peak_rss;
                    double t_seq = 0;
                    if (sequential && ok && !cli_interrupted()) {
                        t_seq = prefill(s, ids, np, 1, logits, &ok);
                        t_tok = now_ms();
                        tok = etch_argmax(logits, m->vocab_size);
                        t_seq += now_ms() - t_tok;
                    }
                    double t_new = 0;
                    if (ok && !cli_interrupted())
                        t_new = new_session_ttft(p, &so, s, ids, np, m->max_seq_len, logits, m->vocab_size, &ok);
                    if (r < 0 || cli_interrupted()) continue;
                    pf[r] = np / t_pre * 1e3, dc[r] = n_gen / t_dec * 1e3, tb[r] = ttft, ts[r] = t_seq, tn[r] = t_new;
                }
                if (cli_interrupted()) break; /* a cut case is not a measurement */
                if (!ok) {
                    fprintf(stderr, "%s: %s\n", cli_name, etch_session_error(s));
                    break;
                }
                double mp = median(pf, reps), md = median(dc, reps), mtb = median(tb, reps), mts = median(ts, reps);
                double mtn = median(tn, reps);
                /* Prefill work: the matrices for every token, attention over the causal triangle, the
                 * classifier once. Decode traffic: every weight byte plus the K/V rows read. */
                double att_macs = 0, kv_bytes = 0, seq_kv_bytes = 0;
                for (int l = 0; l < m->n_layers; l++) { /* a windowed layer's query sees at most its window */
                    double w = m->layer_window[l] ? m->layer_window[l] : 1e18, keys = 0, mid = np + n_gen / 2.0;
                    for (int q = 1; q <= np; q++) keys += q < w ? q : w;
                    att_macs += q_dim * 2.0 * keys;
                    seq_kv_bytes += 2.0 * keys * kv_dim * kv_value_bytes(kv_type, m->head_dim);
                    kv_bytes += 2.0 * (mid < w ? mid : w) * kv_dim * kv_value_bytes(kv_type, m->head_dim);
                }
                double flops = 2.0 * (np * body_macs + att_macs + head_macs);
                bench_row row = {np, n_gen, nt, reps, mp, md, mtb, sequential ? mts : -1, load_warm, load_cold, peak_rss,
                                 flops / (np / mp) / 1e9, (wr.decode + kv_bytes) * md / 1e9, peak, bw,
                                 kv_scale * m->kv_cache_bytes / 1048576.0, kv_scale * m->kv_cache_full_bytes / 1048576.0,
                                 kv_type, mtn, ttft_ceiling(wr, np, seq_kv_bytes, flops, peak, bw)};
                over_bw |= bw > 0 && row.decode_gbps > bw;
                print_row(&row, format, rows++ == 0);
            }
        cli_interrupt_watch(NULL, NULL);
        etch_session_free(s);
    }
    cli_interrupt_end();
    int interrupted = cli_interrupted();
    if (format == OUT_JSON) printf(rows ? "\n]\n" : "[]\n");
    if (format == OUT_MD && over_bw)
        printf("\n* decode above the measured read bandwidth: the weights (%.1f MB) were read from the CPU's caches, "
               "not from memory\n", wr.decode / 1e6);
    fflush(stdout);
    free(pf), free(dc), free(tb), free(ts), free(tn), free(logits);
    etch_free(ids);
    etch_program_close(p);
    if (interrupted) {
        fprintf(stderr, "%s: interrupted after %d case%s\n", cli_name, rows, rows == 1 ? "" : "s");
        return 130;
    }
    return ok ? 0 : 1;
}
