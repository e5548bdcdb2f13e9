/* The real Hugging Face tokenizers (Qwen3 byte-level BPE with NFC, Mistral SentencePiece-style BPE
 * with byte fallback), as programs carry them: decode(encode(x)) == x over the conformance corpus
 * (NFC(x) for Qwen3, whose normalizer is NFC), and the streaming decoder gives the same text without
 * ever handing out a broken UTF-8 character.
 *
 * One exclusion, by design of the reference: a SentencePiece-style tokenizer ("sp") prepends its
 * dummy-prefix space to every piece of text between added tokens (Hugging Face's Prepend normalizer
 * runs per segment; llama.cpp prefixes after a special token too), so "a</s>b" decodes as
 * "a</s> b". Strings with special tokens written in them are therefore not expected to round-trip
 * through an "sp" tokenizer; their ids are checked against the reference by conformance_tokenizers.
 * usage: test_hf_tokenizers corpus.json PROGRAM.etch nfc|sp|plain [PROGRAM.etch MODE ...] */
#include "base/base.h"
#include "check.h"
#include "etch.h"

#include <cjson/cJSON.h>
#include <string.h>
#include <utf8proc.h>

int main(int argc, char **argv) {
    if (argc < 4 || argc % 2) {
        fprintf(stderr, "usage: test_hf_tokenizers corpus.json PROGRAM.etch nfc [...]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    REQUIRE(f, "cannot read %s", argv[1]);
    static char buf[1 << 22];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    cJSON *corpus = cJSON_Parse(buf);
    REQUIRE(cJSON_IsArray(corpus) && cJSON_GetArraySize(corpus) >= 2000, "corpus of 2000+ strings");
    for (int a = 2; a + 1 < argc; a += 2) {
        etch_program *p;
        etch_error err;
        REQUIRE(etch_program_open(argv[a], &p, &err) == ETCH_OK, "%s", err.message);
        int nfc = !strcmp(argv[a + 1], "nfc"), sp = !strcmp(argv[a + 1], "sp"), bad = 0, bad_stream = 0, total = 0,
            excluded = 0;
        for (const cJSON *e = corpus->child; e; e = e->next) {
            const char *x = e->valuestring; /* cJSON ends a string at an embedded NUL: still a valid input */
            size_t xl = strlen(x);
            char *want = nfc ? (char *)utf8proc_NFC((const utf8proc_uint8_t *)x) : NULL;
            const char *w = want ? want : x;
            int32_t *ids, n_ids;
            char *back = NULL;
            size_t bl = 0;
            int has_special = strstr(x, "<|") || strstr(x, "<s>") || strstr(x, "</s>") || strstr(x, "<unk>") ||
                              strstr(x, "<think>") || strstr(x, "</think>");
            if (sp && has_special) {
                excluded++;
                free(want);
                continue;
            }
            total++;
            if (etch_tokenize(p, x, xl, 0, &ids, &n_ids, &err) != ETCH_OK) {
                bad++;
                fprintf(stderr, "%s: encode failed on string %d: %s\n", argv[a], total - 1, err.message);
                free(want);
                continue;
            }
            if (etch_detokenize(p, ids, n_ids, &back, &bl, &err) != ETCH_OK || bl != strlen(w) || memcmp(back, w, bl)) {
                if (bad++ < 5) fprintf(stderr, "%s: round trip differs on string %d: '%s' -> '%s'\n", argv[a], total - 1, x, back);
            }
            /* Streaming: control tokens give no text there, so compare with the non-control text. */
            etch_decoder *d;
            etch_decoder_new(p, &d);
            char acc[1 << 15];
            size_t at = 0;
            int broken = 0;
            for (int32_t i = 0; i <= n_ids; i++) {
                size_t l;
                const char *s = i < n_ids ? etch_decoder_push(d, i ? ids[i - 1] : -1, ids[i], &l) : etch_decoder_flush(d, &l);
                if (base_utf8_check((const uint8_t *)s, l) != l) broken = 1;
                if (at + l < sizeof acc) memcpy(acc + at, s, l);
                at += l;
            }
            etch_decoder_free(d);
            /* Without special tokens the streamed text must equal the full decode. */
            if (broken || (!has_special && (at != bl || memcmp(acc, back, at)))) bad_stream++;
            etch_free(back);
            etch_free(ids);
            free(want);
        }
        printf("%s: %d strings, %d round trips differ, %d streams differ or broke a character%s\n", argv[a], total, bad,
               bad_stream, sp ? " (strings with special tokens excluded, see the top of this file)" : "");
        if (sp) CHECK(total >= 2000 && excluded > 0, "%d strings compared, %d excluded", total, excluded);
        CHECK(bad == 0, "%s: %d of %d strings do not round-trip", argv[a], bad, total);
        CHECK(bad_stream == 0, "%s: %d of %d streams differ", argv[a], bad_stream, total);
        etch_program_close(p);
    }
    cJSON_Delete(corpus);
    return check_done();
}
