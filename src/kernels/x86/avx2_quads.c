/* kernels/x86/avx2_quads.c: the I4 integer-dot GEMM's blocks for AVX2 without VNNI (a Zen 3): vnni.c's
 * quad steps and tiles compiled with V_MADDUBS, so each vpdpbusd is vpmaddubsw + vpmaddwd. */
#define V_MADDUBS 1
#include "vnni.c"
