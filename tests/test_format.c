/* The program file: round trip, corruption, truncation, and hostile values behind a valid checksum. */
#include "check.h"
#include "format/format.h"

#include <string.h>
#include <unistd.h>

static void spit(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

/* Recomputes the checksum after a deliberate edit, so the parsers behind it get tested. */
static void reseal(uint8_t *p) {
    uint64_t meta_off = base_le64(p + 24), meta_size = base_le64(p + 32), dir_size = base_le64(p + 48);
    uint64_t h = base_fnv1a(BASE_FNV_INIT, p, 88);
    h = base_fnv1a(h, p + meta_off, (size_t)(meta_size + dir_size));
    for (int i = 0; i < 8; i++) p[88 + i] = (uint8_t)(h >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Opens bytes written to a file; returns the status and leaves the message in err. */
static etch_status open_bytes(const uint8_t *p, size_t n, etch_error *err) {
    const char *path = check_tmp_path("mutant.etch");
    spit(path, p, n);
    fmt_file f;
    etch_status st = fmt_open(path, &f, err);
    if (st == ETCH_OK) {
        st = fmt_verify_data(&f, err);
        fmt_close(&f);
    }
    return st;
}

/* A check that records the temporary's name and refuses it. */
static char refused_tmp[1024];
static etch_status refuse(const char *tmp, void *user, etch_error *err) {
    (void)user;
    snprintf(refused_tmp, sizeof refused_tmp, "%s", tmp);
    return base_fail(err, ETCH_ERR_FORMAT, "refused");
}

int main(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/roundtrip.etch", ETCH_TEST_TMP);
    float a[5] = {1, 2, 3, 4, 5}, b[3 * 7];
    for (int i = 0; i < 21; i++) b[i] = (float)i * 0.5f;
    int32_t ids[3] = {7, -1, 1 << 30};
    fmt_writer *w = fmt_writer_new();
    fmt_put_i32(w, "answer", 42);
    fmt_put_i32s(w, "ids", ids, 3);
    fmt_put_f32(w, "eps", 1e-5f);
    fmt_put_str(w, "name", "stories");
    fmt_put_bytes(w, "blob", "\x00\x01\x02", 3);
    uint64_t da[1] = {5}, db[2] = {3, 7};
    fmt_add_tensor(w, "a", FMT_DT_F32, 1, da, a);
    fmt_add_tensor(w, "b", FMT_DT_F32, 2, db, b);
    etch_error err;
    REQUIRE(fmt_writer_write(w, path, NULL, NULL, &err) == ETCH_OK, "write: %s", err.message);
    fmt_writer_free(w);

    fmt_file f;
    REQUIRE(fmt_open(path, &f, &err) == ETCH_OK, "open: %s", err.message);
    CHECK(f.n_meta == 5 && f.n_tensors == 2, "counts %u %u", f.n_meta, f.n_tensors);
    const fmt_meta *m = fmt_find_meta(&f, "answer");
    CHECK(m && m->type == FMT_I32 && m->count == 1 && *(const int32_t *)m->data == 42, "i32 scalar");
    m = fmt_find_meta(&f, "ids");
    CHECK(m && m->count == 3 && memcmp(m->data, ids, sizeof ids) == 0, "i32 array");
    m = fmt_find_meta(&f, "eps");
    CHECK(m && m->type == FMT_F32 && *(const float *)m->data == 1e-5f, "f32");
    m = fmt_find_meta(&f, "name");
    CHECK(m && m->type == FMT_STR && strcmp(m->data, "stories") == 0, "string");
    m = fmt_find_meta(&f, "blob");
    CHECK(m && m->count == 3 && memcmp(m->data, "\x00\x01\x02", 3) == 0, "bytes");
    CHECK(fmt_find_meta(&f, "nope") == NULL, "absent key");
    const fmt_tensor *ta = fmt_find_tensor(&f, "a"), *tb = fmt_find_tensor(&f, "b");
    CHECK(ta && ta->ndim == 1 && ta->dims[0] == 5 && memcmp(ta->data, a, sizeof a) == 0, "tensor a");
    CHECK(tb && tb->ndim == 2 && tb->dims[0] == 3 && tb->dims[1] == 7 && memcmp(tb->data, b, sizeof b) == 0, "tensor b");
    CHECK(ta && tb && ta->offset % 64 == 0 && tb->offset % 64 == 0, "64-byte alignment");
    CHECK(fmt_verify_data(&f, &err) == ETCH_OK, "data hash: %s", err.message);
    fmt_close(&f);

    size_t n = 0;
    uint8_t *orig = (uint8_t *)check_read_file(path, &n), *p = malloc(n + 1);
    REQUIRE(orig && n > 200, "read back %zu bytes", n);
    uint64_t data_off = base_le64(orig + 56);

    /* Every single flipped byte of header, metadata and directory is caught by the checksum (or an
     * earlier check); a flipped data byte by the data hash. Nothing crashes. */
    int missed = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(p, orig, n);
        p[i] ^= 0x5A;
        etch_status st = open_bytes(p, n, &err);
        if (st == ETCH_OK) {
            /* Padding between the directory and the data is not covered: nothing reads it. */
            uint64_t dir_end = base_le64(orig + 40) + base_le64(orig + 48);
            if (i < dir_end || i >= data_off) missed++;
        }
    }
    CHECK(missed == 0, "%d flipped bytes went unnoticed", missed);
    memcpy(p, orig, n);
    p[100] ^= 1; /* inside the metadata */
    CHECK(open_bytes(p, n, &err) == ETCH_ERR_FORMAT && strstr(err.message, "checksum"), "flip: %s", err.message);
    memcpy(p, orig, n);
    p[data_off + 3] ^= 1;
    CHECK(open_bytes(p, n, &err) == ETCH_ERR_FORMAT && strstr(err.message, "data hash"), "data flip: %s", err.message);

    /* Truncation at every length is refused with a message. */
    int accepted = 0;
    for (size_t len = 0; len < n; len++)
        if (open_bytes(orig, len, &err) == ETCH_OK) accepted++;
    CHECK(accepted == 0, "%d truncated lengths accepted", accepted);
    CHECK(open_bytes(orig, n - 1, &err) == ETCH_ERR_FORMAT && strstr(err.message, "truncated"), "%s", err.message);
    CHECK(open_bytes(orig, 10, &err) == ETCH_ERR_FORMAT && strstr(err.message, "not an etch program"), "%s",
          err.message);

    /* Hostile values behind a valid checksum. */
    memcpy(p, orig, n);
    p[8] = 2;
    reseal(p);
    CHECK(open_bytes(p, n, &err) == ETCH_ERR_UNSUPPORTED && strstr(err.message, "version 2"), "%s", err.message);
    memcpy(p, orig, n);
    p[72] = 0xFF, p[73] = 0xFF, p[74] = 0xFF; /* n_meta = 16M entries */
    reseal(p);
    CHECK(open_bytes(p, n, &err) == ETCH_ERR_FORMAT && strstr(err.message, "cannot fit"), "%s", err.message);
    /* Found by fuzz_program: a count near 2^32 used to size the index (16 GB) before any entry was read. */
    memcpy(p, orig, n);
    p[76] = 0xF0, p[77] = 0xFF, p[78] = 0xFF, p[79] = 0xFF; /* n_tensors */
    reseal(p);
    CHECK(open_bytes(p, n, &err) == ETCH_ERR_FORMAT && strstr(err.message, "cannot fit"), "%s", err.message);
    memcpy(p, orig, n);
    put_le64(p + 64, base_le64(orig + 64) + 64); /* data size beyond the file */
    reseal(p);
    CHECK(open_bytes(p, n, &err) == ETCH_ERR_FORMAT, "%s", err.message);
    /* The last directory entry ends with nbytes: make it huge, then make its offset overlap. */
    uint64_t dir_end = base_le64(orig + 40) + base_le64(orig + 48);
    memcpy(p, orig, n);
    put_le64(p + dir_end - 8, UINT64_MAX / 2);
    reseal(p);
    CHECK(open_bytes(p, n, &err) == ETCH_ERR_FORMAT && strstr(err.message, "disagrees"), "%s", err.message);
    memcpy(p, orig, n);
    put_le64(p + dir_end - 16, 0); /* tensor b at offset 0, over tensor a */
    reseal(p);
    CHECK(open_bytes(p, n, &err) == ETCH_ERR_FORMAT && strstr(err.message, "overlap"), "%s", err.message);
    memcpy(p, orig, n);
    put_le64(p + dir_end - 16, 32); /* misaligned */
    reseal(p);
    CHECK(open_bytes(p, n, &err) == ETCH_ERR_FORMAT && strstr(err.message, "misaligned"), "%s", err.message);
    memcpy(p, orig, n);
    put_le64(p + dir_end - 24, 0); /* a zero dimension */
    reseal(p);
    CHECK(open_bytes(p, n, &err) == ETCH_ERR_FORMAT && strstr(err.message, "dimension"), "%s", err.message);

    /* Files that are not there or not files. */
    fmt_file g;
    CHECK(fmt_open(check_tmp_path("does-not-exist.etch"), &g, &err) == ETCH_ERR_IO && strstr(err.message, "cannot open"),
          "%s", err.message);
    CHECK(fmt_open(ETCH_TEST_TMP, &g, &err) == ETCH_ERR_IO && strstr(err.message, "not a regular file"), "%s",
          err.message);
    /* A valid file that is not a model: the runtime names what is missing. */
    etch_program *prog;
    CHECK(etch_program_open(path, &prog, &err) == ETCH_ERR_FORMAT && strstr(err.message, "' is missing"), "%s",
          err.message);
    /* The writer leaves nothing behind when it cannot write. */
    w = fmt_writer_new();
    fmt_put_i32(w, "x", 1);
    CHECK(fmt_writer_write(w, "/nonexistent-dir/x.etch", NULL, NULL, &err) == ETCH_ERR_IO, "unwritable: %s", err.message);
    /* A check that refuses the finished file leaves the destination as it was, and no temporary. */
    size_t before_len, after_len;
    char *before = check_read_file(path, &before_len);
    CHECK(fmt_writer_write(w, path, refuse, NULL, &err) == ETCH_ERR_FORMAT && !strstr(err.message, ".XXX"),
          "refused by the check: %s", err.message);
    char *after = check_read_file(path, &after_len);
    CHECK(before && after && before_len == after_len && !memcmp(before, after, before_len), "destination unchanged");
    CHECK(access(refused_tmp, F_OK) != 0 && refused_tmp[0], "temporary %s removed", refused_tmp);
    free(before), free(after);
    fmt_writer_free(w);
    free(orig);
    free(p);
    return check_done();
}
