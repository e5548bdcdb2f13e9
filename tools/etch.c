/* etch: the command line. export, run, inspect, tokenize.
 * Every error prints one line "etch: ..." naming the file or option, and exits non-zero:
 * 1 for a failure at run time, 2 for a usage error. */
#define _POSIX_C_SOURCE 200809L
#include "etch.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *cmd_name = "etch";

static int die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cmd_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see '%s --help')\n", cmd_name);
    va_end(ap);
    return 2;
}

static int die(const char *msg) {
    fprintf(stderr, "%s: %s\n", cmd_name, msg);
    return 1;
}

/* Strict number parsing: the whole string, in range. */
static int parse_int(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        die_usage("%s expects an integer in %ld..%ld, got '%s'", opt, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_u64(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        die_usage("%s expects a non-negative integer, got '%s'", opt, s);
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_float(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        die_usage("%s expects a number in %g..%g, got '%s'", opt, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

/* The value of option argv[*i]; NULL (after a message) when it is the last argument. */
static const char *take(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        die_usage("option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* ------------------------------------------------------------------ JSON output */

static void json_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void json_ids(FILE *f, const int32_t *ids, int32_t n) {
    fputc('[', f);
    for (int32_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ids[i]);
    fputc(']', f);
}

/* ------------------------------------------------------------------ export */

static const char export_help[] =
    "usage: etch export --llama2c MODEL.bin --tokenizer TOK.bin -o OUT.etch [options]\n"
    "\n"
    "Converts a model into one program file: weights in the layout the kernels read, the tokenizer,\n"
    "and the method metadata.\n"
    "\n"
    "  --llama2c FILE          a llama2.c checkpoint (legacy version 0 format)\n"
    "  --tokenizer FILE        its tokenizer.bin\n"
    "  -o, --output FILE       the program file to write (replaced only when complete)\n"
    "  --max-context-len N     KV-cache length (default: the model's context length)\n"
    "  --max-seq-len N         the most tokens one forward call takes (default 128, clamped to the\n"
    "                          context); prompts prefill in chunks of this size\n"
    "  --static                a program that takes one token per call (max_seq_len 1)\n"
    "  -h, --help              this text\n";

static int cmd_export(int argc, char **argv) {
    cmd_name = "etch export";
    const char *model = NULL, *tok = NULL, *out = NULL;
    etch_export_options opt = {0, 0, NULL, NULL};
    int is_static = 0, have_seq = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(export_help, stdout);
            return 0;
        } else if (!strcmp(a, "--llama2c")) {
            if (!(model = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!(tok = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--max-context-len")) {
            if (!(v = take(argc, argv, &i)) || !parse_int(a, v, 1, 1 << 20, &n)) return 2;
            opt.max_context_len = (int32_t)n;
        } else if (!strcmp(a, "--max-seq-len")) {
            if (!(v = take(argc, argv, &i)) || !parse_int(a, v, 1, 1 << 20, &n)) return 2;
            opt.max_seq_len = (int32_t)n;
            have_seq = 1;
        } else if (!strcmp(a, "--static")) {
            is_static = 1;
        } else {
            return die_usage("unknown option '%s'", a);
        }
    }
    if (!model) return die_usage("--llama2c MODEL.bin is required");
    if (!tok) return die_usage("--tokenizer TOK.bin is required");
    if (!out) return die_usage("-o OUT.etch is required");
    if (is_static && have_seq) return die_usage("--static and --max-seq-len exclude each other");
    if (is_static) opt.max_seq_len = 1;
    etch_error err;
    if (etch_export_llama2c(model, tok, out, &opt, &err) != ETCH_OK) return die(err.message);
    etch_program *p;
    if (etch_program_open(out, &p, &err) != ETCH_OK) return die(err.message);
    const etch_method_meta *m = etch_program_meta(p);
    etch_program_info info;
    etch_program_info_get(p, &info);
    fprintf(stderr, "wrote %s: %llu bytes, %llu parameters, max_seq_len %d, max_context_len %d%s\n", out,
            (unsigned long long)info.file_size, (unsigned long long)info.n_parameters, m->max_seq_len,
            m->max_context_len, m->max_seq_len == 1 ? " (static: one token per call)" : "");
    etch_program_close(p);
    return 0;
}

/* ------------------------------------------------------------------ inspect */

static const char inspect_help[] =
    "usage: etch inspect FILE [--no-verify-data]\n"
    "\n"
    "Prints a program's method metadata (as ExecuTorch's MethodMeta), its metadata table and tensor\n"
    "directory, and verifies its checksums.\n"
    "\n"
    "  --no-verify-data   skip hashing the tensor data (the header checksum is always verified)\n"
    "  -h, --help         this text\n";

static int cmd_inspect(int argc, char **argv) {
    cmd_name = "etch inspect";
    const char *path = NULL;
    int verify_data = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(inspect_help, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--no-verify-data")) {
            verify_data = 0;
        } else if (argv[i][0] == '-') {
            return die_usage("unknown option '%s'", argv[i]);
        } else if (path) {
            return die_usage("one FILE only");
        } else {
            path = argv[i];
        }
    }
    if (!path) return die_usage("FILE is required");
    etch_error err;
    etch_program *p;
    if (etch_program_open(path, &p, &err) != ETCH_OK) return die(err.message);
    const etch_method_meta *m = etch_program_meta(p);
    etch_program_info info;
    etch_program_info_get(p, &info);
    printf("program: %s\n", path);
    printf("  format version %u, %llu bytes, %d metadata entries, %d tensors, %llu parameters\n",
           info.format_version, (unsigned long long)info.file_size, info.n_metadata, info.n_tensors,
           (unsigned long long)info.n_parameters);
    printf("  checksum %016llx (header, metadata, directory): ok\n", (unsigned long long)info.checksum);
    if (verify_data) {
        if (etch_program_verify_data(p, &err) != ETCH_OK) {
            etch_program_close(p);
            char msg[1200];
            snprintf(msg, sizeof msg, "%s: %s", path, err.message);
            return die(msg);
        }
        printf("  data hash %016llx: ok\n", (unsigned long long)info.data_hash);
    }
    printf("\nMethodMeta forward:\n");
    printf("  inputs:\n");
    printf("    0: tokens     int32[1, n]  1 <= n <= %d%s\n", m->max_seq_len,
           m->max_seq_len == 1 ? "  (static: one token per call)" : "  (dynamic sequence length)");
    printf("    1: start_pos  int64[1]     0 <= start_pos <= %d - n\n", m->max_context_len);
    printf("  outputs:\n");
    printf("    0: logits     float32[1, %d]  (last position; all positions on request)\n", m->vocab_size);
    printf("  constant methods:\n");
    printf("    get_max_seq_len       %d\n", m->max_seq_len);
    printf("    get_max_context_len   %d\n", m->max_context_len);
    printf("    use_kv_cache          %d\n", m->use_kv_cache);
    printf("    enable_dynamic_shape  %d\n", m->enable_dynamic_shape);
    printf("    get_bos_id            %d\n", m->bos_id);
    printf("    get_eos_ids           [");
    for (int32_t i = 0; i < m->n_eos; i++) printf("%s%d", i ? ", " : "", m->eos_ids[i]);
    printf("]\n    get_vocab_size        %d\n", m->vocab_size);
    printf("    get_n_layers          %d\n", m->n_layers);
    printf("    get_n_kv_heads        %d\n", m->n_kv_heads);
    printf("    get_head_dim          %d\n", m->head_dim);
    printf("    get_dtype             %s\n", m->dtype);
    printf("  architecture: %s, dim %d, hidden_dim %d, n_heads %d, norm_eps %g, rope_base %g, rope %s, "
           "tied embeddings %s, tokenizer %s\n",
           m->arch, m->dim, m->hidden_dim, m->n_heads, (double)m->norm_eps, (double)m->rope_base, m->rope_style,
           m->tied_embeddings ? "yes" : "no", m->tokenizer);
    uint64_t kv_bytes = 2ull * (uint64_t)m->n_layers * (uint64_t)m->max_context_len * (uint64_t)m->n_kv_heads *
                        (uint64_t)m->head_dim * 4;
    printf("  KV cache per session: %.2f MiB\n", (double)kv_bytes / (1024.0 * 1024.0));
    printf("\nmetadata:\n");
    char line[512];
    for (int32_t i = 0; i < info.n_metadata; i++) {
        etch_program_metadata_text(p, i, line, sizeof line);
        printf("  %s\n", line);
    }
    printf("\ntensors:\n");
    for (int32_t i = 0; i < info.n_tensors; i++) {
        etch_tensor_info t;
        etch_program_tensor(p, i, &t);
        char shape[96];
        int at = snprintf(shape, sizeof shape, "[");
        for (int32_t d = 0; d < t.ndim; d++)
            at += snprintf(shape + at, sizeof shape - (size_t)at, "%s%lld", d ? ", " : "", (long long)t.dims[d]);
        snprintf(shape + at, sizeof shape - (size_t)at, "]");
        printf("  %-28s %-4s %-14s offset %10llu  %10llu bytes\n", t.name, t.dtype, shape,
               (unsigned long long)t.offset, (unsigned long long)t.nbytes);
    }
    etch_program_close(p);
    return 0;
}

/* ------------------------------------------------------------------ run */

static const char run_help[] =
    "usage: etch run PROGRAM.etch -p PROMPT [options]\n"
    "\n"
    "Generates text: tokenizes the prompt, prefills it, then samples tokens one at a time and\n"
    "streams them to stdout (never splitting a UTF-8 character).\n"
    "\n"
    "  -p, --prompt TEXT        the prompt (UTF-8); may be empty\n"
    "  -n, --max-new-tokens N   generate at most N tokens (default 128). N counts generated tokens only,\n"
    "                           not the prompt; generation also stops at an EOS id (which counts) or\n"
    "                           when the context is full\n"
    "  --temperature T          0 is greedy (default 0)\n"
    "  --top-k K                sample from the K most probable tokens (default 0: off)\n"
    "  --top-p P                nucleus sampling (default 1: off)\n"
    "  --seed S                 random seed for sampling (default 42)\n"
    "  --prefill MODE           auto (default): batched chunks of min(max_seq_len, tokens left) when the\n"
    "                           program allows more than one token per call, else one token per call;\n"
    "                           batched: the same chunks; sequential: one token per call on any program\n"
    "  --no-bos                 do not prepend the BOS token\n"
    "  --stats                  print ExecuTorch's PyTorchObserver line and report to stderr\n"
    "  --json                   print one JSON object at the end instead of streaming text:\n"
    "                           prompt, prompt_ids, generated_ids, text (generated text only), prefill,\n"
    "                           chunks, stop_reason, stats\n"
    "  -v, --verbose            say which prefill policy ran and why (stderr)\n"
    "  -h, --help               this text\n";

static int on_token_stream(void *user, int32_t token, const char *text, size_t len) {
    (void)token;
    (void)user;
    if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    return 0;
}

static const char *stop_reason_name(int32_t r) {
    switch (r) {
    case 1: return "eos";
    case 2: return "context_full";
    case 3: return "callback";
    }
    return "max_new_tokens";
}

static int cmd_run(int argc, char **argv) {
    cmd_name = "etch run";
    const char *path = NULL, *prompt = NULL;
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    int stats = 0, json = 0, verbose = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        double d;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(run_help, stdout);
            return 0;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-new-tokens")) {
            if (!(v = take(argc, argv, &i)) || !parse_int(a, v, 0, INT32_MAX, &n)) return 2;
            cfg.max_new_tokens = (int32_t)n;
        } else if (!strcmp(a, "--temperature")) {
            if (!(v = take(argc, argv, &i)) || !parse_float(a, v, 0.0, 100.0, &d)) return 2;
            cfg.temperature = (float)d;
        } else if (!strcmp(a, "--top-p")) {
            if (!(v = take(argc, argv, &i)) || !parse_float(a, v, 1e-6, 1.0, &d)) return 2;
            cfg.top_p = (float)d;
        } else if (!strcmp(a, "--top-k")) {
            if (!(v = take(argc, argv, &i)) || !parse_int(a, v, 0, INT32_MAX, &n)) return 2;
            cfg.top_k = (int32_t)n;
        } else if (!strcmp(a, "--seed")) {
            if (!(v = take(argc, argv, &i)) || !parse_u64(a, v, &cfg.seed)) return 2;
        } else if (!strcmp(a, "--prefill")) {
            if (!(v = take(argc, argv, &i))) return 2;
            if (!strcmp(v, "auto")) cfg.prefill = ETCH_PREFILL_AUTO;
            else if (!strcmp(v, "batched")) cfg.prefill = ETCH_PREFILL_BATCHED;
            else if (!strcmp(v, "sequential")) cfg.prefill = ETCH_PREFILL_SEQUENTIAL;
            else return die_usage("--prefill expects auto, batched or sequential, got '%s'", v);
        } else if (!strcmp(a, "--no-bos")) {
            cfg.add_bos = 0;
        } else if (!strcmp(a, "--stats")) {
            stats = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = 1;
        } else if (a[0] == '-' && a[1]) {
            return die_usage("unknown option '%s'", a);
        } else if (path) {
            return die_usage("one PROGRAM only (got '%s' and '%s')", path, a);
        } else {
            path = a;
        }
    }
    if (!path) return die_usage("PROGRAM.etch is required");
    if (!prompt) return die_usage("-p PROMPT is required (it may be empty: -p '')");

    etch_error err;
    etch_program *p;
    if (etch_program_open(path, &p, &err) != ETCH_OK) return die(err.message);
    const etch_method_meta *m = etch_program_meta(p);
    etch_session *s;
    if (etch_session_new(p, &s, &err) != ETCH_OK) {
        etch_program_close(p);
        return die(err.message);
    }
    if (verbose) {
        int batched = cfg.prefill != ETCH_PREFILL_SEQUENTIAL && m->max_seq_len > 1;
        fprintf(stderr, "prefill: %s (%s; program max_seq_len %d)\n", batched ? "batched" : "sequential",
                cfg.prefill == ETCH_PREFILL_SEQUENTIAL ? "forced by --prefill sequential"
                : m->max_seq_len > 1                   ? "the program takes several tokens per call"
                                                       : "a static program takes one token per call",
                m->max_seq_len);
    }
    if (!json) {
        fputs(prompt, stdout);
        fflush(stdout);
    }
    etch_status rc = etch_generate(s, prompt, &cfg, json ? NULL : on_token_stream, NULL);
    if (rc != ETCH_OK) {
        if (!json) fputc('\n', stdout);
        char msg[4200];
        snprintf(msg, sizeof msg, "%s: %s", path, etch_session_error(s));
        etch_session_free(s);
        etch_program_close(p);
        return die(msg);
    }
    const etch_stats *st = etch_session_stats(s);
    char line[2048];
    etch_stats_observer_line(st, line, sizeof line);
    if (json) {
        int32_t np, ng;
        const int32_t *pid = etch_session_prompt_ids(s, &np), *gid = etch_session_generated_ids(s, &ng);
        char *text = NULL;
        size_t tlen = 0;
        /* The generated text, decoded after the last prompt token (so the dummy-prefix rule applies
         * as it did while streaming). */
        etch_decoder *dec;
        if (etch_decoder_new(p, &dec) == ETCH_OK) {
            size_t cap = 64;
            text = malloc(cap);
            for (int32_t i = 0; text && i <= ng; i++) {
                size_t l;
                const char *piece = i < ng ? etch_decoder_push(dec, i ? gid[i - 1] : pid[np - 1], gid[i], &l)
                                           : etch_decoder_flush(dec, &l);
                if (tlen + l + 1 > cap) {
                    while (tlen + l + 1 > cap) cap *= 2;
                    char *nt = realloc(text, cap);
                    if (!nt) {
                        free(text);
                        text = NULL;
                        break;
                    }
                    text = nt;
                }
                memcpy(text + tlen, piece, l);
                tlen += l;
            }
            etch_decoder_free(dec);
        }
        if (!text) {
            etch_session_free(s);
            etch_program_close(p);
            return die("out of memory decoding the output");
        }
        printf("{\"prompt\": ");
        json_string(stdout, prompt, strlen(prompt));
        printf(", \"prompt_ids\": ");
        json_ids(stdout, pid, np);
        printf(", \"generated_ids\": ");
        json_ids(stdout, gid, ng);
        printf(", \"text\": ");
        json_string(stdout, text, tlen);
        printf(", \"prefill\": \"%s\", \"chunks\": ", st->prefill_used == ETCH_PREFILL_SEQUENTIAL ? "sequential" : "batched");
        json_ids(stdout, st->chunks, st->n_chunks);
        printf(", \"max_seq_len\": %d, \"stop_reason\": \"%s\", \"stats\": %s}\n", m->max_seq_len,
               stop_reason_name(st->stop_reason), line + strlen("PyTorchObserver "));
        free(text);
    } else {
        fputc('\n', stdout);
        fflush(stdout);
    }
    if (stats) {
        char report[2048];
        etch_stats_report(st, report, sizeof report);
        fprintf(stderr, "%s\n%s", line, report);
    }
    if (verbose) fprintf(stderr, "stop: %s\n", stop_reason_name(st->stop_reason));
    etch_session_free(s);
    etch_program_close(p);
    return 0;
}

/* ------------------------------------------------------------------ tokenize */

static const char tokenize_help[] =
    "usage: etch tokenize PROGRAM.etch [--file F | TEXT] [--decode] [--bos]\n"
    "\n"
    "Prints the ids of TEXT (or of the file F) as a JSON array, with the program's tokenizer.\n"
    "\n"
    "  --file F    read the text from F\n"
    "  --bos       prepend the BOS id\n"
    "  --decode    the input is ids (a JSON array or whitespace/comma separated): print the text\n"
    "  -h, --help  this text\n";

static int cmd_tokenize(int argc, char **argv) {
    cmd_name = "etch tokenize";
    const char *src = NULL, *text = NULL, *file = NULL;
    int decode = 0, bos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(tokenize_help, stdout);
            return 0;
        } else if (!strcmp(a, "--file")) {
            if (!(file = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--decode")) {
            decode = 1;
        } else if (!strcmp(a, "--bos")) {
            bos = 1;
        } else if (a[0] == '-' && a[1] && !(a[1] >= '0' && a[1] <= '9')) {
            return die_usage("unknown option '%s'", a);
        } else if (!src) {
            src = a;
        } else if (!text) {
            text = a;
        } else {
            return die_usage("unexpected argument '%s'", a);
        }
    }
    if (!src) return die_usage("a SOURCE program is required");
    if (!!text + !!file != 1) return die_usage("give exactly one of TEXT or --file F");
    char *owned = NULL;
    size_t len = 0;
    if (file) {
        FILE *f = fopen(file, "rb");
        if (!f) {
            fprintf(stderr, "%s: %s: cannot open: %s\n", cmd_name, file, strerror(errno));
            return 1;
        }
        size_t cap = 4096;
        owned = malloc(cap);
        size_t got;
        while (owned && (got = fread(owned + len, 1, cap - len - 1, f)) > 0) {
            len += got;
            if (cap - len - 1 == 0) {
                char *n = realloc(owned, cap * 2);
                if (!n) {
                    free(owned);
                    owned = NULL;
                }
                owned = n, cap *= 2;
            }
        }
        fclose(f);
        if (!owned) return die("out of memory reading the input");
        owned[len] = '\0';
        text = owned;
    } else {
        len = strlen(text);
    }
    etch_error err;
    etch_program *p;
    if (etch_program_open(src, &p, &err) != ETCH_OK) {
        free(owned);
        return die(err.message);
    }
    int rc = 0;
    if (decode) {
        int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
        int32_t n = 0;
        const char *c = text;
        while (ids && *c) {
            if (strchr("[], \t\r\n", *c)) {
                c++;
                continue;
            }
            char *end;
            errno = 0;
            long v = strtol(c, &end, 10);
            if (end == c || errno || v < INT32_MIN || v > INT32_MAX) {
                fprintf(stderr, "%s: not an id list at offset %ld: '%.20s'\n", cmd_name, (long)(c - text), c);
                rc = 1;
                break;
            }
            ids[n++] = (int32_t)v;
            c = end;
        }
        char *out = NULL;
        size_t olen;
        if (!ids) rc = die("out of memory");
        else if (!rc && etch_detokenize(p, ids, n, &out, &olen, &err) != ETCH_OK) rc = die(err.message);
        else if (!rc) {
            fwrite(out, 1, olen, stdout);
            fputc('\n', stdout);
        }
        etch_free(out);
        free(ids);
    } else {
        int32_t *ids, n;
        if (etch_tokenize(p, text, len, bos, &ids, &n, &err) != ETCH_OK) {
            rc = die(err.message);
        } else {
            json_ids(stdout, ids, n);
            fputc('\n', stdout);
            etch_free(ids);
        }
    }
    etch_program_close(p);
    free(owned);
    return rc;
}

/* ------------------------------------------------------------------ main */

static const char main_help[] =
    "etch " ETCH_VERSION_STRING ": run causal language models on a CPU from ahead-of-time exported programs\n"
    "\n"
    "usage: etch COMMAND [options]     (etch COMMAND --help for its options)\n"
    "\n"
    "commands:\n"
    "  export     convert a model (llama2.c checkpoint) into a program file\n"
    "  run        generate text with a program, with ExecuTorch-style stats\n"
    "  inspect    print a program's method metadata and tensors, verify its checksums\n"
    "  tokenize   print the token ids of a text (or the text of ids)\n"
    "  version    print the version\n";

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(main_help, stderr);
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) {
        fputs(main_help, stdout);
        return 0;
    }
    if (!strcmp(c, "version") || !strcmp(c, "--version")) {
        printf("etch %s\n", etch_version());
        return 0;
    }
    if (!strcmp(c, "export")) return cmd_export(argc - 1, argv + 1);
    if (!strcmp(c, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(c, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(c, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    return die_usage("unknown command '%s'", c);
}
