/* etch serve: an OpenAI-compatible HTTP server (tools/serve/) for one model. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "serve/serve.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char serve_help[] =
    "usage: etch serve MODEL [--host 127.0.0.1] [--port 8080] [--slots N] [--api-key KEY | --api-key-file F]\n"
    "                  [-t N] [--queue N] [--max-body BYTES] [--timeout S] [--ctx N]\n"
    "\n"
    "Serves MODEL (a program, a GGUF file or a Hugging Face folder, exported on first use into the cache)\n"
    "through OpenAI's API: POST /v1/chat/completions and /v1/completions (streamed as server-sent events\n"
    "with \"stream\": true), GET /v1/models, /health, /metrics (Prometheus) and a chat page at /.\n"
    "Each slot is a session that keeps its last conversation, so a client that sends its history again\n"
    "pays only for the new turn. Requests past the slots wait in a queue; past the queue: 429.\n"
    "\n"
    "  --host ADDR        the IPv4 address to listen on (default 127.0.0.1: this machine only)\n"
    "  --port N           default 8080; 0 picks a free port (printed on stderr)\n"
    "  --slots N          sessions that answer at once (default 2)\n"
    "  --queue N          requests that may wait for a slot (default 16)\n"
    "  --api-key KEY      require Authorization: Bearer KEY on /v1/ (--api-key-file reads it from a file)\n"
    "  -t, --threads N    threads per slot (default: the physical cores divided among the slots)\n"
    "  --kv-type T        the slots' KV cache: f32, f16 or q8 (default: the program's)\n"
    "  --ctx N            the context when MODEL is exported here (default: the model's, at most 4096)\n"
    "  --max-tokens N     new tokens when a request names none (default 512)\n"
    "  --max-body BYTES   the largest request body (default 1048576): past it, 413\n"
    "  --timeout S        close a connection idle for S seconds, e.g. a body that never ends (default 30)\n"
    "  -h, --help         this text\n";

int cmd_serve(int argc, char **argv) {
    cli_name = "etch serve";
    serve_config cfg = {NULL, NULL, "127.0.0.1", NULL, 8080, 2, 16, 0, 1 << 20, 30, 512, NULL};
    const char *key_file = NULL, *path = NULL;
    long ctx = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(serve_help, stdout);
            return 0;
        } else if (!strcmp(a, "--host")) {
            if (!(cfg.host = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--port")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 0, 65535, &n)) return 2;
            cfg.port = (int)n;
        } else if (!strcmp(a, "--slots")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 64, &n)) return 2;
            cfg.n_slots = (int)n;
        } else if (!strcmp(a, "--queue")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 0, 4096, &n)) return 2;
            cfg.queue = (int)n;
        } else if (!strcmp(a, "--api-key")) {
            if (!(cfg.api_key = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--api-key-file")) {
            if (!(key_file = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--kv-type")) {
            if (!(cfg.kv_type = cli_take_kv_type(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 256, &n)) return 2;
            cfg.threads = (int)n;
        } else if (!strcmp(a, "--ctx")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 20, &ctx)) return 2;
        } else if (!strcmp(a, "--max-tokens")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, INT32_MAX, &n)) return 2;
            cfg.max_tokens_default = (int)n;
        } else if (!strcmp(a, "--max-body")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1024, 1L << 30, &n)) return 2;
            cfg.max_body = (size_t)n;
        } else if (!strcmp(a, "--timeout")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 3600, &n)) return 2;
            cfg.timeout_s = (int)n;
        } else if (a[0] == '-') {
            return cli_usage("unknown option '%s'", a);
        } else if (path) {
            return cli_usage("one MODEL only (got '%s' and '%s')", path, a);
        } else {
            path = a;
        }
    }
    if (!path) return cli_usage("MODEL is required");
    if (cfg.api_key && key_file) return cli_usage("--api-key and --api-key-file exclude each other");
    char *key_owned = NULL;
    if (key_file) {
        size_t len;
        if (!(key_owned = cli_slurp(key_file, &len))) return 1;
        while (len && (key_owned[len - 1] == '\n' || key_owned[len - 1] == '\r' || key_owned[len - 1] == ' '))
            key_owned[--len] = '\0';
        if (!len) {
            free(key_owned);
            return cli_failf("%s: the key file is empty", key_file);
        }
        cfg.api_key = key_owned;
    }
    if (cfg.api_key && !*cfg.api_key) return cli_usage("--api-key is empty");
    if (cfg.threads == 0) { /* the cores divided among the slots, at least one each */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cfg.threads = cores > cfg.n_slots ? (int)(cores / cfg.n_slots) : 1;
    }
    etch_error err;
    char prog[4096];
    etch_export_options eo = {ctx ? (int32_t)ctx : -4096, 0, NULL, NULL, cli_progress, NULL, NULL, NULL};
    if (etch_cached_program(path, NULL, &eo, prog, sizeof prog, NULL, &err) != ETCH_OK) {
        free(key_owned);
        return cli_fail(err.message);
    }
    cfg.program_path = prog;
    const char *slash = strrchr(path, '/');
    char name[256];
    snprintf(name, sizeof name, "%s", slash && slash[1] ? slash + 1 : path);
    size_t nl = strlen(name);
    while (nl && name[nl - 1] == '/') name[--nl] = '\0';
    cfg.model_name = name;
    int rc = serve_run(&cfg);
    free(key_owned);
    return rc;
}
