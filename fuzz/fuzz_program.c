/* The program-file reader: header, metadata, directory, then the loader's checks of every key and
 * tensor, the tokenizer it builds, and one forward call when the program opens. The checksum over
 * header, metadata and directory is recomputed for the input (when its offsets allow), so mutations
 * reach the parsers behind it instead of stopping at the checksum. */
#include "fuzz.h"
#include "base/base.h"
#include "etch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static char path[600];
    if (!path[0]) fuzz_path(path, sizeof path, "program.etch");
    uint8_t *buf = malloc(n ? n : 1);
    memcpy(buf, data, n);
    if (n >= 96) {
        uint64_t meta_off = base_le64(buf + 24), dir_off = base_le64(buf + 40), dir_size = base_le64(buf + 48);
        if (meta_off <= n && dir_off <= n && dir_size <= n - dir_off && meta_off <= dir_off + dir_size) {
            uint64_t h = base_fnv1a(BASE_FNV_INIT, buf, 88);
            h = base_fnv1a(h, buf + meta_off, (size_t)(dir_off + dir_size - meta_off));
            for (int i = 0; i < 8; i++) buf[88 + i] = (uint8_t)(h >> (8 * i));
        }
    }
    fuzz_write(path, buf, n);
    free(buf);
    etch_program *p;
    etch_error err;
    if (etch_program_open(path, &p, &err) != ETCH_OK) return 0;
    const etch_method_meta *m = etch_program_meta(p);
    int32_t *ids = NULL, n_ids = 0;
    if (etch_tokenize(p, "Once upon a time", 16, 1, &ids, &n_ids, &err) == ETCH_OK) etch_free(ids);
    /* One forward call when the shapes are small (the fuzzer's files are). */
    if ((int64_t)m->dim * m->n_layers * (m->hidden_dim + m->max_context_len) < (1 << 22)) {
        etch_session *s;
        if (etch_session_new_threads(p, 1, &s, &err) == ETCH_OK) {
            float *logits = malloc((size_t)m->vocab_size * sizeof *logits);
            int32_t tok = 0;
            etch_forward(s, &tok, 1, 0, logits, 0);
            free(logits);
            etch_session_free(s);
        }
    }
    etch_program_close(p);
    return 0;
}
