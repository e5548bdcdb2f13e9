/* etch quantize: a program into a quantized one (weight-only, dynamic or calibrated int8 activations). */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char quantize_help[] =
    "usage: etch quantize IN.etch -o OUT.etch --scheme S [--group-size N] [--act-group N] [--qembedding 8w|4w]\n"
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
    "Matrices already q8 or q4 (a GGUF's block types, kept as they are by `etch export --activations\n"
    "f32`; the default export has converted them already) convert under 8da8w,\n"
    "8da4w or a8w8 to i8 or i4, their own width, with their values, groups, scales and mins as they are:\n"
    "nothing rounded again. Matrices with mins are rounded from their weights under a8w8, 8w and 4w;\n"
    "8w and 4w refuse the others (weight-only already).\n"
    "\n"
    "  --group-size N   values per scale along the input (default: the scheme's)\n"
    "  --act-group N    8da8w, 8da4w: one activation scale per N values of a token instead of one per\n"
    "                   token (N even, a multiple of the weights' groups; 32 quantizes activations as\n"
    "                   llama.cpp does for Q4_0 and Q8_0, each group's scale kept in f16 as its Q8_0)\n"
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

/* Whether program p has a tensor of that name; its entry in *t. */
static int find_tensor(const etch_program *p, const char *name, etch_tensor_info *t) {
    for (int32_t i = 0; etch_program_tensor(p, i, t) == ETCH_OK; i++)
        if (!strcmp(t->name, name)) return 1;
    return 0;
}

int cmd_quantize(int argc, char **argv) {
    cli_name = "etch quantize";
    const char *in = NULL, *out = NULL, *calib[64];
    int n_calib = 0;
    etch_calib_report report;
    etch_quantize_options o = {.report = &report, .report_line = print_line, .progress = cli_progress};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(quantize_help, stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--scheme")) {
            if (!(o.scheme = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--qembedding")) {
            if (!(o.qembedding = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--calib")) {
            if (!(v = cli_take(argc, argv, &i))) return 2;
            if (n_calib == 64) return cli_usage("at most 64 --calib files");
            calib[n_calib++] = v;
        } else if (!strcmp(a, "--calib-mode")) {
            if (!(o.calib_mode = cli_take(argc, argv, &i))) return 2;
            if (strcmp(o.calib_mode, "prefill") && strcmp(o.calib_mode, "generate"))
                return cli_usage("--calib-mode expects prefill or generate, got '%s'", o.calib_mode);
        } else if (!strcmp(a, "--observer")) {
            if (!(o.observer = cli_take(argc, argv, &i))) return 2;
            if (strcmp(o.observer, "minmax") && strcmp(o.observer, "moving-average") && strcmp(o.observer, "percentile") &&
                strcmp(o.observer, "mse"))
                return cli_usage("--observer expects minmax, moving-average, percentile or mse, got '%s'", o.observer);
        } else if (!strcmp(a, "--group-size") || !strcmp(a, "--act-group") || !strcmp(a, "--calib-limit") || !strcmp(a, "--gen-tokens") ||
                   !strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_take(argc, argv, &i)) || !cli_parse_int(a, v, 1, 1 << 20, &n)) return 2;
            int32_t *dst = !strcmp(a, "--group-size") ? &o.group_size : !strcmp(a, "--act-group") ? &o.act_group
                         : !strcmp(a, "--calib-limit") ? &o.calib_limit
                         : !strcmp(a, "--gen-tokens") ? &o.gen_tokens : &o.threads;
            *dst = (int32_t)n;
        } else if (a[0] == '-') {
            return cli_usage("unknown option '%s'", a);
        } else if (in) {
            return cli_usage("one input program, got '%s' and '%s'", in, a);
        } else {
            in = a;
        }
    }
    if (!in) return cli_usage("give the program to quantize");
    if (!out) return cli_usage("-o OUT.etch is required");
    if (!o.scheme) return cli_usage("--scheme 8w|4w|8da8w|8da4w|a8w8 is required");
    if (strcmp(o.scheme, "8w") && strcmp(o.scheme, "4w") && strcmp(o.scheme, "8da8w") && strcmp(o.scheme, "8da4w") &&
        strcmp(o.scheme, "a8w8"))
        return cli_usage("--scheme expects 8w, 4w, 8da8w, 8da4w or a8w8, got '%s'", o.scheme);
    if (o.qembedding && strcmp(o.qembedding, "8w") && strcmp(o.qembedding, "4w"))
        return cli_usage("--qembedding expects 8w or 4w, got '%s'", o.qembedding);
    if (!strcmp(o.scheme, "a8w8") && !n_calib) return cli_usage("a8w8 needs calibration samples: --calib FILE");
    if (strcmp(o.scheme, "a8w8") && n_calib)
        return cli_usage("--calib sets static activation ranges: only a8w8 has them (%s does not)", o.scheme);
    o.calib_files = calib, o.n_calib_files = n_calib;
    etch_error err;
    double t0 = cli_seconds();
    if (n_calib)
        snprintf(calib_header, sizeof calib_header, "calibration (%s mode, %s observer), per observed layer input:",
                 o.calib_mode ? o.calib_mode : "prefill", o.observer ? o.observer : "minmax");
    if (etch_quantize(in, out, &o, &err) != ETCH_OK) return cli_fail(err.message);
    if (n_calib) {
        fprintf(stderr, "calibrated on %d sample%s: %lld tokens observed (%lld generated one at a time) in %.2f s, %.1f tokens/s\n",
                report.samples, report.samples == 1 ? "" : "s", (long long)report.tokens, (long long)report.generated, report.seconds,
                report.seconds > 0 ? (double)report.tokens / report.seconds : 0.0);
        fprintf(stderr, "special and added tokens seen: %d of %d\n", report.n_special_seen, report.n_special);
        if (report.n_special_seen < report.n_special)
            fprintf(stderr, "warning: the calibration data never contains these special tokens, so their activations "
                            "were not observed: %s\n", report.missing);
    }
    etch_program *p, *src;
    if (etch_program_open(out, &p, &err) != ETCH_OK) return cli_fail(err.message);
    if (etch_program_open(in, &src, &err) != ETCH_OK) {
        etch_program_close(p);
        return cli_fail(err.message);
    }
    etch_program_info a, b;
    etch_program_info_get(src, &a);
    etch_program_info_get(p, &b);
    fprintf(stderr, "wrote %s in %.2f s: %s, %llu bytes (%.1f%% of %s's %llu)\n", out, cli_seconds() - t0, o.scheme,
            (unsigned long long)b.file_size, 100.0 * (double)b.file_size / (double)a.file_size, in,
            (unsigned long long)a.file_size);
    if (b.file_size > a.file_size + a.file_size / 100 && !o.qembedding && etch_program_meta(src)->tied_embeddings)
        fprintf(stderr, "%s: note: the output is larger than its input: this model's embedding table is tied to its "
                        "classifier and stays in the input's type; --qembedding 8w or 4w quantizes it too\n", cli_name);
    /* Which matrices kept their values (q8/q4 in the input, a GGUF's block types, converted as they
     * are: with their mins, if any, where the output keeps them) and which were rounded from their
     * weights, said when the input had any quantized matrix. */
    int kept = 0, rounded = 0, quantized_in = 0;
    etch_tensor_info ti, to, tm;
    for (int32_t i = 0; etch_program_tensor(src, i, &ti) == ETCH_OK; i++) {
        int quant_in = !strcmp(ti.dtype, "q8") || !strcmp(ti.dtype, "q4");
        quantized_in |= quant_in;
        if (ti.ndim != 2 || !find_tensor(p, ti.name, &to)) continue;
        char mname[160];
        snprintf(mname, sizeof mname, "%s.min", ti.name);
        int min_in = find_tensor(src, mname, &tm), min_out = find_tensor(p, mname, &tm);
        if (strcmp(to.dtype, ti.dtype) || min_in != min_out) quant_in && min_in == min_out ? kept++ : rounded++;
    }
    if (quantized_in)
        fprintf(stderr, "%d matri%s converted as %s, nothing rounded again; %d rounded from float weights\n", kept,
                kept == 1 ? "x" : "ces", kept == 1 ? "it was" : "they were", rounded);
    etch_program_close(src);
    etch_program_close(p);
    return 0;
}

