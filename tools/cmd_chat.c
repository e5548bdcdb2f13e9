/* etch chat: a conversation on a terminal (or over standard input when it is not one). Each turn
 * prefills only what is new: the session keeps the conversation, the answers as generated. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char chat_help[] =
    "usage: etch chat MODEL [options]\n"
    "\n"
    "Talks with a model in its chat template. On a terminal: type a message and Enter; Ctrl-C stops the\n"
    "answer (the conversation goes on), Ctrl-D leaves. When standard input is not a terminal, each line\n"
    "is a message and each answer is printed on its own line, so it can be scripted. Each turn prefills\n"
    "only its new part: the conversation stays in the session's cache. MODEL is a program, a GGUF file\n"
    "or a Hugging Face folder (exported on first use into $ETCH_CACHE_DIR, as etch run does).\n"
    "\n"
    "Commands: /reset (start again), /stats (the last answer's PyTorchObserver line), /quit.\n"
    "\n"
    "  --system S               a system message\n"
    "  -n, --max-new-tokens N   at most N tokens per answer (default 512)\n"
    "  --temperature T, --top-k K, --top-p P, --seed S   sampling, as etch run\n"
    "  --stop STR               end an answer before STR (repeatable)\n"
    "  --think, --no-think      Qwen3's enable_thinking switch\n"
    "  --chat-template NAME     a template instead of the program's\n"
    "  --shift N                when the context fills, keep the first N positions and drop the oldest\n"
    "                           half of the rest (default: end the answer)\n"
    "  -t, --threads N          worker threads (default: the physical cores)\n"
    CLI_KV_TYPE_HELP
    "  -h, --help               this text\n";

/* A growing list of messages, each string owned. */
typedef struct history {
    etch_chat_message *m;
    int n, cap;
} history;

static int history_add(history *h, const char *role, const char *content, size_t len) {
    if (h->n == h->cap) {
        int cap = h->cap ? h->cap * 2 : 16;
        etch_chat_message *nm = realloc(h->m, (size_t)cap * sizeof *nm);
        if (!nm) return 0;
        h->m = nm, h->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return 0;
    memcpy(c, content, len);
    c[len] = '\0';
    h->m[h->n++] = (etch_chat_message){role, c, NULL};
    return 1;
}

static void history_clear(history *h, int keep) {
    for (int i = keep; i < h->n; i++) free((char *)h->m[i].content);
    h->n = keep;
}

int cmd_chat(int argc, char **argv) {
    cli_name = "etch chat";
    const char *path = NULL, *system = NULL, *stops[CLI_MAX_STOP];
    int n_stop = 0, threads = 0, shift = -1;
    const char *kv_type = NULL;
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = 512;
    etch_chat_options opt = {NULL, -1, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        int took = cli_sampling_option(argc, argv, &i, &cfg, stops, &n_stop);
        if (took < 0) return 2;
        if (took) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(chat_help, stdout);
            return 0;
        } else if (!strcmp(a, "--system")) {
            if (!(system = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--think")) {
            opt.think = 1;
        } else if (!strcmp(a, "--no-think")) {
            opt.think = 0;
        } else if (!strcmp(a, "--chat-template")) {
            if (!(opt.template_name = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--shift")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 0, 1 << 20, &n)) return 2;
            shift = (int)n;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 256, &n)) return 2;
            threads = (int)n;
        } else if (!strcmp(a, "--kv-type")) {
            if (!(kv_type = cli_take_kv_type(argc, argv, &i))) return 2;
        } else if (a[0] == '-') {
            return cli_usage("unknown option '%s'", a);
        } else if (path) {
            return cli_usage("one MODEL only (got '%s' and '%s')", path, a);
        } else {
            path = a;
        }
    }
    if (!path) return cli_usage("MODEL is required");
    if (shift >= 0) cfg.context = ETCH_CONTEXT_SHIFT, cfg.n_keep = shift;

    etch_error err;
    char prog_path[4096];
    etch_export_options eo = {-4096, 0, NULL, NULL, cli_progress, NULL, NULL, NULL};
    if (etch_cached_program(path, NULL, &eo, prog_path, sizeof prog_path, NULL, &err) != ETCH_OK)
        return cli_fail(err.message);
    etch_program *p;
    if (etch_program_open(prog_path, &p, &err) != ETCH_OK) return cli_fail(err.message);
    etch_session *s;
    etch_session_options so = {threads, kv_type};
    if (etch_session_new_opts(p, &so, &s, &err) != ETCH_OK) {
        etch_program_close(p);
        return cli_fail(err.message);
    }
    int tty = isatty(0);
    history h = {0};
    int base = 0, rc = 0;
    if (system && history_add(&h, "system", system, strlen(system))) base = 1;
    cli_interrupt_begin(0); /* Ctrl-C stops an answer, or returns from the prompt's read: never leaves */
    cli_interrupt_watch(s, NULL);
    char *line = NULL;
    size_t cap = 0;
    char *answer = NULL;
    size_t alen = 0, acap = 0;
    if (tty) fprintf(stderr, "etch chat: %s (Ctrl-C stops an answer, Ctrl-D leaves; /reset, /stats)\n", path);
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        cli_interrupt_clear();
        errno = 0;
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) {
            if (errno == EINTR && cli_interrupted()) { /* Ctrl-C at the prompt: a new prompt */
                clearerr(stdin);
                fputc('\n', stdout);
                continue;
            }
            if (tty) fputc('\n', stdout);
            break; /* Ctrl-D or the end of the input */
        }
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if (got == 0) continue;
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            history_clear(&h, base);
            etch_session_reset(s);
            if (tty) fprintf(stderr, "(the conversation starts again)\n");
            continue;
        }
        if (!strcmp(line, "/stats")) {
            char obs[2048];
            const etch_stats *st = etch_session_stats(s);
            etch_stats_observer_line(st, obs, sizeof obs);
            printf("%s\nreused_tokens %lld, position %d of %d\n", obs, (long long)st->reused_tokens,
                   etch_session_position(s), etch_program_meta(p)->max_context_len);
            fflush(stdout);
            continue;
        }
        if (!history_add(&h, "user", line, (size_t)got)) {
            rc = cli_fail("out of memory");
            break;
        }
        etch_status st = etch_chat_start(s, h.m, h.n, &opt, &cfg);
        alen = 0;
        while (st == ETCH_OK) {
            int32_t tok;
            const char *t;
            size_t len;
            if ((st = etch_generate_next(s, &tok, &t, &len)) != ETCH_OK) break;
            if (len) {
                fwrite(t, 1, len, stdout);
                fflush(stdout);
                if (alen + len + 1 > acap) {
                    acap = (alen + len + 1) * 2;
                    char *na = realloc(answer, acap);
                    if (!na) {
                        st = ETCH_ERR_NOMEM;
                        break;
                    }
                    answer = na;
                }
                memcpy(answer + alen, t, len);
                alen += len;
            }
            if (tok < 0) break;
        }
        fputc('\n', stdout);
        fflush(stdout);
        if (st == ETCH_ERR_CANCELLED) { /* stopped before its first token: the turn is dropped */
            history_clear(&h, h.n - 1);
            continue;
        }
        if (st != ETCH_OK) {
            fprintf(stderr, "%s: %s\n", cli_name, etch_session_error(s));
            history_clear(&h, h.n - 1);
            if (!tty) {
                rc = 1;
                break;
            }
            continue;
        }
        if (etch_session_stats(s)->stop_reason == 2)
            fprintf(stderr, "%s: the context is full (%d positions): /reset to go on, or --shift N\n", cli_name,
                    etch_program_meta(p)->max_context_len);
        if (!history_add(&h, "assistant", answer ? answer : "", alen)) {
            rc = cli_fail("out of memory");
            break;
        }
    }
    cli_interrupt_end();
    history_clear(&h, 0);
    free(h.m), free(line), free(answer);
    etch_session_free(s);
    etch_program_close(p);
    return rc;
}
