/* etch synth: a model with seeded random weights, as a Hugging Face folder or a GGUF file. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    "  --dtype T          f32 (default), f16, bf16; GGUF also q8_0, q4_0, q4_1, q5_1, q4_k, q5_k, iq4_nl, iq4_xs\n"
    "  --sliding-window N gemma3: the window of its local layers (default 512; every sixth layer is global)\n"
    "  -h, --help         this text\n";

int cmd_synth(int argc, char **argv) {
    cli_name = "etch synth";
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
                if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 20, &n)) return 2;
                *ints[k].dst = (int32_t)n;
                matched = 1;
            }
        if (matched) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(synth_help, stdout);
            return 0;
        } else if (!strcmp(a, "--arch")) {
            if (!(o.arch = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--preset")) {
            if (!(o.preset = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!(o.tokenizer = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--format")) {
            if (!(o.format = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--dtype")) {
            if (!(o.dtype = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_u64(a, v, &o.seed)) return 2;
        } else if (!strcmp(a, "--std")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_float(a, v, 1e-6, 100.0, &d)) return 2;
            o.std = (float)d;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_take(argc, argv, &i))) return 2;
        } else {
            return cli_usage("unknown option '%s'", a);
        }
    }
    if (!o.arch) return cli_usage("--arch is required");
    if (!o.tokenizer) return cli_usage("--tokenizer tokenizer.json is required");
    if (!o.format) return cli_usage("--format hf|gguf is required");
    if (!out) return cli_usage("-o PATH is required");
    etch_error err;
    double t0 = cli_seconds();
    if (etch_synth(&o, out, &err) != ETCH_OK) return cli_fail(err.message);
    fprintf(stderr, "wrote %s (%s, %s) in %.2f s\n", out, o.format, o.dtype ? o.dtype : "f32", cli_seconds() - t0);
    return 0;
}

