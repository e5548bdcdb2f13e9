/* format: writer and validating reader of program files (format version 1).
 *
 * Header, 96 bytes, little-endian:
 *    0  char[8] magic "ETCHPROG"        48  u64 dir_size
 *    8  u32 version (1)                 56  u64 data_offset (multiple of 64)
 *   12  u32 header_size (96)            64  u64 data_size
 *   16  u64 file_size                   72  u32 n_meta
 *   24  u64 meta_offset (96)            76  u32 n_tensors
 *   32  u64 meta_size                   80  u64 data_hash (FNV-1a/64 variant over the data)
 *   40  u64 dir_offset                  88  u64 checksum (same hash over bytes 0..87, metadata, directory)
 *
 * Metadata entry (starts 8-aligned): u32 key_len (with NUL), key, pad to 4, u32 type, u32 count,
 *   pad to 8, payload [count * elem], pad to 8.
 * Directory entry (starts 8-aligned): u32 name_len (with NUL), name, pad to 4, u32 dtype, u32 ndim,
 *   pad to 8, u64 dims[ndim], u64 offset (relative to data_offset), u64 nbytes.
 */
#define _POSIX_C_SOURCE 200809L
#include "format.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *fmt_dtype_name(uint32_t dtype) {
    switch (dtype) {
    case FMT_DT_F32: return "f32";
    case FMT_DT_F16: return "f16";
    case FMT_DT_BF16: return "bf16";
    case FMT_DT_Q8: return "q8";
    case FMT_DT_Q4: return "q4";
    case FMT_DT_I8: return "i8";
    case FMT_DT_I4: return "i4";
    }
    return "unknown";
}

uint32_t fmt_dtype_bits(uint32_t dtype) {
    switch (dtype) {
    case FMT_DT_F32: return 32;
    case FMT_DT_F16: case FMT_DT_BF16: return 16;
    case FMT_DT_Q8: case FMT_DT_I8: return 8;
    case FMT_DT_Q4: case FMT_DT_I4: return 4;
    }
    return 0;
}

int fmt_tensor_bytes(uint32_t dtype, uint64_t count, uint64_t *nbytes) {
    uint32_t bits = fmt_dtype_bits(dtype);
    if (bits == 0 || (bits == 4 && count % 2)) return 0;
    if (bits == 4) return (*nbytes = count / 2), 1;
    return base_mul_u64(count, bits / 8, nbytes);
}

static uint32_t meta_elem_size(uint32_t type) {
    switch (type) {
    case FMT_I32: case FMT_F32: return 4;
    case FMT_STR: case FMT_BYTES: return 1;
    }
    return 0;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* ------------------------------------------------------------------ reader */

/* A NUL-terminated name of len bytes (len includes the NUL; no NUL inside). */
static etch_status cur_name(base_cursor *c, const char **out, const char *what) {
    uint32_t len;
    etch_status st = base_cur_u32(c, &len, what);
    if (st) return st;
    if (len < 2 || len > 4096)
        return base_fail(c->err, ETCH_ERR_FORMAT, "%s: %s: %s length %u at offset %llu is out of range",
                         c->path, c->section, what, len, (unsigned long long)(c->pos - 4));
    if ((st = base_cur_need(c, len, what))) return st;
    const char *s = (const char *)c->base + c->pos;
    if (memchr(s, '\0', len) != s + len - 1)
        return base_fail(c->err, ETCH_ERR_FORMAT, "%s: %s: %s at offset %llu is not NUL-terminated",
                         c->path, c->section, what, (unsigned long long)c->pos);
    *out = s;
    c->pos += len;
    return ETCH_OK;
}

static etch_status parse_meta(fmt_file *f, base_cursor *c, uint32_t n_meta) {
    f->meta = base_calloc(n_meta ? n_meta : 1, sizeof *f->meta);
    if (!f->meta) return base_fail(c->err, ETCH_ERR_NOMEM, "%s: cannot allocate metadata index", c->path);
    for (uint32_t i = 0; i < n_meta; i++) {
        fmt_meta *m = &f->meta[i];
        etch_status st;
        if ((st = base_cur_align(c, 8, "entry")) || (st = cur_name(c, &m->key, "metadata key")) ||
            (st = base_cur_align(c, 4, "entry")) || (st = base_cur_u32(c, &m->type, "type")) ||
            (st = base_cur_u32(c, &m->count, "count")) || (st = base_cur_align(c, 8, "payload")))
            return st;
        uint32_t es = meta_elem_size(m->type);
        if (es == 0)
            return base_fail(c->err, ETCH_ERR_FORMAT, "%s: metadata '%s' has unknown type %u", c->path,
                             m->key, m->type);
        uint64_t bytes = (uint64_t)m->count * es;
        if ((st = base_cur_need(c, bytes, m->key))) return st;
        m->data = c->base + c->pos;
        if (m->type == FMT_STR) {
            const char *s = m->data;
            if (m->count == 0 || memchr(s, '\0', m->count) != s + m->count - 1)
                return base_fail(c->err, ETCH_ERR_FORMAT,
                                 "%s: metadata '%s' is a string without a final NUL", c->path, m->key);
        }
        c->pos += bytes;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(f->meta[j].key, m->key) == 0)
                return base_fail(c->err, ETCH_ERR_FORMAT, "%s: metadata key '%s' appears twice",
                                 c->path, m->key);
    }
    f->n_meta = n_meta;
    return ETCH_OK;
}

static etch_status parse_dir(fmt_file *f, base_cursor *c, uint32_t n_tensors) {
    f->tensors = base_calloc(n_tensors ? n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors) return base_fail(c->err, ETCH_ERR_NOMEM, "%s: cannot allocate tensor index", c->path);
    for (uint32_t i = 0; i < n_tensors; i++) {
        fmt_tensor *t = &f->tensors[i];
        etch_status st;
        uint64_t rel;
        if ((st = base_cur_align(c, 8, "entry")) || (st = cur_name(c, &t->name, "tensor name")) ||
            (st = base_cur_align(c, 4, "entry")) || (st = base_cur_u32(c, &t->dtype, "dtype")) ||
            (st = base_cur_u32(c, &t->ndim, "ndim")) || (st = base_cur_align(c, 8, "dims")))
            return st;
        if (fmt_dtype_bits(t->dtype) == 0)
            return base_fail(c->err, ETCH_ERR_UNSUPPORTED, "%s: tensor '%s' has unknown dtype %u",
                             c->path, t->name, t->dtype);
        if (t->ndim < 1 || t->ndim > FMT_MAX_DIMS)
            return base_fail(c->err, ETCH_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (1..%d allowed)",
                             c->path, t->name, t->ndim, FMT_MAX_DIMS);
        uint64_t count = 1;
        for (uint32_t d = 0; d < t->ndim; d++) {
            if ((st = base_cur_u64(c, &t->dims[d], "dim"))) return st;
            if (t->dims[d] == 0 || !base_mul_u64(count, t->dims[d], &count))
                return base_fail(c->err, ETCH_ERR_FORMAT, "%s: tensor '%s' dimension %u (%llu) is invalid",
                                 c->path, t->name, d, (unsigned long long)t->dims[d]);
        }
        if ((st = base_cur_u64(c, &rel, "offset")) || (st = base_cur_u64(c, &t->nbytes, "nbytes"))) return st;
        uint64_t want, end;
        if (!fmt_tensor_bytes(t->dtype, count, &want) || want != t->nbytes)
            return base_fail(c->err, ETCH_ERR_FORMAT,
                             "%s: tensor '%s': size %llu bytes disagrees with its shape and dtype",
                             c->path, t->name, (unsigned long long)t->nbytes);
        if (rel % FMT_ALIGN != 0 || !base_add_u64(rel, t->nbytes, &end) || end > f->data_size)
            return base_fail(c->err, ETCH_ERR_FORMAT,
                             "%s: tensor '%s': data at %llu (+%llu bytes) is misaligned or past the data "
                             "section (%llu bytes)",
                             c->path, t->name, (unsigned long long)rel, (unsigned long long)t->nbytes,
                             (unsigned long long)f->data_size);
        t->offset = f->data_offset + rel;
        t->data = f->map.data + t->offset;
        for (uint32_t j = 0; j < i; j++) {
            const fmt_tensor *o = &f->tensors[j];
            if (strcmp(o->name, t->name) == 0)
                return base_fail(c->err, ETCH_ERR_FORMAT, "%s: tensor '%s' appears twice", c->path, t->name);
            if (t->offset < o->offset + o->nbytes && o->offset < t->offset + t->nbytes)
                return base_fail(c->err, ETCH_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", c->path,
                                 o->name, t->name);
        }
    }
    f->n_tensors = n_tensors;
    return ETCH_OK;
}

etch_status fmt_open(const char *path, fmt_file *f, etch_error *err) {
    memset(f, 0, sizeof *f);
    etch_status st = base_map_open(path, &f->map, err);
    if (st) return st;
    const uint8_t *p = f->map.data;
    uint64_t size = f->map.size;
    if (size < FMT_HEADER_SIZE || memcmp(p, FMT_MAGIC, 8) != 0) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: not an etch program (%s)", path,
                       size < FMT_HEADER_SIZE ? "shorter than the 96-byte header" : "bad magic");
        goto fail;
    }
    f->version = base_le32(p + 8);
    if (f->version != FMT_VERSION) {
        st = base_fail(err, f->version > FMT_VERSION ? ETCH_ERR_UNSUPPORTED : ETCH_ERR_FORMAT,
                       "%s: program format version %u; this etch reads version %u", path, f->version,
                       FMT_VERSION);
        goto fail;
    }
    uint64_t file_size = base_le64(p + 16), meta_off = base_le64(p + 24), meta_size = base_le64(p + 32);
    uint64_t dir_off = base_le64(p + 40), dir_size = base_le64(p + 48);
    f->data_offset = base_le64(p + 56);
    f->data_size = base_le64(p + 64);
    uint32_t n_meta = base_le32(p + 72), n_tensors = base_le32(p + 76);
    f->data_hash = base_le64(p + 80);
    f->checksum = base_le64(p + 88);
    if (base_le32(p + 12) != FMT_HEADER_SIZE) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: header size %u, expected %u", path, base_le32(p + 12),
                       FMT_HEADER_SIZE);
        goto fail;
    }
    if (file_size != size) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: the file has %llu bytes but its header says %llu (%s)",
                       path, (unsigned long long)size, (unsigned long long)file_size,
                       size < file_size ? "truncated" : "trailing bytes");
        goto fail;
    }
    /* Sections must follow each other in order inside the file. */
    uint64_t meta_end, dir_end, data_end;
    if (meta_off != FMT_HEADER_SIZE || !base_add_u64(meta_off, meta_size, &meta_end) ||
        dir_off != meta_end || !base_add_u64(dir_off, dir_size, &dir_end) ||
        f->data_offset < dir_end || f->data_offset % FMT_ALIGN != 0 ||
        !base_add_u64(f->data_offset, f->data_size, &data_end) || data_end != size) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: section offsets and sizes in the header are inconsistent",
                       path);
        goto fail;
    }
    uint64_t h = base_fnv1a(BASE_FNV_INIT, p, 88);
    h = base_fnv1a(h, p + meta_off, (size_t)(dir_end - meta_off));
    if (h != f->checksum) {
        st = base_fail(err, ETCH_ERR_FORMAT,
                       "%s: checksum mismatch over header, metadata and directory (stored %016llx, "
                       "computed %016llx): the file is corrupt",
                       path, (unsigned long long)f->checksum, (unsigned long long)h);
        goto fail;
    }
    /* Every entry takes at least 8 bytes: counts the sections cannot hold are refused before the
     * indexes are allocated from them. */
    if (n_meta > meta_size / 8 || n_tensors > dir_size / 8) {
        st = base_fail(err, ETCH_ERR_FORMAT, "%s: %u metadata entries and %u tensors cannot fit in %llu and %llu bytes",
                       path, n_meta, n_tensors, (unsigned long long)meta_size, (unsigned long long)dir_size);
        goto fail;
    }
    base_cursor c = {p, meta_off, meta_end, path, "metadata", err};
    if ((st = parse_meta(f, &c, n_meta))) goto fail;
    base_cursor d = {p, dir_off, dir_end, path, "tensor directory", err};
    if ((st = parse_dir(f, &d, n_tensors))) goto fail;
    return ETCH_OK;
fail:
    fmt_close(f);
    return st;
}

void fmt_close(fmt_file *f) {
    if (!f) return;
    base_map_close(&f->map);
    base_free(f->meta);
    base_free(f->tensors);
    memset(f, 0, sizeof *f);
}

etch_status fmt_verify_data(const fmt_file *f, etch_error *err) {
    uint64_t h = base_fnv1a(BASE_FNV_INIT, f->map.data + f->data_offset, (size_t)f->data_size);
    if (h != f->data_hash)
        return base_fail(err, ETCH_ERR_FORMAT, "tensor data hash mismatch (stored %016llx, computed %016llx)",
                         (unsigned long long)f->data_hash, (unsigned long long)h);
    return ETCH_OK;
}

const fmt_meta *fmt_find_meta(const fmt_file *f, const char *key) {
    for (uint32_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return &f->meta[i];
    return NULL;
}

const fmt_tensor *fmt_find_tensor(const fmt_file *f, const char *name) {
    for (uint32_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/* ------------------------------------------------------------------ writer */

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
} buf;

typedef struct wtensor {
    const void *data;
    uint64_t nbytes, rel_offset;
} wtensor;

struct fmt_writer {
    buf meta, dir;
    uint32_t n_meta, n_tensors;
    wtensor *tensors;
    uint32_t tensors_cap;
    uint64_t data_size;
    int failed;          /* an allocation failed or an argument was invalid */
    char why[256];
};

static void buf_put(fmt_writer *w, buf *b, const void *src, size_t n) {
    if (w->failed) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        uint8_t *np = base_realloc(b->p, cap);
        if (!np) {
            w->failed = 1;
            snprintf(w->why, sizeof w->why, "out of memory building the program header");
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void buf_u32(fmt_writer *w, buf *b, uint32_t v) {
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    buf_put(w, b, le, 4);
}

static void buf_u64(fmt_writer *w, buf *b, uint64_t v) {
    buf_u32(w, b, (uint32_t)v);
    buf_u32(w, b, (uint32_t)(v >> 32));
}

/* The sections start at offset 96 (a multiple of 8), so aligning lengths aligns file offsets. */
static void buf_align(fmt_writer *w, buf *b, size_t a) {
    static const uint8_t zero[8] = {0};
    size_t pad = (size_t)(align_up(b->len, a) - b->len);
    buf_put(w, b, zero, pad);
}

static void buf_name(fmt_writer *w, buf *b, const char *s) {
    size_t n = strlen(s) + 1;
    buf_align(w, b, 8);
    buf_u32(w, b, (uint32_t)n);
    buf_put(w, b, s, n);
    buf_align(w, b, 4);
}

fmt_writer *fmt_writer_new(void) { return base_calloc(1, sizeof(fmt_writer)); }

void fmt_writer_free(fmt_writer *w) {
    if (!w) return;
    base_free(w->meta.p);
    base_free(w->dir.p);
    base_free(w->tensors);
    base_free(w);
}

static void put_meta(fmt_writer *w, const char *key, uint32_t type, const void *v, uint32_t count) {
    buf_name(w, &w->meta, key);
    buf_u32(w, &w->meta, type);
    buf_u32(w, &w->meta, count);
    buf_align(w, &w->meta, 8);
    /* Little-endian host assumed for the payload (x86-64, AArch64); documented in the format. */
    buf_put(w, &w->meta, v, (size_t)count * meta_elem_size(type));
    buf_align(w, &w->meta, 8);
    w->n_meta++;
}

void fmt_put_i32s(fmt_writer *w, const char *key, const int32_t *v, uint32_t n) { put_meta(w, key, FMT_I32, v, n); }
void fmt_put_i32(fmt_writer *w, const char *key, int32_t v) { put_meta(w, key, FMT_I32, &v, 1); }
void fmt_put_f32s(fmt_writer *w, const char *key, const float *v, uint32_t n) { put_meta(w, key, FMT_F32, v, n); }
void fmt_put_f32(fmt_writer *w, const char *key, float v) { put_meta(w, key, FMT_F32, &v, 1); }
void fmt_put_str(fmt_writer *w, const char *key, const char *s) {
    put_meta(w, key, FMT_STR, s, (uint32_t)strlen(s) + 1);
}
void fmt_put_bytes(fmt_writer *w, const char *key, const void *v, uint32_t n) { put_meta(w, key, FMT_BYTES, v, n); }

void fmt_add_tensor(fmt_writer *w, const char *name, uint32_t dtype, uint32_t ndim, const uint64_t *dims,
                    const void *data) {
    if (w->failed) return;
    uint64_t count = 1, nbytes = 0;
    for (uint32_t d = 0; d < ndim && d < FMT_MAX_DIMS; d++)
        if (!base_mul_u64(count, dims[d], &count)) count = 0;
    if (ndim < 1 || ndim > FMT_MAX_DIMS || count == 0 || !fmt_tensor_bytes(dtype, count, &nbytes)) {
        w->failed = 1;
        snprintf(w->why, sizeof w->why, "tensor '%s' has an invalid shape or dtype", name);
        return;
    }
    if (w->n_tensors == w->tensors_cap) {
        uint32_t cap = w->tensors_cap ? w->tensors_cap * 2 : 64;
        wtensor *nt = base_realloc(w->tensors, cap * sizeof *nt);
        if (!nt) {
            w->failed = 1;
            snprintf(w->why, sizeof w->why, "out of memory adding tensor '%s'", name);
            return;
        }
        w->tensors = nt;
        w->tensors_cap = cap;
    }
    uint64_t rel = align_up(w->data_size, FMT_ALIGN);
    w->tensors[w->n_tensors++] = (wtensor){data, nbytes, rel};
    w->data_size = rel + nbytes;
    buf_name(w, &w->dir, name);
    buf_u32(w, &w->dir, dtype);
    buf_u32(w, &w->dir, ndim);
    buf_align(w, &w->dir, 8);
    for (uint32_t d = 0; d < ndim; d++) buf_u64(w, &w->dir, dims[d]);
    buf_u64(w, &w->dir, rel);
    buf_u64(w, &w->dir, nbytes);
}

static int write_all(FILE *fp, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, fp) == n; }

etch_status fmt_writer_write(fmt_writer *w, const char *path, fmt_check_fn check, void *check_user, etch_error *err) {
    if (w->failed) return base_fail(err, ETCH_ERR_NOMEM, "%s: %s", path, w->why);
    uint64_t meta_off = FMT_HEADER_SIZE, dir_off = meta_off + w->meta.len;
    uint64_t data_off = align_up(dir_off + w->dir.len, FMT_ALIGN);
    uint64_t data_size = align_up(w->data_size, FMT_ALIGN);
    uint64_t file_size = data_off + data_size;

    /* Hash the data exactly as it will lie in the file: tensors with zero padding between. */
    static const uint8_t zeros[FMT_ALIGN] = {0};
    uint64_t dh = BASE_FNV_INIT;
    uint64_t at = 0;
    /* The hash works on 8-byte words, so it is fed in the same pieces the reader sees: one buffer.
     * Tensors and paddings are multiples of 4 bytes but not of 8, so stream through a staging area. */
    uint8_t *stage = base_malloc(1 << 20);
    if (!stage) return base_fail(err, ETCH_ERR_NOMEM, "%s: out of memory", path);
    size_t fill = 0;
#define STAGE(src, n)                                                                  \
    do {                                                                               \
        const uint8_t *s_ = (const uint8_t *)(src);                                    \
        size_t n_ = (size_t)(n);                                                       \
        while (n_) {                                                                   \
            size_t k_ = (1u << 20) - fill < n_ ? (1u << 20) - fill : n_;               \
            memcpy(stage + fill, s_, k_);                                              \
            fill += k_, s_ += k_, n_ -= k_;                                            \
            if (fill == (1u << 20)) dh = base_fnv1a(dh, stage, fill), fill = 0;        \
        }                                                                              \
    } while (0)
    for (uint32_t i = 0; i < w->n_tensors; i++) {
        while (at < w->tensors[i].rel_offset) {
            uint64_t k = w->tensors[i].rel_offset - at;
            STAGE(zeros, k > FMT_ALIGN ? FMT_ALIGN : k);
            at += k > FMT_ALIGN ? FMT_ALIGN : k;
        }
        STAGE(w->tensors[i].data, w->tensors[i].nbytes);
        at += w->tensors[i].nbytes;
    }
    STAGE(zeros, data_size - at);
#undef STAGE
    dh = base_fnv1a(dh, stage, fill);
    base_free(stage);

    buf hdr = {0};
    buf_put(w, &hdr, FMT_MAGIC, 8);
    buf_u32(w, &hdr, FMT_VERSION);
    buf_u32(w, &hdr, FMT_HEADER_SIZE);
    buf_u64(w, &hdr, file_size);
    buf_u64(w, &hdr, meta_off);
    buf_u64(w, &hdr, w->meta.len);
    buf_u64(w, &hdr, dir_off);
    buf_u64(w, &hdr, w->dir.len);
    buf_u64(w, &hdr, data_off);
    buf_u64(w, &hdr, data_size);
    buf_u32(w, &hdr, w->n_meta);
    buf_u32(w, &hdr, w->n_tensors);
    buf_u64(w, &hdr, dh);
    if (w->failed) {
        base_free(hdr.p);
        return base_fail(err, ETCH_ERR_NOMEM, "%s: %s", path, w->why);
    }
    uint64_t ck = base_fnv1a(BASE_FNV_INIT, hdr.p, 88);
    /* The checksum runs over metadata and directory as one contiguous byte range. */
    buf both = {0};
    buf_put(w, &both, w->meta.p, w->meta.len);
    buf_put(w, &both, w->dir.p, w->dir.len);
    if (w->failed) {
        base_free(hdr.p);
        base_free(both.p);
        return base_fail(err, ETCH_ERR_NOMEM, "%s: %s", path, w->why);
    }
    ck = base_fnv1a(ck, both.p, both.len);
    buf_u64(w, &hdr, ck);
    base_free(both.p);

    if (w->failed) {
        base_free(hdr.p);
        return base_fail(err, ETCH_ERR_NOMEM, "%s: out of memory", path);
    }
    base_outfile out;
    etch_status st = base_out_open(&out, path, err);
    if (st) {
        base_free(hdr.p);
        return st;
    }
    FILE *fp = out.f;
    int ok = write_all(fp, hdr.p, hdr.len) && write_all(fp, w->meta.p, w->meta.len) &&
             write_all(fp, w->dir.p, w->dir.len);
    uint64_t pos = dir_off + w->dir.len;
    ok = ok && write_all(fp, zeros, (size_t)(data_off - pos));
    at = 0;
    for (uint32_t i = 0; ok && i < w->n_tensors; i++) {
        ok = write_all(fp, zeros, (size_t)(w->tensors[i].rel_offset - at)) &&
             write_all(fp, w->tensors[i].data, (size_t)w->tensors[i].nbytes);
        at = w->tensors[i].rel_offset + w->tensors[i].nbytes;
    }
    ok = ok && write_all(fp, zeros, (size_t)(data_size - at));
    int e = errno;
    base_free(hdr.p);
    if (!ok) {
        base_out_abort(&out);
        return base_fail(err, ETCH_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    }
    if ((st = base_out_finish(&out, err))) return st;
    if (check && (st = check(out.tmp, check_user, err))) { /* the caller's check of the finished file */
        base_out_abort(&out);
        return st;
    }
    return base_out_commit(&out, err);
}
