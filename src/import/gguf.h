/* import: GGUF reading (for export) and writing (for `etch synth`). */
#ifndef ETCH_GGUF_H
#define ETCH_GGUF_H

#include "import.h"

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

/* ---- writer: key-values, then tensor infos, then tensor data in the same order */
enum { GGUF_F32 = 0, GGUF_F16 = 1, GGUF_Q4_0 = 2, GGUF_Q8_0 = 8, GGUF_BF16 = 30 };
enum { GGUF_T_I32 = 5, GGUF_T_F32 = 6, GGUF_T_STR = 8 };

typedef struct gguf_writer {
    void *w;
    const char *path;
    uint64_t n_kv, data_size;
    int data_started;
} gguf_writer;

etch_status gguf_writer_open(gguf_writer *g, const char *path, uint64_t n_tensors, etch_error *err);
void gguf_kv_str(gguf_writer *g, const char *key, const char *v);
void gguf_kv_u32(gguf_writer *g, const char *key, uint32_t v);
void gguf_kv_f32(gguf_writer *g, const char *key, float v);
void gguf_kv_bool(gguf_writer *g, const char *key, int v);
void gguf_kv_arr_begin(gguf_writer *g, const char *key, int elem_type, uint64_t count);
void gguf_arr_str(gguf_writer *g, const char *s, size_t n);
void gguf_arr_i32(gguf_writer *g, int32_t v);
void gguf_arr_f32(gguf_writer *g, float v);
/* rows x cols (cols 0: a vector); infos in the order the data will follow. */
void gguf_tensor_info(gguf_writer *g, const char *name, int type, uint64_t rows, uint64_t cols);
/* count values (a multiple of 32 for Q8_0 and Q4_0), converted or quantized to type. */
void gguf_tensor_data(gguf_writer *g, int type, const float *x, uint64_t count);
/* Writes the key-value count into the header and closes; removes the file when anything failed. */
etch_status gguf_writer_close(gguf_writer *g, etch_error *err);

#endif
