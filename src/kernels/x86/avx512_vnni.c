/* kernels/x86/avx512_vnni.c: the integer-dot GEMM of vnni.c on zmm registers (EVEX vpdpbusd,
 * AVX512-VNNI): vnni.c compiled with VNNI_ZMM, whose whole-group tiles are z_tile_groups. */
#define VNNI_ZMM 1
#include "vnni.c"
