/* kernels/scratch: a block of working memory per thread for the kernels whose blocks would not fit
 * the stacks embedders give their threads (glibc's default is 8 MiB, musl's 128 KiB, and a
 * session's forward call runs on the caller's thread too): the weight-only matmul's widened blocks
 * and sums of x, AVX-512 f16/bf16 prefill's widened blocks. Allocated on a thread's first call,
 * freed when the thread exits. A second block, grown to the largest call's need, holds working sets
 * that grow with the shape (AMX-BF16 4w prefill's split activations). */
#include "kern_impl.h"

#include <pthread.h>
#include <stdlib.h>

static pthread_key_t key;
static int key_ok;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void make_key(void) { key_ok = pthread_key_create(&key, free) == 0; }

void *kern_scratch(void) {
    pthread_once(&once, make_key);
    if (!key_ok) return NULL;
    void *p = pthread_getspecific(key);
    if (p) return p;
    if (!(p = aligned_alloc(64, KERN_SCRATCH_BYTES))) return NULL;
    if (pthread_setspecific(key, p) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

/* The grown block: a second key, its size in front of it. */
typedef struct grown {
    size_t bytes;
    _Alignas(64) unsigned char data[];
} grown;
static pthread_key_t grown_key;
static int grown_ok;
static pthread_once_t grown_once = PTHREAD_ONCE_INIT;

static void make_grown_key(void) { grown_ok = pthread_key_create(&grown_key, free) == 0; }

void *kern_scratch_grown(size_t bytes) {
    pthread_once(&grown_once, make_grown_key);
    if (!grown_ok) return NULL;
    grown *g = pthread_getspecific(grown_key);
    if (g && g->bytes >= bytes) return g->data;
    grown *bigger = aligned_alloc(64, (sizeof *g + bytes + 63) / 64 * 64);
    if (!bigger) return NULL;
    if (pthread_setspecific(grown_key, bigger) != 0) {
        free(bigger);
        return NULL;
    }
    free(g);
    bigger->bytes = bytes;
    return bigger->data;
}
