/* tools/cli.h: the command line's helper layer and its commands. tools/etch.c keeps the table of
 * commands; each command is one file, tools/cmd_NAME.c, with `int cmd_NAME(argc, argv)` (argv[0] is
 * the command's name) returning the exit code: 0, 1 for a failure at run time, 2 for a usage error. */
#ifndef ETCH_CLI_H
#define ETCH_CLI_H

#include "etch.h"

#include <stdint.h>
#include <stdio.h>

/* The prefix of every message: "etch", or "etch run" once a command starts. */
extern const char *cli_name;

/* "NAME: message (see 'NAME --help')" on stderr; returns 2. */
int cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "NAME: msg" on stderr; returns 1. */
int cli_fail(const char *msg);
/* The same with a printf format. */
int cli_failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Strict numbers: the whole string, in range; otherwise a usage message naming opt, and 0. */
int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out);
int cli_parse_u64(const char *opt, const char *s, uint64_t *out);
int cli_parse_float(const char *opt, const char *s, double lo, double hi, double *out);
/* A comma-separated list of integers in lo..hi into out[cap]; the count, or 0 after a message. */
int cli_parse_list(const char *opt, const char *s, long lo, long hi, int *out, int cap);
/* The value of option argv[*i] (and *i moves past it); NULL after a message when there is none. */
const char *cli_take(int argc, char **argv, int *i);
/* The value of --kv-type (argv[*i]): f32, f16 or q8; NULL after a message. */
const char *cli_take_kv_type(int argc, char **argv, int *i);
#define CLI_KV_TYPE_HELP \
    "  --kv-type f32|f16|q8     the KV cache: f32, f16, or int8 with a scale per row and head\n" \
    "                           (default: the program's, etch inspect shows it)\n"

/* Seconds on the monotonic clock. */
double cli_seconds(void);
/* A progress bar on stderr, redrawn in place, only when stderr is a terminal (the shape of
 * etch_export_options.progress). */
void cli_progress(void *user, const char *what, int64_t done, int64_t total);
/* The whole file, NUL-terminated, malloc'ed; NULL after a message naming it. */
char *cli_slurp(const char *path, size_t *len);

/* A JSON string of s[n] (NUL bytes included) and a JSON array of ids. */
/* What the program's weight matrices are stored as, largest share first: "q4 71%, q8 29%" (by bytes,
 * scales and mins apart; meta's dtype names only the float type of the other tensors). */
void cli_weight_types(const etch_program *p, char *buf, size_t cap);

void cli_json_string(FILE *f, const char *s, size_t n);
void cli_json_ids(FILE *f, const int32_t *ids, int32_t n);
/* Decodes the JSON string at *p (after its opening quote) into out (room for end - *p bytes), NULs
 * kept; the length, or -1 when malformed. *p moves past the closing quote. */
long cli_json_string_at(const char **p, const char *end, char *out);

/* Ctrl-C: begin installs the handler (once: a second Ctrl-C ends the process at once), which sets a
 * flag and cancels the sessions watched (etch_session_cancel: the running call stops at its next
 * check); end restores what was there. */
void cli_interrupt_begin(int once);
void cli_interrupt_watch(etch_session *a, etch_session *b);
int cli_interrupted(void);
void cli_interrupt_clear(void);
void cli_interrupt_end(void);

/* The sampling options that etch run and etch chat share (-n, --temperature, --top-p, --top-k,
 * --seed, --stop into stops[CLI_MAX_STOP]): 1 when argv[*i] was one (and *i moved past its value),
 * 0 when it is not, -1 after a usage message. */
#define CLI_MAX_STOP 16
int cli_sampling_option(int argc, char **argv, int *i, etch_generate_config *cfg, const char **stops, int *n_stop);

int cmd_export(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_eval(int argc, char **argv);

#endif
