/* The GGUF reader: header, key-values, tensor infos, the tokenizer it carries, the weights' bounds. */
#include "fuzz.h"
#include "readers/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static char path[600];
    if (!path[0]) fuzz_path(path, sizeof path, "model.gguf");
    fuzz_write(path, data, n);
    imp_model m;
    etch_error err;
    if (imp_gguf(path, &m, 0, &err) == ETCH_OK) imp_model_free(&m);
    return 0;
}
