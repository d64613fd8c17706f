/* backend.c — the backend registry: the one table of compute backends, their capabilities, and
 * the factory that creates one by name. */
#include "backend.h"

#include "kvd_engine.h"
#include "kvd_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each backend file exposes its constructor (and, when its bits depend on more than the build,
 * a describe function); this table is the only place that names them, so adding a backend
 * touches its own file, one row here and nothing in the forward pass or the harness.
 * create: spec is the whole name given (NAME, or NAME:seed=N for a LM_BE_SEEDED backend). */
int lm_backend_naive_create(lm_backend **out, const char *spec, int n_threads, lm_err *err);
int lm_backend_blas_create(lm_backend **out, const char *spec, int n_threads, lm_err *err);
void lm_backend_blas_describe(char *buf, size_t n, bool brief);
void lm_backend_blas_kernels(lm_backend_kernels *out);
int lm_backend_det_create(lm_backend **out, const char *spec, int n_threads, lm_err *err);
void lm_backend_det_describe(char *buf, size_t n, bool brief);
void lm_backend_det_kernels(lm_backend_kernels *out);
/* backend_blis.c: BLIS, loaded at run time. */
int lm_backend_blis_create(lm_backend **out, const char *spec, int n_threads, lm_err *err);
void lm_backend_blis_describe(char *buf, size_t n, bool brief);
void lm_backend_blis_kernels(lm_backend_kernels *out);
int lm_backend_sr_create_named(lm_backend **out, const char *spec, int n_threads, lm_err *err);
/* backend_cuda.cu (or backend_cuda_absent.c in a build without nvcc): all four CUDA rows. */
int lm_backend_cuda_create(lm_backend **out, const char *spec, int n_threads, lm_err *err);
void lm_backend_cuda_describe(char *buf, size_t n, bool brief);

typedef struct backend_entry {
    lm_backend_info info;
    int (*create)(lm_backend **out, const char *spec, int n_threads, lm_err *err);
} backend_entry;

static const backend_entry backends[] = {
    {{.name = "naive",
      .summary = "scalar C, one thread, each dot product left to right from +0.0f (the "
                 "reference order)",
      .flags = LM_BE_CHUNK_INVARIANT | LM_BE_ONE_THREAD,
      .describe = NULL},
     lm_backend_naive_create},
    {{.name = "blas",
      .summary = "OpenBLAS sgemm/sgemv, its kernel's blocked FMA order, OpenBLAS threads",
      .flags = LM_BE_SHARES_PROCESS_STATE,
      .describe = lm_backend_blas_describe,
      .kernels = lm_backend_blas_kernels},
     lm_backend_blas_create},
    {{.name = "det",
      .summary = "fixed-order AVX-512/AVX2/scalar kernels: 8 FMA lanes over k, fixed lane "
                 "tree; threads split outputs, never k; one pool",
      .flags = LM_BE_CHUNK_INVARIANT,
      .describe = lm_backend_det_describe,
      .kernels = lm_backend_det_kernels},
     lm_backend_det_create},
    /* Not chunk-invariant (measured with BLIS 0.9.0's haswell configuration, gemm_nt on
     * 576 x 576 x 576: calls of 7, 16 or 64 rows differ from the whole product in 89% of the
     * elements, its small-shape kernels against its packed ones; one row (sgemv) in 90%), nor
     * thread-invariant on small shapes (23 x 37 x 301: 2 threads differ from 1 in 5 of 851). */
    {{.name = "blis",
      .summary = "BLIS bli_sgemm/bli_sgemv (libblis.so.4 loaded at run time), its "
                 "configuration's blocked FMA order, BLIS threads",
      .flags = LM_BE_SHARES_PROCESS_STATE | LM_BE_LOADED,
      .describe = lm_backend_blis_describe,
      .kernels = lm_backend_blis_kernels},
     lm_backend_blis_create},
    {{.name = "naive-sr",
      .summary = "naive's order with seeded stochastic rounding of every operation (noise "
                 "ensemble member)",
      .flags = LM_BE_CHUNK_INVARIANT | LM_BE_SEEDED | LM_BE_STOCHASTIC_ROUNDING |
               LM_BE_ONE_THREAD,
      .describe = NULL},
     lm_backend_sr_create_named},
    {{.name = "cuda",
      .summary = "cuBLAS sgemm/sgemv in float32 (pedantic math), elementwise stages on the host",
      .flags = LM_BE_DEVICE,
      .describe = lm_backend_cuda_describe},
     lm_backend_cuda_create},
    {{.name = "cuda-tf32",
      .summary = "cuBLAS sgemm with TF32 tensor cores (inputs to a 10-bit mantissa, float32 "
                 "accumulation)",
      .flags = LM_BE_DEVICE,
      .operand_bits = 11,
      .describe = lm_backend_cuda_describe},
     lm_backend_cuda_create},
    {{.name = "cuda-bf16",
      .summary = "cuBLAS GemmEx on bfloat16 weights and activations, float32 accumulation",
      .flags = LM_BE_DEVICE,
      .operand_bits = 8,
      .describe = lm_backend_cuda_describe},
     lm_backend_cuda_create},
    {{.name = "cuda-det",
      .summary = "own CUDA kernel: each output one sequential FMA chain over k (chunk-invariant)",
      .flags = LM_BE_DEVICE | LM_BE_CHUNK_INVARIANT,
      .describe = lm_backend_cuda_describe},
     lm_backend_cuda_create},
};
#define N_BACKENDS (sizeof backends / sizeof backends[0])

size_t lm_backend_count(void)
{
    return N_BACKENDS;
}

const lm_backend_info *lm_backend_at(size_t i)
{
    return i < N_BACKENDS ? &backends[i].info : NULL;
}

static const backend_entry *find(const char *name, size_t len)
{
    const char *colon = memchr(name, ':', len);
    if (colon != NULL)
        len = (size_t)(colon - name);
    for (size_t i = 0; i < N_BACKENDS; ++i)
        if (strlen(backends[i].info.name) == len && memcmp(backends[i].info.name, name, len) == 0)
            return &backends[i];
    return NULL;
}

const lm_backend_info *lm_backend_find(const char *name, size_t len)
{
    const backend_entry *e = find(name, len);
    return e ? &e->info : NULL;
}

bool lm_backend_kernels_of(lm_backend_kernels *out, const char *name)
{
    const backend_entry *e = name ? find(name, strlen(name)) : NULL;
    *out = (lm_backend_kernels){.older = false};
    if (e == NULL || e->info.kernels == NULL)
        return false;
    e->info.kernels(out);
    return true;
}

unsigned lm_backend_flags(const char *name)
{
    const backend_entry *e = name ? find(name, strlen(name)) : NULL;
    return e ? e->info.flags : 0;
}

bool lm_backend_known(const char *name, size_t len)
{
    const backend_entry *e = memchr(name, ':', len) ? NULL : find(name, len);
    return e != NULL && !(e->info.flags & LM_BE_SEEDED);
}

/* The user-choosable names in words, "a, b or c", built once. */
static char expected[256];
static pthread_once_t expected_once = PTHREAD_ONCE_INIT;

static void build_expected(void)
{
    size_t n_user = 0;
    for (size_t i = 0; i < N_BACKENDS; ++i)
        n_user += !(backends[i].info.flags & LM_BE_SEEDED);
    for (size_t i = 0, seen = 0; i < N_BACKENDS; ++i)
        if (!(backends[i].info.flags & LM_BE_SEEDED))
            lm_words_append(expected, sizeof expected, seen++, n_user, backends[i].info.name,
                            " or ");
}

const char *lm_backend_expected(void)
{
    pthread_once(&expected_once, build_expected);
    return expected;
}

void lm_backend_seeded_name(char *buf, size_t n, const char *backend, uint64_t seed)
{
    snprintf(buf, n, "%s:seed=%llu", backend, (unsigned long long)seed);
}

void lm_sr_backend_name(char *buf, size_t n, uint64_t seed)
{
    lm_backend_seeded_name(buf, n, "naive-sr", seed);
}

int lm_backend_create(lm_backend **out, const char *name, int n_threads, lm_err *err)
{
    *out = NULL;
    if (name == NULL)
        name = "blas";
    if (n_threads < 0 || n_threads > (int)LM_MAX_THREADS)
        return LM_FAIL(err, LM_E_INPUT, "threads %d: must be in 0..%u", n_threads,
                       LM_MAX_THREADS);
    const size_t len = strlen(name);
    const backend_entry *e = find(name, len);
    /* NAME:... is a seeded name: only a LM_BE_SEEDED backend takes one */
    if (e != NULL && (memchr(name, ':', len) == NULL || (e->info.flags & LM_BE_SEEDED))) {
        int rc = e->create(out, name, n_threads, err);
        if (rc == LM_OK)
            (*out)->flags = e->info.flags;
        return rc;
    }
    return LM_FAIL(err, LM_E_INPUT, "backend '%s': unknown (expected %s)", name,
                   lm_backend_expected());
}

int lm_backend_probe(const char *name, lm_err *err)
{
    lm_backend *be = NULL;
    const int rc = lm_backend_create(&be, name, 1, err);
    lm_backend_destroy(be);
    return rc;
}

void lm_backend_destroy(lm_backend *be)
{
    if (be == NULL)
        return;
    free(be->wtile);
    be->vt->destroy(be);
}
