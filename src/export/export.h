/* export: the program writer (export.c) over a reader's model. */
#ifndef ETCH_EXPORT_H
#define ETCH_EXPORT_H

#include "../readers/reader.h"

/* Writes the program file for m (and opens it once to prove it valid). */
etch_status imp_export(const imp_model *m, const char *out_path, const etch_export_options *opt, etch_error *err);


#endif
