/* etch run: generate text with a program; the stats in ExecuTorch's shape. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int cmd_run(int argc, char **argv) {
    cli_name = "etch run";
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
            if (!(prompt = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--max-new-tokens")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 0, INT32_MAX, &n)) return 2;
            cfg.max_new_tokens = (int32_t)n;
        } else if (!strcmp(a, "--temperature")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_float(a, v, 0.0, 100.0, &d)) return 2;
            cfg.temperature = (float)d;
        } else if (!strcmp(a, "--top-p")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_float(a, v, 1e-6, 1.0, &d)) return 2;
            cfg.top_p = (float)d;
        } else if (!strcmp(a, "--top-k")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 0, INT32_MAX, &n)) return 2;
            cfg.top_k = (int32_t)n;
        } else if (!strcmp(a, "--seed")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_u64(a, v, &cfg.seed)) return 2;
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
    if (!prompt) return cli_usage("-p PROMPT is required (it may be empty: -p '')");
    if (!chat && (chat_opt.system || chat_opt.think >= 0 || chat_opt.template_name))
        return cli_usage("--system, --think, --no-think and --chat-template go with --chat");

    etch_error err;
    etch_program *p;
    if (etch_program_open(path, &p, &err) != ETCH_OK) return cli_fail(err.message);
    const etch_method_meta *m = etch_program_meta(p);
    etch_session *s;
    if (etch_session_new_threads(p, threads, &s, &err) != ETCH_OK) {
        etch_program_close(p);
        return cli_fail(err.message);
    }
    char *rendered = NULL;
    if (chat) {
        if (etch_chat_render(p, prompt, &chat_opt, &rendered, &err) != ETCH_OK) {
            etch_session_free(s);
            etch_program_close(p);
            char msg[1200];
            snprintf(msg, sizeof msg, "%s: %s", path, err.message);
            return cli_fail(msg);
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
        etch_free(rendered);
        return cli_fail(msg);
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
            etch_free(rendered);
            return cli_fail("out of memory decoding the output");
        }
        printf("{\"prompt\": ");
        cli_json_string(stdout, prompt, strlen(prompt));
        printf(", \"prompt_ids\": ");
        cli_json_ids(stdout, pid, np);
        printf(", \"generated_ids\": ");
        cli_json_ids(stdout, gid, ng);
        printf(", \"text\": ");
        cli_json_string(stdout, text, tlen);
        printf(", \"prefill\": \"%s\", \"chunks\": ", st->prefill_used == ETCH_PREFILL_SEQUENTIAL ? "sequential" : "batched");
        cli_json_ids(stdout, st->chunks, st->n_chunks);
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
    etch_free(rendered);
    return 0;
}

