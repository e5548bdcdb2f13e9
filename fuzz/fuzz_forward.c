/* The forward call's input checks (and the forward itself when they pass): token count, start
 * position and ids from the input, on stories260K with calls of up to 64 tokens; a session that has
 * seen earlier calls, as an embedder's would. */
#include "fuzz_stories.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static etch_session *s;
    static float *logits;
    etch_program *p = fuzz_stories(64);
    const etch_method_meta *m = etch_program_meta(p);
    etch_error err;
    if (!s) {
        if (etch_session_new_threads(p, 1, &s, &err) != ETCH_OK) abort();
        logits = malloc((size_t)64 * m->vocab_size * sizeof *logits);
    }
    if (n < 8) return 0;
    int32_t count, start;
    memcpy(&count, data, 4);
    memcpy(&start, data + 4, 4);
    /* Mostly short calls (fast), sometimes up to and past the bound of 64, sometimes negative. */
    count = (data[3] & 0x80) ? count % 80 : count % 9;
    int32_t ids[80];
    size_t have = (n - 8) / 4;
    for (int32_t i = 0; i < 80; i++) {
        int32_t v = 0;
        if ((size_t)i < have) memcpy(&v, data + 8 + 4 * i, 4);
        ids[i] = (v & 0x40000000) ? v : v % 600; /* mostly in or near the vocabulary (512) */
    }
    if (data[0] & 0x80) start = start % 600;
    etch_forward(s, (data[1] & 1) ? NULL : ids, count, start, logits, data[2] & 1);
    return 0;
}
