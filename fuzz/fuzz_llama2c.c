/* A llama2.c checkpoint and tokenizer.bin: the input's first byte picks which one is fuzzed; the other
 * is stories260K's own. */
#include "fuzz.h"
#include "import/import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static char path[600], model[1100], tok[1100];
    if (!path[0]) {
        fuzz_path(path, sizeof path, "llama2c.bin");
        snprintf(model, sizeof model, "%s/stories260K/stories260K.bin", fuzz_models_dir());
        snprintf(tok, sizeof tok, "%s/stories260K/tok512.bin", fuzz_models_dir());
    }
    if (n < 1) return 0;
    fuzz_write(path, data + 1, n - 1);
    imp_model m;
    etch_error err;
    int fuzz_model = data[0] & 1;
    if (imp_llama2c(fuzz_model ? path : model, fuzz_model ? tok : path, &m, &err) == ETCH_OK) imp_model_free(&m);
    return 0;
}
