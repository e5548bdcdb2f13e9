/* One program shared by several sessions on several threads, generating at once: each session's
 * output equals what it produces alone (the program is immutable after open; sessions share nothing). */
#include "stories.h"

#include <pthread.h>

enum { THREADS = 4, TOKENS = 96 };

static etch_program *prog;
static const char *prompts[THREADS] = {"Once upon a time", "The little dog", "Lily and Ben went", ""};

typedef struct job {
    int index;
    int32_t ids[TOKENS];
    int32_t n;
    int ok;
} job;

static void *run(void *arg) {
    job *j = arg;
    etch_session *s;
    etch_error err;
    j->ok = etch_session_new_threads(prog, 2, &s, &err) == ETCH_OK; /* each session with its own pool */
    etch_generate_config cfg;
    etch_generate_config_default(&cfg);
    cfg.max_new_tokens = TOKENS;
    cfg.temperature = j->index == 1 ? 0.8f : 0.0f; /* one samples, with a fixed seed */
    cfg.seed = 1234;
    if (j->ok) j->ok = etch_generate(s, prompts[j->index], &cfg, NULL, NULL) == ETCH_OK;
    if (j->ok) {
        const int32_t *g = etch_session_generated_ids(s, &j->n);
        memcpy(j->ids, g, (size_t)j->n * sizeof *g);
    }
    etch_session_free(s);
    return NULL;
}

int main(void) {
    const char *path = export_stories("concurrency.etch", 0, 0);
    etch_error err;
    REQUIRE(path && etch_program_open(path, &prog, &err) == ETCH_OK, "open: %s", path ? err.message : "export");
    job alone[THREADS], together[THREADS];
    for (int i = 0; i < THREADS; i++) {
        alone[i] = (job){.index = i};
        run(&alone[i]);
        REQUIRE(alone[i].ok && alone[i].n > 0, "session %d alone", i);
    }
    for (int round = 0; round < 3; round++) {
        pthread_t t[THREADS];
        for (int i = 0; i < THREADS; i++) {
            together[i] = (job){.index = i};
            REQUIRE(pthread_create(&t[i], NULL, run, &together[i]) == 0, "thread %d", i);
        }
        for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < THREADS; i++)
            CHECK(together[i].ok && together[i].n == alone[i].n &&
                      memcmp(together[i].ids, alone[i].ids, (size_t)alone[i].n * sizeof(int32_t)) == 0,
                  "round %d: session %d on a shared program differs from its run alone", round, i);
    }
    etch_program_close(prog);
    return check_done();
}
