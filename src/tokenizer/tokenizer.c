/* tokenizer: BPE by score or by merge rank, added tokens, NFC, split regex, streaming UTF-8. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------------ tables */

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 16777619u;
    }
    return h;
}

static uint32_t hash_pair(int32_t a, int32_t b) {
    uint64_t x = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static const char *piece_of(const tok_tokenizer *t, int32_t id, size_t *len) {
    *len = (size_t)(t->s.offsets[id + 1] - t->s.offsets[id]);
    return t->s.blob + t->s.offsets[id];
}

int32_t tok_find(const tok_tokenizer *t, const char *s, size_t n) {
    uint32_t mask = t->n_slots - 1;
    for (uint32_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int32_t v = t->slots[i];
        if (v == 0) return -1;
        size_t plen;
        const char *p = piece_of(t, v - 1, &plen);
        if (plen == n && memcmp(p, s, n) == 0) return v - 1;
    }
}

/* The index of the merge (left, right), or -1. */
static int32_t find_merge(const tok_tokenizer *t, int32_t a, int32_t b) {
    uint32_t mask = t->n_merge_slots - 1;
    for (uint32_t i = hash_pair(a, b) & mask;; i = (i + 1) & mask) {
        int32_t v = t->merge_slots[i];
        if (v == 0) return -1;
        const int32_t *m = t->s.merges + 3 * (size_t)(v - 1);
        if (m[0] == a && m[1] == b) return v - 1;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Added tokens are matched longest first, and among equal pieces the lowest id. The text is searched
 * at every byte, and Gemma 3 has 6,414 added tokens, 6,321 of them beginning with '<': scanned one by
 * one, they made tokenizing its plain text 15 times slower than the rest of the work. So they are
 * sorted as (first byte, length descending, bytes, id), without state shared between tokenizers
 * built on different threads, and a search takes the text's first byte's tokens one length at a
 * time, by bisection. */
typedef struct len_id {
    int32_t first, len, id;
    const char *p;
} len_id;

static int by_first_length_bytes(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->first != y->first) return x->first > y->first ? 1 : -1;
    if (x->len != y->len) return x->len < y->len ? 1 : -1;
    int c = memcmp(x->p, y->p, (size_t)x->len);
    if (c) return c;
    return (x->id > y->id) - (x->id < y->id);
}

/* PCRE2's memory, through etch's allocator. */
static void *re_malloc(PCRE2_SIZE n, void *ud) {
    (void)ud;
    return base_malloc(n);
}
static void re_free(void *p, void *ud) {
    (void)ud;
    base_free(p);
}

etch_status tok_init(tok_tokenizer *t, const tok_spec *spec, const char *what, etch_error *err) {
    memset(t, 0, sizeof *t);
    const tok_spec *s = spec;
    if (s->n_vocab < 1 || s->n_vocab > (1 << 24))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: vocabulary size %d is out of range", what, s->n_vocab);
    if (s->offsets[0] != 0)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer offsets do not start at 0", what);
    if (s->model != TOK_MODEL_SCORES && s->model != TOK_MODEL_MERGES)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: unknown tokenizer model %d", what, s->model);
    if (s->model == TOK_MODEL_SCORES && !s->scores)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: a score-ranked tokenizer without scores", what);
    if (s->n_merges < 0 || (s->n_merges > 0 && !s->merges))
        return base_fail(err, ETCH_ERR_FORMAT, "%s: bad merge count %d", what, s->n_merges);
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (s->offsets[i + 1] < s->offsets[i] || (uint64_t)s->offsets[i + 1] > s->blob_size)
            return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer piece %d has offsets %d..%d outside 0..%llu",
                             what, i, s->offsets[i], s->offsets[i + 1], (unsigned long long)s->blob_size);
        uint8_t ty = s->types[i];
        if (ty < TOK_NORMAL || ty > TOK_BYTE)
            return base_fail(err, ETCH_ERR_FORMAT, "%s: tokenizer piece %d has unknown type %u", what, i, ty);
    }
    if (s->bos_id >= s->n_vocab || s->unk_id >= s->n_vocab)
        return base_fail(err, ETCH_ERR_FORMAT, "%s: BOS or UNK id is outside the vocabulary", what);
    t->s = *s;
    t->n_slots = 1;
    while (t->n_slots < 2u * (uint32_t)s->n_vocab) t->n_slots <<= 1;
    t->n_merge_slots = 1;
    while (t->n_merge_slots < 2u * (uint32_t)s->n_merges) t->n_merge_slots <<= 1;
    t->slots = base_calloc(t->n_slots, sizeof *t->slots);
    t->merge_slots = base_calloc(t->n_merge_slots, sizeof *t->merge_slots);
    t->byte_val = base_malloc((size_t)s->n_vocab * sizeof *t->byte_val);
    t->added = base_malloc((size_t)s->n_vocab * sizeof *t->added);
    if (!t->slots || !t->merge_slots || !t->byte_val || !t->added) {
        tok_free(t);
        return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate tokenizer tables", what);
    }
    for (int b = 0; b < 256; b++) t->byte_id[b] = t->byte_sym[b] = -1;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        size_t n;
        const char *p = piece_of(t, i, &n);
        uint8_t ty = s->types[i];
        t->byte_val[i] = -1;
        if ((int32_t)n > t->max_piece_len) t->max_piece_len = (int32_t)n;
        if (ty == TOK_BYTE) {
            int hi = n == 6 ? hexval(p[3]) : -1, lo = n == 6 ? hexval(p[4]) : -1;
            if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>' || hi < 0 || lo < 0) {
                tok_free(t);
                return base_fail(err, ETCH_ERR_FORMAT, "%s: byte token %d is not of the form <0xHH>", what, i);
            }
            int b = hi * 16 + lo;
            t->byte_val[i] = (int16_t)b;
            if (t->byte_id[b] < 0) t->byte_id[b] = i;
        } else if ((ty == TOK_NORMAL || ty == TOK_USER) && n > 0 && tok_find(t, p, n) < 0) {
            /* The first of duplicate pieces wins, as a linear search would find it. */
            uint32_t mask = t->n_slots - 1, j = hash_bytes(p, n) & mask;
            while (t->slots[j]) j = (j + 1) & mask;
            t->slots[j] = i + 1;
            if (n == 1 && t->byte_sym[(uint8_t)p[0]] < 0) t->byte_sym[(uint8_t)p[0]] = i;
        }
        if (s->match_added && (ty == TOK_CONTROL || ty == TOK_USER) && n > 0) t->added[t->n_added++] = i;
    }
    len_id *order = base_malloc((size_t)(t->n_added ? t->n_added : 1) * sizeof *order);
    t->added_run_end = base_malloc((size_t)(t->n_added ? t->n_added : 1) * sizeof *t->added_run_end);
    if (!order || !t->added_run_end) {
        base_free(order);
        tok_free(t);
        return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate tokenizer tables", what);
    }
    for (int32_t i = 0; i < t->n_added; i++) {
        size_t l;
        const char *p = piece_of(t, t->added[i], &l);
        order[i] = (len_id){(uint8_t)p[0], (int32_t)l, t->added[i], p};
    }
    qsort(order, (size_t)t->n_added, sizeof *order, by_first_length_bytes);
    for (int b = 0, i = 0; b <= 256; b++) { /* the first index whose first byte is b or more */
        while (i < t->n_added && order[i].first < b) i++;
        t->added_from[b] = i;
    }
    for (int32_t i = t->n_added - 1; i >= 0; i--) {
        t->added[i] = order[i].id;
        int same = i + 1 < t->n_added && order[i + 1].first == order[i].first && order[i + 1].len == order[i].len;
        t->added_run_end[i] = same ? t->added_run_end[i + 1] : i + 1;
    }
    base_free(order);
    /* A byte-level vocabulary may lack a few bytes (SmolLM2's has no control bytes such as 0x04): text
     * holding one is refused when it is encoded (or becomes <unk>), not the whole tokenizer. */
    for (int32_t i = 0; i < s->n_merges; i++) {
        const int32_t *m = s->merges + 3 * (size_t)i;
        int ok = m[0] >= 0 && m[0] < s->n_vocab && m[1] >= 0 && m[1] < s->n_vocab && m[2] >= 0 && m[2] < s->n_vocab;
        if (ok) {
            size_t la, lb, lm;
            const char *pa = piece_of(t, m[0], &la), *pb = piece_of(t, m[1], &lb), *pm = piece_of(t, m[2], &lm);
            ok = lm == la + lb && memcmp(pm, pa, la) == 0 && memcmp(pm + la, pb, lb) == 0;
        }
        if (!ok) {
            tok_free(t);
            return base_fail(err, ETCH_ERR_FORMAT, "%s: merge %d (%d + %d -> %d) does not join its two pieces", what,
                             i, m[0], m[1], m[2]);
        }
        if (find_merge(t, m[0], m[1]) >= 0) continue; /* the first (lowest rank) wins */
        uint32_t mask = t->n_merge_slots - 1, j = hash_pair(m[0], m[1]) & mask;
        while (t->merge_slots[j]) j = (j + 1) & mask;
        t->merge_slots[j] = i + 1;
    }
    if (s->pretok && s->pretok[0]) {
        int code;
        PCRE2_SIZE at;
        pcre2_general_context *g = pcre2_general_context_create(re_malloc, re_free, NULL);
        pcre2_compile_context *cc = g ? pcre2_compile_context_create(g) : NULL;
        pcre2_match_context *mc = g ? pcre2_match_context_create(g) : NULL;
        t->re_gctx = g, t->re_mctx = mc;
        if (!cc || !mc) {
            pcre2_compile_context_free(cc);
            tok_free(t);
            return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate the split regex", what);
        }
        unsigned failures = base_alloc_failures();
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)s->pretok, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code,
                                       &at, cc);
        pcre2_compile_context_free(cc);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(code, msg, sizeof msg);
            tok_free(t);
            if (base_alloc_failures() != failures)
                return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate the split regex", what);
            return base_fail(err, ETCH_ERR_FORMAT, "%s: split regex does not compile at offset %zu: %s", what,
                             (size_t)at, (const char *)msg);
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* a speed-up when available; matching works without it */
        t->re = re;
    }
    return ETCH_OK;
}

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    base_free(t->slots);
    base_free(t->merge_slots);
    base_free(t->byte_val);
    base_free(t->added);
    base_free(t->added_run_end);
    pcre2_code_free((pcre2_code *)t->re);
    pcre2_match_context_free((pcre2_match_context *)t->re_mctx);
    pcre2_general_context_free((pcre2_general_context *)t->re_gctx);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------------ encode */

/* A growable id list. */
typedef struct ids_buf {
    int32_t *v;
    size_t n, cap;
    int oom;
} ids_buf;

static void push_id(ids_buf *b, int32_t id) {
    if (b->oom) return;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        int32_t *nv = base_realloc(b->v, cap * sizeof *nv);
        if (!nv) {
            b->oom = 1;
            return;
        }
        b->v = nv;
        b->cap = cap;
    }
    b->v[b->n++] = id;
}

/* BPE state for one word: a doubly linked list of symbols and a min-heap of candidate merges. */
typedef struct sym {
    int32_t id, prev, next;
} sym;

typedef struct cand {
    double prio;       /* lower merges first: the rank, or minus the merged piece's score */
    int32_t pos;       /* left symbol: ties go to the leftmost */
    int32_t left, right, merged;
} cand;

typedef struct bpe_work {
    const int *cancel; /* NULL, or the caller's flag: stop when it is set */
    unsigned ticks;    /* work done since the flag was last read */
    sym *syms;
    size_t syms_cap;
    cand *heap;
    size_t heap_n, heap_cap;
    char *scratch;     /* [2 * max_piece_len] */
    int oom;
} bpe_work;

/* Whether the caller asked to stop; reads the flag once per 4096 ticks of work. */
static int stop_asked(bpe_work *w) {
    return w->cancel && (++w->ticks & 4095) == 0 && __atomic_load_n(w->cancel, __ATOMIC_RELAXED);
}

static int cand_less(const cand *a, const cand *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->pos < b->pos);
}

static void heap_push(bpe_work *w, cand c) {
    if (w->heap_n == w->heap_cap) {
        size_t cap = w->heap_cap ? w->heap_cap * 2 : 64;
        cand *nh = base_realloc(w->heap, cap * sizeof *nh);
        if (!nh) {
            w->oom = 1;
            return;
        }
        w->heap = nh;
        w->heap_cap = cap;
    }
    size_t i = w->heap_n++;
    while (i > 0 && cand_less(&c, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = c;
}

static cand heap_pop(bpe_work *w) {
    cand top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < n && cand_less(&w->heap[l], best)) m = l, best = &w->heap[l];
        if (r < n && cand_less(&w->heap[r], best)) m = r;
        if (m == i) break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n) w->heap[i] = last;
    return top;
}

/* Queues the merge of symbols at positions a and b (adjacent) if there is one. */
static void try_pair(const tok_tokenizer *t, bpe_work *w, int32_t a, int32_t b) {
    if (a < 0 || b < 0) return;
    int32_t l = w->syms[a].id, r = w->syms[b].id;
    if (t->s.model == TOK_MODEL_MERGES) {
        int32_t m = find_merge(t, l, r);
        if (m >= 0) heap_push(w, (cand){(double)m, a, l, r, t->s.merges[3 * (size_t)m + 2]});
        return;
    }
    /* By score: the concatenation must be a piece; byte-fallback tokens never merge. */
    if (t->s.types[l] == TOK_BYTE || t->s.types[r] == TOK_BYTE) return;
    size_t la, lb;
    const char *pa = piece_of(t, l, &la), *pb = piece_of(t, r, &lb);
    if (la + lb > (size_t)t->max_piece_len) return;
    memcpy(w->scratch, pa, la);
    memcpy(w->scratch + la, pb, lb);
    int32_t id = tok_find(t, w->scratch, la + lb);
    if (id >= 0) heap_push(w, (cand){-(double)t->s.scores[id], a, l, r, id});
}

/* Appends the initial symbols of one UTF-8 character (or byte) and reports failure on no token. */
static int add_sym(bpe_work *w, size_t *n, int32_t id) {
    if (*n == w->syms_cap) {
        size_t cap = w->syms_cap ? w->syms_cap * 2 : 256;
        sym *ns = base_realloc(w->syms, cap * sizeof *ns);
        if (!ns) return w->oom = 1, 0;
        w->syms = ns;
        w->syms_cap = cap;
    }
    w->syms[*n] = (sym){id, (int32_t)*n - 1, (int32_t)*n + 1};
    (*n)++;
    return 1;
}

/* Tokenizes one word (a piece of text that merges never cross) into out. */
static etch_status bpe_word(const tok_tokenizer *t, bpe_work *w, const char *s, size_t len, ids_buf *out,
                            etch_error *err) {
    if (len == 0) return ETCH_OK;
    if (t->s.ignore_merges) {
        int32_t whole = tok_find(t, s, len);
        if (whole >= 0) {
            push_id(out, whole);
            return ETCH_OK;
        }
    }
    size_t n = 0;
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < len;) {
        if (t->s.byte_level) {
            int32_t id = t->byte_sym[u[i]] >= 0 ? t->byte_sym[u[i]] : t->s.unk_id;
            if (id < 0) return base_fail(err, ETCH_ERR_TEXT, "byte 0x%02x has no token in this vocabulary", u[i]);
            if (!add_sym(w, &n, id)) goto oom;
            i++;
            continue;
        }
        size_t cl = (size_t)base_utf8_seq_len(u + i, len - i);
        int32_t id = tok_find(t, s + i, cl);
        if (id >= 0) {
            if (!add_sym(w, &n, id)) goto oom;
        } else if (t->s.byte_fallback && t->byte_id[u[i]] >= 0) {
            for (size_t j = 0; j < cl; j++) {
                int32_t b = t->byte_id[u[i + j]];
                if (b < 0) return base_fail(err, ETCH_ERR_TEXT, "byte 0x%02x has no byte-fallback token", u[i + j]);
                if (!add_sym(w, &n, b)) goto oom;
            }
        } else if (t->s.unk_id >= 0) {
            /* Consecutive unknown characters fuse into one <unk> (SentencePiece, HF fuse_unk). */
            if (!(n > 0 && w->syms[n - 1].id == t->s.unk_id) && !add_sym(w, &n, t->s.unk_id)) goto oom;
        } else {
            return base_fail(err, ETCH_ERR_TEXT, "character at byte %zu of a word has no token and there is no <unk>", i);
        }
        i += cl;
    }
    w->syms[n - 1].next = -1;
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(t, w, (int32_t)i, (int32_t)i + 1);
    while (w->heap_n > 0 && !w->oom) {
        if (stop_asked(w)) return base_fail(err, ETCH_ERR_CANCELLED, "tokenizing was cancelled");
        cand c = heap_pop(w);
        sym *a = &w->syms[c.pos];
        if (a->id != c.left || a->next < 0 || w->syms[a->next].id != c.right) continue; /* stale */
        int32_t b = a->next;
        a->id = c.merged;
        a->next = w->syms[b].next;
        if (a->next >= 0) w->syms[a->next].prev = c.pos;
        w->syms[b].id = -1;
        try_pair(t, w, a->prev, c.pos);
        try_pair(t, w, c.pos, a->next);
    }
    if (w->oom) goto oom;
    for (int32_t i = 0; i >= 0; i = w->syms[i].next) push_id(out, w->syms[i].id);
    return ETCH_OK;
oom:
    return base_fail(err, ETCH_ERR_NOMEM, "out of memory tokenizing");
}

/* Normalizes, splits and tokenizes text that holds no added token. */
static etch_status encode_plain(const tok_tokenizer *t, bpe_work *w, const char *s, size_t len, int first,
                                ids_buf *out, etch_error *err) {
    if (len == 0) return ETCH_OK;
    char *norm = NULL;
    if (t->s.nfc) {
        /* utf8proc_map's steps, in a buffer of ours: code points, composed, re-encoded in place. */
        const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
        utf8proc_ssize_t r = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, NULL, 0, opt);
        if (r < 0) return base_fail(err, ETCH_ERR_TEXT, "NFC normalization failed: %s", utf8proc_errmsg(r));
        utf8proc_int32_t *cp = base_malloc(((size_t)r + 1) * sizeof *cp);
        if (!cp) return base_fail(err, ETCH_ERR_NOMEM, "out of memory normalizing text");
        r = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, cp, r, opt);
        if (r >= 0) r = utf8proc_reencode(cp, r, opt);
        if (r < 0) {
            base_free(cp);
            return base_fail(err, ETCH_ERR_TEXT, "NFC normalization failed: %s", utf8proc_errmsg(r));
        }
        norm = (char *)cp;
        s = norm;
        len = (size_t)r;
    }
    char *prefixed = NULL;
    if (t->s.add_dummy_prefix && (first || t->s.match_added)) {
        /* SentencePiece's dummy prefix (Hugging Face's Prepend("▁") runs on every piece of text
         * between added tokens; llama2.c's once at the start). */
        prefixed = base_malloc(len + 1);
        if (!prefixed) {
            base_free(norm);
            return base_fail(err, ETCH_ERR_NOMEM, "out of memory tokenizing");
        }
        prefixed[0] = ' ';
        memcpy(prefixed + 1, s, len);
        s = prefixed;
        len++;
    }
    etch_status st = ETCH_OK;
    if (t->re) {
        pcre2_match_data *md = pcre2_match_data_create(4, (pcre2_general_context *)t->re_gctx);
        if (!md) st = base_fail(err, ETCH_ERR_NOMEM, "out of memory tokenizing");
        size_t pos = 0, from = 0;
        while (!st && from < len) {
            if (stop_asked(w)) {
                st = base_fail(err, ETCH_ERR_CANCELLED, "tokenizing was cancelled");
                break;
            }
            /* NO_UTF_CHECK: tok_encode validated the text once (NFC and the dummy prefix keep it
             * valid); without it PCRE2 checks the whole subject again on every call, once per
             * pre-token, which made tokenizing quadratic in the text's length. */
            int rc = pcre2_match((const pcre2_code *)t->re, (PCRE2_SPTR)s, len, from, PCRE2_NO_UTF_CHECK, md,
                                 (pcre2_match_context *)t->re_mctx);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                st = rc == PCRE2_ERROR_NOMEMORY || rc == PCRE2_ERROR_HEAPLIMIT
                         ? base_fail(err, ETCH_ERR_NOMEM, "out of memory tokenizing")
                         : base_fail(err, ETCH_ERR_TEXT, "split regex failed (PCRE2 error %d)", rc);
                break;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) { /* an empty match: step over one character */
                from = ms + (size_t)base_utf8_seq_len((const uint8_t *)s + ms, len - ms);
                continue;
            }
            if (ms > pos) st = bpe_word(t, w, s + pos, ms - pos, out, err); /* the gap is a word too */
            if (!st) st = bpe_word(t, w, s + ms, me - ms, out, err);
            pos = from = me;
        }
        if (!st && pos < len) st = bpe_word(t, w, s + pos, len - pos, out, err);
        pcre2_match_data_free(md);
    } else {
        st = bpe_word(t, w, s, len, out, err);
    }
    base_free(prefixed);
    base_free(norm);
    return st;
}

/* The added token that starts at s[0..n), longest first (the lowest id of equal pieces), or -1. */
static int32_t match_added_at(const tok_tokenizer *t, const char *s, size_t n) {
    const uint8_t first = (uint8_t)s[0];
    for (int32_t i = t->added_from[first], end; i < t->added_from[first + 1]; i = end) {
        end = t->added_run_end[i];
        size_t pl;
        piece_of(t, t->added[i], &pl);
        if (pl > n) continue;
        int32_t lo = i, hi = end; /* the first of the run whose bytes are not below s[0..pl) */
        while (lo < hi) {
            int32_t mid = lo + (hi - lo) / 2;
            if (memcmp(piece_of(t, t->added[mid], &pl), s, pl) < 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo < end && memcmp(piece_of(t, t->added[lo], &pl), s, pl) == 0) return t->added[lo];
    }
    return -1;
}

etch_status tok_encode(const tok_tokenizer *t, const char *text, size_t len, int flags, const int *cancel,
                       int32_t **ids_out, int32_t *n_out, etch_error *err) {
    *ids_out = NULL;
    *n_out = 0;
    const uint8_t *u = (const uint8_t *)text;
    size_t bad = base_utf8_check(u, len);
    if (bad != len)
        return base_fail(err, ETCH_ERR_TEXT, "text is not valid UTF-8: bad byte 0x%02x at offset %zu", u[bad], bad);
    if (len > (size_t)INT32_MAX / 2) return base_fail(err, ETCH_ERR_ARG, "text of %zu bytes is too long", len);
    ids_buf out = {0};
    bpe_work w = {0};
    w.cancel = cancel;
    w.scratch = base_malloc((size_t)t->max_piece_len * 2 + 8);
    if (!w.scratch) return base_fail(err, ETCH_ERR_NOMEM, "out of memory tokenizing");
    if ((flags & TOK_BOS) && t->s.bos_id >= 0) push_id(&out, t->s.bos_id);
    etch_status st = ETCH_OK;
    size_t start = 0;
    int first = !(flags & TOK_CONTINUES); /* text that continues earlier text takes no dummy prefix */
    for (size_t i = 0; i < len && !st && t->n_added > 0;) {
        if (stop_asked(&w)) {
            st = base_fail(err, ETCH_ERR_CANCELLED, "tokenizing was cancelled");
            break;
        }
        int32_t id = match_added_at(t, text + i, len - i);
        if (id < 0) {
            i++;
            continue;
        }
        st = encode_plain(t, &w, text + start, i - start, first, &out, err);
        first = 0;
        push_id(&out, id);
        size_t pl;
        piece_of(t, id, &pl);
        i += pl;
        start = i;
    }
    if (!st) st = encode_plain(t, &w, text + start, len - start, first, &out, err);
    base_free(w.syms);
    base_free(w.heap);
    base_free(w.scratch);
    if (!st && out.oom) st = base_fail(err, ETCH_ERR_NOMEM, "out of memory tokenizing");
    if (st) {
        base_free(out.v);
        return st;
    }
    if (!out.v) out.v = base_malloc(sizeof *out.v); /* an empty result is still an allocation the caller frees */
    if (!out.v) return base_fail(err, ETCH_ERR_NOMEM, "out of memory tokenizing");
    *ids_out = out.v;
    *n_out = (int32_t)out.n;
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

const char *tok_piece(const tok_tokenizer *t, int32_t prev, int32_t id, int flags, size_t *len) {
    *len = 0;
    if (id < 0 || id >= t->s.n_vocab) return "";
    uint8_t ty = t->s.types[id];
    if (ty == TOK_UNUSED || (ty == TOK_CONTROL && (flags & TOK_SKIP_CONTROL))) return "";
    if (ty == TOK_BYTE) {
        *len = 1;
        return &byte_chars[t->byte_val[id]];
    }
    const char *p = piece_of(t, id, len);
    if (t->s.add_dummy_prefix && ty != TOK_CONTROL && (prev < 0 || prev == t->s.bos_id) && *len > 0 && p[0] == ' ') {
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

/* ------------------------------------------------------------------ GPT-2 byte-level alphabet */

/* Printable Latin-1 bytes stand for themselves; the other 68 bytes map to U+0100.. in order. */
static int byte_is_self(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

uint32_t tok_byte_to_cp(uint8_t b) {
    if (byte_is_self(b)) return b;
    uint32_t k = 0;
    for (int i = 0; i < b; i++) k += !byte_is_self(i);
    return 256 + k;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_self((int)cp) ? (int)cp : -1;
    uint32_t k = 0;
    for (int b = 0; b < 256; b++)
        if (!byte_is_self(b) && 256 + k++ == cp) return b;
    return -1;
}
