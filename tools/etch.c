/* etch: the command line. export, run, inspect, tokenize.
 * Every error prints one line "etch: ..." naming the file or option, and exits non-zero:
 * 1 for a failure at run time, 2 for a usage error. */
#define _POSIX_C_SOURCE 200809L
#include "etch.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static const char *cmd_name = "etch";
int cmd_bench(int argc, char **argv); /* tools/bench.c */
int cmd_eval(int argc, char **argv);  /* tools/eval.c */
void progress_bar(void *user, const char *what, int64_t done, int64_t total);

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

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
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
    "usage: etch export (--llama2c MODEL.bin --tokenizer TOK.bin | --hf DIR | --gguf FILE) -o OUT.etch [options]\n"
    "\n"
    "Converts a model into one program file: weights in the layout the kernels read, the tokenizer,\n"
    "and the method metadata. Weights are converted once, here; the runtime converts nothing.\n"
    "\n"
    "  --llama2c FILE          a llama2.c checkpoint (legacy version 0 format)\n"
    "  --tokenizer FILE        its tokenizer.bin\n"
    "  --hf DIR                a Hugging Face folder: config.json, model.safetensors (or sharded),\n"
    "                          tokenizer.json, tokenizer_config.json (Llama, Qwen2, Qwen3)\n"
    "  --gguf FILE             a GGUF file (version 2 or 3; F32, F16, BF16, Q8_0, Q4_0 tensors,\n"
    "                          dequantized to --dtype) with its tokenizer (llama, qwen2, qwen3)\n"
    "  -o, --output FILE       the program file to write (replaced only when complete)\n"
    "  --dtype f32|f16|bf16    weight type in the program (default: the source's; f16 for quantized GGUF)\n"
    "  --chat-template NAME    chatml, qwen3, llama3, llama2 or none (default: recognized from the source)\n"
    "  --max-context-len N     KV-cache length (default: the model's context length, at most 4096 for\n"
    "                          Hugging Face and GGUF models)\n"
    "  --max-seq-len N         the most tokens one forward call takes (default 128, clamped to the\n"
    "                          context); prompts prefill in chunks of this size\n"
    "  --static                a program that takes one token per call (max_seq_len 1)\n"
    "  -h, --help              this text\n";

/* A progress bar on stderr, redrawn in place: only when stderr is a terminal. The unit follows
 * `what`: tokens when calibrating, windows when evaluating, else tensors. etch eval uses it too. */
void progress_bar(void *user, const char *what, int64_t done, int64_t total) {
    (void)user;
    if (!isatty(2) || total <= 0) return;
    int width = 40, filled = (int)(width * (double)done / (double)total);
    const char *unit = !strcmp(what, "calibrating") ? "tokens" : !strcmp(what, "evaluating") ? "windows" : "tensors";
    fprintf(stderr, "\r%-11s [%.*s%*s] %lld/%lld %s", what, filled, "########################################",
            width - filled, "", (long long)done, (long long)total, unit);
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
}

static int cmd_export(int argc, char **argv) {
    cmd_name = "etch export";
    const char *model = NULL, *tok = NULL, *out = NULL, *hf = NULL, *gguf = NULL;
    etch_export_options opt = {0, 0, NULL, NULL, progress_bar, NULL};
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
        } else if (!strcmp(a, "--hf")) {
            if (!(hf = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--gguf")) {
            if (!(gguf = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--dtype")) {
            if (!(opt.dtype = take(argc, argv, &i))) return 2;
            if (strcmp(opt.dtype, "f32") && strcmp(opt.dtype, "f16") && strcmp(opt.dtype, "bf16"))
                return die_usage("--dtype expects f32, f16 or bf16, got '%s'", opt.dtype);
        } else if (!strcmp(a, "--chat-template")) {
            if (!(opt.chat_template = take(argc, argv, &i))) return 2;
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
    if (!!model + !!hf + !!gguf != 1) return die_usage("give one source: --llama2c, --hf or --gguf");
    if (model && !tok) return die_usage("--tokenizer TOK.bin is required with --llama2c");
    if (!model && tok) return die_usage("--tokenizer goes with --llama2c (Hugging Face and GGUF carry their own)");
    if (!out) return die_usage("-o OUT.etch is required");
    if (is_static && have_seq) return die_usage("--static and --max-seq-len exclude each other");
    if (is_static) opt.max_seq_len = 1;
    if ((hf || gguf) && opt.max_context_len == 0) opt.max_context_len = -4096; /* "the model's, at most 4096" */
    etch_error err;
    double t0 = now_seconds();
    etch_status st = model ? etch_export_llama2c(model, tok, out, &opt, &err)
                     : hf  ? etch_export_hf(hf, out, &opt, &err)
                           : etch_export_gguf(gguf, out, &opt, &err);
    if (st != ETCH_OK) return die(err.message);
    etch_program *p;
    if (etch_program_open(out, &p, &err) != ETCH_OK) return die(err.message);
    const etch_method_meta *m = etch_program_meta(p);
    etch_program_info info;
    etch_program_info_get(p, &info);
    const char *kept = ""; /* GGUF's Q8_0/Q4_0 matrices, when export kept them */
    char line[256];
    for (int32_t i = 0; i < info.n_metadata; i++)
        if (etch_program_metadata_text(p, i, line, sizeof line) > 0 && !strncmp(line, "quant.scheme: \"gguf\"", 21))
            kept = " (Q8_0/Q4_0 matrices kept as they are)";
    fprintf(stderr, "wrote %s in %.2f s: %llu bytes, %llu parameters, %s%s, max_seq_len %d, max_context_len %d%s\n", out,
            now_seconds() - t0, (unsigned long long)info.file_size, (unsigned long long)info.n_parameters, m->dtype, kept,
            m->max_seq_len, m->max_context_len, m->max_seq_len == 1 ? " (static: one token per call)" : "");
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
    if (m->sliding_window)
        printf("  sliding window %d in %d of %d layers (the others attend to the whole context)\n", m->sliding_window,
               m->n_window_layers, m->n_layers);
    printf("  KV cache per session: %.2f MiB", (double)m->kv_cache_bytes / (1024.0 * 1024.0));
    if (m->kv_cache_bytes != m->kv_cache_full_bytes)
        printf(" (rings of window + max_seq_len - 1 rows in windowed layers; %.2f MiB with a full cache in every layer)",
               (double)m->kv_cache_full_bytes / (1024.0 * 1024.0));
    printf("\n");
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
    "  --chat                   wrap the prompt in the program's chat template as one user turn\n"
    "  --system S               a system message (with --chat)\n"
    "  --think, --no-think      Qwen3's enable_thinking switch (with --chat; default: the template's, on)\n"
    "  --chat-template NAME     use chatml, qwen3, llama3 or llama2 instead of the program's template\n"
    "  --stats                  print ExecuTorch's PyTorchObserver line and report to stderr\n"
    "  --json                   print one JSON object at the end instead of streaming text:\n"
    "                           prompt, prompt_ids, generated_ids, text (generated text only), prefill,\n"
    "                           chunks, stop_reason, stats\n"
    "  -t, --threads N          worker threads (default: the machine's physical cores)\n"
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
    int stats = 0, json = 0, verbose = 0, chat = 0, threads = 0;
    etch_chat_options chat_opt = {NULL, -1, NULL};
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
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = take(argc, argv, &i)) || !parse_int(a, v, 1, 256, &n)) return 2;
            threads = (int)n;
        } else if (!strcmp(a, "--chat")) {
            chat = 1;
        } else if (!strcmp(a, "--system")) {
            if (!(chat_opt.system = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--think")) {
            chat_opt.think = 1;
        } else if (!strcmp(a, "--no-think")) {
            chat_opt.think = 0;
        } else if (!strcmp(a, "--chat-template")) {
            if (!(chat_opt.template_name = take(argc, argv, &i))) return 2;
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
    if (!chat && (chat_opt.system || chat_opt.think >= 0 || chat_opt.template_name))
        return die_usage("--system, --think, --no-think and --chat-template go with --chat");

    etch_error err;
    etch_program *p;
    if (etch_program_open(path, &p, &err) != ETCH_OK) return die(err.message);
    const etch_method_meta *m = etch_program_meta(p);
    etch_session *s;
    if (etch_session_new_threads(p, threads, &s, &err) != ETCH_OK) {
        etch_program_close(p);
        return die(err.message);
    }
    char *rendered = NULL;
    if (chat) {
        if (etch_chat_render(p, prompt, &chat_opt, &rendered, &err) != ETCH_OK) {
            etch_session_free(s);
            etch_program_close(p);
            char msg[1200];
            snprintf(msg, sizeof msg, "%s: %s", path, err.message);
            return die(msg);
        }
        prompt = rendered;
    }
    if (verbose) {
        int batched = cfg.prefill != ETCH_PREFILL_SEQUENTIAL && m->max_seq_len > 1;
        fprintf(stderr, "prefill: %s (%s; program max_seq_len %d)\n", batched ? "batched" : "sequential",
                cfg.prefill == ETCH_PREFILL_SEQUENTIAL ? "forced by --prefill sequential"
                : m->max_seq_len > 1                   ? "the program takes several tokens per call"
                                                       : "a static program takes one token per call",
                m->max_seq_len);
    }
    if (!json && !chat) { /* a chat prompt is not echoed: it is the template's text */
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
        free(rendered);
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
    free(rendered);
    return 0;
}

/* ------------------------------------------------------------------ tokenize */

static const char tokenize_help[] =
    "usage: etch tokenize SOURCE [--file F | TEXT | --batch FILE.json] [--decode] [--bos]\n"
    "\n"
    "Prints the ids of TEXT (or of the file F) as a JSON array. SOURCE is a program file, a Hugging\n"
    "Face tokenizer.json (or the folder holding it), or a GGUF file. Special tokens written in the\n"
    "text are matched (as Hugging Face does by default); no BOS unless --bos.\n"
    "\n"
    "  --file F          read the text from F\n"
    "  --batch FILE.json a JSON array of strings: print one JSON array holding each string's ids\n"
    "  --bos             prepend the BOS id (when the tokenizer has one)\n"
    "  --decode          the input is ids (a JSON array or whitespace/comma separated): print the text\n"
    "  -h, --help        this text\n";

/* Reads a whole file into a NUL-terminated malloc'ed buffer. */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s: cannot open: %s\n", cmd_name, path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) free(buf);
            buf = nb, cap *= 2;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: %s: out of memory\n", cmd_name, path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Decodes the JSON string starting at *p (after its opening quote) into out, keeping embedded NULs
 * (cJSON cannot: its strings end at the first NUL). Returns the length, or -1 when malformed. */
static long json_string_at(const char **p, const char *end, char *out) {
    long n = 0;
    const char *s = *p;
    while (s < end && *s != '"') {
        unsigned char c = (unsigned char)*s++;
        if (c < 0x20) return -1;
        if (c != '\\') {
            out[n++] = (char)c;
            continue;
        }
        if (s >= end) return -1;
        char e = *s++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            out[n++] = map[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u' || end - s < 4) return -1;
        unsigned cp = 0;
        for (int i = 0; i < 4; i++) {
            char h = *s++;
            cp = cp << 4 | (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
            if (cp > 0xFFFF) return -1;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
            unsigned lo = 0;
            if (end - s < 6 || s[0] != '\\' || s[1] != 'u') return -1;
            s += 2;
            for (int i = 0; i < 4; i++) {
                char h = *s++;
                lo = lo << 4 | (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
                if (lo > 0xFFFF) return -1;
            }
            if (lo < 0xDC00 || lo > 0xDFFF) return -1;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return -1;
        }
        if (cp < 0x80) out[n++] = (char)cp;
        else if (cp < 0x800) out[n++] = (char)(0xC0 | cp >> 6), out[n++] = (char)(0x80 | (cp & 63));
        else if (cp < 0x10000) out[n++] = (char)(0xE0 | cp >> 12), out[n++] = (char)(0x80 | (cp >> 6 & 63)), out[n++] = (char)(0x80 | (cp & 63));
        else out[n++] = (char)(0xF0 | cp >> 18), out[n++] = (char)(0x80 | (cp >> 12 & 63)), out[n++] = (char)(0x80 | (cp >> 6 & 63)), out[n++] = (char)(0x80 | (cp & 63));
    }
    if (s >= end) return -1;
    *p = s + 1;
    return n;
}

static int tokenize_batch(etch_tokenizer *t, const char *file, int bos) {
    size_t len;
    char *text = slurp(file, &len);
    if (!text) return 1;
    char *buf = malloc(len + 1); /* a decoded string is never longer than its JSON text */
    const char *p = text, *end = text + len;
    int i = 0, rc = 0;
#define SKIP_WS() while (p < end && strchr(" \t\r\n", *p)) p++
    SKIP_WS();
    if (!buf || p >= end || *p++ != '[') rc = 1;
    SKIP_WS();
    if (!rc) fputc('[', stdout);
    while (!rc && p < end && *p != ']') {
        long n;
        if (*p != '"' || (p++, n = json_string_at(&p, end, buf)) < 0) {
            fprintf(stderr, "%s: %s: element %d is not a valid JSON string\n", cmd_name, file, i);
            rc = 2;
            break;
        }
        int32_t *ids, n_ids;
        etch_error err;
        if (etch_tokenizer_encode(t, buf, (size_t)n, bos, &ids, &n_ids, &err) != ETCH_OK) {
            fprintf(stderr, "\n%s: %s: element %d: %s\n", cmd_name, file, i, err.message);
            rc = 2;
            break;
        }
        if (i++) fputc(',', stdout);
        json_ids(stdout, ids, n_ids);
        etch_free(ids);
        SKIP_WS();
        if (p < end && *p == ',') {
            p++;
            SKIP_WS();
        } else if (p < end && *p != ']') {
            rc = 1;
        }
    }
    if (!rc && (p >= end || *p != ']')) rc = 1;
#undef SKIP_WS
    if (rc == 1) fprintf(stderr, "%s: %s: not a JSON array of strings (near byte %ld)\n", cmd_name, file, (long)(p - text));
    if (!rc) fputs("]\n", stdout);
    free(buf);
    free(text);
    return rc ? 1 : 0;
}

static int cmd_tokenize(int argc, char **argv) {
    cmd_name = "etch tokenize";
    const char *src = NULL, *text = NULL, *file = NULL, *batch = NULL;
    int decode = 0, bos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(tokenize_help, stdout);
            return 0;
        } else if (!strcmp(a, "--file")) {
            if (!(file = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--batch")) {
            if (!(batch = take(argc, argv, &i))) return 2;
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
    if (!src) return die_usage("a SOURCE (program, tokenizer.json or GGUF) is required");
    if (!!text + !!file + !!batch != 1) return die_usage("give exactly one of TEXT, --file F or --batch FILE.json");
    if (batch && decode) return die_usage("--batch and --decode exclude each other");
    etch_error err;
    etch_tokenizer *t;
    if (etch_tokenizer_open(src, &t, &err) != ETCH_OK) return die(err.message);
    if (batch) {
        int rc = tokenize_batch(t, batch, bos);
        etch_tokenizer_close(t);
        return rc;
    }
    char *owned = NULL;
    size_t len = 0;
    if (file) {
        if (!(owned = slurp(file, &len))) {
            etch_tokenizer_close(t);
            return 1;
        }
        text = owned;
    } else {
        len = strlen(text);
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
        else if (!rc && etch_tokenizer_decode(t, ids, n, &out, &olen, &err) != ETCH_OK) rc = die(err.message);
        else if (!rc) {
            fwrite(out, 1, olen, stdout);
            fputc('\n', stdout);
        }
        etch_free(out);
        free(ids);
    } else {
        int32_t *ids, n;
        if (etch_tokenizer_encode(t, text, len, bos, &ids, &n, &err) != ETCH_OK) {
            rc = die(err.message);
        } else {
            json_ids(stdout, ids, n);
            fputc('\n', stdout);
            etch_free(ids);
        }
    }
    etch_tokenizer_close(t);
    free(owned);
    return rc;
}

/* ------------------------------------------------------------------ synth */

static const char synth_help[] =
    "usage: etch synth --arch llama|qwen2|qwen3|gemma3 --tokenizer tokenizer.json --format hf|gguf -o PATH [options]\n"
    "\n"
    "Writes a model with seeded random weights (matrices N(0, std), norms 1 + N(0, std)) in a real\n"
    "model's shapes or any other, with a real tokenizer: a Hugging Face folder (config.json,\n"
    "model.safetensors, tokenizer files) or a GGUF file that llama.cpp loads. Same seed, same bytes.\n"
    "\n"
    "  --preset NAME      qwen3-0.6b, llama-3.2-1b, gemma3-1b or tiny (default tiny: 2 layers, dim 64)\n"
    "  --layers N --dim N --hidden-dim N --heads N --kv-heads N --head-dim N --context-len N\n"
    "                     override the preset's shapes\n"
    "  --seed S           default 1\n"
    "  --std X            weight standard deviation (default 0.02)\n"
    "  --dtype T          f32 (default), f16, bf16; GGUF also q8_0, q4_0\n"
    "  --sliding-window N gemma3: the window of its local layers (default 512; every sixth layer is global)\n"
    "  -h, --help         this text\n";

static int cmd_synth(int argc, char **argv) {
    cmd_name = "etch synth";
    etch_synth_options o;
    memset(&o, 0, sizeof o);
    o.seed = 1;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        double d;
        struct { const char *name; int32_t *dst; } ints[] = {
            {"--layers", &o.layers}, {"--dim", &o.dim}, {"--hidden-dim", &o.hidden_dim}, {"--heads", &o.heads},
            {"--kv-heads", &o.kv_heads}, {"--head-dim", &o.head_dim}, {"--context-len", &o.context_len},
            {"--sliding-window", &o.sliding_window}};
        int matched = 0;
        for (size_t k = 0; k < sizeof ints / sizeof *ints; k++)
            if (!strcmp(a, ints[k].name)) {
                if (!(v = take(argc, argv, &i)) || !parse_int(a, v, 1, 1 << 20, &n)) return 2;
                *ints[k].dst = (int32_t)n;
                matched = 1;
            }
        if (matched) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(synth_help, stdout);
            return 0;
        } else if (!strcmp(a, "--arch")) {
            if (!(o.arch = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--preset")) {
            if (!(o.preset = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!(o.tokenizer = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--format")) {
            if (!(o.format = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--dtype")) {
            if (!(o.dtype = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (!(v = take(argc, argv, &i)) || !parse_u64(a, v, &o.seed)) return 2;
        } else if (!strcmp(a, "--std")) {
            if (!(v = take(argc, argv, &i)) || !parse_float(a, v, 1e-6, 100.0, &d)) return 2;
            o.std = (float)d;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = take(argc, argv, &i))) return 2;
        } else {
            return die_usage("unknown option '%s'", a);
        }
    }
    if (!o.arch) return die_usage("--arch is required");
    if (!o.tokenizer) return die_usage("--tokenizer tokenizer.json is required");
    if (!o.format) return die_usage("--format hf|gguf is required");
    if (!out) return die_usage("-o PATH is required");
    etch_error err;
    double t0 = now_seconds();
    if (etch_synth(&o, out, &err) != ETCH_OK) return die(err.message);
    fprintf(stderr, "wrote %s (%s, %s) in %.2f s\n", out, o.format, o.dtype ? o.dtype : "f32", now_seconds() - t0);
    return 0;
}

/* ------------------------------------------------------------------ quantize */

static const char quantize_help[] =
    "usage: etch quantize IN.etch -o OUT.etch --scheme S [--group-size N] [--qembedding 8w|4w]\n"
    "                     [--calib FILE ...] [--calib-mode prefill|generate] [--gen-tokens N]\n"
    "                     [--observer minmax|moving-average|percentile|mse] [--calib-limit N] [-t N]\n"
    "\n"
    "Writes a copy of a program with its linear layers quantized. Schemes:\n"
    "  8w      int8 weights, one scale per output channel; activations stay f32\n"
    "  4w      int4 weights, one scale per group of 32 inputs; activations stay f32\n"
    "  8da8w   int8 weights per channel x int8 activations quantized per token at run time\n"
    "  8da4w   int4 weights in groups of 32 x int8 activations per token\n"
    "  a8w8    int8 weights per channel x int8 activations with a static scale and zero point per\n"
    "          layer input, calibrated: needs --calib\n"
    "A program whose layers are already q8 or q4 (a GGUF's Q8_0/Q4_0 kept as they are) converts to\n"
    "8da8w or a8w8 (q8) and 8da4w (q4) with its values and groups as they are, nothing rounded again.\n"
    "\n"
    "  --group-size N   values per scale along the input (default: the scheme's)\n"
    "  --qembedding S   quantize the embedding table too, 8w or 4w (a tied table then serves the\n"
    "                   output layer; without it the output layer gets its own quantized copy)\n"
    "  --calib FILE     calibration samples (repeatable): .txt text (chunked to the context), .json\n"
    "                   (an array) or .jsonl (a line each) of strings, {\"text\": ...} or chat samples\n"
    "                   {\"messages\": [{\"role\", \"content\", \"reasoning_content\"?}, ...]} rendered with\n"
    "                   the program's chat template, answers and special tokens included\n"
    "  --calib-mode M   prefill (default): each sample in one batched prefill, observed chunk by\n"
    "                   chunk; generate: then --gen-tokens greedy tokens one at a time (the older,\n"
    "                   slower pipeline, for comparison)\n"
    "  --gen-tokens N   generate mode: tokens per sample (default 128)\n"
    "  --observer O     minmax (default), moving-average, percentile (0.01%..99.99%), mse\n"
    "  --calib-limit N  use the first N samples\n"
    "  -t, --threads N  threads for calibration (default: the physical cores)\n"
    "  -h, --help       this text\n";

static char calib_header[160]; /* printed before the first line of the calibration report */

static void print_line(void *user, const char *line) {
    (void)user;
    if (calib_header[0]) fprintf(stderr, "%s\n", calib_header), calib_header[0] = '\0';
    fprintf(stderr, "  %s\n", line);
}

static int cmd_quantize(int argc, char **argv) {
    cmd_name = "etch quantize";
    const char *in = NULL, *out = NULL, *calib[64];
    int n_calib = 0;
    etch_calib_report report;
    etch_quantize_options o = {.report = &report, .report_line = print_line, .progress = progress_bar};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(quantize_help, stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--scheme")) {
            if (!(o.scheme = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--qembedding")) {
            if (!(o.qembedding = take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--calib")) {
            if (!(v = take(argc, argv, &i))) return 2;
            if (n_calib == 64) return die_usage("at most 64 --calib files");
            calib[n_calib++] = v;
        } else if (!strcmp(a, "--calib-mode")) {
            if (!(o.calib_mode = take(argc, argv, &i))) return 2;
            if (strcmp(o.calib_mode, "prefill") && strcmp(o.calib_mode, "generate"))
                return die_usage("--calib-mode expects prefill or generate, got '%s'", o.calib_mode);
        } else if (!strcmp(a, "--observer")) {
            if (!(o.observer = take(argc, argv, &i))) return 2;
            if (strcmp(o.observer, "minmax") && strcmp(o.observer, "moving-average") && strcmp(o.observer, "percentile") &&
                strcmp(o.observer, "mse"))
                return die_usage("--observer expects minmax, moving-average, percentile or mse, got '%s'", o.observer);
        } else if (!strcmp(a, "--group-size") || !strcmp(a, "--calib-limit") || !strcmp(a, "--gen-tokens") ||
                   !strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = take(argc, argv, &i)) || !parse_int(a, v, 1, 1 << 20, &n)) return 2;
            int32_t *dst = !strcmp(a, "--group-size") ? &o.group_size : !strcmp(a, "--calib-limit") ? &o.calib_limit
                         : !strcmp(a, "--gen-tokens") ? &o.gen_tokens : &o.threads;
            *dst = (int32_t)n;
        } else if (a[0] == '-') {
            return die_usage("unknown option '%s'", a);
        } else if (in) {
            return die_usage("one input program, got '%s' and '%s'", in, a);
        } else {
            in = a;
        }
    }
    if (!in) return die_usage("give the program to quantize");
    if (!out) return die_usage("-o OUT.etch is required");
    if (!o.scheme) return die_usage("--scheme 8w|4w|8da8w|8da4w|a8w8 is required");
    if (strcmp(o.scheme, "8w") && strcmp(o.scheme, "4w") && strcmp(o.scheme, "8da8w") && strcmp(o.scheme, "8da4w") &&
        strcmp(o.scheme, "a8w8"))
        return die_usage("--scheme expects 8w, 4w, 8da8w, 8da4w or a8w8, got '%s'", o.scheme);
    if (o.qembedding && strcmp(o.qembedding, "8w") && strcmp(o.qembedding, "4w"))
        return die_usage("--qembedding expects 8w or 4w, got '%s'", o.qembedding);
    if (!strcmp(o.scheme, "a8w8") && !n_calib) return die_usage("a8w8 needs calibration samples: --calib FILE");
    if (strcmp(o.scheme, "a8w8") && n_calib)
        return die_usage("--calib sets static activation ranges: only a8w8 has them (%s does not)", o.scheme);
    o.calib_files = calib, o.n_calib_files = n_calib;
    etch_error err;
    double t0 = now_seconds();
    if (n_calib)
        snprintf(calib_header, sizeof calib_header, "calibration (%s mode, %s observer), per observed layer input:",
                 o.calib_mode ? o.calib_mode : "prefill", o.observer ? o.observer : "minmax");
    if (etch_quantize(in, out, &o, &err) != ETCH_OK) return die(err.message);
    if (n_calib) {
        fprintf(stderr, "calibrated on %d samples: %lld tokens observed (%lld generated one at a time) in %.2f s, %.1f tokens/s\n",
                report.samples, (long long)report.tokens, (long long)report.generated, report.seconds,
                report.seconds > 0 ? (double)report.tokens / report.seconds : 0.0);
        fprintf(stderr, "special and added tokens seen: %d of %d\n", report.n_special_seen, report.n_special);
        if (report.n_special_seen < report.n_special)
            fprintf(stderr, "warning: the calibration data never contains these special tokens, so their activations "
                            "were not observed: %s\n", report.missing);
    }
    etch_program *p, *src;
    if (etch_program_open(out, &p, &err) != ETCH_OK) return die(err.message);
    if (etch_program_open(in, &src, &err) != ETCH_OK) {
        etch_program_close(p);
        return die(err.message);
    }
    etch_program_info a, b;
    etch_program_info_get(src, &a);
    etch_program_info_get(p, &b);
    fprintf(stderr, "wrote %s in %.2f s: %s, %llu bytes (%.1f%% of %s's %llu)\n", out, now_seconds() - t0, o.scheme,
            (unsigned long long)b.file_size, 100.0 * (double)b.file_size / (double)a.file_size, in,
            (unsigned long long)a.file_size);
    etch_program_close(src);
    etch_program_close(p);
    return 0;
}

/* ------------------------------------------------------------------ main */

static const char main_help[] =
    "etch " ETCH_VERSION_STRING ": run causal language models on a CPU from ahead-of-time exported programs\n"
    "\n"
    "usage: etch COMMAND [options]     (etch COMMAND --help for its options)\n"
    "\n"
    "commands:\n"
    "  export     convert a model (llama2.c, Hugging Face folder, GGUF) into a program file\n"
    "  run        generate text with a program, with ExecuTorch-style stats\n"
    "  inspect    print a program's method metadata and tensors, verify its checksums\n"
    "  tokenize   print the token ids of a text (or the text of ids)\n"
    "  synth      write a model with seeded random weights (Hugging Face folder or GGUF)\n"
    "  bench      measure prefill, decode, time to first token, against the machine's peaks\n"
    "  eval       perplexity over a text, and divergence from a reference program (KL, top-1)\n"
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
    if (!strcmp(c, "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(c, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(c, "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(c, "quantize")) return cmd_quantize(argc - 1, argv + 1);
    return die_usage("unknown command '%s'", c);
}
