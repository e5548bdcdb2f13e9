/* etch: the command line. A table of commands, each in its own file (tools/cmd_*.c) over the helper
 * layer in tools/cli.c. Every error prints one line "etch COMMAND: ..." naming the file or option,
 * and exits non-zero: 1 for a failure at run time, 2 for a usage error. */
#include "cli.h"

#include <string.h>

static const struct {
    const char *name, *what;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"export", "convert a model (llama2.c, Hugging Face folder, GGUF) into a program file", cmd_export},
    {"run", "generate text with a program, with ExecuTorch-style stats", cmd_run},
    {"chat", "talk with a model in its chat template, each turn prefilling only what is new", cmd_chat},
    {"serve", "an OpenAI-compatible HTTP server with a chat page, slots that keep conversations", cmd_serve},
    {"inspect", "print a program's method metadata and tensors, verify its checksums", cmd_inspect},
    {"tokenize", "print the token ids of a text (or the text of ids)", cmd_tokenize},
    {"quantize", "quantize a program (8w, 4w, 8da8w, 8da4w, a8w8 calibrated by prefill)", cmd_quantize},
    {"synth", "write a model with seeded random weights (Hugging Face folder or GGUF)", cmd_synth},
    {"bench", "measure prefill, decode, time to first token, against the machine's peaks", cmd_bench},
    {"eval", "perplexity over a text, and divergence from a reference program (KL, top-1)", cmd_eval},
};

static void usage(FILE *f) {
    fputs("etch " ETCH_VERSION_STRING ": run causal language models on a CPU from ahead-of-time exported programs\n"
          "\n"
          "usage: etch COMMAND [options]     (etch COMMAND --help for its options)\n"
          "\n"
          "commands:\n",
          f);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].what);
    fprintf(f, "  %-10s %s\n", "version", "print the version");
}

int main(int argc, char **argv) {
    if (argc < 2) { /* a usage error: the help goes where errors go */
        usage(stderr);
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(c, "version") || !strcmp(c, "--version")) {
        printf("etch %s\n", etch_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(c, commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    return cli_usage("unknown command '%s'", c);
}
