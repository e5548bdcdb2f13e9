/* base/cursor: the one bounds-checked reader of binary files (the program format and GGUF): every
 * read checks the bound first and fails with a message naming the file, the section and the offset. */
#include "base.h"

etch_status base_cur_need(base_cursor *c, uint64_t n, const char *what) {
    if (n <= c->end - c->pos) return ETCH_OK;
    if (c->section)
        return base_fail(c->err, ETCH_ERR_FORMAT, "%s: %s: %s at offset %llu runs past the end of the section (%llu)",
                         c->path, c->section, what, (unsigned long long)c->pos, (unsigned long long)c->end);
    return base_fail(c->err, ETCH_ERR_FORMAT, "%s: %s at offset %llu runs past the end of the file", c->path, what,
                     (unsigned long long)c->pos);
}

etch_status base_cur_skip(base_cursor *c, uint64_t n, const char *what) {
    etch_status st = base_cur_need(c, n, what);
    if (!st) c->pos += n;
    return st;
}

etch_status base_cur_u32(base_cursor *c, uint32_t *v, const char *what) {
    etch_status st = base_cur_need(c, 4, what);
    if (!st) *v = base_le32(c->base + c->pos), c->pos += 4;
    return st;
}

etch_status base_cur_u64(base_cursor *c, uint64_t *v, const char *what) {
    etch_status st = base_cur_need(c, 8, what);
    if (!st) *v = base_le64(c->base + c->pos), c->pos += 8;
    return st;
}

etch_status base_cur_align(base_cursor *c, uint64_t a, const char *what) {
    uint64_t to = (c->pos + a - 1) / a * a;
    return base_cur_skip(c, to - c->pos, what);
}
