/* readers/gguf.h: the GGUF format's constants and its validating reader (export time). The writer
 * (synth/gguf_writer.h) uses the same constants. */
#ifndef ETCH_GGUF_H
#define ETCH_GGUF_H

#include "reader.h"

/* GGUF value types and the ggml tensor types etch reads or writes. */
enum { GGUF_T_U8 = 0, GGUF_T_I8, GGUF_T_U16, GGUF_T_I16, GGUF_T_U32, GGUF_T_I32, GGUF_T_F32, GGUF_T_BOOL, GGUF_T_STR,
       GGUF_T_ARR, GGUF_T_U64, GGUF_T_I64, GGUF_T_F64 };
enum { GGUF_F32 = 0, GGUF_F16 = 1, GGUF_Q4_0 = 2, GGUF_Q4_1 = 3, GGUF_Q5_0 = 6, GGUF_Q5_1 = 7, GGUF_Q8_0 = 8,
       GGUF_Q4_K = 12, GGUF_Q5_K = 13, GGUF_Q6_K = 14, GGUF_IQ4_NL = 20, GGUF_IQ4_XS = 23, GGUF_BF16 = 30 };
/* A tensor type's block: elements per block (1 for F32, F16, BF16) and *bytes per block; 0 for a
 * type etch does not read. */
uint32_t gguf_block_size(uint32_t type, uint32_t *bytes);
/* IQ4_NL's and IQ4_XS's 16 values (GGML's kvalues_iq4nl): a nibble q stands for table[q] times the scale. */
extern const int8_t gguf_iq4nl_table[16];

typedef struct gguf_str {
    const char *s; /* not NUL-terminated: a view into the mapping */
    uint64_t n;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    uint32_t type;
    const uint8_t *value, *value_end; /* the value's bytes, bounds-checked */
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    uint64_t ne[4];      /* innermost first */
    uint32_t type;       /* ggml type */
    uint64_t offset;     /* from the data start */
    uint64_t bytes;
    const uint8_t *data; /* NULL for a type etch does not read */
} gguf_tensor;

typedef struct gguf_file {
    base_map map;
    const char *path;
    uint32_t version;
    gguf_kv *kv;
    uint64_t n_kv;
    gguf_tensor *tensors;
    uint64_t n_tensors;
    uint64_t data_offset;
} gguf_file;

/* Maps and validates a GGUF file: every count, string and array is bounds-checked, every tensor
 * of a known type lies inside the data. */
etch_status gguf_open(const char *path, gguf_file *g, etch_error *err);
void gguf_close(gguf_file *g);
const gguf_kv *gguf_find(const gguf_file *g, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);
int gguf_int(const gguf_file *g, const char *key, int64_t *v);
int gguf_float(const gguf_file *g, const char *key, double *v);
int gguf_string(const gguf_file *g, const char *key, gguf_str *s);
int gguf_array(const gguf_file *g, const char *key, uint32_t *elem_type, uint64_t *count, const uint8_t **first);

#endif
