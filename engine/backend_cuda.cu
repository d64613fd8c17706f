/* backend_cuda.cu — four GPU backends: cuBLAS FP32 ("cuda"), cuBLAS with TF32 tensor cores
 * ("cuda-tf32"), bfloat16 operands with float32 accumulation ("cuda-bf16") and a kernel of our
 * own whose reduction order depends only on K ("cuda-det").
 *
 * What runs where: the matrix products run on the device; everything elementwise (RMSNorm,
 * RoPE, softmax, SwiGLU, residuals) stays in the shared host C of forward.c, so all four share
 * the CPU backends' elementwise bits and differ from them only in the products. The price is one
 * host-to-device copy of each activation operand and one device-to-host copy of each result per
 * product (the weights are uploaded once per context by bind_weights, and converted to
 * bfloat16 once for cuda-bf16).
 *
 * Orders:
 *   cuda       cublasSgemm (cublasSgemv for one row), CUBLAS_PEDANTIC_MATH: float32 products and
 *              sums in cuBLAS's own blocked order, which depends on the shape: run-to-run
 *              deterministic (no split-K atomics with the default workspace) but not invariant to
 *              the number of rows, so a chunked prefill changes bits.
 *   cuda-tf32  cublasSgemm with CUBLAS_TF32_TENSOR_OP_MATH: inputs rounded to a 10-bit mantissa,
 *              float32 accumulation on tensor cores; one row still goes through sgemv (float32).
 *   cuda-bf16  operands rounded to bfloat16 (round to nearest even), cublasGemmEx with
 *              CUBLAS_COMPUTE_32F: float32 accumulation, float32 output, every row count alike.
 *   cuda-det   det_gemm below: each output element is one thread's sequential chain of fused
 *              multiply-adds, p = 0, 1, ..., k-1, then one multiplication by alpha. Tiles only
 *              decide which thread owns an element, never the order of its sum, so the bits of an
 *              element depend on (its row of A, its column of B, k) alone: invariant to the step
 *              size and to how rows are batched, decode through the same kernel as prefill.
 *
 * Errors: the gemm slots cannot return a status; the first CUDA or cuBLAS failure is kept and
 * reported by the check slot, which the forward pass calls after every chunk, and later products
 * are skipped (their outputs are set to NaN so that nothing computed after a failure looks
 * valid). */
extern "C" {
#include "backend.h"
}

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum cuda_mode { MODE_FP32, MODE_TF32, MODE_BF16, MODE_DET } cuda_mode;

/* A device buffer that grows to the largest request and is reused. */
typedef struct dev_buf {
    void *p;
    size_t cap; /* bytes */
} dev_buf;

typedef struct cuda_backend {
    lm_backend base; /* first: lm_backend* <-> cuda_backend* */
    cuda_mode mode;
    cublasHandle_t blas;
    cudaStream_t stream;
    /* The model's weight arena, uploaded once: a B operand inside [w_host, w_host + w_n) is read
     * from w_dev (or w_dev16 for cuda-bf16) at the same offset. */
    const float *w_host;
    size_t w_n;
    float *w_dev;          /* [w_n] */
    __nv_bfloat16 *w_dev16; /* [w_n], cuda-bf16 only */
    dev_buf a, b, c, a16, b16;
    char failed[256]; /* first failure, "" while none */
} cuda_backend;

static cuda_backend *cb_of(lm_backend *be) { return (cuda_backend *)be; }

/* Keeps the first failure; returns true when this call failed. */
static bool cuda_failed(cuda_backend *cb, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return false;
    if (cb->failed[0] == '\0')
        snprintf(cb->failed, sizeof cb->failed, "%s: %s: %s", cb->base.vt->name, what,
                 cudaGetErrorString(e));
    return true;
}

static bool blas_failed(cuda_backend *cb, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return false;
    if (cb->failed[0] == '\0')
        snprintf(cb->failed, sizeof cb->failed, "%s: %s: cuBLAS status %d", cb->base.vt->name,
                 what, (int)s);
    return true;
}

static void *dev_reserve(cuda_backend *cb, dev_buf *buf, size_t bytes)
{
    if (bytes <= buf->cap)
        return buf->p;
    if (buf->p != NULL)
        cudaFree(buf->p);
    buf->p = NULL;
    buf->cap = 0;
    if (cuda_failed(cb, cudaMalloc(&buf->p, bytes), "cudaMalloc"))
        return NULL;
    buf->cap = bytes;
    return buf->p;
}

static void fill_nan(float *c, uint32_t m, uint32_t n, size_t ldc)
{
    for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < n; ++j)
            c[(size_t)i * ldc + j] = NAN;
}

/* ---- the device's own kernels ---- */

/* float32 -> bfloat16, round to nearest even, n contiguous values. */
__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t step = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += step)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* det_gemm: C[m][n] = alpha * sum_p A[m][p] * op(B)[p][n], op(B)[p][j] = B[j][p] when b_trans
 * (B is [n][ldb], the x . W^T and Q . K^T case) and B[p][j] otherwise (B is [k][ldb], P . V).
 * Block: 16 x 16 threads own a 64 x 64 tile of C, each thread a 4 x 4 sub-tile; A and B are
 * staged through shared memory 16 values of p at a time. For every element the accumulator runs
 * p = 0 .. k-1 in order with __fmaf_rn, whatever the tile: the order contract of cuda-det. */
#define DET_TILE 64
#define DET_KB 16
__global__ void det_gemm_kernel(uint32_t m, uint32_t n, uint32_t k, float alpha,
                                const float *__restrict__ a, size_t lda,
                                const float *__restrict__ b, size_t ldb, int b_trans,
                                float *__restrict__ c, size_t ldc)
{
    __shared__ float as[DET_KB][DET_TILE + 1]; /* [p][row] */
    __shared__ float bs[DET_KB][DET_TILE + 1]; /* [p][col] */
    const uint32_t tx = threadIdx.x, ty = threadIdx.y; /* 16 x 16 */
    const uint32_t row0 = blockIdx.y * DET_TILE, col0 = blockIdx.x * DET_TILE;
    const uint32_t tid = ty * 16 + tx;
    float acc[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
            acc[i][j] = 0.0f;
    for (uint32_t p0 = 0; p0 < k; p0 += DET_KB) {
        /* 256 threads stage 64 x 16 values of each operand: 4 each; zeros past the edges only
         * ever meet rows or columns that are not written back, or p >= k which is skipped. */
        for (uint32_t l = tid; l < DET_TILE * DET_KB; l += 256) {
            uint32_t r = l / DET_KB, p = l % DET_KB;
            uint32_t gr = row0 + r, gp = p0 + p;
            as[p][r] = (gr < m && gp < k) ? a[(size_t)gr * lda + gp] : 0.0f;
            uint32_t gc = col0 + r;
            float bv = 0.0f;
            if (gc < n && gp < k)
                bv = b_trans ? b[(size_t)gc * ldb + gp] : b[(size_t)gp * ldb + gc];
            bs[p][r] = bv;
        }
        __syncthreads();
        uint32_t pn = k - p0 < DET_KB ? k - p0 : DET_KB;
        for (uint32_t p = 0; p < pn; ++p) {
            float av[4], bv[4];
            for (int i = 0; i < 4; ++i)
                av[i] = as[p][ty + 16 * i];
            for (int j = 0; j < 4; ++j)
                bv[j] = bs[p][tx + 16 * j];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j)
                    acc[i][j] = __fmaf_rn(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            uint32_t r = row0 + ty + 16 * i, col = col0 + tx + 16 * j;
            if (r < m && col < n)
                c[(size_t)r * ldc + col] = __fmul_rn(alpha, acc[i][j]);
        }
}

/* ---- operands ---- */

/* The bfloat16 copy (round to nearest even) of n device floats, in buf. */
static const void *to_bf16(cuda_backend *cb, dev_buf *buf, const float *d, size_t n)
{
    __nv_bfloat16 *d16 = (__nv_bfloat16 *)dev_reserve(cb, buf, n * sizeof(__nv_bfloat16));
    if (d16 == NULL)
        return NULL;
    const size_t blocks = (n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096;
    to_bf16_kernel<<<(unsigned)blocks, 256, 0, cb->stream>>>(d16, d, n);
    return cuda_failed(cb, cudaGetLastError(), "bf16 conversion") ? NULL : d16;
}

/* Device address of a B operand: the uploaded weight arena when b lies inside it, else a copy
 * of its rows x [cols] (row stride ldb, kept) in buf. */
static const void *b_operand(cuda_backend *cb, const float *b, size_t rows, size_t cols,
                             size_t ldb, bool want_bf16)
{
    if (cb->w_dev != NULL && b >= cb->w_host && b < cb->w_host + cb->w_n) {
        size_t off = (size_t)(b - cb->w_host);
        return want_bf16 ? (const void *)(cb->w_dev16 + off) : (const void *)(cb->w_dev + off);
    }
    size_t n = (rows - 1) * ldb + cols; /* the span the product reads */
    float *d = (float *)dev_reserve(cb, &cb->b, n * sizeof(float));
    if (d == NULL || cuda_failed(cb, cudaMemcpyAsync(d, b, n * sizeof(float),
                                                     cudaMemcpyHostToDevice, cb->stream),
                                 "copy B"))
        return NULL;
    return want_bf16 ? to_bf16(cb, &cb->b16, d, n) : d;
}

/* A operand: rows x [cols] with row stride lda, packed densely on the device ([rows][cols]). */
static const void *a_operand(cuda_backend *cb, const float *a, size_t rows, size_t cols,
                             size_t lda, bool want_bf16)
{
    float *d = (float *)dev_reserve(cb, &cb->a, rows * cols * sizeof(float));
    if (d == NULL || cuda_failed(cb, cudaMemcpy2DAsync(d, cols * sizeof(float), a,
                                                       lda * sizeof(float), cols * sizeof(float),
                                                       rows, cudaMemcpyHostToDevice, cb->stream),
                                 "copy A"))
        return NULL;
    return want_bf16 ? to_bf16(cb, &cb->a16, d, rows * cols) : d;
}

/* C[m][n] = alpha * A[m][k] . op(B), op(B) = B^T ([n][ldb]) when b_trans, else B ([k][ldb]).
 * Row-major X[r][c] with stride ld is column-major X^T with leading dimension ld, so cuBLAS
 * computes C^T = op'(B) . A^T, with A^T the packed A (leading dimension k). */
static void cuda_gemm(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                      const float *a, size_t lda, const float *b, size_t ldb, bool b_trans,
                      float *c, size_t ldc)
{
    cuda_backend *cb = cb_of(be);
    if (m == 0 || n == 0)
        return;
    if (k == 0) { /* an empty sum is +0 */
        for (uint32_t i = 0; i < m; ++i)
            memset(c + (size_t)i * ldc, 0, n * sizeof(float));
        return;
    }
    if (cb->failed[0] != '\0') {
        fill_nan(c, m, n, ldc);
        return;
    }
    const bool bf16 = cb->mode == MODE_BF16;
    const void *da = a_operand(cb, a, m, k, lda, bf16);
    const void *db = b_trans ? b_operand(cb, b, n, k, ldb, bf16) : b_operand(cb, b, k, n, ldb, bf16);
    float *dc = (float *)dev_reserve(cb, &cb->c, (size_t)m * n * sizeof(float));
    if (da == NULL || db == NULL || dc == NULL) {
        fill_nan(c, m, n, ldc);
        return;
    }
    const float zero = 0.0f;
    const cublasOperation_t opb = b_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    bool bad = false;
    switch (cb->mode) {
    case MODE_FP32:
    case MODE_TF32:
        if (m == 1) /* y[n] = op(B)^T-as-stored . a: one row through sgemv, as serving does */
            bad = blas_failed(cb, cublasSgemv(cb->blas, b_trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                                              b_trans ? (int)k : (int)n, b_trans ? (int)n : (int)k,
                                              &alpha, (const float *)db, (int)ldb,
                                              (const float *)da, 1, &zero, dc, 1),
                              "cublasSgemv");
        else
            bad = blas_failed(cb, cublasSgemm(cb->blas, opb, CUBLAS_OP_N, (int)n, (int)m, (int)k,
                                              &alpha, (const float *)db, (int)ldb,
                                              (const float *)da, (int)k, &zero, dc, (int)n),
                              "cublasSgemm");
        break;
    case MODE_BF16:
        bad = blas_failed(cb, cublasGemmEx(cb->blas, opb, CUBLAS_OP_N, (int)n, (int)m, (int)k,
                                           &alpha, db, CUDA_R_16BF, (int)ldb, da, CUDA_R_16BF,
                                           (int)k, &zero, dc, CUDA_R_32F, (int)n,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                          "cublasGemmEx(bf16)");
        break;
    case MODE_DET: {
        dim3 block(16, 16), grid((n + DET_TILE - 1) / DET_TILE, (m + DET_TILE - 1) / DET_TILE);
        det_gemm_kernel<<<grid, block, 0, cb->stream>>>(m, n, k, alpha, (const float *)da, k,
                                                        (const float *)db, ldb, b_trans ? 1 : 0,
                                                        dc, n);
        bad = cuda_failed(cb, cudaGetLastError(), "det_gemm launch");
        break;
    }
    }
    if (bad || cuda_failed(cb, cudaMemcpy2DAsync(c, ldc * sizeof(float), dc, n * sizeof(float),
                                                 n * sizeof(float), m, cudaMemcpyDeviceToHost,
                                                 cb->stream),
                           "copy C") ||
        cuda_failed(cb, cudaStreamSynchronize(cb->stream), "synchronize"))
        fill_nan(c, m, n, ldc);
}

static void cuda_gemm_nt(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                         const float *a /* [m][lda] */, size_t lda,
                         const float *b /* [n][ldb] */, size_t ldb,
                         float *c /* [m][ldc] */, size_t ldc)
{
    cuda_gemm(be, m, n, k, alpha, a, lda, b, ldb, true, c, ldc);
}

static void cuda_gemm_nn(lm_backend *be, uint32_t m, uint32_t n, uint32_t k,
                         const float *a /* [m][lda] */, size_t lda,
                         const float *b /* [k][ldb] */, size_t ldb,
                         float *c /* [m][ldc] */, size_t ldc)
{
    cuda_gemm(be, m, n, k, 1.0f, a, lda, b, ldb, false, c, ldc);
}

static int cuda_bind_weights(lm_backend *be, const float *w /* [n] */, size_t n, lm_err *err)
{
    cuda_backend *cb = cb_of(be);
    if (n == 0)
        return LM_OK;
    cudaError_t e = cudaMalloc((void **)&cb->w_dev, n * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMemcpy(cb->w_dev, w, n * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess && cb->mode == MODE_BF16) {
        e = cudaMalloc((void **)&cb->w_dev16, n * sizeof(__nv_bfloat16));
        if (e == cudaSuccess) {
            to_bf16_kernel<<<4096, 256, 0, cb->stream>>>(cb->w_dev16, cb->w_dev, n);
            e = cudaGetLastError();
        }
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(cb->stream);
    }
    if (e != cudaSuccess)
        return LM_FAIL(err, LM_E_NOMEM, "backend %s: uploading %zu weights (%.1f MiB): %s",
                       be->vt->name, n, (double)n * 4.0 / 1048576.0, cudaGetErrorString(e));
    cb->w_host = w;
    cb->w_n = n;
    return LM_OK;
}

static int cuda_check(lm_backend *be, lm_err *err)
{
    cuda_backend *cb = cb_of(be);
    if (cb->failed[0] == '\0')
        return LM_OK;
    return LM_FAIL(err, LM_E_IO, "%s", cb->failed);
}

/* What fixes these backends' bits on this machine: the device and its compute capability, the
 * driver and cuBLAS versions (each backend's math mode is in its name). Nothing when no device
 * is present, so that a machine without one keeps the fingerprint it had. */
static void cuda_describe(char *buf, size_t n, bool brief)
{
    int count = 0, dev = 0, driver = 0, blas_ver = 0;
    buf[0] = '\0';
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || cudaGetDevice(&dev) != cudaSuccess)
        return;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return;
    cudaDriverGetVersion(&driver);
    int major = 0, minor = 0, patch = 0;
    cublasGetProperty(MAJOR_VERSION, &major);
    cublasGetProperty(MINOR_VERSION, &minor);
    cublasGetProperty(PATCH_LEVEL, &patch);
    blas_ver = major * 10000 + minor * 100 + patch;
    if (brief)
        snprintf(buf, n, "sm_%d%d", prop.major, prop.minor);
    else
        snprintf(buf, n, "cuda_device=%s; cuda_cc=%d.%d; cuda_driver=%d; cublas=%d", prop.name,
                 prop.major, prop.minor, driver, blas_ver);
}

static void cuda_destroy(lm_backend *be)
{
    cuda_backend *cb = cb_of(be);
    dev_buf *bufs[] = {&cb->a, &cb->b, &cb->c, &cb->a16, &cb->b16};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
        if (bufs[i]->p != NULL)
            cudaFree(bufs[i]->p);
    if (cb->w_dev != NULL)
        cudaFree(cb->w_dev);
    if (cb->w_dev16 != NULL)
        cudaFree(cb->w_dev16);
    if (cb->blas != NULL)
        cublasDestroy(cb->blas);
    if (cb->stream != NULL)
        cudaStreamDestroy(cb->stream);
    free(cb);
}

#define CUDA_VT(vt_name, str)                                                                   \
    static const lm_backend_i vt_name = {                                                       \
        .name = str,                                                                            \
        .gemm_nt = cuda_gemm_nt,                                                                \
        .gemm_nn = cuda_gemm_nn,                                                                \
        .destroy = cuda_destroy,                                                                \
        .perturb = NULL,                                                                        \
        .bind_weights = cuda_bind_weights,                                                      \
        .check = cuda_check,                                                                    \
    }
CUDA_VT(vt_fp32, "cuda");
CUDA_VT(vt_tf32, "cuda-tf32");
CUDA_VT(vt_bf16, "cuda-bf16");
CUDA_VT(vt_det, "cuda-det");

static int cuda_create(lm_backend **out, cuda_mode mode, const lm_backend_i *vt, int n_threads,
                       lm_err *err)
{
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "backend '%s': no CUDA device (%s)", vt->name,
                       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (cb == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "backend '%s': out of memory", vt->name);
    cb->base.vt = vt;
    cb->base.n_threads = n_threads; /* host threads for the elementwise stages */
    cb->mode = mode;
    static const cublasMath_t math[] = {CUBLAS_PEDANTIC_MATH, CUBLAS_TF32_TENSOR_OP_MATH,
                                        CUBLAS_DEFAULT_MATH, CUBLAS_PEDANTIC_MATH};
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    e = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        s = cublasCreate(&cb->blas);
    if (e == cudaSuccess && s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetStream(cb->blas, cb->stream);
    if (e == cudaSuccess && s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetMathMode(cb->blas, math[mode]);
    if (e != cudaSuccess || s != CUBLAS_STATUS_SUCCESS) {
        cuda_destroy(&cb->base);
        return LM_FAIL(err, LM_E_UNSUPPORTED, "backend '%s': %s", vt->name,
                       e != cudaSuccess ? cudaGetErrorString(e) : "cuBLAS initialisation failed");
    }
    *out = &cb->base;
    return LM_OK;
}

extern "C" {
void lm_backend_cuda_describe(char *buf, size_t n, bool brief);
int lm_backend_cuda_create(lm_backend **out, const char *spec, int n_threads, lm_err *err);
}

void lm_backend_cuda_describe(char *buf, size_t n, bool brief)
{
    cuda_describe(buf, n, brief);
}

/* One constructor for the four registry rows: spec is the row's name. */
int lm_backend_cuda_create(lm_backend **out, const char *spec, int n_threads, lm_err *err)
{
    static const lm_backend_i *const vts[] = {&vt_fp32, &vt_tf32, &vt_bf16, &vt_det};
    for (int mode = MODE_FP32; mode <= MODE_DET; ++mode)
        if (strcmp(spec, vts[mode]->name) == 0)
            return cuda_create(out, (cuda_mode)mode, vts[mode], n_threads, err);
    *out = NULL;
    return LM_FAIL(err, LM_E_INTERNAL, "backend '%s': not a CUDA backend", spec);
}
