/* tokenizer: score-ranked BPE with byte fallback (SentencePiece style), streaming UTF-8. */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ tables */

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 16777619u;
    }
    return h;
}

static const char *piece_of(const tok_tokenizer *t, int32_t id, size_t *len) {
    *len = (size_t)(t->s.offsets[id + 1] - t->s.offsets[id]);
    return t->s.blob + t->s.offsets[id];
}

/* The id of a normal piece equal to s[0..n), or -1. */
static int32_t lookup(const tok_tokenizer *t, const char *s, size_t n) {
    uint32_t mask = t->n_slots - 1;
    for (uint32_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int32_t v = t->slots[i];
        if (v == 0) return -1;
        size_t plen;
        const char *p = piece_of(t, v - 1, &plen);
        if (plen == n && memcmp(p, s, n) == 0) return v - 1;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

etch_status tok_init(tok_tokenizer *t, const tok_spec *spec, const char *what, etch_error *err) {
    memset(t, 0, sizeof *t);
    const tok_spec *s = spec;
    if (s->n_vocab < 1 || s->n_vocab > (1 << 24))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: vocabulary size %d is out of range", what, s->n_vocab);
    if (s->offsets[0] != 0)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer offsets do not start at 0", what);
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (s->offsets[i + 1] < s->offsets[i] || (uint64_t)s->offsets[i + 1] > s->blob_size)
            return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer piece %d has offsets %d..%d outside 0..%llu",
                             what, i, s->offsets[i], s->offsets[i + 1], (unsigned long long)s->blob_size);
        uint8_t ty = s->types[i];
        if (ty != TOK_NORMAL && ty != TOK_UNKNOWN && ty != TOK_CONTROL && ty != TOK_USER && ty != TOK_BYTE)
            return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer piece %d has unknown type %u", what, i, ty);
    }
    if (s->bos_id >= s->n_vocab || s->unk_id >= s->n_vocab)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: BOS or UNK id is outside the vocabulary", what);
    t->s = *s;
    t->n_slots = 1;
    while (t->n_slots < 2u * (uint32_t)s->n_vocab) t->n_slots <<= 1;
    t->slots = calloc(t->n_slots, sizeof *t->slots);
    t->byte_val = malloc((size_t)s->n_vocab * sizeof *t->byte_val);
    if (!t->slots || !t->byte_val) {
        tok_free(t);
        return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate tokenizer tables", what);
    }
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        size_t n;
        const char *p = piece_of(t, i, &n);
        t->byte_val[i] = -1;
        if ((int32_t)n > t->max_piece_len) t->max_piece_len = (int32_t)n;
        if (s->types[i] == TOK_BYTE) {
            int hi = n == 6 ? hexval(p[3]) : -1, lo = n == 6 ? hexval(p[4]) : -1;
            if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>' || hi < 0 || lo < 0) {
                tok_free(t);
                return base_fail(err, ETCH_ERR_FORMAT, "%s: byte token %d is not of the form <0xHH>", what, i);
            }
            int b = hi * 16 + lo;
            t->byte_val[i] = (int16_t)b;
            if (t->byte_id[b] < 0) t->byte_id[b] = i;
        } else if ((s->types[i] == TOK_NORMAL || s->types[i] == TOK_USER) && n > 0 && lookup(t, p, n) < 0) {
            /* The first of duplicate pieces wins, as a linear search would find it. */
            uint32_t mask = t->n_slots - 1, j = hash_bytes(p, n) & mask;
            while (t->slots[j]) j = (j + 1) & mask;
            t->slots[j] = i + 1;
        }
    }
    return ETCH_OK;
}

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    free(t->slots);
    free(t->byte_val);
    t->slots = NULL;
    t->byte_val = NULL;
}

/* ------------------------------------------------------------------ encode */

/* Whether tokens a and b merge: true when the concatenation of their pieces is a normal piece;
 * then *score is its score and *merged its id. Byte-fallback tokens never merge (as in llama2.c and
 * SentencePiece: they stand for bytes that no piece covers). scratch holds 2 * max_piece_len bytes. */
static int pair_score(const tok_tokenizer *t, int32_t a, int32_t b, char *scratch, float *score,
                      int32_t *merged) {
    if (t->s.types[a] == TOK_BYTE || t->s.types[b] == TOK_BYTE) return 0;
    size_t la, lb;
    const char *pa = piece_of(t, a, &la), *pb = piece_of(t, b, &lb);
    if (la + lb > (size_t)t->max_piece_len) return 0;
    memcpy(scratch, pa, la);
    memcpy(scratch + la, pb, lb);
    int32_t id = lookup(t, scratch, la + lb);
    if (id < 0) return 0;
    *score = t->s.scores[id];
    *merged = id;
    return 1;
}

etch_status tok_encode(const tok_tokenizer *t, const char *text, size_t len, int add_bos, int32_t **ids_out,
                       int32_t *n_out, etch_error *err) {
    *ids_out = NULL;
    *n_out = 0;
    const uint8_t *u = (const uint8_t *)text;
    size_t bad = base_utf8_check(u, len);
    if (bad != len)
        return base_fail(err, ETCH_ERR_TEXT, "text is not valid UTF-8: bad byte 0x%02x at offset %zu", u[bad], bad);
    /* At most one token per byte, plus BOS and the dummy prefix. */
    size_t cap = len + 2;
    if (cap > (size_t)INT32_MAX) return base_fail(err, ETCH_ERR_ARG, "text of %zu bytes is too long", len);
    int32_t *ids = malloc(cap * sizeof *ids);
    float *score = malloc(cap * sizeof *score);   /* score[i]: merging ids[i] with ids[i+1] */
    int32_t *merge = malloc(cap * sizeof *merge); /* the merged id for that pair */
    char *scratch = malloc((size_t)t->max_piece_len * 2 + 8);
    if (!ids || !score || !merge || !scratch) {
        free(ids), free(score), free(merge), free(scratch);
        return base_fail(err, ETCH_ERR_NOMEM, "cannot allocate %zu tokens", cap);
    }
    int32_t n = 0;
    if (add_bos && t->s.bos_id >= 0) ids[n++] = t->s.bos_id;
    int32_t first = n;
    /* Initial tokens: each code point as a piece when it is one, else its bytes. */
    static const char space = ' ';
    for (size_t i = 0, k = 0; i < len || (k == 0 && t->s.add_dummy_prefix && len > 0); k++) {
        const char *cp;
        size_t cl;
        if (k == 0 && t->s.add_dummy_prefix && len > 0) {
            cp = &space;
            cl = 1;
        } else {
            cp = text + i;
            cl = (size_t)base_utf8_seq_len(u + i, len - i);
            i += cl;
        }
        int32_t id = lookup(t, cp, cl);
        if (id >= 0) {
            ids[n++] = id;
            continue;
        }
        for (size_t j = 0; j < cl; j++) {
            int32_t bid = t->byte_id[(uint8_t)cp[j]];
            ids[n++] = bid >= 0 ? bid : t->s.unk_id;
            if (ids[n - 1] < 0) {
                free(ids), free(score), free(merge), free(scratch);
                return base_fail(err, ETCH_ERR_TEXT,
                                 "byte 0x%02x at offset %zu has no token and the vocabulary has no <unk>",
                                 (uint8_t)cp[j], i - cl + j);
            }
        }
    }
    /* Merge the best-scoring adjacent pair until none merges. Pair scores are cached and only the
     * neighbours of a merge are recomputed: O(n) lookups, O(n^2) comparisons in the worst case. */
    int32_t m = n - first;
    int32_t *tk = ids + first;
    for (int32_t i = 0; i + 1 < m; i++)
        if (!pair_score(t, tk[i], tk[i + 1], scratch, &score[i], &merge[i])) merge[i] = -1;
    for (;;) {
        int32_t best = -1;
        for (int32_t i = 0; i + 1 < m; i++)
            if (merge[i] >= 0 && (best < 0 || score[i] > score[best])) best = i;
        if (best < 0) break;
        tk[best] = merge[best];
        /* Token best+1 is gone: tokens and pair entries after it move one place left. */
        memmove(tk + best + 1, tk + best + 2, (size_t)(m - best - 2) * sizeof *tk);
        if (m - best - 3 > 0) {
            memmove(score + best + 1, score + best + 2, (size_t)(m - best - 3) * sizeof *score);
            memmove(merge + best + 1, merge + best + 2, (size_t)(m - best - 3) * sizeof *merge);
        }
        m--;
        if (best > 0 && !pair_score(t, tk[best - 1], tk[best], scratch, &score[best - 1], &merge[best - 1]))
            merge[best - 1] = -1;
        if (best + 1 < m && !pair_score(t, tk[best], tk[best + 1], scratch, &score[best], &merge[best]))
            merge[best] = -1;
    }
    n = first + m;
    free(score), free(merge), free(scratch);
    *ids_out = ids;
    *n_out = n;
    return ETCH_OK;
}

/* ------------------------------------------------------------------ decode */

static const char byte_chars[256] = {
#define B4(i) (char)(i), (char)(i + 1), (char)(i + 2), (char)(i + 3)
#define B16(i) B4(i), B4(i + 4), B4(i + 8), B4(i + 12)
    B16(0),   B16(16),  B16(32),  B16(48),  B16(64),  B16(80),  B16(96),  B16(112),
    B16(128), B16(144), B16(160), B16(176), B16(192), B16(208), B16(224), B16(240),
#undef B16
#undef B4
};

const char *tok_piece(const tok_tokenizer *t, int32_t prev, int32_t id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= t->s.n_vocab) return "";
    uint8_t ty = t->s.types[id];
    if (ty == TOK_CONTROL) return "";
    if (ty == TOK_BYTE) {
        *len = 1;
        return &byte_chars[t->byte_val[id]];
    }
    const char *p = piece_of(t, id, len);
    if (t->s.add_dummy_prefix && (prev < 0 || prev == t->s.bos_id) && *len > 0 && p[0] == ' ') {
        p++;
        (*len)--;
    }
    return p;
}

/* Could s[0..n) (n < the full length) still become a valid sequence? */
static int utf8_prefix_ok(const uint8_t *s, int n) {
    uint8_t c = s[0];
    int need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (need == 0 || n >= need) return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (n >= 2) {
        if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && s[1] > 0x9F) return 0; /* surrogate */
        if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && s[1] > 0x8F) return 0; /* past U+10FFFF */
    }
    return 1;
}

static size_t put_replacement(char *out) {
    out[0] = (char)0xEF, out[1] = (char)0xBF, out[2] = (char)0xBD;
    return 3;
}

size_t tok_utf8_feed(tok_utf8_stream *u, const char *s, size_t n, char *out) {
    size_t w = 0, i = 0;
    /* Complete the held character first, byte by byte. */
    while (u->n_held > 0 && i < n) {
        u->held[u->n_held++] = (uint8_t)s[i++];
        int l = base_utf8_seq_len(u->held, (size_t)u->n_held);
        if (l > 0) {
            memcpy(out + w, u->held, (size_t)l);
            w += (size_t)l;
            u->n_held = 0;
        } else if (!utf8_prefix_ok(u->held, u->n_held)) {
            /* The held lead byte is bad: replace it and rescan what followed it. */
            w += put_replacement(out + w);
            int rest = u->n_held - 1;
            uint8_t tmp[4];
            memcpy(tmp, u->held + 1, (size_t)rest);
            u->n_held = 0;
            w += tok_utf8_feed(u, (const char *)tmp, (size_t)rest, out + w);
        }
    }
    while (i < n) {
        const uint8_t *p = (const uint8_t *)s + i;
        int l = base_utf8_seq_len(p, n - i);
        if (l > 0) {
            memcpy(out + w, p, (size_t)l);
            w += (size_t)l;
            i += (size_t)l;
        } else if (n - i < 4 && utf8_prefix_ok(p, (int)(n - i))) {
            memcpy(u->held, p, n - i);
            u->n_held = (int)(n - i);
            i = n;
        } else {
            w += put_replacement(out + w);
            i++;
        }
    }
    return w;
}

size_t tok_utf8_finish(tok_utf8_stream *u, char *out) {
    size_t w = u->n_held > 0 ? put_replacement(out) : 0;
    u->n_held = 0;
    return w;
}
