/* A twenty-line test helper: CHECK records a failure with its place and goes on; REQUIRE stops the
 * test when a precondition fails; check_done prints "N passed, M failed" for ctest's log.
 * Each condition is evaluated exactly once. */
#ifndef ETCH_CHECK_H
#define ETCH_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int check_pass, check_fail;

__attribute__((format(printf, 5, 6))) static inline int check_record(int ok, const char *expr, const char *file,
                                                                     int line, const char *fmt, ...) {
    if (ok) {
        check_pass++;
        return 1;
    }
    check_fail++;
    fprintf(stderr, "%s:%d: CHECK(%s) failed: ", file, line, expr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 0;
}

#define CHECK(cond, ...) ((void)check_record(!!(cond), #cond, __FILE__, __LINE__, __VA_ARGS__))

#define REQUIRE(cond, ...)                                                          \
    do {                                                                            \
        if (!check_record(!!(cond), #cond, __FILE__, __LINE__, __VA_ARGS__)) return check_done(); \
    } while (0)

static inline int check_done(void) {
    printf("%d passed, %d failed\n", check_pass, check_fail);
    return check_fail || check_pass == 0 ? 1 : 0;
}

/* The whole of a file, NUL-terminated, malloc'ed (caller frees); NULL when it cannot be read. */
static inline char *check_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = len >= 0 ? malloc((size_t)len + 1) : NULL;
    size_t got = p ? fread(p, 1, (size_t)len, f) : 0;
    fclose(f);
    if (!p) return NULL;
    p[got] = '\0';
    if (n) *n = got;
    return p;
}

#ifdef ETCH_TEST_TMP
/* ETCH_TEST_TMP/name, in one of eight rotating buffers (a call's result lives for eight more calls). */
static inline const char *check_tmp_path(const char *name) {
    static char out[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(out[k], sizeof out[k], "%s/%s", ETCH_TEST_TMP, name);
    return out[k];
}
#endif

/* The folder with stories260K/ and friends: $ETCH_MODELS_DIR, else the build's default. */
static inline const char *models_dir(void) {
    const char *d = getenv("ETCH_MODELS_DIR");
    return d && *d ? d : ETCH_DEFAULT_MODELS_DIR;
}

/* The folder with qwen3/ and mistral/ tokenizers: $ETCH_TOKENIZERS_DIR, else models_dir()/../tokenizers. */
static inline const char *tokenizers_dir(void) {
    static char buf[1024];
    const char *d = getenv("ETCH_TOKENIZERS_DIR");
    if (d && *d) return d;
    snprintf(buf, sizeof buf, "%s/../tokenizers", models_dir());
    return buf;
}

#endif
