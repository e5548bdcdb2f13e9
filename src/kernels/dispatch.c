/* kernels/dispatch: which variant runs. The CPU is asked once what it has (CPUID, and XGETBV for the
 * registers the OS saves); kern_init points `active` at the widest variant the CPU and the caps allow,
 * and every public entry point calls through it. A new instruction set is a new file in x86/ and one
 * table below. */
#include "kern_impl.h"

#include <stdlib.h>
#include <string.h>

static const kern_variant portable = {
    "portable",
    {kern_matmul_portable, kern_matmul_portable, kern_matmul_portable, kern_matmul_portable, kern_matmul_portable},
    kern_matmul_i_ref,
    kern_quantize_x_ref,
    kern_attention_ref,
    kern_kv_store_ref,
    kern_softmax_ref,
    kern_rmsnorm_ref,
    kern_swiglu_ref,
    kern_geglu_ref,
    kern_fma_peak_portable,
    kern_read_bandwidth_portable,
};

#ifdef KERN_X86
#include <cpuid.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* The x86 variants: W (avx2 or avx512) names the width of the float matmuls, attention, softmax,
 * SwiGLU, GeGLU and the peak probe; they differ otherwise only in their weight-only Q4 matmul (Q4)
 * and their integer-dot GEMM. */
#define X86_VARIANT(NAME, W, Q4, MATMUL_I)                                                             \
    {NAME,                                                                                            \
     {kern_##W##_matmul_f32, kern_##W##_matmul_f16, kern_##W##_matmul_bf16, kern_##W##_matmul_q8, Q4}, \
     MATMUL_I,                                                                                        \
     kern_avx2_quantize_x,                                                                            \
     kern_##W##_attention,                                                                            \
     kern_avx2_kv_store,                                                                              \
     kern_##W##_softmax,                                                                              \
     kern_avx2_rmsnorm,                                                                               \
     kern_##W##_swiglu,                                                                               \
     kern_##W##_geglu,                                                                                \
     kern_##W##_fma_peak,                                                                             \
     kern_avx2_read_bandwidth}
static const kern_variant avx2 = X86_VARIANT("avx2", avx2, kern_avx2_matmul_q4, kern_avx2_matmul_i);
static const kern_variant avx2_vnni = X86_VARIANT("avx2+vnni", avx2, kern_avx2_matmul_q4, kern_vnni_matmul_i);
static const kern_variant avx512 = X86_VARIANT("avx512", avx512, kern_avx512_matmul_q4, kern_avx2_matmul_i);
static const kern_variant avx512_vnni =
    X86_VARIANT("avx512+vnni", avx512, kern_avx512_matmul_q4, kern_avx512_vnni_matmul_i);
static const kern_variant avx512_vbmi =
    X86_VARIANT("avx512+vnni+vbmi", avx512, kern_avx512_vbmi_matmul_q4, kern_avx512_vnni_matmul_i);
static const kern_variant avx512_amx = X86_VARIANT("avx512+amx", avx512, kern_amx_matmul_q4, kern_amx_matmul_i);

/* AVX2, FMA and F16C from CPUID, and the OS saving the YMM registers (XGETBV): the same answer with
 * GCC and clang (clang's __builtin_cpu_supports has no "f16c"). */
static int cpu_has_avx2_fma_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(fma && osxsave && avx && f16c)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6) != 6) return 0; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 5) & 1;
}

/* AVX-512F: CPUID leaf 7 EBX bit 16, and the OS saving the opmask and ZMM state (XGETBV bits 5-7). */
static int cpu_has_avx512f(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((b >> 16) & 1)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0xE6) == 0xE6;
}

/* AVX512-VNNI (the EVEX vpdpbusd on zmm registers), CPUID leaf 7 ECX bit 11, with AVX512-BW (byte
 * shuffles of the decode GEMV), EBX bit 30: every CPU with the first has the second. */
static int cpu_has_avx512_vnni(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (c >> 11) & 1 && (b >> 30) & 1;
}

/* AVX512-VBMI (byte permutes across a zmm register, vpermt2b), CPUID leaf 7 ECX bit 1: every CPU with
 * it has AVX512-VNNI too (Ice Lake and later, Zen 4 and later), which the variants with it assume. */
static int cpu_has_avx512_vbmi(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (c >> 1) & 1 && cpu_has_avx512_vnni();
}

/* AMX-TILE, AMX-INT8 and AMX-BF16 (CPUID leaf 7 EDX bits 24, 25 and 22: every AMX CPU so far has
 * all three), the OS saving the tile state (XGETBV
 * bits 17 and 18), and Linux granting it to this process: the tile data is off until asked for
 * (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), and a tile instruction without it is
 * SIGILL. Asking again is harmless; the grant covers every thread of the process. */
static int cpu_has_amx(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1) || !((d >> 25) & 1) || !((d >> 22) & 1)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return 0;
#ifdef __linux__
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return 0;
#endif
}

/* AVX-VNNI (the VEX vpdpbusd on ymm registers): CPUID leaf 7, subleaf 1, EAX bit 4. */
static int cpu_has_avx_vnni(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    return (a >> 4) & 1;
}
#endif

/* The variant in use: written by kern_init (every caller computes the same choice), read by every
 * kernel call. */
static const kern_variant *active = &portable;
static int limit = KERN_BEST;

/* The cap from the environment, a variant's name: ETCH_KERNELS=avx512+vnni+vbmi (no AMX), avx512+vnni
 * (no VBMI either), avx2+vnni (no AVX-512), avx2 (no VNNI either) or portable; anything else: none. */
static int env_limit(void) {
    const char *e = getenv("ETCH_KERNELS");
    if (!e) return KERN_BEST;
    return !strcmp(e, "portable") ? KERN_PORTABLE : !strcmp(e, "avx2") ? KERN_NO_VNNI
         : !strcmp(e, "avx2+vnni")                 ? KERN_NO_AVX512
         : !strcmp(e, "avx512+vnni")               ? KERN_NO_VBMI
         : !strcmp(e, "avx512+vnni+vbmi")          ? KERN_NO_AMX : KERN_BEST;
}

const char *kern_init(void) {
    int cap = env_limit() > limit ? env_limit() : limit;
    const kern_variant *v = &portable;
#ifdef KERN_X86
    if (cap != KERN_PORTABLE && cpu_has_avx2_fma_f16c()) {
        int wide = cap <= KERN_NO_VBMI && cpu_has_avx512f(), vbmi = cap <= KERN_NO_AMX && cpu_has_avx512_vbmi();
        if (wide) v = !cpu_has_avx512_vnni()                 ? &avx512
                    : cap == KERN_BEST && vbmi && cpu_has_amx() ? &avx512_amx
                    : vbmi                                     ? &avx512_vbmi : &avx512_vnni;
        else v = cap <= KERN_NO_AVX512 && cpu_has_avx_vnni() ? &avx2_vnni : &avx2;
    }
#else
    (void)cap;
#endif
    active = v;
    return v->name;
}

const char *kern_limit(int level) {
    limit = level;
    return kern_init();
}

void kern_matmul(float *y, int ldy, const float *x, const kern_mat *w, int n, int d, int k, int o_begin, int o_end) {
    active->matmul[w->type](y, ldy, x, w, n, d, k, o_begin, o_end);
}

int kern_matmul_exact(const kern_mat *w, int n, int k) {
#ifdef KERN_X86
    if (active == &avx512_amx && w->type == KERN_Q4 && kern_amx_q4_takes(w, n, k)) return 0;
#else
    (void)w, (void)n, (void)k;
#endif
    return 1;
}

void kern_matmul_i(float *y, int ldy, const kern_qx *x, const kern_mat *w, int n, int d, int k, int o_begin, int o_end) {
    active->matmul_i(y, ldy, x, w, n, d, k, o_begin, o_end);
}

void kern_quantize_x(kern_qx *qx, const float *x, int n, int k, const float *stat) {
    active->quantize_x(qx, x, n, k, stat);
}

void kern_attention(float *out, const float *q, const kern_kv *kv, int n, int start_pos, const kern_att_shape *a,
                    float *scores, int h_begin, int h_end) {
    active->attention(out, q, kv, n, start_pos, a, scores, h_begin, h_end);
}

void kern_kv_store(const kern_kv *kv, const float *k, const float *v, int n, int start_pos, const kern_att_shape *a) {
    active->kv_store(kv, k, v, n, start_pos, a);
}

void kern_softmax(float *x, int n) { active->softmax(x, n); }

void kern_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps) {
    active->rmsnorm(out, x, w, n, dim, eps);
}

void kern_swiglu(float *h, const float *g, size_t n) { active->swiglu(h, g, n); }
void kern_geglu(float *h, const float *g, size_t n) { active->geglu(h, g, n); }

double kern_fma_peak(double seconds) { return active->fma_peak(seconds); }

double kern_read_bandwidth(const float *buf, size_t n) { return active->read_bandwidth(buf, n); }
