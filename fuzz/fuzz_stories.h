/* stories260K exported once per fuzzing process, for the harnesses that need a program. */
#ifndef ETCH_FUZZ_STORIES_H
#define ETCH_FUZZ_STORIES_H

#include "fuzz.h"
#include "etch.h"

static etch_program *fuzz_stories(int max_seq_len) {
    static etch_program *p;
    if (p) return p;
    char model[1100], tok[1100], out[700];
    snprintf(model, sizeof model, "%s/stories260K/stories260K.bin", fuzz_models_dir());
    snprintf(tok, sizeof tok, "%s/stories260K/tok512.bin", fuzz_models_dir());
    fuzz_path(out, sizeof out, "stories260K.etch");
    etch_export_options o = {0, max_seq_len, NULL, NULL, NULL, NULL, NULL, NULL};
    etch_error err;
    if (etch_export_llama2c(model, tok, out, &o, &err) != ETCH_OK || etch_program_open(out, &p, &err) != ETCH_OK) {
        fprintf(stderr, "fuzz: cannot prepare stories260K (set ETCH_MODELS_DIR): %s\n", err.message);
        abort();
    }
    return p;
}

#endif
