/* kernels/x86/avx512_vnni.c: the integer-dot GEMM of vnni.c with its dot loop on zmm registers
 * (EVEX vpdpbusd, AVX512-VNNI): the same blocks, offsets and float order, so the same sums. */
#define VNNI_ZMM 1
#define VNNI_ENTRY kern_avx512_vnni_matmul_i
#include "vnni.c"
