/* tools/cli: the command line's helper layer (as lauxlib is to lua.c): messages that name the command,
 * strict numbers, option values, the progress bar, files read whole, and JSON strings. Every command
 * (tools/cmd_*.c) stands on it; none calls another. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *cli_name = "etch";

int cli_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cli_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see '%s --help')\n", cli_name);
    va_end(ap);
    return 2;
}

int cli_fail(const char *msg) {
    fprintf(stderr, "%s: %s\n", cli_name, msg);
    return 1;
}

int cli_failf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cli_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* Strict number parsing: the whole string, in range. */
const char *cli_take_kv_type(int argc, char **argv, int *i) {
    const char *opt = argv[*i], *v = cli_take(argc, argv, i);
    if (v && strcmp(v, "f32") && strcmp(v, "f16") && strcmp(v, "q8")) {
        cli_usage("%s expects f32, f16 or q8, got '%s'", opt, v);
        return NULL;
    }
    return v;
}

int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_usage("%s expects an integer in %ld..%ld, got '%s'", opt, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_u64(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        cli_usage("%s expects a non-negative integer, got '%s'", opt, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_float(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        cli_usage("%s expects a number in %g..%g, got '%s'", opt, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_list(const char *opt, const char *s, long lo, long hi, int *out, int cap) {
    int n = 0;
    for (const char *p = s;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || (*end && *end != ',') || v < lo || v > hi || n == cap) {
            cli_usage("%s expects up to %d comma-separated integers in %ld..%ld, got '%s'", opt, cap, lo, hi, s);
            return 0;
        }
        out[n++] = (int)v;
        if (!*end) return n;
        p = end + 1;
    }
}

/* The value of option argv[*i]; NULL (after a message) when it is the last argument. */
const char *cli_take(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_usage("option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

double cli_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A progress bar on stderr, redrawn in place: only when stderr is a terminal. The unit follows
 * `what`: tokens when calibrating, windows when evaluating, else tensors. etch eval uses it too. */
void cli_progress(void *user, const char *what, int64_t done, int64_t total) {
    (void)user;
    if (!isatty(2) || total <= 0) return;
    int width = 40, filled = (int)(width * (double)done / (double)total);
    const char *unit = !strcmp(what, "calibrating") ? "tokens" : !strcmp(what, "evaluating") ? "windows" : "tensors";
    fprintf(stderr, "\r%-11s [%.*s%*s] %lld/%lld %s", what, filled, "########################################",
            width - filled, "", (long long)done, (long long)total, unit);
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
}

/* JSON strings by hand, both ways, for one reason: the texts etch prints and reads may hold NUL
 * bytes (a byte-fallback token decodes to one), and cJSON's strings end at the first NUL. Objects are
 * assembled around these with printf. */
void cli_json_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void cli_json_ids(FILE *f, const int32_t *ids, int32_t n) {
    fputc('[', f);
    for (int32_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ids[i]);
    fputc(']', f);
}

char *cli_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s: cannot open: %s\n", cli_name, path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) free(buf);
            buf = nb, cap *= 2;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: %s: out of memory\n", cli_name, path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Decodes the JSON string starting at *p (after its opening quote) into out, keeping embedded NULs
 * (cJSON cannot: its strings end at the first NUL). Returns the length, or -1 when malformed. */
long cli_json_string_at(const char **p, const char *end, char *out) {
    long n = 0;
    const char *s = *p;
    while (s < end && *s != '"') {
        unsigned char c = (unsigned char)*s++;
        if (c < 0x20) return -1;
        if (c != '\\') {
            out[n++] = (char)c;
            continue;
        }
        if (s >= end) return -1;
        char e = *s++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            out[n++] = map[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u' || end - s < 4) return -1;
        unsigned cp = 0;
        for (int i = 0; i < 4; i++) {
            char h = *s++;
            cp = cp << 4 | (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
            if (cp > 0xFFFF) return -1;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
            unsigned lo = 0;
            if (end - s < 6 || s[0] != '\\' || s[1] != 'u') return -1;
            s += 2;
            for (int i = 0; i < 4; i++) {
                char h = *s++;
                lo = lo << 4 | (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
                if (lo > 0xFFFF) return -1;
            }
            if (lo < 0xDC00 || lo > 0xDFFF) return -1;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return -1;
        }
        if (cp < 0x80) out[n++] = (char)cp;
        else if (cp < 0x800) out[n++] = (char)(0xC0 | cp >> 6), out[n++] = (char)(0x80 | (cp & 63));
        else if (cp < 0x10000) out[n++] = (char)(0xE0 | cp >> 12), out[n++] = (char)(0x80 | (cp >> 6 & 63)), out[n++] = (char)(0x80 | (cp & 63));
        else out[n++] = (char)(0xF0 | cp >> 18), out[n++] = (char)(0x80 | (cp >> 12 & 63)), out[n++] = (char)(0x80 | (cp >> 6 & 63)), out[n++] = (char)(0x80 | (cp & 63));
    }
    if (s >= end) return -1;
    *p = s + 1;
    return n;
}


/* ------------------------------------------------------------------ Ctrl-C */

static etch_session *volatile watched[2];
static volatile sig_atomic_t interrupted_flag;
static struct sigaction previous;

static void on_interrupt(int sig) {
    (void)sig;
    interrupted_flag = 1;
    for (int i = 0; i < 2; i++)
        if (watched[i]) etch_session_cancel(watched[i]); /* one atomic store: safe in a handler */
}

void cli_interrupt_begin(int once) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sa.sa_flags = once ? SA_RESETHAND : 0; /* no SA_RESTART: a read at a prompt returns with EINTR */
    sigemptyset(&sa.sa_mask);
    interrupted_flag = 0;
    sigaction(SIGINT, &sa, &previous);
}

void cli_interrupt_watch(etch_session *a, etch_session *b) { watched[0] = a, watched[1] = b; }
int cli_interrupted(void) { return interrupted_flag; }
void cli_interrupt_clear(void) { interrupted_flag = 0; }

void cli_interrupt_end(void) {
    sigaction(SIGINT, &previous, NULL);
    watched[0] = watched[1] = NULL;
}

int cli_sampling_option(int argc, char **argv, int *i, etch_generate_config *cfg, const char **stops, int *n_stop) {
    const char *a = argv[*i], *v;
    long n;
    double d;
    if (!strcmp(a, "-n") || !strcmp(a, "--max-new-tokens")) {
        if (!(v = cli_take(argc, argv, i)) || !cli_parse_int(a, v, 0, INT32_MAX, &n)) return -1;
        cfg->max_new_tokens = (int32_t)n;
    } else if (!strcmp(a, "--temperature")) {
        if (!(v = cli_take(argc, argv, i)) || !cli_parse_float(a, v, 0.0, 100.0, &d)) return -1;
        cfg->temperature = (float)d;
    } else if (!strcmp(a, "--top-p")) {
        if (!(v = cli_take(argc, argv, i)) || !cli_parse_float(a, v, 1e-6, 1.0, &d)) return -1;
        cfg->top_p = (float)d;
    } else if (!strcmp(a, "--top-k")) {
        if (!(v = cli_take(argc, argv, i)) || !cli_parse_int(a, v, 0, INT32_MAX, &n)) return -1;
        cfg->top_k = (int32_t)n;
    } else if (!strcmp(a, "--seed")) {
        if (!(v = cli_take(argc, argv, i)) || !cli_parse_u64(a, v, &cfg->seed)) return -1;
    } else if (!strcmp(a, "--stop")) {
        if (!(v = cli_take(argc, argv, i))) return -1;
        if (*n_stop == CLI_MAX_STOP) return cli_usage("%d stop strings at most", CLI_MAX_STOP), -1;
        if (!*v) return cli_usage("--stop expects a non-empty string"), -1;
        stops[(*n_stop)++] = v;
        cfg->stop = stops, cfg->n_stop = *n_stop;
    } else {
        return 0;
    }
    return 1;
}

void cli_weight_types(const etch_program *p, char *buf, size_t cap) {
    const char *names[8] = {0};
    double bytes[8] = {0}, total = 0;
    int n = 0;
    etch_program_info info;
    etch_program_info_get(p, &info);
    for (int32_t i = 0; i < info.n_tensors; i++) {
        etch_tensor_info t;
        size_t len;
        if (etch_program_tensor(p, i, &t) != ETCH_OK || t.ndim != 2 || (len = strlen(t.name)) < 7 ||
            strcmp(t.name + len - 7, ".weight"))
            continue; /* matrices only: NAME.weight, not NAME.scale, .min, .act or a norm */
        int j = 0;
        while (j < n && strcmp(names[j], t.dtype)) j++;
        if (j == n && n < 8) names[n++] = t.dtype;
        if (j < n) bytes[j] += (double)t.nbytes, total += (double)t.nbytes;
    }
    size_t at = 0;
    buf[0] = 0;
    for (int k = 0; k < n; k++) { /* largest first */
        int best = -1;
        for (int j = 0; j < n; j++)
            if (bytes[j] >= 0 && (best < 0 || bytes[j] > bytes[best])) best = j;
        int w = snprintf(buf + at, cap - at, "%s%s %.0f%%", k ? ", " : "", names[best],
                         100.0 * bytes[best] / (total > 0 ? total : 1));
        if (w < 0 || (size_t)w >= cap - at) break;
        at += (size_t)w;
        bytes[best] = -1;
    }
}
