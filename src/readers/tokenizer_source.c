/* import: a tokenizer on its own, from a program file, a tokenizer.json or a GGUF file. */
#include "reader.h"

#include "../runtime/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct etch_tokenizer {
    etch_program *prog;     /* when the source is a program: its tokenizer is used */
    imp_model model;        /* otherwise: the imported tokenizer's tables */
    tok_tokenizer tok;
    const tok_tokenizer *use;
};

etch_status etch_tokenizer_open(const char *path, etch_tokenizer **out, etch_error *err) {
    base_clear(err);
    if (!path || !out) return base_fail(err, ETCH_ERR_ARG, "etch_tokenizer_open: NULL argument");
    *out = NULL;
    etch_tokenizer *t = base_calloc(1, sizeof *t);
    if (!t) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    struct stat sb;
    char magic[8] = {0};
    if (stat(path, &sb) != 0) {
        base_free(t);
        return base_fail(err, ETCH_ERR_IO, "%s: cannot open: no such file or folder", path);
    }
    if (!S_ISDIR(sb.st_mode)) {
        FILE *f = fopen(path, "rb");
        if (!f) {
            base_free(t);
            return base_fail(err, ETCH_ERR_IO, "%s: cannot open", path);
        }
        size_t got = fread(magic, 1, 8, f);
        fclose(f);
        (void)got;
    }
    etch_status st;
    if (!memcmp(magic, "ETCHPROG", 8)) {
        st = etch_program_open(path, &t->prog, err);
        if (!st) t->use = &t->prog->tok;
    } else {
        st = !memcmp(magic, "GGUF", 4) ? imp_gguf(path, &t->model, 1, err) : imp_hf_tokenizer(path, &t->model, err);
        if (!st) {
            tok_spec spec;
            imp_tok_spec(&t->model, &spec);
            st = tok_init(&t->tok, &spec, path, err);
            if (!st) t->use = &t->tok;
        }
    }
    if (st) {
        etch_tokenizer_close(t);
        return st;
    }
    *out = t;
    return ETCH_OK;
}

void etch_tokenizer_close(etch_tokenizer *t) {
    if (!t) return;
    etch_program_close(t->prog);
    tok_free(&t->tok);
    imp_model_free(&t->model);
    base_free(t);
}

etch_status etch_tokenizer_encode(const etch_tokenizer *t, const char *text, size_t len, int add_bos, int32_t **ids_out,
                                  int32_t *n_out, etch_error *err) {
    base_clear(err);
    if (!t || !ids_out || !n_out || (!text && len)) return base_fail(err, ETCH_ERR_ARG, "etch_tokenizer_encode: NULL argument");
    return tok_encode(t->use, text ? text : "", len, add_bos ? TOK_BOS : 0, NULL, ids_out, n_out, err);
}

etch_status etch_tokenizer_decode(const etch_tokenizer *t, const int32_t *ids, int32_t n, char **text_out,
                                  size_t *len_out, etch_error *err) {
    base_clear(err);
    if (!t || !text_out || (!ids && n > 0) || n < 0) return base_fail(err, ETCH_ERR_ARG, "etch_tokenizer_decode: bad argument");
    *text_out = NULL;
    size_t total = 1;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->use->s.n_vocab)
            return base_fail(err, ETCH_ERR_ARG, "id %d at index %d is outside the vocabulary [0, %d)", ids[i], i,
                             t->use->s.n_vocab);
        size_t l;
        tok_piece(t->use, i ? ids[i - 1] : -1, ids[i], 0, &l);
        total += l;
    }
    char *out = base_malloc(total);
    if (!out) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t l;
        const char *p = tok_piece(t->use, i ? ids[i - 1] : -1, ids[i], 0, &l);
        memcpy(out + at, p, l);
        at += l;
    }
    out[at] = '\0';
    *text_out = out;
    if (len_out) *len_out = at;
    return ETCH_OK;
}

int32_t etch_tokenizer_vocab_size(const etch_tokenizer *t) { return t ? t->use->s.n_vocab : 0; }
