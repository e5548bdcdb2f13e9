/* bench_tokenize: what pathological text costs a tokenizer. For each class of input (one repeated
 * letter, spaces, emoji, CJK, one long word, digits, English, special-token text, invalid UTF-8) at
 * 10 KB, 100 KB and 1 MB, on a byte-level BPE with a split regex (Qwen3's tokenizer.json) and a
 * SentencePiece-style BPE with byte fallback (Mistral's), it prints microseconds per byte, the growth
 * from one size to the next (10x the bytes: about 10x for linear work, 100x for quadratic), and the
 * peak of memory the tokenizer allocated per input byte. A program, not a test.
 * usage: bench_tokenize QWEN3_TOKENIZER.json MISTRAL_TOKENIZER.json [MAX_BYTES] */
#define _POSIX_C_SOURCE 200809L
#include "etch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The allocator hook counts the bytes live and their peak (etch_set_allocator). */
static size_t live, peak;
static void *counting(void *ud, void *ptr, size_t size) {
    (void)ud;
    size_t *h = ptr ? (size_t *)ptr - 2 : NULL;
    if (!size) {
        if (h) live -= h[0], free(h);
        return NULL;
    }
    if (h) live -= h[0];
    size_t *n = realloc(h, size + 2 * sizeof *n);
    if (!n) {
        if (h) live += h[0];
        return NULL;
    }
    n[0] = size, live += size;
    if (live > peak) peak = live;
    return n + 2;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Fills buf[n] by repeating unit, cut at a character boundary (never inside a UTF-8 sequence). */
static size_t fill(char *buf, size_t n, const char *unit) {
    size_t u = strlen(unit), i = 0;
    while (i + u <= n) memcpy(buf + i, unit, u), i += u;
    buf[i] = '\0';
    return i;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenize QWEN3_TOKENIZER.json MISTRAL_TOKENIZER.json [MAX_BYTES]\n");
        return 2;
    }
    size_t max = argc > 3 ? (size_t)strtoul(argv[3], NULL, 10) : 1000000;
    static const struct {
        const char *name, *unit;
    } classes[] = {
        {"one letter", "a"},
        {"spaces", " "},
        {"emoji", "\xF0\x9F\x98\x80"},
        {"CJK", "\xE4\xB8\xAD\xE6\x96\x87"},
        {"one long word", "abcdefghij"},
        {"digits", "0101010101"},
        {"English", "The quick brown fox jumps over the lazy dog, and then it rests. "},
        {"special tokens", "<|im_start|>user\nhi<|im_end|>\n"},
        {"invalid UTF-8", "ab\xC3"},
    };
    const char *names[2] = {"qwen3 (byte-level BPE, split regex)", "mistral (SentencePiece BPE, byte fallback)"};
    etch_set_allocator(counting, NULL);
    char *buf = malloc(max + 16);
    if (!buf) return 1;
    printf("| tokenizer | input | 10 KB us/byte | 100 KB us/byte | 1 MB us/byte | growth 10K->100K | growth 100K->1M | peak bytes/byte at the largest |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < 2; k++) {
        etch_tokenizer *t;
        etch_error err;
        if (etch_tokenizer_open(argv[1 + k], &t, &err) != ETCH_OK) {
            fprintf(stderr, "bench_tokenize: %s\n", err.message);
            return 1;
        }
        for (size_t c = 0; c < sizeof classes / sizeof *classes; c++) {
            double us[3] = {0};
            double per_byte_mem = 0;
            const char *status = "";
            size_t sizes[3] = {10000, 100000, 1000000};
            for (int i = 0; i < 3 && sizes[i] <= max; i++) {
                size_t n = fill(buf, sizes[i], classes[c].unit);
                int32_t *ids;
                int32_t n_ids;
                size_t base = live;
                peak = live;
                double t0 = now();
                etch_status st = etch_tokenizer_encode(t, buf, n, 0, &ids, &n_ids, &err);
                us[i] = (now() - t0) * 1e6 / (double)n;
                per_byte_mem = (double)(peak - base) / (double)n;
                if (st == ETCH_OK) etch_free(ids);
                else status = etch_status_string(st);
            }
            printf("| %s | %s%s%s | %.3f | %.3f | %.3f | %.1fx | %.1fx | %.1f |\n", k ? "mistral" : "qwen3",
                   classes[c].name, *status ? ", refused: " : "", status, us[0], us[1], us[2],
                   us[1] / us[0] * 10, us[2] > 0 ? us[2] / us[1] * 10 : 0, per_byte_mem);
            fflush(stdout);
        }
        etch_tokenizer_close(t);
        (void)names;
    }
    free(buf);
    return 0;
}
