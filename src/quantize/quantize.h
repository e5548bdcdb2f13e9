/* quantize: a program into a quantized one (quantize.c), and the calibration of static int8
 * activations by the runtime's own prefill (calibrate.c). */
#ifndef ETCH_QUANTIZE_H
#define ETCH_QUANTIZE_H

#include "../readers/reader.h"

/* Calibrates the program at path on o's samples (a8w8): params[2 * i] and params[2 * i + 1] become
 * the int8 scale and zero point of observed site i, i = layer * 4 + MODEL_SITE_* for the layers'
 * sites and n_layers * 4 for the classifier's input ([n_layers * 4 + 1] pairs). */
etch_status imp_calibrate(const char *path, const etch_quantize_options *o, float *params, etch_error *err);

#endif
