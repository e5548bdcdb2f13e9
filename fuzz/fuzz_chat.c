/* Chat rendering: arbitrary system and user text (split at the first NUL), each template, each
 * thinking setting; then the rendered prompt is tokenized. */
#include "fuzz_stories.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static const char *templates[] = {"chatml", "qwen3", "llama3", "llama2", "bogus", NULL};
    etch_program *p = fuzz_stories(64);
    if (n < 1) return 0;
    char *buf = malloc(n + 1);
    memcpy(buf, data + 1, n - 1);
    buf[n - 1] = '\0';
    const char *user = buf, *system = NULL;
    size_t first = strlen(buf);
    if (first + 1 < n - 1) system = buf + first + 1; /* text after the first NUL, up to the next */
    etch_chat_options o = {(data[0] & 8) ? system : NULL, (int)(data[0] & 3) - 1, templates[(data[0] >> 4) % 6]};
    char *out = NULL;
    etch_error err;
    if (etch_chat_render(p, user, &o, &out, &err) == ETCH_OK) {
        int32_t *ids = NULL, n_ids = 0;
        if (etch_tokenize(p, out, strlen(out), 1, &ids, &n_ids, &err) == ETCH_OK) etch_free(ids);
        etch_free(out);
    }
    free(buf);
    return 0;
}
