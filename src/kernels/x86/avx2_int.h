/* kernels/x86/avx2_int.h: the integer-dot GEMM's shared pieces (AVX2 tiles in avx2_int.c, vpdpbusd
 * tiles in vnni.c): the matrix's layout, a group's int32 sums joined to the float sums, the offsets
 * of unsigned weights, and a long group's sums carried from block to block. */
#ifndef ETCH_KERN_X86_AVX2_INT_H
#define ETCH_KERN_X86_AVX2_INT_H

#include "avx2.h"

typedef struct imat {
    const uint8_t *w;
    qscales sc, mn;      /* the scales, and the mins (mn.v NULL without: kern_mat.mins) */
    const float *wsum;
    int k, half, n_groups, group;
    const int32_t *goff; /* NULL, or [n rows, n_groups]: the weights' offset off each row's group sums
                          * (unit times the input's sum over the group), computed once per call */
    const float *xsum;   /* with goff and mins, else NULL: [n rows, n_groups], each row's input sum over
                          * each group (i_xsum) as a float, exact, made once per call beside goff for
                          * the zmm and AMX joins (z_join), which had reworked it from the prefix sums
                          * in every panel; the ymm tiles still do (the table measured nothing there) */
} imat;
static INLINE imat imat_of(const kern_mat *km, int k, const int32_t *goff, const float *xsum) {
    int n_groups = kern_q_groups(k, km->group);
    return (imat){km->w, qscales_of(km, 0, n_groups), qscales_of(km, 1, n_groups), km->wsum, k, k / 2, n_groups,
                  km->group, goff, xsum};
}

/* The offset of a type's unsigned weights, per unit of the input's sum: I4's stored nibble is value +
 * 8 (with mins the nibble is the value: 0); I8's byte is value + 128 where vpdpbusd reads it unsigned
 * (vnni), the value itself elsewhere. */
static INLINE int i_unit(int type, const imat *m, int vnni) {
    return type == KERN_I8 ? (vnni ? 128 : 0) : m->mn.v ? 0 : 8;
}

/* Row `row`'s input sum over pair steps b .. e-1 (from its prefix sums). */
static INLINE int32_t i_xsum(const kern_qx *x, const imat *m, int row, int b, int e) {
    const int32_t *ps = x->psum + (size_t)row * (size_t)(m->half + 1);
    return ps[e] - ps[b];
}

/* 16 rows' scales (or mins) of group g, times row `row`'s input scale of the group where the inputs
 * have groups (kern_qx.group): the twin's weight-side product. */
static INLINE void i_scales(const qscales *q, const kern_qx *x, const imat *m, int row, int panel, int g, __m256 *s0,
                            __m256 *s1) {
    scales16(q, panel, g, s0, s1);
    if (x->group) {
        __m256 xg = _mm256_set1_ps(kern_qx_scale(x, m->group, row, g));
        *s0 = _mm256_mul_ps(*s0, xg), *s1 = _mm256_mul_ps(*s1, xg);
    }
}

/* With mins: acc += min * xs, xs the row's input sum over group g, for 16 rows (after i_join). */
static INLINE void i_join_min(const imat *m, int panel, int g, const kern_qx *x, int row, int32_t xs, __m256 *a0,
                              __m256 *a1) {
    if (!m->mn.v) return;
    __m256 n0, n1, v = _mm256_set1_ps((float)xs);
    i_scales(&m->mn, x, m, row, panel, g, &n0, &n1);
    *a0 = _mm256_fmadd_ps(n0, v, *a0);
    *a1 = _mm256_fmadd_ps(n1, v, *a1);
}

/* The float terms of group g of input row `row` joined to acc: acc += (dot - zero * wsum) * scale,
 * for 16 rows. */
static INLINE void i_join(const imat *m, int panel, int g, const kern_qx *x, int row, __m256i d0, __m256i d1,
                          __m256 *a0, __m256 *a1) {
    size_t si = ((size_t)panel * m->n_groups + (size_t)g) * KERN_PANEL;
    int32_t zero = x->zero[row];
    if (zero) {
        __m256i z = _mm256_set1_epi32(zero);
        d0 = _mm256_sub_epi32(d0, _mm256_mullo_epi32(z, _mm256_cvttps_epi32(_mm256_loadu_ps(m->wsum + si))));
        d1 = _mm256_sub_epi32(d1, _mm256_mullo_epi32(z, _mm256_cvttps_epi32(_mm256_loadu_ps(m->wsum + si + 8))));
    }
    __m256 s0, s1;
    i_scales(&m->sc, x, m, row, panel, g, &s0, &s1);
    *a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), s0, *a0);
    *a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), s1, *a1);
}

/* What a row's sums are multiplied by after the last group: its input scale, or 1 (exact) where the
 * inputs have groups and their scales went in with the weights'. */
static INLINE float i_row_scale(const kern_qx *x, int row) { return x->group ? 1.0f : x->scale[row]; }

/* ---- I4 by vpmaddubsw in the decode GEMV: a pair step's 32 stored nibbles (value + 8, 0..15) as
 * unsigned bytes times the input's pair as signed bytes, each row's pair summed in int16 (at most 2 *
 * 15 * 128 = 3,840), eight steps added in int16 (30,720 < 32,767) before they widen to int32; the
 * offset of 8 comes off per group as 8 times the input's sum over the group (the prefix sums of
 * kern_qx). */

/* The 32 nibbles of I4 pair step at w as bytes: rows 0..7's pairs in the low lane, 8..15's in the high. */
static INLINE __m256i i4_bytes(const uint8_t *w) {
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)w));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}

/* The float sums of R rows of a panel's tile: from y, or zero before the first group (g0 = 0). */
static INLINE void sums_load(const float *y, int ldy, int g0, int R, int cols, __m256 *a0, __m256 *a1) {
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        a0[r] = g0 ? load_cols(y + (size_t)r * ldy, cols) : _mm256_setzero_ps();
        a1[r] = g0 && cols > 8 ? load_cols(y + (size_t)r * ldy + 8, cols - 8) : _mm256_setzero_ps();
    }
}
/* ... and back to y, times the rows' input scales after the last group. */
static INLINE void sums_store(float *y, int ldy, const kern_qx *x, int r0, int last, int R, int cols, __m256 *a0,
                                   __m256 *a1) {
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        if (last) {
            __m256 sc = _mm256_set1_ps(i_row_scale(x, r0 + r));
            a0[r] = _mm256_mul_ps(a0[r], sc), a1[r] = _mm256_mul_ps(a1[r], sc);
        }
        store_cols(y + (size_t)r * ldy, a0[r], a1[r], cols);
    }
}

/* The weights' offset off a row's sum of group pairs b .. e-1: unit times the input's sum over them,
 * from the row's prefix sums ps. unit: 8 for I4's stored nibbles, 128 for I8 made unsigned (vpdpbusd).
 * In uint32: int32 sums wrap, and only the final sum must fit. */
static INLINE int32_t group_offset(int unit, const int32_t *ps, int b, int e) {
    return (int32_t)((uint32_t)unit * (uint32_t)(ps[e] - ps[b]));
}

/* group_offset off R rows' int32 sums (unit 0: none). */
static INLINE void i_offset(int unit, const kern_qx *x, int r0, const imat *m, int b, int e, int R, __m256i *d0,
                                 __m256i *d1) {
    if (!unit) return;
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        __m256i off = _mm256_set1_epi32(group_offset(unit, x->psum + (size_t)(r0 + r) * (m->half + 1), b, e));
        d0[r] = _mm256_sub_epi32(d0[r], off), d1[r] = _mm256_sub_epi32(d1[r], off);
    }
}

/* A long group's int32 sums of R rows between blocks: carry [R][16], read when cont (else zero)... */
static INLINE void carry_load(const int32_t *carry, int cont, int R, __m256i *d0, __m256i *d1) {
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        d0[r] = cont ? _mm256_loadu_si256((const __m256i *)(carry + r * 16)) : _mm256_setzero_si256();
        d1[r] = cont ? _mm256_loadu_si256((const __m256i *)(carry + r * 16 + 8)) : _mm256_setzero_si256();
    }
}
/* ... and written when the group goes on in the next block. */
static INLINE void carry_store(int32_t *carry, int R, const __m256i *d0, const __m256i *d1) {
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        _mm256_storeu_si256((__m256i *)(carry + r * 16), d0[r]);
        _mm256_storeu_si256((__m256i *)(carry + r * 16 + 8), d1[r]);
    }
}

/* The end of group g for R rows: the offset off (unit, as i_offset), the group's terms joined to the
 * float sums kept in y (read back unless it is the first group), the rows' scales after the last. */
static INLINE void group_end(int unit, float *y, int ldy, const kern_qx *x, int r0, const imat *m, int panel, int g,
                                  int R, int cols, __m256i *d0, __m256i *d1) {
    int gb = g * m->group / 2, ge = group_end_at(g, m->group, m->k) / 2;
    i_offset(unit, x, r0, m, gb, ge, R, d0, d1);
    __m256 a0[6], a1[6];
    sums_load(y, ldy, g, R, cols, a0, a1);
    _Pragma("GCC unroll 6") for (int r = 0; r < R; r++) {
        i_join(m, panel, g, x, r0 + r, d0[r], d1[r], &a0[r], &a1[r]);
        i_join_min(m, panel, g, x, r0 + r, m->mn.v ? i_xsum(x, m, r0 + r, gb, ge) : 0, &a0[r], &a1[r]);
    }
    sums_store(y, ldy, x, r0, g == m->n_groups - 1, R, cols, a0, a1);
}

/* Pair steps of a panel widened to int16 at a time for several rows: 16 KiB on the stack; rows of
 * a long group's int32 sums carried between blocks: 3 KiB. */
#define I_BLOCK 256

/* One block of the integer GEMM, for a variant that tiles it its own way (vnni.c's v_block): pair
 * steps sb .. se-1 of groups g0 .. g1-1 of panel wp, rows r0 .. r0+rows-1; blk is 16 KiB of scratch. */
typedef void (*kern_int_block_fn)(int type, float *y, int ldy, const kern_qx *x, const uint8_t *wp, uint8_t *blk,
                                  int sb, int se, const imat *m, int panel, int g0, int g1, int r0, int rows, int cols,
                                  int32_t *carry, int cont);
/* The integer GEMM/GEMV over I8 or I4 (avx2_int.c): block NULL for the AVX2 pair-step tiles (I8
 * only: I4 always comes with a block); goff and xsum NULL, or imat's tables for the n rows
 * (kern_group_offsets). */
void kern_avx2_int_matmul(kern_int_block_fn block, float *y, int ldy, const kern_qx *x, const kern_mat *w, int n,
                          int k, int ob, int oe, const int32_t *goff, const float *xsum);
/* kern_avx2_int_matmul with the tables goff and (weights with mins) xsum for its n rows
 * (kern_group_offsets), or without them where it finds no memory (the tiles then work the offsets
 * out from the prefix sums). first: the first row whose offsets the variant's tiles read (AMX's
 * tiles read none: rows 0 .. first-1 of goff are left unwritten), 0 for all. */
void kern_int_matmul_offsets(kern_int_block_fn block, float *y, int ldy, const kern_qx *x, const kern_mat *w, int n,
                             int k, int ob, int oe, int first);
/* I4 prefill on AVX2 without VNNI: vnni.c's blocks with vpmaddubsw (avx2_quads.c). */
void kern_avx2_i4_matmul(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int k, int ob, int oe);
/* goff[r * n_groups + g] = unit * (the sum of row r's input values over group g), unit i_unit's for
 * vpdpbusd (the offsets of unsigned weights), for rows first .. n-1 of x and w's groups; xsum (NULL,
 * or for weights with mins) the sums themselves as floats, for all n rows. */
void kern_group_offsets(int32_t *goff, float *xsum, const kern_qx *x, const kern_mat *w, int n, int k, int first);

#endif
