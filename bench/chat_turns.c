/* bench_chat: the time to the first token of each turn of a conversation, with the session keeping
 * the conversation (each turn prefills only its new message) and with the whole history prefilled
 * again (the session reset before each turn), as a chat app without state pays. A program, not a test.
 * usage: bench_chat PROGRAM.etch [TURNS=10] [ANSWER_TOKENS=32] [THREADS=0] */
#define _POSIX_C_SOURCE 200809L
#include "etch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs a started generation to its end; its text into *text (malloc'ed). */
static int drain(etch_session *s, char **text) {
    size_t len = 0, cap = 256;
    *text = malloc(cap);
    (*text)[0] = '\0';
    for (;;) {
        int32_t tok;
        const char *t;
        size_t n;
        if (etch_generate_next(s, &tok, &t, &n) != ETCH_OK) return 0;
        if (len + n + 1 > cap) *text = realloc(*text, cap = (len + n + 1) * 2);
        memcpy(*text + len, t, n);
        len += n;
        (*text)[len] = '\0';
        if (tok < 0) return 1;
    }
}

static double ttft_ms(const etch_stats *st) { return st->first_token_ms - st->inference_start_ms; }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_chat PROGRAM.etch [TURNS=10] [ANSWER_TOKENS=32] [THREADS=0]\n");
        return 2;
    }
    int turns = argc > 2 ? atoi(argv[2]) : 10, answer = argc > 3 ? atoi(argv[3]) : 32, threads = argc > 4 ? atoi(argv[4]) : 0;
    etch_program *p;
    etch_session *keep, *again;
    etch_error err;
    if (etch_program_open(argv[1], &p, &err) != ETCH_OK || etch_session_new_threads(p, threads, &keep, &err) != ETCH_OK ||
        etch_session_new_threads(p, threads, &again, &err) != ETCH_OK) {
        fprintf(stderr, "bench_chat: %s\n", err.message);
        return 1;
    }
    static const char *questions[] = {
        "Tell me about the history of computing in a few sentences.",
        "Which of those machines was the first to store its program in memory?",
        "How did compilers change the way programs were written?",
        "What is a library of code, and why do programmers share them?",
        "Explain what an operating system does for a program.",
        "Why did personal computers become popular in the 1980s?",
        "What changed when computers were connected into networks?",
        "How do the processors of today differ from the early ones?",
        "What is a language model, in one paragraph?",
        "Summarize our conversation so far in three sentences."};
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = answer;
    etch_chat_message *msgs = calloc((size_t)(2 * turns + 2), sizeof *msgs);
    int n = 0;
    msgs[n++] = (etch_chat_message){"system", "You are a helpful assistant who answers at length.", NULL};
    printf("| turn | history tokens | TTFT, conversation kept (ms) | new tokens prefilled | TTFT, history prefilled again (ms) | tokens prefilled | ratio |\n");
    printf("|---|---|---|---|---|---|---|\n");
    double sum_keep = 0, sum_again = 0;
    for (int t = 0; t < turns; t++) {
        msgs[n++] = (etch_chat_message){"user", questions[t % 10], NULL};
        char *text, *unused;
        if (etch_chat_start(keep, msgs, n, NULL, &cfg) != ETCH_OK || !drain(keep, &text)) {
            fprintf(stderr, "bench_chat: %s\n", etch_session_error(keep));
            return 1;
        }
        etch_stats a = *etch_session_stats(keep);
        etch_session_reset(again);
        if (etch_chat_start(again, msgs, n, NULL, &cfg) != ETCH_OK || !drain(again, &unused)) {
            fprintf(stderr, "bench_chat: %s\n", etch_session_error(again));
            return 1;
        }
        etch_stats b = *etch_session_stats(again);
        free(unused);
        printf("| %d | %lld | %.1f | %lld | %.1f | %lld | %.1fx |\n", t + 1, (long long)(a.prompt_tokens + a.reused_tokens),
               ttft_ms(&a), (long long)a.prompt_tokens, ttft_ms(&b), (long long)b.prompt_tokens, ttft_ms(&b) / ttft_ms(&a));
        fflush(stdout);
        sum_keep += ttft_ms(&a), sum_again += ttft_ms(&b);
        msgs[n++] = (etch_chat_message){"assistant", text, NULL};
    }
    printf("\nall %d turns: %.0f ms to first tokens with the conversation kept, %.0f ms with the history prefilled "
           "again (%.1fx)\n", turns, sum_keep, sum_again, sum_again / sum_keep);
    for (int i = 0; i < n; i++)
        if (!strcmp(msgs[i].role, "assistant")) free((char *)msgs[i].content);
    free(msgs);
    etch_session_free(keep);
    etch_session_free(again);
    etch_program_close(p);
    return 0;
}
