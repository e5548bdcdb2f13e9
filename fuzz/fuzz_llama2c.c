/* A llama2.c checkpoint and tokenizer.bin: the input's first byte picks which one is fuzzed; the other
 * is the small valid one from the seeds (fuzz/seeds/llama2c, written without its selector byte). */
#include "fuzz.h"
#include "readers/reader.h"

/* Copies a seed file without its first byte to dst. */
static void partner(const char *seed, const char *dst) {
    FILE *f = fopen(seed, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_llama2c: cannot open %s\n", seed);
        abort();
    }
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (n < 1) abort();
    fuzz_write(dst, buf + 1, n - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static char path[600], model[600], tok[600];
    if (!path[0]) {
        fuzz_path(path, sizeof path, "llama2c.bin");
        fuzz_path(model, sizeof model, "partner-checkpoint.bin");
        fuzz_path(tok, sizeof tok, "partner-tokenizer.bin");
        partner(ETCH_SOURCE_DIR "/fuzz/seeds/llama2c/checkpoint", model);
        partner(ETCH_SOURCE_DIR "/fuzz/seeds/llama2c/tokenizer", tok);
    }
    if (n < 1) return 0;
    fuzz_write(path, data + 1, n - 1);
    imp_model m;
    etch_error err;
    int fuzz_model = data[0] & 1;
    if (imp_llama2c(fuzz_model ? path : model, fuzz_model ? tok : path, &m, &err) == ETCH_OK) imp_model_free(&m);
    return 0;
}
