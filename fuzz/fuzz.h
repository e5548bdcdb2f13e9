/* Shared by the libFuzzer harnesses: inputs reach the path-based readers through a file of this
 * process, and the assets (stories260K, tokenizers) come from the same places the tests use. */
#ifndef ETCH_FUZZ_H
#define ETCH_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A folder of this process under $TMPDIR (or /tmp), made once. */
static const char *fuzz_dir(void) {
    static char dir[512];
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/etch-fuzz-%d", t && *t ? t : "/tmp", (int)getpid());
        char cmd[600];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
        if (system(cmd) != 0) abort();
    }
    return dir;
}

/* Writes data to dir/name and returns the path (a static buffer per call site is the caller's). */
static void fuzz_write(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

static void fuzz_path(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", fuzz_dir(), name); }

/* The folder with stories260K/: $ETCH_MODELS_DIR, else beside the checkout. */
static const char *fuzz_models_dir(void) {
    const char *d = getenv("ETCH_MODELS_DIR");
    return d && *d ? d : ETCH_DEFAULT_MODELS_DIR;
}

#endif
