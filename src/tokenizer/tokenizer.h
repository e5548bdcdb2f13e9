/* tokenizer: BPE in two rankings, one engine.
 *   - by score (SentencePiece style: llama2.c, GGUF "llama"): merge the adjacent pair whose
 *     concatenation is the piece with the highest score;
 *   - by merge rank (Hugging Face BPE, GGUF "gpt2"): merge the adjacent pair that comes first in
 *     the merges list.
 * Symbols start as code points with byte fallback, or as bytes (byte-level BPE). Added and special
 * tokens are matched in the text first; the rest is NFC-normalized when asked, split by the
 * tokenizer's own regex (PCRE2) when it has one, and merged word by word.
 * Pieces are stored as the raw bytes they stand for: a space is ' ' (not U+2581 or U+0120). */
#ifndef ETCH_TOKENIZER_H
#define ETCH_TOKENIZER_H

#include "../base/base.h"

/* Piece types, with SentencePiece's (and GGUF's) numbers. */
enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER = 4, TOK_UNUSED = 5, TOK_BYTE = 6 };
/* Ranking of merges. */
enum { TOK_MODEL_SCORES = 0, TOK_MODEL_MERGES = 1 };

/* What a tokenizer is made of: views that must outlive the tokenizer (the program mapping, or
 * an importer's buffers). */
typedef struct tok_spec {
    int32_t n_vocab;
    const char *blob;        /* all pieces, concatenated */
    uint64_t blob_size;
    const int32_t *offsets;  /* [n_vocab + 1]: piece i is blob[offsets[i] .. offsets[i+1]) */
    const float *scores;     /* [n_vocab]: higher merges first (TOK_MODEL_SCORES); may be NULL otherwise */
    const uint8_t *types;    /* [n_vocab]: TOK_* */
    int32_t bos_id, unk_id;  /* -1 when absent */
    int add_dummy_prefix;    /* prepend a space to non-empty text, drop it when decoding at the start */
    int model;               /* TOK_MODEL_* */
    const int32_t *merges;   /* [n_merges * 3]: left id, right id, merged id; rank = index (MERGES) */
    int32_t n_merges;
    int byte_level;          /* symbols start as single bytes, each a piece of its own */
    int byte_fallback;       /* a code point that is no piece becomes its <0xHH> byte tokens */
    int ignore_merges;       /* a word that is a piece is taken whole (Llama 3) */
    int match_added;         /* control and user-defined pieces in the text are their tokens */
    int nfc;                 /* NFC-normalize text outside added tokens */
    const char *pretok;      /* split regex (PCRE2 syntax, Isolated behaviour), NULL or "" for none */
} tok_spec;

typedef struct tok_tokenizer {
    tok_spec s;
    int32_t *slots;          /* [n_slots] open-addressing table of id+1 (0 = empty): pieces by text */
    uint32_t n_slots;        /* power of two */
    int32_t *merge_slots;    /* [n_merge_slots] table of merge index+1 by (left, right) */
    uint32_t n_merge_slots;
    int32_t byte_id[256];    /* id of the byte-fallback token <0xHH>, or -1 */
    int32_t byte_sym[256];   /* byte-level: id of the piece that is exactly this byte, or -1 */
    int16_t *byte_val;       /* [n_vocab]: the byte a TOK_BYTE piece stands for, else -1 */
    int32_t *added;          /* [n_added] ids matched in text: by first byte, then longest first, then
                                by their bytes, then by id */
    int32_t *added_run_end;  /* [n_added]: the index after the last of added[i]'s first byte and length */
    int32_t n_added;
    int32_t added_from[257]; /* added[added_from[b] .. added_from[b + 1]): those whose first byte is b */
    int32_t max_piece_len;
    void *re;                /* pcre2_code_8 *, or NULL */
    void *re_gctx, *re_mctx; /* PCRE2 general and match contexts: its memory through base_malloc */
} tok_tokenizer;

/* Validates the spec (offsets in bounds and ordered, types known, byte pieces well-formed, every
 * merge's result equal to its two sides) and builds the lookup tables. `what` names the source. */
etch_status tok_init(tok_tokenizer *t, const tok_spec *spec, const char *what, etch_error *err);
void tok_free(tok_tokenizer *t);

/* Encodes UTF-8 text (refused with ETCH_ERR_TEXT if invalid). *ids is malloc'ed; caller frees.
 * flags: TOK_BOS and TOK_CONTINUES (below).
 * cancel: NULL, or a flag read (atomically) every few thousand pre-tokens and merges; once it is
 * non-zero the call stops with ETCH_ERR_CANCELLED. The work is linear in the text's length (up to
 * the heap's log factor within one word); memory is about 40 bytes per byte of the longest word. */
enum { TOK_BOS = 1, TOK_CONTINUES = 2 }; /* BOS first; the text continues earlier text (no dummy prefix) */
etch_status tok_encode(const tok_tokenizer *t, const char *text, size_t len, int flags, const int *cancel,
                       int32_t **ids, int32_t *n, etch_error *err);

/* Decoding flags. */
enum { TOK_SKIP_CONTROL = 1 };
/* The bytes that token id stands for, following prev (-1 at the start): a byte token gives its
 * byte, a control token its text (nothing with TOK_SKIP_CONTROL), and the dummy-prefix space is
 * dropped after BOS or at the start. The view lives as long as the tokenizer. */
const char *tok_piece(const tok_tokenizer *t, int32_t prev, int32_t id, int flags, size_t *len);

/* The id of the piece whose text is exactly s[0..n), or -1. */
int32_t tok_find(const tok_tokenizer *t, const char *s, size_t n);

/* Streaming UTF-8: holds the bytes of a character that is not complete yet. */
typedef struct tok_utf8_stream {
    uint8_t held[4];
    int n_held;
} tok_utf8_stream;

/* out must hold 3 * (n + 4) bytes. Appends the complete characters of held + s[0..n) to out,
 * invalid bytes as U+FFFD, and keeps an incomplete tail. Returns the bytes written. */
size_t tok_utf8_feed(tok_utf8_stream *u, const char *s, size_t n, char *out);
/* Writes U+FFFD for an incomplete held tail and clears it. out holds 3 bytes. */
size_t tok_utf8_finish(tok_utf8_stream *u, char *out);

/* GPT-2's byte-level alphabet: the code point that stands for byte b, and back (-1 if none). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

#endif
