/* synth/gguf_writer.h: writes GGUF files (`etch synth`): key-values, then tensor infos, then tensor
 * data in the same order, F32/F16/BF16 converted; Q8_0, Q4_0, Q4_1, Q5_1, Q4_K, Q5_K, IQ4_NL and IQ4_XS quantized (gguf_writer.c). */
#ifndef ETCH_GGUF_WRITER_H
#define ETCH_GGUF_WRITER_H

#include "../readers/gguf.h"

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
