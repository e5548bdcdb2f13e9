/* Exports stories260K (from the shared models folder) into the test folder. */
#ifndef ETCH_TEST_STORIES_H
#define ETCH_TEST_STORIES_H

#include "check.h"
#include "etch.h"

#include <string.h>

/* Writes stories260K as a program at ETCH_TEST_TMP/name with the given forward bound (0 = default,
 * 1 = static) and context (0 = the model's). Returns the path, or NULL after printing why. */
static inline const char *export_stories(const char *name, int32_t max_seq_len, int32_t max_context_len) {
    static char out[8][512];
    static int k;
    k = (k + 1) % 8;
    char model[512], tok[512];
    snprintf(model, sizeof model, "%s/stories260K/stories260K.bin", models_dir());
    snprintf(tok, sizeof tok, "%s/stories260K/tok512.bin", models_dir());
    snprintf(out[k], sizeof out[k], "%s/%s", ETCH_TEST_TMP, name);
    etch_export_options opt = {max_context_len, max_seq_len, NULL, NULL, NULL, NULL, NULL, NULL};
    etch_error err;
    if (etch_export_llama2c(model, tok, out[k], &opt, &err) != ETCH_OK) {
        fprintf(stderr, "export of stories260K failed (set ETCH_MODELS_DIR to the folder holding stories260K/): %s\n",
                err.message);
        return NULL;
    }
    return out[k];
}

#endif
