/* The stories260K tokenizer (score-ranked BPE with byte fallback): known ids, round trips over a
 * varied corpus, streaming decoding that never emits a broken character, invalid UTF-8. Added
 * tokens that begin one another: the longest wins, at every position. */
#include "base/base.h"
#include "stories.h"

#include <sys/stat.h>

static uint64_t rng = 99;
static uint32_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)rng;
}

/* Appends code point cp as UTF-8. */
static size_t put_cp(char *s, uint32_t cp) {
    if (cp < 0x80) return s[0] = (char)cp, 1;
    if (cp < 0x800) return s[0] = (char)(0xC0 | cp >> 6), s[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return s[0] = (char)(0xE0 | cp >> 12), s[1] = (char)(0x80 | (cp >> 6 & 63)), s[2] = (char)(0x80 | (cp & 63)), 3;
    return s[0] = (char)(0xF0 | cp >> 18), s[1] = (char)(0x80 | (cp >> 12 & 63)), s[2] = (char)(0x80 | (cp >> 6 & 63)),
           s[3] = (char)(0x80 | (cp & 63)), 4;
}

static void random_string(char *s, size_t cap) {
    static const uint32_t ranges[][2] = {{0x20, 0x7E},   {0x09, 0x0D},   {0xA0, 0x17F},  {0x400, 0x4FF},
                                         {0x4E00, 0x4FFF}, {0x1F600, 0x1F64F}, {0x3040, 0x30FF}, {0x600, 0x6FF},
                                         {0x01, 0x1F},   {0xE000, 0xE0FF}};
    size_t n = 0, len = next() % 60;
    for (size_t i = 0; i < len && n + 4 < cap; i++) {
        const uint32_t *r = ranges[next() % 10 < 6 ? 0 : next() % 10];
        n += put_cp(s + n, r[0] + next() % (r[1] - r[0] + 1));
    }
    s[n] = '\0';
}

static int round_trip(etch_program *p, const char *text, int *stream_ok) {
    int32_t *ids, n;
    etch_error err;
    if (etch_tokenize(p, text, strlen(text), 0, &ids, &n, &err) != ETCH_OK) return 0;
    char *back;
    size_t blen;
    int ok = etch_detokenize(p, ids, n, &back, &blen, &err) == ETCH_OK && blen == strlen(text) &&
             memcmp(back, text, blen) == 0;
    /* The same through the streaming decoder: every piece handed out is whole UTF-8. */
    etch_decoder *d;
    etch_decoder_new(p, &d);
    char acc[4096];
    size_t at = 0;
    *stream_ok = 1;
    for (int32_t i = 0; i <= n; i++) {
        size_t l;
        const char *s = i < n ? etch_decoder_push(d, i ? ids[i - 1] : -1, ids[i], &l) : etch_decoder_flush(d, &l);
        if (base_utf8_check((const uint8_t *)s, l) != l) *stream_ok = 0;
        if (at + l < sizeof acc) memcpy(acc + at, s, l);
        at += l;
    }
    if (at != strlen(text) || memcmp(acc, text, at) != 0) *stream_ok = 0;
    etch_decoder_free(d);
    etch_free(back);
    etch_free(ids);
    return ok;
}

/* Added tokens, some the beginning of others (as Gemma 3's runs of newlines and spaces are), in a
 * tokenizer.json with one token per character and no merges: at every position the longest added
 * token that starts there is taken (Hugging Face's leftmost-longest), and a duplicate piece is its
 * lowest id. */
static int test_added_longest(void) {
    const char *dir = check_tmp_path("added-tokens");
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    mkdir(dir, 0755);
    FILE *f = fopen(path, "wb");
    if (!check_record(f != NULL, "fopen", __FILE__, __LINE__, "write %s", path)) return 0;
    fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"x\": 2, \"<\": 3, \"|\": 4, \">\": 5, "
          "\"\\n\": 6}, \"merges\": []}, \"added_tokens\": ["
          "{\"id\": 10, \"content\": \"<|a|>\", \"special\": true}, "
          "{\"id\": 11, \"content\": \"<|a|>b\", \"special\": true}, "
          "{\"id\": 12, \"content\": \"<|ab\", \"special\": true}, "
          "{\"id\": 13, \"content\": \"<|\", \"special\": true}, "
          "{\"id\": 14, \"content\": \"\\n\\n\", \"special\": false}, "
          "{\"id\": 15, \"content\": \"\\n\\n\\n\", \"special\": false}, "
          "{\"id\": 16, \"content\": \"<|ab\", \"special\": true}]}", f);
    fclose(f);
    etch_tokenizer *t;
    etch_error err;
    if (!check_record(etch_tokenizer_open(path, &t, &err) == ETCH_OK, "open", __FILE__, __LINE__, "%s", err.message))
        return 0;
    static const struct {
        const char *text;
        int32_t n, want[12];
    } cases[] = {
        {"<|a|>bx<|a|>x<|ab", 5, {11, 2, 10, 2, 12}},
        {"<|a|", 3, {13, 0, 4}},
        {"\n\n\n\n\n<|", 3, {15, 14, 13}},
        {"x\n<|a|>b<|a|>", 4, {2, 6, 11, 10}},
        {"<<|ab>", 3, {3, 12, 5}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int32_t *ids = NULL, n = 0, want_n = cases[i].n;
        etch_status st = etch_tokenizer_encode(t, cases[i].text, strlen(cases[i].text), 0, &ids, &n, &err);
        CHECK(st == ETCH_OK && n == want_n && memcmp(ids, cases[i].want, (size_t)want_n * sizeof *ids) == 0,
              "added tokens in case %zu: %d ids, the first %d", i, n, n > 0 ? ids[0] : -1);
        etch_free(ids);
    }
    etch_tokenizer_close(t);
    return 1;
}

int main(void) {
    test_added_longest();
    const char *path = export_stories("tok.etch", 0, 0);
    REQUIRE(path, "export");
    etch_program *p;
    etch_error err;
    REQUIRE(etch_program_open(path, &p, &err) == ETCH_OK, "%s", err.message);

    int32_t *ids, n;
    REQUIRE(etch_tokenize(p, "Once upon a time", 16, 1, &ids, &n, &err) == ETCH_OK, "%s", err.message);
    int32_t want[] = {1, 403, 407, 261, 378};
    CHECK(n == 5 && memcmp(ids, want, sizeof want) == 0, "'Once upon a time' -> %d ids [%d, %d, ...]", n, ids[0],
          n > 1 ? ids[1] : -1);
    etch_free(ids);
    CHECK(etch_tokenize(p, "", 0, 1, &ids, &n, &err) == ETCH_OK && n == 1 && ids[0] == 1, "empty text is BOS only");
    etch_free(ids);
    CHECK(etch_tokenize(p, "\t", 1, 0, &ids, &n, &err) == ETCH_OK && n == 2 && ids[1] == 3 + 9,
          "a tab goes through byte fallback (<0x09> = id 12)");
    etch_free(ids);

    static const char *corpus[] = {
        "Once upon a time",
        "",
        " ",
        "   leading spaces",
        "trailing spaces   ",
        "two  spaces,   three,\t\ttabs\n\nnewlines\r\n",
        "Lily's mom said, \"Lily, let's go to the park.\"",
        "Punctuation!?.,;:'\"()[]{}<>/\\|@#$%^&*-_=+~`",
        "numbers 0 1 12 123 1234567890 3.14159 -42 1e10",
        "caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9",
        "\xe4\xb8\xad\xe6\x96\x87\xe6\xb5\x8b\xe8\xaf\x95",
        "emoji \xf0\x9f\x98\x80\xf0\x9f\x8e\x89 mixed",
        "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\xbc\xd0\xb8\xd1\x80",
        "<s> literal </s> and <0x41> and <unk>",
        "\x01\x02\x7f control bytes",
        "\n",
        "ends with newline\n",
        "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX.",
        "a",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "\xef\xbf\xbd replacement char, \xe2\x80\x8b zero width, \xc2\xa0 nbsp",
    };
    int bad = 0, bad_stream = 0, total = 0;
    for (size_t i = 0; i < sizeof corpus / sizeof *corpus; i++) {
        int s;
        total++;
        if (!round_trip(p, corpus[i], &s)) {
            bad++;
            fprintf(stderr, "round trip failed: '%s'\n", corpus[i]);
        }
        if (!s) bad_stream++;
    }
    char buf[512];
    for (int i = 0; i < 1000; i++) {
        random_string(buf, sizeof buf);
        int s;
        total++;
        if (!round_trip(p, buf, &s)) {
            bad++;
            if (bad < 5) fprintf(stderr, "round trip failed on random string %d\n", i);
        }
        if (!s) bad_stream++;
    }
    CHECK(bad == 0, "%d of %d strings do not round-trip", bad, total);
    CHECK(bad_stream == 0, "%d of %d strings broke the streaming decoder", bad_stream, total);

    /* Invalid UTF-8 is refused with the offset. */
    static const char *invalid[] = {"\xff", "abc\xc3", "\xed\xa0\x80", "\xc0\xaf", "ok\xf4\x90\x80\x80", "\x80"};
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++) {
        etch_status st = etch_tokenize(p, invalid[i], strlen(invalid[i]), 1, &ids, &n, &err);
        CHECK(st == ETCH_ERR_TEXT && strstr(err.message, "offset"), "invalid %zu: status %d '%s'", i, st, err.message);
    }

    /* A character split over byte tokens comes out whole, once complete; a broken one as U+FFFD. */
    etch_decoder *d;
    etch_decoder_new(p, &d);
    size_t l;
    int32_t euro[3] = {3 + 0xE2, 3 + 0x82, 3 + 0xAC};
    etch_decoder_push(d, 100, euro[0], &l);
    CHECK(l == 0, "first byte of a 3-byte character is held");
    etch_decoder_push(d, euro[0], euro[1], &l);
    CHECK(l == 0, "second byte is held");
    const char *s = etch_decoder_push(d, euro[1], euro[2], &l);
    CHECK(l == 3 && memcmp(s, "\xe2\x82\xac", 3) == 0, "the euro sign comes out whole");
    etch_decoder_push(d, 100, 3 + 0xE2, &l);
    s = etch_decoder_push(d, 3 + 0xE2, 3 + 'A', &l);
    CHECK(l == 4 && memcmp(s, "\xef\xbf\xbd" "A", 4) == 0, "a broken character becomes U+FFFD then A");
    etch_decoder_push(d, 100, 3 + 0xF0, &l);
    s = etch_decoder_flush(d, &l);
    CHECK(l == 3 && memcmp(s, "\xef\xbf\xbd", 3) == 0, "an unfinished character at the end is U+FFFD");
    etch_decoder_free(d);

    char *text;
    CHECK(etch_detokenize(p, (int32_t[]){1, 600}, 2, &text, NULL, &err) == ETCH_ERR_ARG && strstr(err.message, "600"),
          "out-of-range id: %s", err.message);
    etch_program_close(p);
    return check_done();
}
