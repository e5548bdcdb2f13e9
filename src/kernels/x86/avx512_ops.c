/* kernels/x86/avx512_ops.c: softmax, SwiGLU and GeGLU of avx2_ops.c on 16 lanes (AVX-512F):
 * avx2_ops.c compiled with OPS_ZMM. */
#define OPS_ZMM 1
#include "avx2_ops.c"
