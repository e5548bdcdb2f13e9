/* A Hugging Face tokenizer.json: model, vocabulary, merges, added tokens, normalizer and
 * pre-tokenizer; then the tokenizer it builds encodes and decodes a few strings. */
#include "fuzz.h"
#include "readers/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static char path[600];
    if (!path[0]) fuzz_path(path, sizeof path, "tokenizer.json");
    fuzz_write(path, data, n);
    imp_model m;
    etch_error err;
    if (imp_hf_tokenizer(path, &m, &err) != ETCH_OK) return 0;
    tok_spec spec;
    tok_tokenizer t;
    imp_tok_spec(&m, &spec);
    if (tok_init(&t, &spec, path, &err) == ETCH_OK) {
        static const char *texts[] = {"Hello, world!", "  spaces\tand\nlines ", "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80", "<|im_start|>user"};
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            int32_t *ids = NULL, n_ids = 0;
            if (tok_encode(&t, texts[i], strlen(texts[i]), TOK_BOS, NULL, &ids, &n_ids, &err) == ETCH_OK) {
                for (int32_t k = 0; k < n_ids; k++) {
                    size_t l;
                    tok_piece(&t, k ? ids[k - 1] : -1, ids[k], 0, &l);
                }
                free(ids);
            }
        }
        tok_free(&t);
    }
    imp_model_free(&m);
    return 0;
}
