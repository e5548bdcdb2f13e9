/* import: readers of model inputs into an in-memory model, and the exporter that writes a program
 * file from it. Export time only: the runtime never links a reader. */
#ifndef ETCH_IMPORT_H
#define ETCH_IMPORT_H

#include "../base/base.h"

#define IMP_MAX_TENSORS 4096

typedef struct imp_tensor {
    char name[64];
    uint32_t ndim;
    uint64_t dims[2];   /* [rows, cols] or [n] */
    const float *data;  /* borrowed: from a mapping or a buffer the model owns */
} imp_tensor;

/* A model between import and export. Views point into `maps` and `owned`, released together. */
typedef struct imp_model {
    /* architecture */
    const char *arch;        /* "llama" */
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim, vocab_size, context_len;
    float norm_eps, rope_base;
    const char *rope_style;  /* "adjacent" | "half" */
    int32_t tied_embeddings;
    /* tokenizer (score-ranked BPE, pieces raw) */
    char *tok_blob;          /* owned, all pieces concatenated */
    uint64_t tok_blob_size;
    int32_t *tok_offsets;    /* owned [vocab_size + 1] */
    float *tok_scores;       /* owned [vocab_size] */
    uint8_t *tok_types;      /* owned [vocab_size] */
    int32_t bos_id, unk_id, add_dummy_prefix;
    int32_t eos_ids[8], n_eos;
    /* weights */
    imp_tensor *tensors;     /* owned [n_tensors] */
    int32_t n_tensors;
    base_map map;            /* the checkpoint mapping the tensors borrow from */
    char source[512];        /* where it came from, for the program's metadata */
} imp_model;

void imp_model_free(imp_model *m);

/* llama2.c checkpoint (legacy version 0 header) and tokenizer.bin. */
etch_status imp_llama2c(const char *model_path, const char *tokenizer_path, imp_model *m, etch_error *err);

/* Writes the program file for m (and opens it once to prove it valid). */
etch_status imp_export(const imp_model *m, const char *out_path, const etch_export_options *opt, etch_error *err);

#endif
