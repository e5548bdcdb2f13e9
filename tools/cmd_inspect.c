/* etch inspect: a program's method metadata, metadata, tensors and checksums. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char inspect_help[] =
    "usage: etch inspect FILE [--no-verify-data]\n"
    "\n"
    "Prints a program's method metadata (as ExecuTorch's MethodMeta), its metadata table and tensor\n"
    "directory, and verifies its checksums.\n"
    "\n"
    "  --no-verify-data   skip hashing the tensor data (the header checksum is always verified)\n"
    "  -h, --help         this text\n";

int cmd_inspect(int argc, char **argv) {
    cli_name = "etch inspect";
    const char *path = NULL;
    int verify_data = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(inspect_help, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--no-verify-data")) {
            verify_data = 0;
        } else if (argv[i][0] == '-') {
            return cli_usage("unknown option '%s'", argv[i]);
        } else if (path) {
            return cli_usage("one FILE only");
        } else {
            path = argv[i];
        }
    }
    if (!path) return cli_usage("FILE is required");
    etch_error err;
    etch_program *p;
    if (etch_program_open(path, &p, &err) != ETCH_OK) return cli_fail(err.message);
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
            return cli_fail(msg);
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
    char types[128];
    cli_weight_types(p, types, sizeof types);
    printf("  weight matrices: %s (by bytes; get_dtype is the float type of the other tensors)\n", types);
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
        printf("  %-32s %-4s %-14s offset %10llu  %10llu bytes\n", t.name, t.dtype, shape,
               (unsigned long long)t.offset, (unsigned long long)t.nbytes);
    }
    etch_program_close(p);
    return 0;
}

