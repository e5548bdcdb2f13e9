/* etch tokenize: token ids of a text, the text of ids, or a JSON batch. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char tokenize_help[] =
    "usage: etch tokenize SOURCE [--file F | TEXT | --batch FILE.json] [--decode] [--bos]\n"
    "\n"
    "Prints the ids of TEXT (or of the file F) as a JSON array. SOURCE is a program file, a Hugging\n"
    "Face tokenizer.json (or the folder holding it), or a GGUF file. Special tokens written in the\n"
    "text are matched (as Hugging Face does by default); no BOS unless --bos.\n"
    "\n"
    "  --file F          read the text from F\n"
    "  --batch FILE.json a JSON array of strings: print one JSON array holding each string's ids\n"
    "  --bos             prepend the BOS id (when the tokenizer has one)\n"
    "  --decode          the input is ids (a JSON array or whitespace/comma separated): print the text\n"
    "  -h, --help        this text\n";

/* Reads a whole file into a NUL-terminated malloc'ed buffer. */
static int tokenize_batch(etch_tokenizer *t, const char *file, int bos) {
    size_t len;
    char *text = cli_slurp(file, &len);
    if (!text) return 1;
    char *buf = malloc(len + 1); /* a decoded string is never longer than its JSON text */
    const char *p = text, *end = text + len;
    int i = 0, rc = 0;
#define SKIP_WS() while (p < end && strchr(" \t\r\n", *p)) p++
    SKIP_WS();
    if (!buf || p >= end || *p++ != '[') rc = 1;
    SKIP_WS();
    if (!rc) fputc('[', stdout);
    while (!rc && p < end && *p != ']') {
        long n;
        if (*p != '"' || (p++, n = cli_json_string_at(&p, end, buf)) < 0) {
            fprintf(stderr, "%s: %s: element %d is not a valid JSON string\n", cli_name, file, i);
            rc = 2;
            break;
        }
        int32_t *ids, n_ids;
        etch_error err;
        if (etch_tokenizer_encode(t, buf, (size_t)n, bos, &ids, &n_ids, &err) != ETCH_OK) {
            fprintf(stderr, "\n%s: %s: element %d: %s\n", cli_name, file, i, err.message);
            rc = 2;
            break;
        }
        if (i++) fputc(',', stdout);
        cli_json_ids(stdout, ids, n_ids);
        etch_free(ids);
        SKIP_WS();
        if (p < end && *p == ',') {
            p++;
            SKIP_WS();
        } else if (p < end && *p != ']') {
            rc = 1;
        }
    }
    if (!rc && (p >= end || *p != ']')) rc = 1;
#undef SKIP_WS
    if (rc == 1) fprintf(stderr, "%s: %s: not a JSON array of strings (near byte %ld)\n", cli_name, file, (long)(p - text));
    if (!rc) fputs("]\n", stdout);
    free(buf);
    free(text);
    return rc ? 1 : 0;
}

int cmd_tokenize(int argc, char **argv) {
    cli_name = "etch tokenize";
    const char *src = NULL, *text = NULL, *file = NULL, *batch = NULL;
    int decode = 0, bos = 0, n_words = 0;
    char *joined = NULL; /* --decode 403 407: the ids as separate arguments, joined */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(tokenize_help, stdout);
            return 0;
        } else if (!strcmp(a, "--file")) {
            if (!(file = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--batch")) {
            if (!(batch = cli_take(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--decode")) {
            decode = 1;
        } else if (!strcmp(a, "--bos")) {
            bos = 1;
        } else if (a[0] == '-' && a[1] && !(a[1] >= '0' && a[1] <= '9')) {
            return cli_usage("unknown option '%s'", a);
        } else if (!src) {
            src = a;
        } else {
            size_t have = joined ? strlen(joined) : 0, add = strlen(a);
            char *nj = realloc(joined, have + add + 2);
            if (!nj) {
                free(joined);
                return cli_fail("out of memory");
            }
            joined = nj;
            if (have) joined[have++] = ' ';
            memcpy(joined + have, a, add + 1);
            text = joined;
            n_words++;
        }
    }
    if (n_words > 1 && !decode) {
        free(joined);
        return cli_usage("one TEXT only (quote it), or ids with --decode");
    }
    int urc = 0;
    if (!src) urc = cli_usage("a SOURCE (program, tokenizer.json or GGUF) is required");
    else if (!!text + !!file + !!batch != 1) urc = cli_usage("give exactly one of TEXT, --file F or --batch FILE.json");
    else if (batch && decode) urc = cli_usage("--batch and --decode exclude each other");
    if (urc) {
        free(joined);
        return urc;
    }
    etch_error err;
    etch_tokenizer *t;
    if (etch_tokenizer_open(src, &t, &err) != ETCH_OK) {
        free(joined);
        return cli_fail(err.message);
    }
    if (batch) {
        int rc = tokenize_batch(t, batch, bos);
        etch_tokenizer_close(t);
        free(joined);
        return rc;
    }
    char *owned = NULL;
    size_t len = 0;
    if (file) {
        if (!(owned = cli_slurp(file, &len))) {
            etch_tokenizer_close(t);
            free(joined);
            return 1;
        }
        text = owned;
    } else {
        len = strlen(text);
    }
    int rc = 0;
    if (decode) {
        int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
        int32_t n = 0;
        const char *c = text;
        while (ids && *c) {
            if (strchr("[], \t\r\n", *c)) {
                c++;
                continue;
            }
            char *end;
            errno = 0;
            long v = strtol(c, &end, 10);
            if (end == c || errno || v < INT32_MIN || v > INT32_MAX) {
                fprintf(stderr, "%s: not an id list at offset %ld: '%.20s'\n", cli_name, (long)(c - text), c);
                rc = 1;
                break;
            }
            ids[n++] = (int32_t)v;
            c = end;
        }
        char *out = NULL;
        size_t olen;
        if (!ids) rc = cli_fail("out of memory");
        else if (!rc && etch_tokenizer_decode(t, ids, n, &out, &olen, &err) != ETCH_OK) rc = cli_fail(err.message);
        else if (!rc) {
            fwrite(out, 1, olen, stdout);
            fputc('\n', stdout);
        }
        etch_free(out);
        free(ids);
    } else {
        int32_t *ids, n;
        if (etch_tokenizer_encode(t, text, len, bos, &ids, &n, &err) != ETCH_OK) {
            rc = cli_fail(err.message);
        } else {
            cli_json_ids(stdout, ids, n);
            fputc('\n', stdout);
            etch_free(ids);
        }
    }
    etch_tokenizer_close(t);
    free(owned);
    free(joined);
    return rc;
}

