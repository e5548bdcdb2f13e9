/* synth/gguf_writer: GGUF files written for `etch synth` (and the tests' llama.cpp peers). */
#define _POSIX_C_SOURCE 200809L
#include "gguf_writer.h"

#include "../kernels/kernels.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gw {
    base_outfile out; /* the file appears at its path only when complete */
    FILE *f;
    int failed;
} gw;

static void w_bytes(gw *w, const void *p, size_t n) {
    if (!w->failed && n && fwrite(p, 1, n, w->f) != n) w->failed = 1;
}
static void w_u32(gw *w, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    w_bytes(w, b, 4);
}
static void w_u64(gw *w, uint64_t v) {
    w_u32(w, (uint32_t)v);
    w_u32(w, (uint32_t)(v >> 32));
}
static void w_str(gw *w, const char *s, size_t n) {
    w_u64(w, n);
    w_bytes(w, s, n);
}
static void w_key(gw *w, const char *k, uint32_t type) {
    w_str(w, k, strlen(k));
    w_u32(w, type);
}

void gguf_kv_str(gguf_writer *g, const char *key, const char *v) {
    gw *w = g->w;
    w_key(w, key, GGUF_T_STR);
    w_str(w, v, strlen(v));
    g->n_kv++;
}
void gguf_kv_u32(gguf_writer *g, const char *key, uint32_t v) {
    w_key(g->w, key, GGUF_T_U32);
    w_u32(g->w, v);
    g->n_kv++;
}
void gguf_kv_f32(gguf_writer *g, const char *key, float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    w_key(g->w, key, GGUF_T_F32);
    w_u32(g->w, b);
    g->n_kv++;
}
void gguf_kv_bool(gguf_writer *g, const char *key, int v) {
    uint8_t b = v != 0;
    w_key(g->w, key, GGUF_T_BOOL);
    w_bytes(g->w, &b, 1);
    g->n_kv++;
}
void gguf_kv_arr_begin(gguf_writer *g, const char *key, int elem_type, uint64_t count) {
    w_key(g->w, key, GGUF_T_ARR);
    w_u32(g->w, (uint32_t)elem_type);
    w_u64(g->w, count);
    g->n_kv++;
}
void gguf_arr_str(gguf_writer *g, const char *s, size_t n) { w_str(g->w, s, n); }
void gguf_arr_i32(gguf_writer *g, int32_t v) { w_u32(g->w, (uint32_t)v); }
void gguf_arr_f32(gguf_writer *g, float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    w_u32(g->w, b);
}

static void put_half(uint8_t *out, float f) {
    uint16_t h = kern_f32_to_f16(f);
    memcpy(out, &h, 2);
}

/* Quantizes one block (gguf_block_size values) as GGML's reference quantizers do: Q8_0 scale max|x|/127;
 * Q4_0 a scale from the value of largest magnitude over -8, nibbles offset by 8; Q4_1 and Q5_1 a scale
 * (max - min) / 15 or 31 and the min. Q4_K and Q5_K take each 32-value sub-block's scale and min the
 * simple way (min of the values and 0, range / 15 or 31; GGML searches for better ones), as 6-bit
 * multiples of the super-block's d and dmin, then the values against the rounded ones. IQ4_NL and
 * IQ4_XS take each 32 values' scale from the value of largest magnitude over GGML's table's -127 (IQ4_XS:
 * as 6-bit multiples of the super-block's d, the largest scale over -32), then each value's nearest
 * table entry (GGML also searches the scale). */
/* The 16 bytes of an IQ4 block's nibbles: x[i] / d's nearest table entry, elements 0..15 low, 16..31 high. */
static void iq4_nibbles(const float *x, float d, uint8_t *qs) {
    float id = d ? 1.0f / d : 0.0f;
    memset(qs, 0, 16);
    for (int i = 0; i < 32; i++) {
        int best = 0;
        for (int v = 1; v < 16; v++)
            if (fabsf(x[i] * id - gguf_iq4nl_table[v]) < fabsf(x[i] * id - gguf_iq4nl_table[best])) best = v;
        qs[i % 16] |= (uint8_t)(best << (i < 16 ? 0 : 4));
    }
}

/* The value of largest magnitude among x[0..n), with its sign. */
static float signed_amax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    return max;
}

static void quant_block(int type, const float *x, uint8_t *out) {
    if (type == GGUF_IQ4_NL) {
        float d = kern_f16_to_f32(kern_f32_to_f16(signed_amax(x, 32) / -127.0f));
        put_half(out, d);
        iq4_nibbles(x, d, out + 2);
    } else if (type == GGUF_IQ4_XS) { /* f16 d, u16 scales_h, scales_l[4], qs[128] */
        float sc[8], max_sc = 0;
        for (int j = 0; j < 8; j++) {
            sc[j] = signed_amax(x + 32 * j, 32) / -127.0f;
            if (fabsf(sc[j]) > fabsf(max_sc)) max_sc = sc[j];
        }
        float d = kern_f16_to_f32(kern_f32_to_f16(max_sc / -32.0f));
        uint16_t sh = 0;
        put_half(out, d);
        memset(out + 4, 0, 4);
        for (int j = 0; j < 8; j++) {
            int l = d ? (int)lroundf(sc[j] / d) : 0;
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            int ls = l + 32;
            out[4 + j / 2] |= (uint8_t)((ls & 0xF) << 4 * (j % 2));
            sh |= (uint16_t)((ls >> 4) << 2 * j);
            iq4_nibbles(x + 32 * j, d * (float)l, out + 8 + 16 * j);
        }
        memcpy(out + 2, &sh, 2);
    } else if (type == GGUF_Q8_0) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
        float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        put_half(out, d);
        for (int i = 0; i < 32; i++) out[2 + i] = (uint8_t)(int8_t)roundf(x[i] * id);
    } else if (type == GGUF_Q4_0) {
        float d = signed_amax(x, 32) / -8.0f, id = d ? 1.0f / d : 0.0f;
        put_half(out, d);
        for (int i = 0; i < 16; i++) {
            int a = (int)(x[i] * id + 8.5f), b = (int)(x[16 + i] * id + 8.5f);
            a = a < 0 ? 0 : a > 15 ? 15 : a;
            b = b < 0 ? 0 : b > 15 ? 15 : b;
            out[2 + i] = (uint8_t)(a | b << 4);
        }
    } else if (type == GGUF_Q4_1 || type == GGUF_Q5_1) {
        int nmax = type == GGUF_Q4_1 ? 15 : 31;
        float min = x[0], max = x[0];
        for (int i = 1; i < 32; i++) min = fminf(min, x[i]), max = fmaxf(max, x[i]);
        float d = (max - min) / (float)nmax, id = d ? 1.0f / d : 0.0f;
        put_half(out, d);
        put_half(out + 2, min);
        uint8_t *qs = out + (type == GGUF_Q4_1 ? 4 : 8);
        uint32_t qh = 0;
        memset(qs, 0, 16);
        for (int i = 0; i < 32; i++) {
            int q = (int)((x[i] - min) * id + 0.5f);
            q = q > nmax ? nmax : q;
            qs[i % 16] |= (uint8_t)((q & 15) << (i < 16 ? 0 : 4));
            qh |= (uint32_t)(q >> 4) << i;
        }
        if (type == GGUF_Q5_1) memcpy(out + 4, &qh, 4);
    } else { /* Q4_K, Q5_K: f16 d, f16 dmin, scales[12], (Q5_K: qh[32]), qs[128] */
        int nmax = type == GGUF_Q4_K ? 15 : 31;
        float sc[8], mn[8], max_sc = 0, max_mn = 0;
        for (int j = 0; j < 8; j++) {
            float lo = 0, hi = x[32 * j];
            for (int i = 0; i < 32; i++) lo = fminf(lo, x[32 * j + i]), hi = fmaxf(hi, x[32 * j + i]);
            sc[j] = (hi - lo) / (float)nmax, mn[j] = -lo;
            max_sc = fmaxf(max_sc, sc[j]), max_mn = fmaxf(max_mn, mn[j]);
        }
        float d = kern_f16_to_f32(kern_f32_to_f16(max_sc / 63.0f)), dmin = kern_f16_to_f32(kern_f32_to_f16(max_mn / 63.0f));
        put_half(out, d);
        put_half(out + 2, dmin);
        uint8_t *scales = out + 4, *qh = out + 16, *qs = out + (type == GGUF_Q4_K ? 16 : 48);
        memset(scales, 0, 12);
        memset(qs, 0, 128);
        if (type == GGUF_Q5_K) memset(qh, 0, 32);
        for (int j = 0; j < 8; j++) {
            int ls = d > 0 ? (int)lroundf(sc[j] / d) : 0, lm = dmin > 0 ? (int)lroundf(mn[j] / dmin) : 0;
            ls = ls > 63 ? 63 : ls, lm = lm > 63 ? 63 : lm;
            if (j < 4) {
                scales[j] |= (uint8_t)ls, scales[j + 4] |= (uint8_t)lm;
            } else {
                scales[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
                scales[j - 4] |= (uint8_t)((ls >> 4) << 6), scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
            float dj = d * (float)ls, mj = dmin * (float)lm;
            for (int i = 0; i < 32; i++) {
                int q = dj > 0 ? (int)lroundf((x[32 * j + i] + mj) / dj) : 0;
                q = q < 0 ? 0 : q > nmax ? nmax : q;
                qs[32 * (j / 2) + i] |= (uint8_t)((q & 15) << (j % 2 ? 4 : 0));
                if (q > 15) qh[i] |= (uint8_t)(1 << j);
            }
        }
    }
}

static uint64_t type_bytes(int type, uint64_t count) {
    uint32_t bytes, n = gguf_block_size((uint32_t)type, &bytes);
    return count / n * bytes;
}

etch_status gguf_writer_open(gguf_writer *g, const char *path, uint64_t n_tensors, etch_error *err) {
    memset(g, 0, sizeof *g);
    g->w = base_calloc(1, sizeof(gw));
    if (!g->w) return base_fail(err, ETCH_ERR_NOMEM, "out of memory");
    gw *w = g->w;
    etch_status st = base_out_open(&w->out, path, err);
    if (st) {
        base_free(w);
        g->w = NULL;
        return st;
    }
    w->f = w->out.f;
    g->path = path;
    w_bytes(w, "GGUF", 4);
    w_u32(w, 3);
    w_u64(w, n_tensors);
    w_u64(w, 0); /* the key-value count, patched by gguf_writer_close */
    return ETCH_OK;
}

void gguf_tensor_info(gguf_writer *g, const char *name, int type, uint64_t rows, uint64_t cols) {
    gw *w = g->w;
    w_str(w, name, strlen(name));
    w_u32(w, cols ? 2 : 1);
    if (cols) {
        w_u64(w, cols);
        w_u64(w, rows);
    } else {
        w_u64(w, rows);
    }
    w_u32(w, (uint32_t)type);
    w_u64(w, g->data_size);
    g->data_size = (g->data_size + type_bytes(type, rows * (cols ? cols : 1)) + 31) / 32 * 32;
}

void gguf_tensor_data(gguf_writer *g, int type, const float *x, uint64_t count) {
    gw *w = g->w;
    if (!g->data_started) { /* pad the header to the 32-byte alignment */
        long pos = ftell(w->f);
        static const uint8_t zero[32] = {0};
        if (pos < 0) w->failed = 1;
        else w_bytes(w, zero, (size_t)((32 - pos % 32) % 32));
        g->data_started = 1;
    }
    uint8_t buf[256];
    for (uint64_t i = 0; i < count;) {
        if (type == GGUF_F32) {
            w_bytes(w, x + i, 4);
            i++;
        } else if (type == GGUF_F16 || type == GGUF_BF16) {
            uint16_t h = type == GGUF_F16 ? kern_f32_to_f16(x[i]) : kern_f32_to_bf16(x[i]);
            w_bytes(w, &h, 2);
            i++;
        } else {
            uint32_t bytes, n = gguf_block_size((uint32_t)type, &bytes);
            quant_block(type, x + i, buf);
            w_bytes(w, buf, bytes);
            i += n;
        }
    }
    uint64_t bytes = type_bytes(type, count);
    static const uint8_t zero[32] = {0};
    w_bytes(w, zero, (size_t)((32 - bytes % 32) % 32));
}

etch_status gguf_writer_close(gguf_writer *g, etch_error *err) {
    gw *w = g->w;
    if (!w) return base_fail(err, ETCH_ERR_IO, "gguf writer not open");
    /* The key-value count goes into the header now that it is known. */
    if (fseek(w->f, 16, SEEK_SET) != 0) w->failed = 1;
    w_u64(w, g->n_kv);
    etch_status st;
    if (w->failed) {
        base_out_abort(&w->out);
        st = base_fail(err, ETCH_ERR_IO, "%s: write failed", g->path);
    } else {
        st = base_out_commit(&w->out, err);
    }
    base_free(w);
    g->w = NULL;
    return st;
}
