/* base: status messages, clocks, mapped files, the bounded binary reader, checked arithmetic, hashing.
 * Used by every other layer; uses nothing of etch. */
#ifndef ETCH_BASE_H
#define ETCH_BASE_H

#include "etch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

/* Allocation: every allocation of the library goes through these, and they through the function
 * etch_set_allocator installed (the C library's when none). base_free(NULL) is a no-op; the others
 * return NULL on failure (also when a size overflows). */
void *base_malloc(size_t n);
void *base_calloc(size_t n, size_t size);
void *base_realloc(void *p, size_t n);
void base_free(void *p);
/* n * size zeroed bytes at an address that is a multiple of 64 (a cache line), for buffers whose
 * rows kernels load in pieces a line could split (AMX's tile loads of int8 activations), wherever
 * the allocator happens to place them. Freed by base_free_lines only. */
void *base_calloc_lines(size_t n, size_t size);
void base_free_lines(void *p);
char *base_strdup(const char *s);
char *base_strndup(const char *s, size_t n);
/* How many allocations have failed on this thread so far: code that calls a library which reports
 * every failure alike (cJSON's parser returns NULL) tells an allocation failure from bad input by it. */
unsigned base_alloc_failures(void);
/* st, or ETCH_ERR_NOMEM with a message naming `what` when st is an error and an allocation on this
 * thread has failed since base_alloc_failures() returned `since`: the honest cause of a parse that
 * failed because a buffer could not grow. */
etch_status base_nomem_since(etch_status st, unsigned since, etch_error *err, const char *what);

/* Sets err (when non-NULL) to st and a printf-style message; returns st so callers can
 * `return base_fail(err, ETCH_ERR_IO, "...")`. */
etch_status base_fail(etch_error *err, etch_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void base_clear(etch_error *err);

/* Wall-clock microseconds since the epoch, advanced by a monotonic clock so that successive
 * readings never go backwards. */
double base_now_us(void);

/* Asks the kernel for 2 MiB pages over the whole 2 MiB blocks of [p, p + bytes) (Linux's
 * MADV_HUGEPAGE; a no-op elsewhere, or when refused): for mapped programs, whose weights decode
 * streams whole every token (where the filesystem keeps large folios, the file's pages are then
 * mapped 2 MiB at a time). Call it before the pages are first touched. */
void base_advise_huge(void *p, size_t bytes);

/* Asks the kernel to keep the whole pages of [p, p + bytes) in 4 KiB pages (MADV_NOHUGEPAGE),
 * whatever the system's transparent-huge-page policy: for buffers touched sparsely at first and
 * filled over time (the KV cache), where a 2 MiB page would make its whole block resident, zeroed,
 * at the first touch. Call it before the pages are first touched. */
void base_advise_small(void *p, size_t bytes);

/* A read-only mapping of a whole file. */
typedef struct base_map {
    const uint8_t *data; /* [size], NULL for an empty file */
    uint64_t size;
} base_map;

/* Maps path read-only. On failure, a message naming the file. */
etch_status base_map_open(const char *path, base_map *m, etch_error *err);
void base_map_close(base_map *m);

/* Reads a whole file into a malloc'ed buffer (caller frees). For small inputs at export time. */
etch_status base_read_file(const char *path, uint8_t **data, uint64_t *size, etch_error *err);

/* An output file written whole or not at all (outfile.c): bytes go to a temporary beside the
 * destination (mkstemp), finish flushes them to disk, commit renames the temporary over the
 * destination; abort (or any failure) removes the temporary. A device, folder, pipe or socket at the
 * destination is refused; a symbolic link is written through to its target. Messages name `path`. */
typedef struct base_outfile {
    FILE *f;           /* write here between open and finish */
    const char *path;  /* as the caller gave it */
    char *tmp, *final; /* the temporary, and the file it will replace (the link's target for a link) */
} base_outfile;
etch_status base_out_open(base_outfile *o, const char *path, etch_error *err);
/* Flushes and closes the temporary (o->tmp can then be read back to check it). */
etch_status base_out_finish(base_outfile *o, etch_error *err);
etch_status base_out_commit(base_outfile *o, etch_error *err);
void base_out_abort(base_outfile *o);

/* Checked arithmetic on sizes read from files: return 0 on overflow. */
static inline int base_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int base_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* 64-bit FNV-1a, continued from h (start with BASE_FNV_INIT). */
#define BASE_FNV_INIT 0xcbf29ce484222325ull
uint64_t base_fnv1a(uint64_t h, const void *data, size_t n);

/* Little-endian loads from unaligned bytes. */
static inline uint32_t base_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t base_le64(const uint8_t *p) {
    return (uint64_t)base_le32(p) | (uint64_t)base_le32(p + 4) << 32;
}

/* A bounded cursor over bytes [pos, end) of a file mapped at base: every read checks the bound first
 * and fails (ETCH_ERR_FORMAT) with a message naming path, the section (when not NULL), `what` and
 * the offset. Offsets are absolute (alignment is relative to base). */
typedef struct base_cursor {
    const uint8_t *base;
    uint64_t pos, end;
    const char *path, *section;
    etch_error *err;
} base_cursor;
etch_status base_cur_need(base_cursor *c, uint64_t n, const char *what);
etch_status base_cur_skip(base_cursor *c, uint64_t n, const char *what);
etch_status base_cur_u32(base_cursor *c, uint32_t *v, const char *what);
etch_status base_cur_u64(base_cursor *c, uint64_t *v, const char *what);
etch_status base_cur_align(base_cursor *c, uint64_t a, const char *what);

/* UTF-8: the length of the valid sequence starting at s (1..4), or 0 when s[0..n) does not start
 * with one (bad lead byte, bad continuation, overlong, surrogate, past U+10FFFF, or cut short). */
int base_utf8_seq_len(const uint8_t *s, size_t n);
/* The offset of the first invalid byte, or n when all of s[0..n) is valid UTF-8. */
size_t base_utf8_check(const uint8_t *s, size_t n);

#endif
