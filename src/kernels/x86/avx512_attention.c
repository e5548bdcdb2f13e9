/* kernels/x86/avx512_attention.c: the attention of avx2_attention.c on 16 lanes (AVX-512F), for
 * heads whose size is a multiple of 16 (others take the twin). */
#define ATT_ZMM 1
#include "avx2_attention.c"
