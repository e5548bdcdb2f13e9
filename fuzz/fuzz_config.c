/* A Hugging Face config.json: architectures, shapes, RoPE scaling, Gemma-3 keys, sliding windows. */
#include "fuzz.h"
#include "readers/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static char path[600];
    if (!path[0]) fuzz_path(path, sizeof path, "config.json");
    fuzz_write(path, data, n);
    imp_model m;
    etch_error err;
    imp_hf_config(fuzz_dir(), &m, &err);
    return 0;
}
