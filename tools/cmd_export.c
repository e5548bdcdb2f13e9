/* etch export: a model (llama2.c, Hugging Face folder, GGUF) into a program file. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char export_help[] =
    "usage: etch export (--llama2c MODEL.bin --tokenizer TOK.bin | --hf DIR | --gguf FILE) -o OUT.etch [options]\n"
    "\n"
    "Converts a model into one program file: weights in the layout the kernels read, the tokenizer,\n"
    "and the method metadata. Weights are converted once, here; the runtime converts nothing.\n"
    "\n"
    "  --llama2c FILE          a llama2.c checkpoint (legacy version 0 format)\n"
    "  --tokenizer FILE        its tokenizer.bin\n"
    "  --hf DIR                a Hugging Face folder: config.json, model.safetensors (or sharded),\n"
    "                          tokenizer.json, tokenizer_config.json (Llama, Qwen2, Qwen3, Mistral, Gemma 3)\n"
    "  --gguf FILE             a GGUF file (version 2 or 3) with its tokenizer (llama, qwen2, qwen3,\n"
    "                          gemma3): F32, F16, BF16; Q8_0, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K and\n"
    "                          Q6_K kept as they are, exactly (the 4-bit ones as q4, the others as int8\n"
    "                          values; with their scales and, for Q4_1/Q4_K/Q5_1/Q5_K, their mins)\n"
    "  -o, --output FILE       the program file to write (replaced only when complete)\n"
    "  --dtype f32|f16|bf16    weight type in the program (default: the source's; f16 for quantized\n"
    "                          GGUF, whose quantized matrices stay as they are unless a dtype is asked\n"
    "                          for, which dequantizes them)\n"
    "  --activations int8|f32  a GGUF's quantized matrices (default int8): laid out for int8 dot\n"
    "                          products, activations rounded to int8 per 32 values at run time, as\n"
    "                          llama.cpp rounds them (faster prefill); f32: weight-only with f32\n"
    "                          activations, the file's weights and arithmetic exactly\n"
    "  --chat-template NAME    chatml, qwen3, llama3, llama2 or none (default: recognized from the source)\n"
    "  --max-context-len N     KV-cache length (default: the model's context length, at most 4096 for\n"
    "                          Hugging Face and GGUF models)\n"
    "  --max-seq-len N         the most tokens one forward call takes (default 128, clamped to the\n"
    "                          context); prompts prefill in chunks of this size\n"
    "  --static                a program that takes one token per call (max_seq_len 1)\n"
    "  --kv-type f32|f16|q8    the KV cache sessions keep unless they ask for another (default: etch's,\n"
    "                          " ETCH_DEFAULT_KV_TYPE ")\n"
    "  -h, --help              this text\n";

int cmd_export(int argc, char **argv) {
    cli_name = "etch export";
    const char *model = NULL, *tok = NULL, *out = NULL, *hf = NULL, *gguf = NULL;
    etch_export_options opt = {0, 0, NULL, NULL, cli_progress, NULL, NULL, NULL};
    int is_static = 0, have_seq = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(export_help, stdout);
            return 0;
        } else if (!strcmp(a, "--llama2c")) {
            if (!(model = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!(tok = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--hf")) {
            if (!(hf = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--gguf")) {
            if (!(gguf = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--kv-type")) {
            if (!(opt.kv_type = cli_take_kv_type(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--dtype")) {
            if (!(opt.dtype = cli_take(argc, argv, &i))) return 2;
            if (strcmp(opt.dtype, "f32") && strcmp(opt.dtype, "f16") && strcmp(opt.dtype, "bf16"))
                return cli_usage("--dtype expects f32, f16 or bf16, got '%s'", opt.dtype);
        } else if (!strcmp(a, "--activations")) {
            if (!(opt.activations = cli_take(argc, argv, &i))) return 2;
            if (strcmp(opt.activations, "int8") && strcmp(opt.activations, "f32"))
                return cli_usage("--activations expects int8 or f32, got '%s'", opt.activations);
        } else if (!strcmp(a, "--chat-template")) {
            if (!(opt.chat_template = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--max-context-len")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 20, &n)) return 2;
            opt.max_context_len = (int32_t)n;
        } else if (!strcmp(a, "--max-seq-len")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 20, &n)) return 2;
            opt.max_seq_len = (int32_t)n;
            have_seq = 1;
        } else if (!strcmp(a, "--static")) {
            is_static = 1;
        } else {
            return cli_usage("unknown option '%s'", a);
        }
    }
    if (!!model + !!hf + !!gguf != 1) return cli_usage("give one source: --llama2c, --hf or --gguf");
    if (model && !tok) return cli_usage("--tokenizer TOK.bin is required with --llama2c");
    if (!model && tok) return cli_usage("--tokenizer goes with --llama2c (Hugging Face and GGUF carry their own)");
    if (!out) return cli_usage("-o OUT.etch is required");
    if (is_static && have_seq) return cli_usage("--static and --max-seq-len exclude each other");
    if (is_static) opt.max_seq_len = 1;
    if ((hf || gguf) && opt.max_context_len == 0) opt.max_context_len = -4096; /* "the model's, at most 4096" */
    etch_error err;
    double t0 = cli_seconds();
    etch_status st = model ? etch_export_llama2c(model, tok, out, &opt, &err)
                     : hf  ? etch_export_hf(hf, out, &opt, &err)
                           : etch_export_gguf(gguf, out, &opt, &err);
    if (st != ETCH_OK) return cli_fail(err.message);
    etch_program *p;
    if (etch_program_open(out, &p, &err) != ETCH_OK) return cli_fail(err.message);
    const etch_method_meta *m = etch_program_meta(p);
    etch_program_info info;
    etch_program_info_get(p, &info);
    const char *kept = ""; /* GGUF's quantized matrices, when export kept them */
    char line[256];
    long trained = 0;
    int int8 = 0;
    for (int32_t i = 0; i < info.n_metadata; i++) {
        if (etch_program_metadata_text(p, i, line, sizeof line) <= 0) continue;
        if (!strncmp(line, "quant.scheme: \"gguf\"", 21)) kept = " (GGUF's quantized matrices kept as they are)";
        if (!strncmp(line, "quant.act_group: ", 17)) int8 = 1;
        if (!strncmp(line, "source_context_len: ", 20)) trained = strtol(line + 20, NULL, 10);
    }
    if (*kept && int8) kept = " (GGUF's quantized matrices kept as they are, for int8 activations per 32 values)";
    fprintf(stderr, "wrote %s in %.2f s: %llu bytes, %llu parameters, %s%s, max_seq_len %d, max_context_len %d%s\n", out,
            cli_seconds() - t0, (unsigned long long)info.file_size, (unsigned long long)info.n_parameters, m->dtype, kept,
            m->max_seq_len, m->max_context_len, m->max_seq_len == 1 ? " (static: one token per call)" : "");
    if (*kept) /* the arithmetic is a choice between speed and the file's exact weights: said either way */
        fprintf(stderr, int8 ? "%s: activations are rounded to int8 per 32 values, as llama.cpp rounds them; --activations f32 "
                               "keeps them f32 (the file's arithmetic exactly, slower prefill)\n"
                             : "%s: they keep f32 activations (the file's arithmetic exactly); the default, --activations int8, "
                               "rounds them per 32 values as llama.cpp does (faster prefill)\n", cli_name);
    if (trained > 0 && m->max_context_len > trained)
        fprintf(stderr, "%s: warning: max_context_len %d is past the %ld positions the model was trained on: "
                        "text beyond them is usually poor\n", cli_name, m->max_context_len, trained);
    etch_program_close(p);
    return 0;
}

