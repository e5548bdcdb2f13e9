/* kernels/x86/amx.c: the integer-dot GEMM of avx512_vnni.c with its blocks of whole groups on AMX-INT8
 * tiles, sixteen rows at a time (vnni.c's amx_tile_groups); everything else is avx512_vnni.c's. */
#define VNNI_ZMM 1
#define VNNI_AMX 1
#include "vnni.c"
