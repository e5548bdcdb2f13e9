/* base: status messages, clocks, mapped files, hashing. */
#define _POSIX_C_SOURCE 200809L
#include "base.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *etch_version(void) { return ETCH_VERSION_STRING; }

const char *etch_status_string(etch_status st) {
    switch (st) {
    case ETCH_OK: return "ok";
    case ETCH_ERR_ARG: return "bad argument";
    case ETCH_ERR_IO: return "i/o error";
    case ETCH_ERR_FORMAT: return "format error";
    case ETCH_ERR_UNSUPPORTED: return "unsupported";
    case ETCH_ERR_NOMEM: return "out of memory";
    case ETCH_ERR_INPUT: return "invalid input";
    case ETCH_ERR_CONTEXT: return "context overflow";
    case ETCH_ERR_TEXT: return "invalid text";
    case ETCH_ERR_CANCELLED: return "cancelled";
    case ETCH_ERR_NUMERIC: return "non-finite logits";
    case ETCH_ERR_LIMIT: return "over a limit";
    }
    return "unknown status";
}

etch_status base_fail(etch_error *err, etch_status st, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->status = st;
    }
    return st;
}

void base_clear(etch_error *err) {
    if (err) {
        err->status = ETCH_OK;
        err->message[0] = '\0';
    }
}

void etch_free(void *ptr) { base_free(ptr); }

/* ------------------------------------------------------------------ allocation */

static etch_alloc_fn alloc_fn;
static void *alloc_ud;
static _Thread_local unsigned alloc_failures;

unsigned base_alloc_failures(void) { return alloc_failures; }

etch_status base_nomem_since(etch_status st, unsigned since, etch_error *err, const char *what) {
    if (st == ETCH_OK || st == ETCH_ERR_NOMEM || alloc_failures == since) return st;
    return base_fail(err, ETCH_ERR_NOMEM, "%s: out of memory", what);
}

static void *counted(void *p) {
    if (!p) alloc_failures++;
    return p;
}

/* cJSON's hooks, when an allocator is installed (cJSON reallocates by malloc + copy then). */
static void *cjson_malloc(size_t n) { return base_malloc(n); }
static void cjson_free(void *p) { base_free(p); }

void etch_set_allocator(etch_alloc_fn fn, void *ud) {
    alloc_fn = fn;
    alloc_ud = ud;
    cJSON_Hooks hooks = {fn ? cjson_malloc : NULL, fn ? cjson_free : NULL};
    cJSON_InitHooks(&hooks);
}

void *base_malloc(size_t n) {
    if (!alloc_fn) return counted(malloc(n ? n : 1));
    return counted(alloc_fn(alloc_ud, NULL, n ? n : 1));
}

void *base_calloc(size_t n, size_t size) {
    if (!alloc_fn) return counted(calloc(n ? n : 1, size ? size : 1));
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) return counted(NULL);
    void *p = counted(alloc_fn(alloc_ud, NULL, bytes ? bytes : 1));
    if (p) memset(p, 0, bytes);
    return p;
}

void *base_realloc(void *p, size_t n) {
    if (!alloc_fn) return counted(realloc(p, n ? n : 1));
    return counted(alloc_fn(alloc_ud, p, n ? n : 1));
}

void base_free(void *p) {
    if (!p) return;
    if (!alloc_fn) free(p);
    else alloc_fn(alloc_ud, p, 0);
}

/* The allocation base_calloc returned sits in the pointer-sized slot just below the aligned address.
 * base_calloc, not malloc and memset: the C library's calloc leaves a large block's fresh pages
 * untouched, so a KV cache stays unresident until positions are written. */
void *base_calloc_lines(size_t n, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes) || bytes > SIZE_MAX - 64 - sizeof(void *)) return counted(NULL);
    uint8_t *raw = base_calloc(bytes + 64 + sizeof(void *), 1);
    if (!raw) return NULL;
    uintptr_t at = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
    memcpy((void *)(at - sizeof(void *)), &raw, sizeof raw);
    return (void *)at;
}

void base_free_lines(void *p) {
    if (!p) return;
    void *raw;
    memcpy(&raw, (uint8_t *)p - sizeof raw, sizeof raw);
    base_free(raw);
}

#if defined(MADV_HUGEPAGE) || defined(MADV_NOHUGEPAGE)
/* madvise over the whole blocks of `block` bytes (a power of two) inside [p, p + bytes) */
static void advise_blocks(void *p, size_t bytes, uintptr_t block, int advice) {
    const uintptr_t b = ((uintptr_t)p + block - 1) & ~(block - 1), e = ((uintptr_t)p + bytes) & ~(block - 1);
    if (p && e > b) (void)madvise((void *)b, e - b, advice);
}
#endif

void base_advise_huge(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    advise_blocks(p, bytes, (uintptr_t)2 << 20, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

void base_advise_small(void *p, size_t bytes) {
#ifdef MADV_NOHUGEPAGE
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0 && (page & (page - 1)) == 0) advise_blocks(p, bytes, (uintptr_t)page, MADV_NOHUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

char *base_strndup(const char *s, size_t n) {
    size_t len = strnlen(s, n);
    char *d = base_malloc(len + 1);
    if (d) memcpy(d, s, len), d[len] = '\0';
    return d;
}

char *base_strdup(const char *s) { return base_strndup(s, strlen(s)); }

static double ts_us(const struct timespec *t) { return (double)t->tv_sec * 1e6 + (double)t->tv_nsec / 1e3; }

/* The epoch offset of the monotonic clock, taken once (pthread_once: sessions run on many threads). */
static double offset_us;
static pthread_once_t offset_once = PTHREAD_ONCE_INIT;

static void take_offset(void) {
    struct timespec real, mono;
    clock_gettime(CLOCK_REALTIME, &real);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    offset_us = ts_us(&real) - ts_us(&mono);
}

double base_now_us(void) {
    pthread_once(&offset_once, take_offset);
    struct timespec mono;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    return ts_us(&mono) + offset_us;
}

etch_status base_map_open(const char *path, base_map *m, etch_error *err) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return base_fail(err, ETCH_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return base_fail(err, ETCH_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return base_fail(err, ETCH_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return base_fail(err, ETCH_ERR_IO, "%s: cannot map %lld bytes: %s", path,
                             (long long)st.st_size, strerror(e));
        }
        m->data = p;
        m->size = (uint64_t)st.st_size;
        base_advise_huge(p, (size_t)st.st_size); /* decode reads every weight once per token */
    }
    close(fd);
    return ETCH_OK;
}

void base_map_close(base_map *m) {
    if (m && m->data) munmap((void *)m->data, (size_t)m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}

etch_status base_read_file(const char *path, uint8_t **data, uint64_t *size, etch_error *err) {
    *data = NULL;
    *size = 0;
    base_map m;
    etch_status st = base_map_open(path, &m, err);
    if (st != ETCH_OK) return st;
    uint8_t *buf = base_malloc(m.size ? (size_t)m.size : 1);
    if (!buf) {
        base_map_close(&m);
        return base_fail(err, ETCH_ERR_NOMEM, "%s: cannot allocate %llu bytes", path,
                         (unsigned long long)m.size);
    }
    if (m.size) memcpy(buf, m.data, (size_t)m.size);
    *data = buf;
    *size = m.size;
    base_map_close(&m);
    return ETCH_OK;
}

uint64_t base_fnv1a(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    /* Eight bytes per step keeps this near memory speed for the data hash. */
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h ^= w;
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int base_utf8_seq_len(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1Fu; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0Fu; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07u; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    if (len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
    if (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
    return len;
}

size_t base_utf8_check(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int l = base_utf8_seq_len(s + i, n - i);
        if (l == 0) return i;
        i += (size_t)l;
    }
    return n;
}
