/* backend_cuda_absent.c — the CUDA registry rows' constructor and describe hook in a build made
 * without nvcc (Makefile: KVD_HAVE_CUDA unset): asking for a CUDA backend then says why it is
 * not there, as a one-line error, instead of "unknown backend". */
#include "backend.h"

#include <stdbool.h>

#ifndef KVD_HAVE_CUDA
void lm_backend_cuda_describe(char *buf, size_t n, bool brief);
int lm_backend_cuda_create(lm_backend **out, const char *spec, int n_threads, lm_err *err);

void lm_backend_cuda_describe(char *buf, size_t n, bool brief)
{
    (void)brief;
    if (n > 0)
        buf[0] = '\0';
}

int lm_backend_cuda_create(lm_backend **out, const char *spec, int n_threads, lm_err *err)
{
    (void)n_threads;
    *out = NULL;
    return LM_FAIL(err, LM_E_UNSUPPORTED,
                   "backend '%s': no CUDA device (kvdrift was built without nvcc)", spec);
}
#endif
