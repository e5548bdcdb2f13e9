/* One safetensors file: the 8-byte header length, the JSON header, shapes, dtypes and offsets. */
#include "fuzz.h"
#include "readers/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static char path[600];
    if (!path[0]) fuzz_path(path, sizeof path, "model.safetensors");
    fuzz_write(path, data, n);
    imp_model m;
    etch_error err;
    if (imp_safetensors(path, &m, &err) == ETCH_OK) imp_model_free(&m);
    return 0;
}
