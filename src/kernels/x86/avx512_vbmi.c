/* kernels/x86/avx512_vbmi.c: the weight-only Q4 matmul of avx512_float.c with its decode GEMV taking
 * eight steps at a time through byte permutes (AVX512-VBMI, zq4_steps8): avx512_float.c's Q8/Q4
 * part compiled with ZQ_VBMI. */
#define ZQ_VBMI 1
#include "avx512_float.c"
