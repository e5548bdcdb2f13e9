/* etch run: generate text with a program; the stats in ExecuTorch's shape. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char run_help[] =
    "usage: etch run MODEL (-p PROMPT | -p - | -f FILE) [options]\n"
    "\n"
    "Generates text: tokenizes the prompt, prefills it, then samples tokens one at a time and\n"
    "streams them to stdout (never splitting a UTF-8 character). MODEL is a program (.etch), or a GGUF\n"
    "file or a Hugging Face folder, exported on first use into $ETCH_CACHE_DIR (default ~/.cache/etch)\n"
    "and reused while it is unchanged. Ctrl-C stops the answer and prints what was generated (and the\n"
    "stats or JSON asked for), exiting 130; a second Ctrl-C ends at once.\n"
    "\n"
    "  -p, --prompt TEXT        the prompt (UTF-8); may be empty; - reads it from standard input\n"
    "  -f, --file FILE          the prompt from a file\n"
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
    "  --stop STR               end before STR appears; none of it is printed (repeatable)\n"
    "  --no-bos                 do not prepend the BOS token\n"
    "  --chat                   wrap the prompt in the program's chat template as one user turn\n"
    "  --system S               a system message (with --chat)\n"
    "  --think, --no-think      Qwen3's enable_thinking switch (with --chat; default: the template's, on)\n"
    "  --chat-template NAME     use chatml, qwen3, llama3 or llama2 instead of the program's template\n"
    "  --stats                  print ExecuTorch's PyTorchObserver line and report to stderr\n"
    "  --json                   print one JSON object at the end instead of streaming text:\n"
    "                           prompt, prompt_ids, generated_ids, text (generated text only), prefill,\n"
    "                           chunks, stop_reason (max_new_tokens, eos, context_full, interrupted), stats\n"
    "  -t, --threads N          worker threads (default: the machine's physical cores)\n"
    CLI_KV_TYPE_HELP
    "  -v, --verbose            say which prefill policy ran and why (stderr)\n"
    "  -h, --help               this text\n";

static const char *stop_reason_name(int32_t r) {
    switch (r) {
    case 1: return "eos";
    case 2: return "context_full";
    case 3: return "callback";
    case 4: return "interrupted";
    case 5: return "stop_string";
    }
    return "max_new_tokens";
}

/* The prompt: -p TEXT, -p - (standard input) or -f FILE; *owned is what to free. */
static const char *read_prompt(const char *prompt, const char *file, char **owned) {
    *owned = NULL;
    if (file || (prompt && !strcmp(prompt, "-"))) {
        size_t len;
        *owned = cli_slurp(file ? file : "/dev/stdin", &len);
        if (*owned && strlen(*owned) != len) {
            fprintf(stderr, "%s: %s: the prompt holds a NUL byte\n", cli_name, file ? file : "standard input");
            free(*owned);
            *owned = NULL;
        }
        return *owned;
    }
    return prompt;
}

/* A growing buffer of the generated text (for --json). */
typedef struct text_acc {
    char *s;
    size_t len, cap;
    int oom;
} text_acc;
static void acc_add(text_acc *t, const char *p, size_t n) {
    if (t->oom || !n) return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *ns = realloc(t->s, cap);
        if (!ns) {
            t->oom = 1;
            return;
        }
        t->s = ns, t->cap = cap;
    }
    memcpy(t->s + t->len, p, n);
    t->len += n;
}

int cmd_run(int argc, char **argv) {
    cli_name = "etch run";
    const char *path = NULL, *prompt = NULL, *prompt_file = NULL, *stops[CLI_MAX_STOP];
    int n_stop = 0;
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    int stats = 0, json = 0, verbose = 0, chat = 0, threads = 0;
    const char *kv_type = NULL;
    etch_chat_options chat_opt = {NULL, -1, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        int took = cli_sampling_option(argc, argv, &i, &cfg, stops, &n_stop);
        if (took < 0) return 2;
        if (took) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(run_help, stdout);
            return 0;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(prompt_file = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--prefill")) {
            if (!(v = cli_take(argc, argv, &i))) return 2;
            if (!strcmp(v, "auto")) cfg.prefill = ETCH_PREFILL_AUTO;
            else if (!strcmp(v, "batched")) cfg.prefill = ETCH_PREFILL_BATCHED;
            else if (!strcmp(v, "sequential")) cfg.prefill = ETCH_PREFILL_SEQUENTIAL;
            else return cli_usage("--prefill expects auto, batched or sequential, got '%s'", v);
        } else if (!strcmp(a, "--no-bos")) {
            cfg.add_bos = 0;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 256, &n)) return 2;
            threads = (int)n;
        } else if (!strcmp(a, "--kv-type")) {
            if (!(kv_type = cli_take_kv_type(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--chat")) {
            chat = 1;
        } else if (!strcmp(a, "--system")) {
            if (!(chat_opt.system = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--think")) {
            chat_opt.think = 1;
        } else if (!strcmp(a, "--no-think")) {
            chat_opt.think = 0;
        } else if (!strcmp(a, "--chat-template")) {
            if (!(chat_opt.template_name = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--stats")) {
            stats = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = 1;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage("unknown option '%s'", a);
        } else if (path) {
            return cli_usage("one PROGRAM only (got '%s' and '%s')", path, a);
        } else {
            path = a;
        }
    }
    if (!path) return cli_usage("PROGRAM.etch is required");
    if (!prompt == !prompt_file) return cli_usage("give the prompt with -p PROMPT, -p - (standard input) or -f FILE");
    if (!chat && (chat_opt.system || chat_opt.think >= 0 || chat_opt.template_name))
        return cli_usage("--system, --think, --no-think and --chat-template go with --chat");
    char *prompt_owned;
    if (!(prompt = read_prompt(prompt, prompt_file, &prompt_owned))) return 1;

    /* A GGUF file or a Hugging Face folder runs too: exported into the cache on first use. */
    etch_error err;
    char prog_path[4096];
    etch_export_options eo = {-4096, 0, NULL, NULL, cli_progress, NULL, NULL, NULL};
    int exported = 0;
    if (etch_cached_program(path, NULL, &eo, prog_path, sizeof prog_path, &exported, &err) != ETCH_OK) {
        free(prompt_owned);
        return cli_fail(err.message);
    }
    if (exported) fprintf(stderr, "%s: exported %s into the cache: %s (reused while the source is unchanged)\n",
                          cli_name, path, prog_path);
    etch_program *p;
    if (etch_program_open(prog_path, &p, &err) != ETCH_OK) {
        free(prompt_owned);
        return cli_fail(err.message);
    }
    const etch_method_meta *m = etch_program_meta(p);
    etch_session *s;
    etch_session_options so = {threads, kv_type};
    if (etch_session_new_opts(p, &so, &s, &err) != ETCH_OK) {
        etch_program_close(p);
        free(prompt_owned);
        return cli_fail(err.message);
    }
    if (threads > etch_session_threads(s))
        fprintf(stderr, "%s: %d threads asked, %d run: this machine has %d processors online\n", cli_name, threads,
                etch_session_threads(s), etch_session_threads(s));
    int rc = 1;
    char *rendered = NULL, msg[4200];
    text_acc out = {0};
    if (chat && etch_chat_render(p, prompt, &chat_opt, &rendered, &err) != ETCH_OK) {
        snprintf(msg, sizeof msg, "%s: %s", path, err.message);
        cli_fail(msg);
        goto done;
    }
    const char *text_in = chat ? rendered : prompt;
    /* The prompt is checked (UTF-8, the context) before it is echoed. */
    int32_t *ids, n_ids;
    if (etch_tokenize(p, text_in, strlen(text_in), cfg.add_bos, &ids, &n_ids, &err) != ETCH_OK) {
        snprintf(msg, sizeof msg, "%s: prompt: %s", path, err.message);
        cli_fail(msg);
        goto done;
    }
    etch_free(ids);
    if (n_ids > m->max_context_len) {
        snprintf(msg, sizeof msg,
                 "%s: the prompt has %d tokens but the context holds %d (max_context_len): shorten the prompt or "
                 "export with a larger --max-context-len",
                 path, n_ids, m->max_context_len);
        cli_fail(msg);
        goto done;
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

    cli_interrupt_begin(1);
    cli_interrupt_watch(s, NULL);
    etch_status st = etch_generate_start(s, text_in, &cfg);
    while (st == ETCH_OK) {
        int32_t tok;
        const char *piece;
        size_t len;
        if ((st = etch_generate_next(s, &tok, &piece, &len)) != ETCH_OK) break;
        if (json) acc_add(&out, piece, len);
        else if (len) {
            fwrite(piece, 1, len, stdout);
            fflush(stdout);
        }
        if (tok < 0) break;
    }
    cli_interrupt_end();
    int interrupted = cli_interrupted();
    if (st != ETCH_OK && !(st == ETCH_ERR_CANCELLED && interrupted)) {
        if (!json) fputc('\n', stdout);
        snprintf(msg, sizeof msg, "%s: %s", path, etch_session_error(s));
        cli_fail(msg);
        goto done;
    }
    const etch_stats *sts = etch_session_stats(s);
    if (out.oom) {
        cli_fail("out of memory holding the output");
        goto done;
    }
    char line[2048];
    etch_stats_observer_line(sts, line, sizeof line);
    if (json) {
        int32_t np, ng;
        const int32_t *pid = etch_session_prompt_ids(s, &np), *gid = etch_session_generated_ids(s, &ng);
        printf("{\"prompt\": ");
        cli_json_string(stdout, prompt, strlen(prompt));
        printf(", \"prompt_ids\": ");
        cli_json_ids(stdout, pid, np);
        printf(", \"generated_ids\": ");
        cli_json_ids(stdout, gid, ng);
        printf(", \"text\": ");
        cli_json_string(stdout, out.s ? out.s : "", out.len);
        printf(", \"prefill\": \"%s\", \"chunks\": ", sts->prefill_used == ETCH_PREFILL_SEQUENTIAL ? "sequential" : "batched");
        cli_json_ids(stdout, sts->chunks, sts->n_chunks);
        printf(", \"max_seq_len\": %d, \"stop_reason\": \"%s\", \"stats\": %s}\n", m->max_seq_len,
               stop_reason_name(interrupted ? 4 : sts->stop_reason), line + strlen("PyTorchObserver "));
    } else {
        fputc('\n', stdout);
    }
    fflush(stdout);
    if (stats) {
        char report[2048];
        etch_stats_report(sts, report, sizeof report);
        fprintf(stderr, "%s\n%s", line, report);
    }
    if (sts->stop_reason == 2)
        fprintf(stderr, "%s: the context is full (%d positions): generation stopped; export with a larger "
                        "--max-context-len for longer texts\n", cli_name, m->max_context_len);
    if (interrupted) fprintf(stderr, "%s: interrupted\n", cli_name);
    if (verbose) fprintf(stderr, "stop: %s\n", stop_reason_name(interrupted ? 4 : sts->stop_reason));
    rc = interrupted ? 130 : 0;
done:
    free(out.s);
    etch_free(rendered);
    etch_session_free(s);
    etch_program_close(p);
    free(prompt_owned);
    return rc;
}
