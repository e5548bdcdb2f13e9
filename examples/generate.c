/* A short program against the installed libetch (build it with pkg-config):
 *   cc generate.c $(pkg-config --cflags --libs etch) -o generate
 *   ./generate stories.etch "Once upon a time" 40
 * It opens a program, prints its method metadata, streams a greedy continuation with a callback
 * that stops at the first full stop after 20 tokens, and prints ExecuTorch's stats line. */
#include <etch.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int on_token(void *user, int32_t token, const char *text, size_t len) {
    int *count = user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    (*count)++;
    return token >= 0 && *count >= 20 && memchr(text, '.', len) != NULL; /* non-zero stops */
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s PROGRAM.etch PROMPT N\n", argv[0]);
        return 2;
    }
    printf("etch %s (header %s)\n", etch_version(), ETCH_VERSION_STRING);
    etch_error err;
    etch_program *prog;
    if (etch_program_open(argv[1], &prog, &err) != ETCH_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    const etch_method_meta *m = etch_program_meta(prog);
    printf("max_seq_len %d, max_context_len %d, vocab %d, %s\n", m->max_seq_len, m->max_context_len, m->vocab_size, m->dtype);
    etch_session *s;
    if (etch_session_new(prog, &s, &err) != ETCH_OK) {
        fprintf(stderr, "%s\n", err.message);
        etch_program_close(prog);
        return 1;
    }
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = atoi(argv[3]);
    int count = 0;
    fputs(argv[2], stdout);
    if (etch_generate(s, argv[2], &cfg, on_token, &count) != ETCH_OK) {
        fprintf(stderr, "\n%s\n", etch_session_error(s));
        etch_session_free(s);
        etch_program_close(prog);
        return 1;
    }
    char line[2048];
    etch_stats_observer_line(etch_session_stats(s), line, sizeof line);
    printf("\n%s\n", line);
    etch_session_free(s);
    etch_program_close(prog);
    return 0;
}
