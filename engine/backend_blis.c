/* backend_blis.c — BLIS backend: bli_sgemm for chunks (m > 1), bli_sgemv for one row, BLIS
 * loaded at run time.
 *
 * OpenBLAS and BLIS both export the BLAS and CBLAS names (sgemm_, cblas_sgemm), so one binary
 * cannot link both: libblis.so.4 is opened with dlopen(RTLD_NOW | RTLD_LOCAL) on first use,
 * and only BLIS's own typed API (bli_*, which OpenBLAS does not define) is resolved with dlsym,
 * so no call of ours or of BLIS's reaches the other library. Where it is absent the binary
 * still starts; creating this backend fails with LM_E_UNSUPPORTED "BLIS not installed"
 * (LM_BE_LOADED: tests and cases skip it visibly). The handle stays open for the process.
 *
 * The ABI used, from BLIS 0.9's blis.h: dim_t and inc_t are gint_t, 64 bits on LP64 (long);
 * trans_t and conj_t are enums whose "no transpose" / "no conjugate" value is 0; arch_t an
 * enum. A product runs through general strides, so the row-major operands need no transpose
 * flag: C = A . B^T reads B [n][ldb] as the k x n matrix with row stride 1, column stride ldb.
 *
 * Order and threading: whatever BLIS's sub-configuration for this CPU does (bli_arch_string:
 * "haswell", "skx", "zen3"...): packed, blocked microkernels with FMA, and for small shapes its
 * unpacked "sup" kernels, which sum in another order; threads split m and n, never k. BLIS
 * does not thread sgemv. Not chunk-invariant, nor thread-invariant on small shapes (the
 * figures are at its registry row in backend.c): like blas, a backend whose bits depend on
 * the chunk schedule, which kvdrift measures.
 *
 * The thread count is BLIS-global (bli_thread_set_num_threads), set before every call as
 * blas does. */
#include "backend.h"
#include "kernel_isa.h"
#include "kvd_engine.h"
#include "kvd_util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLIS_SONAME "libblis.so.4"

typedef long bl_int; /* dim_t, inc_t */
typedef void (*bl_sgemm_fn)(int transa, int transb, bl_int m, bl_int n, bl_int k,
                            const float *alpha, const float *a, bl_int rs_a, bl_int cs_a,
                            const float *b, bl_int rs_b, bl_int cs_b, const float *beta, float *c,
                            bl_int rs_c, bl_int cs_c);
typedef void (*bl_sgemv_fn)(int transa, int conjx, bl_int m, bl_int n, const float *alpha,
                            const float *a, bl_int rs_a, bl_int cs_a, const float *x, bl_int incx,
                            const float *beta, float *y, bl_int incy);
typedef void (*bl_set_threads_fn)(bl_int n);
typedef int (*bl_arch_id_fn)(void);
typedef const char *(*bl_arch_string_fn)(int id);
typedef const char *(*bl_version_fn)(void);

/* The library, loaded once (pthread_once); ok false with why[] when it could not be. */
static struct {
    bool ok;
    char why[256];
    bl_sgemm_fn sgemm;
    bl_sgemv_fn sgemv;
    bl_set_threads_fn set_threads;
    char config[32], version[32];
} blis;
static pthread_once_t blis_once = PTHREAD_ONCE_INIT;

/* dlsym into a function pointer (ISO C has no object-to-function pointer cast: copy the
 * bytes, as POSIX guarantees they represent the function). */
static bool sym(void *h, const char *name, void *fn, size_t size)
{
    void *p = dlsym(h, name);
    if (p == NULL) {
        snprintf(blis.why, sizeof blis.why, "%s has no %s", BLIS_SONAME, name);
        return false;
    }
    memcpy(fn, &p, size);
    return true;
}

static void blis_load(void)
{
    void *h = dlopen(BLIS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(blis.why, sizeof blis.why, "%.200s", e ? e : BLIS_SONAME);
        return;
    }
    bl_arch_id_fn arch_id;
    bl_arch_string_fn arch_string;
    bl_version_fn version;
    if (!sym(h, "bli_sgemm", &blis.sgemm, sizeof blis.sgemm) ||
        !sym(h, "bli_sgemv", &blis.sgemv, sizeof blis.sgemv) ||
        !sym(h, "bli_thread_set_num_threads", &blis.set_threads, sizeof blis.set_threads) ||
        !sym(h, "bli_arch_query_id", &arch_id, sizeof arch_id) ||
        !sym(h, "bli_arch_string", &arch_string, sizeof arch_string) ||
        !sym(h, "bli_info_get_version_str", &version, sizeof version)) {
        dlclose(h);
        return;
    }
    lm_field_copy(blis.config, sizeof blis.config, arch_string(arch_id()));
    lm_field_copy(blis.version, sizeof blis.version, version());
    blis.ok = true;
}

static bool blis_loaded(void)
{
    pthread_once(&blis_once, blis_load);
    return blis.ok;
}

/* An empty sum is +0 (BLIS's sgemv with n = 0 would scale y by beta = 0 too, but m = 0 and
 * k = 0 are handled here once, as blas does). */
static void zero_rows(float *c, uint32_t m, uint32_t n, size_t ldc)
{
    for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < n; ++j)
            c[(size_t)i * ldc + j] = 0.0f;
}

static void blis_gemm_nt(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                         const float *a /* [m][lda] */, size_t lda,
                         const float *b /* [n][ldb] */, size_t ldb,
                         float *c /* [m][ldc] */, size_t ldc)
{
    if (m == 0 || n == 0)
        return;
    if (k == 0) {
        zero_rows(c, m, n, ldc);
        return;
    }
    const float zero = 0.0f;
    blis.set_threads(be->n_threads);
    if (m == 1) /* y[n] = alpha * B[n][k] . a[k] */
        blis.sgemv(0, 0, n, k, &alpha, b, (bl_int)ldb, 1, a, 1, &zero, c, 1);
    else /* B^T: k x n with row stride 1, column stride ldb */
        blis.sgemm(0, 0, m, n, k, &alpha, a, (bl_int)lda, 1, b, 1, (bl_int)ldb, &zero, c,
                   (bl_int)ldc, 1);
}

static void blis_gemm_nn(lm_backend *be, uint32_t m, uint32_t n, uint32_t k,
                         const float *a /* [m][lda] */, size_t lda,
                         const float *b /* [k][ldb] */, size_t ldb,
                         float *c /* [m][ldc] */, size_t ldc)
{
    if (m == 0 || n == 0)
        return;
    if (k == 0) {
        zero_rows(c, m, n, ldc);
        return;
    }
    const float one = 1.0f, zero = 0.0f;
    blis.set_threads(be->n_threads);
    if (m == 1) /* y[n] = B^T . a: B^T is n x k with row stride 1, column stride ldb */
        blis.sgemv(0, 0, n, k, &one, b, 1, (bl_int)ldb, a, 1, &zero, c, 1);
    else
        blis.sgemm(0, 0, m, n, k, &one, a, (bl_int)lda, 1, b, (bl_int)ldb, 1, &zero, c,
                   (bl_int)ldc, 1);
}

static void blis_destroy(lm_backend *be)
{
    free(be);
}

static const lm_backend_i blis_vt = {
    .name = "blis",
    .gemm_nt = blis_gemm_nt,
    .gemm_nn = blis_gemm_nn,
    .destroy = blis_destroy,
};

/* The sub-configuration BLIS picked for this CPU, the level its kernels need against the
 * CPU's, and when they are older the warning (kernel_isa.h); name "" without BLIS. */
void lm_backend_blis_kernels(lm_backend_kernels *out);
void lm_backend_blis_kernels(lm_backend_kernels *out)
{
    *out = (lm_backend_kernels){.older = false};
    if (!blis_loaded())
        return;
    lm_field_copy(out->name, sizeof out->name, blis.config);
    const lm_isa_level k = lm_blis_config_level(blis.config), cpu = lm_cpu_isa_level();
    snprintf(out->isa, sizeof out->isa, "%s", lm_isa_level_name(k));
    snprintf(out->cpu_isa, sizeof out->cpu_isa, "%s", lm_isa_level_name(cpu));
    out->older = lm_blis_warning(out->warning, sizeof out->warning, blis.config, cpu);
}

/* What picks the bits here: BLIS's version and the sub-configuration it picked at run time
 * (its kernels and block sizes). Without BLIS both forms are "": nothing of it can run. */
void lm_backend_blis_describe(char *buf, size_t n, bool brief);
void lm_backend_blis_describe(char *buf, size_t n, bool brief)
{
    if (!blis_loaded()) {
        snprintf(buf, n, "%s", "");
        return;
    }
    char mark[48];
    lm_kernels_mark(mark, sizeof mark, lm_blis_config_level(blis.config), lm_cpu_isa_level());
    if (brief)
        snprintf(buf, n, "blis=%s%s", blis.config, mark);
    else
        snprintf(buf, n, "blis=%s; blis_config=%s", blis.version, blis.config);
}

int lm_backend_blis_create(lm_backend **out, const char *spec, int n_threads, lm_err *err);
int lm_backend_blis_create(lm_backend **out, const char *spec, int n_threads, lm_err *err)
{
    (void)spec;
    if (!blis_loaded())
        return LM_FAIL(err, LM_E_UNSUPPORTED,
                       "blis backend: BLIS not installed (%s; Debian: apt-get install "
                       "libblis4-pthread)", blis.why);
    lm_backend *be = calloc(1, sizeof *be);
    if (be == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "blis backend: out of memory");
    if (n_threads <= 0) { /* 0 = all online cores */
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)nc : 1;
    }
    be->vt = &blis_vt;
    be->n_threads = n_threads;
    *out = be;
    return LM_OK;
}
