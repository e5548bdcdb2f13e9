/* format: the program file, version 1 (docs/PROGRAM_FORMAT.md).
 *
 *   header   96 bytes, little-endian (layout in format.c)
 *   metadata n_meta typed key-value entries, each 8-byte aligned
 *   directory n_tensors entries: name, dtype, shape, offset, size
 *   data     tensors, each at a multiple of 64 bytes from the start of the file
 *
 * A checksum covers header, metadata and directory; a hash of the data is checked on request.
 * The reader validates everything before handing out a view; the writer builds a file in memory
 * order and renames it into place only when complete. */
#ifndef ETCH_FORMAT_H
#define ETCH_FORMAT_H

#include "../base/base.h"

#define FMT_MAGIC "ETCHPROG"
#define FMT_VERSION 1u
#define FMT_HEADER_SIZE 96u
#define FMT_ALIGN 64u
#define FMT_MAX_DIMS 4

/* Metadata value types. Strings carry their NUL (count includes it). */
enum { FMT_I32 = 1, FMT_F32 = 2, FMT_STR = 3, FMT_BYTES = 4 };

/* Tensor element types. */
enum { FMT_DT_F32 = 0, FMT_DT_F16 = 1, FMT_DT_BF16 = 2, FMT_DT_Q8 = 3, FMT_DT_Q4 = 4, FMT_DT_I8 = 5, FMT_DT_I4 = 6 };
const char *fmt_dtype_name(uint32_t dtype);
/* Bits per element (q8, i8: int8; q4, i4: two 4-bit values per byte), 0 for an unknown dtype. */
uint32_t fmt_dtype_bits(uint32_t dtype);
/* *nbytes = the bytes of count elements of dtype. 0 when dtype is unknown, the size overflows, or
 * a q4 tensor has an odd count (its bytes hold whole pairs). */
int fmt_tensor_bytes(uint32_t dtype, uint64_t count, uint64_t *nbytes);

typedef struct fmt_meta {
    const char *key;   /* NUL-terminated view into the mapping */
    uint32_t type;
    uint32_t count;    /* elements (bytes for STR and BYTES) */
    const void *data;  /* [count] elements, aligned to 8 */
} fmt_meta;

typedef struct fmt_tensor {
    const char *name;  /* NUL-terminated view */
    uint32_t dtype;
    uint32_t ndim;
    uint64_t dims[FMT_MAX_DIMS]; /* outermost first: a matrix is [rows, cols], row-major */
    uint64_t offset;   /* absolute file offset, multiple of 64 */
    uint64_t nbytes;
    const void *data;  /* view into the mapping */
} fmt_tensor;

typedef struct fmt_file {
    base_map map;
    uint32_t version;
    uint64_t checksum, data_hash;
    uint64_t data_offset, data_size;
    fmt_meta *meta;       /* [n_meta], owned */
    uint32_t n_meta;
    fmt_tensor *tensors;  /* [n_tensors], owned */
    uint32_t n_tensors;
} fmt_file;

/* Maps and validates path. On failure nothing is held and f is zeroed. */
etch_status fmt_open(const char *path, fmt_file *f, etch_error *err);
void fmt_close(fmt_file *f);
/* Hashes the data section and compares it with the header's data_hash. */
etch_status fmt_verify_data(const fmt_file *f, etch_error *err);

const fmt_meta *fmt_find_meta(const fmt_file *f, const char *key);
const fmt_tensor *fmt_find_tensor(const fmt_file *f, const char *name);

/* ---- writer */
typedef struct fmt_writer fmt_writer;
fmt_writer *fmt_writer_new(void);
void fmt_writer_free(fmt_writer *w);
/* Each adder copies key and value; an allocation failure is remembered and reported by write. */
void fmt_put_i32s(fmt_writer *w, const char *key, const int32_t *v, uint32_t n);
void fmt_put_i32(fmt_writer *w, const char *key, int32_t v);
void fmt_put_f32s(fmt_writer *w, const char *key, const float *v, uint32_t n);
void fmt_put_f32(fmt_writer *w, const char *key, float v);
void fmt_put_str(fmt_writer *w, const char *key, const char *s);
void fmt_put_bytes(fmt_writer *w, const char *key, const void *v, uint32_t n);
/* Borrows data (nbytes = product of dims * dtype size) until fmt_writer_write returns. */
void fmt_add_tensor(fmt_writer *w, const char *name, uint32_t dtype, uint32_t ndim,
                    const uint64_t *dims, const void *data);
/* Checks a finished file at tmp_path before it replaces the destination (the exporter opens it with
 * the runtime's own checks). Returns ETCH_OK to let it through. */
typedef etch_status (*fmt_check_fn)(const char *tmp_path, void *user, etch_error *err);
/* Writes the file whole or not at all (base_outfile): a temporary beside path, then check (when not
 * NULL), then a rename over path. On any failure path is as it was. */
etch_status fmt_writer_write(fmt_writer *w, const char *path, fmt_check_fn check, void *check_user, etch_error *err);

#endif
