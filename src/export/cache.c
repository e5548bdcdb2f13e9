/* export/cache: models run directly. A GGUF file or a Hugging Face folder is exported on first use
 * into a cache folder and the program there is reused while the source is unchanged; a program file
 * is opened as it is. The cache key covers what makes the program: the source's absolute path, each
 * of its files' size, modification time and first 64 KiB, the export options, and etch's version and
 * export format (the salt). */
#define _POSIX_C_SOURCE 200809L
#include "export.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { KEY_HEAD = 64 * 1024 };

/* Folds one file (name, size, mtime, first 64 KiB) into the key. */
static uint64_t key_file(uint64_t h, const char *path, const struct stat *st) {
    h = base_fnv1a(h, path, strlen(path) + 1);
    int64_t facts[3] = {(int64_t)st->st_size, (int64_t)st->st_mtim.tv_sec, (int64_t)st->st_mtim.tv_nsec};
    h = base_fnv1a(h, facts, sizeof facts);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return h;
    static _Thread_local uint8_t head[KEY_HEAD];
    ssize_t n = read(fd, head, sizeof head);
    close(fd);
    return n > 0 ? base_fnv1a(h, head, (size_t)n) : h;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The key of a folder: its regular files in name order. */
static etch_status key_folder(uint64_t *h, const char *dir, etch_error *err) {
    DIR *d = opendir(dir);
    if (!d) return base_fail(err, ETCH_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    etch_status st = ETCH_OK;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nn = base_realloc(names, cap * sizeof *nn);
            if (!nn) {
                st = base_fail(err, ETCH_ERR_NOMEM, "out of memory listing %s", dir);
                break;
            }
            names = nn;
        }
        if (!(names[n] = base_strdup(e->d_name))) {
            st = base_fail(err, ETCH_ERR_NOMEM, "out of memory listing %s", dir);
            break;
        }
        n++;
    }
    closedir(d);
    if (!st) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        struct stat fs;
        int fits = snprintf(path, sizeof path, "%s/%s", dir, names[i]) < (int)sizeof path;
        if (!st && fits && stat(path, &fs) == 0 && S_ISREG(fs.st_mode)) *h = key_file(*h, path, &fs);
        base_free(names[i]);
    }
    base_free(names);
    return st;
}

/* What the source is: 0 a program, 1 GGUF, 2 a Hugging Face folder, -1 none of them (message set). */
static int source_kind(const char *path, const struct stat *st, etch_error *err) {
    if (S_ISDIR(st->st_mode)) {
        char cfg[PATH_MAX];
        if (snprintf(cfg, sizeof cfg, "%s/config.json", path) < (int)sizeof cfg && access(cfg, R_OK) == 0) return 2;
        base_fail(err, ETCH_ERR_UNSUPPORTED, "%s: a folder without config.json is not a Hugging Face model", path);
        return -1;
    }
    char magic[8] = {0};
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(magic, 1, sizeof magic, f) : 0;
    if (f) fclose(f);
    if (got >= 8 && !memcmp(magic, "ETCHPROG", 8)) return 0;
    if (got >= 4 && !memcmp(magic, "GGUF", 4)) return 1;
    base_fail(err, ETCH_ERR_FORMAT,
              "%s: not an etch program, a GGUF file or a Hugging Face folder (a llama2.c checkpoint is exported with "
              "`etch export --llama2c FILE --tokenizer TOK.bin -o OUT.etch`)",
              path);
    return -1;
}

etch_status etch_cached_program(const char *source, const char *cache_dir, const etch_export_options *opt, char *out,
                                size_t cap, int *exported, etch_error *err) {
    base_clear(err);
    if (exported) *exported = 0;
    if (!source || !out || cap == 0) return base_fail(err, ETCH_ERR_ARG, "etch_cached_program: NULL argument");
    struct stat st;
    if (stat(source, &st) != 0) return base_fail(err, ETCH_ERR_IO, "%s: cannot open: %s", source, strerror(errno));
    int kind = source_kind(source, &st, err);
    if (kind < 0) return err ? err->status : ETCH_ERR_FORMAT;
    if (kind == 0) {
        if (strlen(source) >= cap) return base_fail(err, ETCH_ERR_ARG, "%s: path too long", source);
        strcpy(out, source);
        return ETCH_OK;
    }
    char abs[PATH_MAX];
    if (!realpath(source, abs)) return base_fail(err, ETCH_ERR_IO, "%s: %s", source, strerror(errno));
    /* The salt changes with what export writes for the same source (2: GGUF's Q4_1, Q4_K, Q5_1 and Q5_K
     * kept with their mins, no longer dequantized to f16; 3: a GGUF's block types for int8 activations
     * by default), so an upgraded etch exports again. */
    uint64_t h = base_fnv1a(BASE_FNV_INIT, "etch-cache-3", 12);
    h = base_fnv1a(h, ETCH_VERSION_STRING, sizeof ETCH_VERSION_STRING);
    h = base_fnv1a(h, abs, strlen(abs) + 1);
    etch_export_options o = {-4096, 0, NULL, NULL, NULL, NULL, NULL, NULL}; /* the command line's defaults */
    if (opt) o = *opt;
    int32_t nums[2] = {o.max_context_len, o.max_seq_len};
    h = base_fnv1a(h, nums, sizeof nums);
    h = base_fnv1a(h, o.dtype ? o.dtype : "-", strlen(o.dtype ? o.dtype : "-") + 1);
    h = base_fnv1a(h, o.chat_template ? o.chat_template : "-", strlen(o.chat_template ? o.chat_template : "-") + 1);
    h = base_fnv1a(h, o.kv_type ? o.kv_type : "-", strlen(o.kv_type ? o.kv_type : "-") + 1);
    h = base_fnv1a(h, o.activations ? o.activations : "int8", strlen(o.activations ? o.activations : "int8") + 1);
    etch_status rc = kind == 1 ? (h = key_file(h, abs, &st), ETCH_OK) : key_folder(&h, abs, err);
    if (rc) return rc;

    char dir[PATH_MAX];
    const char *env = getenv("ETCH_CACHE_DIR"), *home = getenv("HOME");
    int n = cache_dir && *cache_dir ? snprintf(dir, sizeof dir, "%s", cache_dir)
            : env && *env           ? snprintf(dir, sizeof dir, "%s", env)
            : home && *home         ? snprintf(dir, sizeof dir, "%s/.cache/etch", home)
                                    : -1;
    if (n < 0) return base_fail(err, ETCH_ERR_ARG, "no cache folder: set ETCH_CACHE_DIR");
    if (n >= (int)sizeof dir) return base_fail(err, ETCH_ERR_ARG, "the cache folder's path is too long");
    for (char *p = dir + 1;; p++) { /* mkdir -p */
        char c = *p;
        if (c != '/' && c) continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            etch_status e = base_fail(err, ETCH_ERR_IO, "%s: cannot create the cache folder: %s", dir, strerror(errno));
            *p = c;
            return e;
        }
        *p = c;
        if (!c) break;
    }
    const char *base = strrchr(abs, '/');
    base = base ? base + 1 : abs;
    int len = (int)strcspn(base, ".");
    if (len == 0) len = (int)strlen(base);
    if (snprintf(out, cap, "%s/%.*s-%016llx.etch", dir, len > 64 ? 64 : len, base, (unsigned long long)h) >= (int)cap)
        return base_fail(err, ETCH_ERR_ARG, "the cached program's path does not fit");
    if (access(out, R_OK) == 0) return ETCH_OK;
    rc = kind == 1 ? etch_export_gguf(abs, out, &o, err) : etch_export_hf(abs, out, &o, err);
    if (!rc && exported) *exported = 1;
    return rc;
}
