/* tokenizer: score-ranked BPE in the SentencePiece style (llama2.c, Llama 2), with byte fallback,
 * and streaming UTF-8 detokenization. Pieces are stored raw (a space is ' ', not U+2581). */
#ifndef ETCH_TOKENIZER_H
#define ETCH_TOKENIZER_H

#include "../base/base.h"

/* Piece types, with SentencePiece's numbers. */
enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER = 4, TOK_BYTE = 6 };

/* What a tokenizer is made of: views that must outlive the tokenizer (the program mapping, or
 * an importer's buffers). */
typedef struct tok_spec {
    int32_t n_vocab;
    const char *blob;        /* all pieces, concatenated */
    uint64_t blob_size;
    const int32_t *offsets;  /* [n_vocab + 1]: piece i is blob[offsets[i] .. offsets[i+1]) */
    const float *scores;     /* [n_vocab]: higher merges first */
    const uint8_t *types;    /* [n_vocab]: TOK_* */
    int32_t bos_id, unk_id;  /* -1 when absent */
    int add_dummy_prefix;    /* prepend a space to non-empty text, strip it when decoding */
} tok_spec;

typedef struct tok_tokenizer {
    tok_spec s;
    int32_t *slots;          /* [n_slots] open-addressing table of id+1 (0 = empty), normal pieces only */
    uint32_t n_slots;        /* power of two */
    int32_t byte_id[256];    /* id of the byte-fallback token <0xHH>, or -1 */
    int16_t *byte_val;       /* [n_vocab]: the byte a TOK_BYTE piece stands for, else -1 */
    int32_t max_piece_len;
} tok_tokenizer;

/* Validates the spec (offsets in bounds and ordered, types known, byte pieces well-formed) and
 * builds the lookup tables. `what` names the source in messages. */
etch_status tok_init(tok_tokenizer *t, const tok_spec *spec, const char *what, etch_error *err);
void tok_free(tok_tokenizer *t);

/* Encodes UTF-8 text (refused with ETCH_ERR_TEXT if invalid). *ids is malloc'ed; caller frees. */
etch_status tok_encode(const tok_tokenizer *t, const char *text, size_t len, int add_bos, int32_t **ids,
                       int32_t *n, etch_error *err);

/* The bytes that token id stands for, following prev (-1 at the start): control tokens give
 * nothing, a byte token its byte, and the dummy-prefix space is dropped after BOS or at the start.
 * The view lives as long as the tokenizer (byte tokens point into a static table). */
const char *tok_piece(const tok_tokenizer *t, int32_t prev, int32_t id, size_t *len);

/* Streaming UTF-8: holds the bytes of a character that is not complete yet. */
typedef struct tok_utf8_stream {
    uint8_t held[4];
    int n_held;
    char *out;      /* [cap] */
    size_t cap;
} tok_utf8_stream;

/* out must hold 3 * (n + 4) bytes. Appends the complete characters of held + s[0..n) to out,
 * invalid bytes as U+FFFD, and keeps an incomplete tail. Returns the bytes written. */
size_t tok_utf8_feed(tok_utf8_stream *u, const char *s, size_t n, char *out);
/* Writes U+FFFD for an incomplete held tail and clears it. out holds 3 bytes. */
size_t tok_utf8_finish(tok_utf8_stream *u, char *out);

#endif
