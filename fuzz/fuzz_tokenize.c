/* Tokenizer encode and decode on arbitrary bytes, with two real tokenizers: stories260K's
 * (SentencePiece-style scores, byte fallback) and Qwen3's tokenizer.json (byte-level BPE, NFC, a split
 * regex, added tokens). Invalid UTF-8 must be refused, valid text must round-trip through decode
 * without a crash; the input read as ids exercises decode's range checks. */
#include "fuzz_stories.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static etch_tokenizer *qwen;
    etch_program *p = fuzz_stories(64);
    etch_error err;
    if (!qwen) {
        char path[1200];
        const char *t = getenv("ETCH_TOKENIZERS_DIR");
        if (t && *t) snprintf(path, sizeof path, "%s/qwen3/tokenizer.json", t);
        else snprintf(path, sizeof path, "%s/../tokenizers/qwen3/tokenizer.json", fuzz_models_dir());
        if (etch_tokenizer_open(path, &qwen, &err) != ETCH_OK) {
            fprintf(stderr, "fuzz: %s\n", err.message);
            abort();
        }
    }
    int32_t *ids = NULL, n_ids = 0;
    char *text = NULL;
    size_t len = 0;
    if (etch_tokenize(p, (const char *)data, n, 1, &ids, &n_ids, &err) == ETCH_OK) {
        if (etch_detokenize(p, ids, n_ids, &text, &len, &err) == ETCH_OK) etch_free(text);
        etch_free(ids);
    }
    if (etch_tokenizer_encode(qwen, (const char *)data, n, 0, &ids, &n_ids, &err) == ETCH_OK) {
        if (etch_tokenizer_decode(qwen, ids, n_ids, &text, &len, &err) == ETCH_OK) etch_free(text);
        etch_free(ids);
    }
    /* The bytes as ids (in or out of range), through decode and the streaming decoder. */
    int32_t raw[64];
    int32_t k = (int32_t)(n / 4 < 64 ? n / 4 : 64);
    memcpy(raw, data, (size_t)k * 4);
    for (int32_t i = 0; i < k; i++) raw[i] = raw[i] % 200000;
    if (etch_tokenizer_decode(qwen, raw, k, &text, &len, &err) == ETCH_OK) etch_free(text);
    etch_decoder *d;
    if (etch_decoder_new(p, &d) == ETCH_OK) {
        for (int32_t i = 0; i < k; i++)
            if (raw[i] >= 0 && raw[i] < etch_program_meta(p)->vocab_size) etch_decoder_push(d, i ? raw[i - 1] : -1, raw[i], &len);
        etch_decoder_flush(d, &len);
        etch_decoder_free(d);
    }
    return 0;
}
