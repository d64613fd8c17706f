/* det_kernels.c — the det backend's GEMM/GEMV kernels for AVX-512, AVX2 + FMA and plain C.
 * The summation orders are stated in det_kernels.h; every path below implements them exactly,
 * whatever its tile shape: tiles only decide which outputs are computed side by side.
 *
 * gemm_nt tiles: AVX2 4 rows of A x 3 rows of B (12 accumulators of 8 lanes), 1 x 6 for one
 * row of A (decode); AVX-512 4 x 8 (16 registers of two outputs); smaller tiles at the edges.
 * Every tile runs the same per-element order, so decode and prefill agree. Rows of A are
 * visited in blocks of DET_MB so that the block stays in L2 while B's rows stream through.
 * gemm_nn: one row of C at a time, 16 (AVX-512) or 8 (AVX2) columns per register, the 8
 * lanes as 8 accumulator registers, masked at the column edge. */
#include "det_kernels.h"

#include <math.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#define DET_X86 1
#include <immintrin.h>
#else
#define DET_X86 0
#endif

#define DET_MB 64u /* rows of A per cache block in gemm_nt */

const char *lm_det_isa_name(lm_det_isa isa)
{
    switch (isa) {
    case LM_DET_AVX512: return "avx512";
    case LM_DET_AVX2: return "avx2";
    default: return "scalar";
    }
}

int lm_det_isa_parse(const char *name)
{
    for (int i = LM_DET_SCALAR; i <= LM_DET_AVX512; ++i)
        if (strcmp(name, lm_det_isa_name((lm_det_isa)i)) == 0)
            return i;
    return -1;
}

lm_det_isa lm_det_isa_best(void)
{
#if DET_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
        return LM_DET_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return LM_DET_AVX2;
#endif
    return LM_DET_SCALAR;
}

/* ---- scalar: the orders written out, one element at a time ---- */

static float reduce8_scalar(const float acc[8])
{
    float v4[4], v2[2];
    for (int p = 0; p < 4; ++p)
        v4[p] = acc[p] + acc[p + 4];
    for (int p = 0; p < 2; ++p)
        v2[p] = v4[p] + v4[p + 2];
    return v2[0] + v2[1];
}

static void nt_scalar(uint32_t m, uint32_t n, uint32_t k, float alpha, const float *a, size_t lda,
                      const float *b, size_t ldb, float *c, size_t ldc)
{
    for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < n; ++j) {
            const float *ai = a + (size_t)i * lda, *bj = b + (size_t)j * ldb;
            float acc[8] = {0};
            for (uint32_t l0 = 0; l0 < k; l0 += 8)
                for (uint32_t p = 0; p < 8; ++p) {
                    const uint32_t l = l0 + p;
                    acc[p] = l < k ? fmaf(ai[l], bj[l], acc[p]) : fmaf(0.0f, 0.0f, acc[p]);
                }
            c[(size_t)i * ldc + j] = alpha * reduce8_scalar(acc);
        }
}

/* gemm_nn in the same order: B's column j read with stride ldb. */
static void nn_scalar(uint32_t m, uint32_t n, uint32_t k, const float *a, size_t lda,
                      const float *b, size_t ldb, float *c, size_t ldc)
{
    for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < n; ++j) {
            const float *ai = a + (size_t)i * lda;
            float acc[8] = {0};
            for (uint32_t l0 = 0; l0 < k; l0 += 8)
                for (uint32_t p = 0; p < 8; ++p) {
                    const uint32_t l = l0 + p;
                    acc[p] = l < k ? fmaf(ai[l], b[(size_t)l * ldb + j], acc[p])
                                   : fmaf(0.0f, 0.0f, acc[p]);
                }
            c[(size_t)i * ldc + j] = reduce8_scalar(acc);
        }
}

#if DET_X86

#define T2 __attribute__((target("avx2,fma")))
#define T5 __attribute__((target("avx512f,avx2,fma")))
#define INL static inline __attribute__((always_inline))

/* v8 -> the lane tree's last three steps (p + 4, p + 2, p + 1). */
T2 INL float reduce8_avx2(__m256 v8)
{
    const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
    const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
    return _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1)));
}

/* ---- AVX2: the 8 lanes in one register ---- */

/* x[0..8) of which the first `live` exist (others read as +0). */
T2 INL __m256 load8_avx2(const float *x, uint32_t live)
{
    static const int32_t ramp[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)live),
                                          _mm256_loadu_si256((const __m256i *)ramp));
    return _mm256_maskload_ps(x, mk);
}

/* MR rows of A x NR rows of B: MR * NR accumulators of 8 lanes. */
T2 INL void nt_tile_avx2(const int MR, const int NR, uint32_t k, float alpha, const float *a,
                         size_t lda, const float *b, size_t ldb, float *c, size_t ldc)
{
    __m256 acc[4][6];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 6
        for (int q = 0; q < NR; ++q)
            acc[r][q] = _mm256_setzero_ps();
    uint32_t l = 0;
    /* B's NR vectors stay in registers, A's rows come one at a time: 16 registers at 4 x 3 */
    for (; l + 8 <= k; l += 8) {
        __m256 bv[6];
#pragma GCC unroll 6
        for (int q = 0; q < NR; ++q)
            bv[q] = _mm256_loadu_ps(b + (size_t)q * ldb + l);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
            const __m256 av = _mm256_loadu_ps(a + (size_t)r * lda + l);
#pragma GCC unroll 6
            for (int q = 0; q < NR; ++q)
                acc[r][q] = _mm256_fmadd_ps(av, bv[q], acc[r][q]);
        }
    }
    if (l < k) { /* the last block: lanes past k read as +0 (fma(0, 0, acc) as every path) */
        __m256 bv[6];
#pragma GCC unroll 6
        for (int q = 0; q < NR; ++q)
            bv[q] = load8_avx2(b + (size_t)q * ldb + l, k - l);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
            const __m256 av = load8_avx2(a + (size_t)r * lda + l, k - l);
#pragma GCC unroll 6
            for (int q = 0; q < NR; ++q)
                acc[r][q] = _mm256_fmadd_ps(av, bv[q], acc[r][q]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 6
        for (int q = 0; q < NR; ++q)
            c[(size_t)r * ldc + q] = alpha * reduce8_avx2(acc[r][q]);
}

/* One row of A (decode): 1 x 6 tiles; several rows: 4 x 3 tiles, 1 x 3 for the last rows. */
T2 static void nt_avx2(uint32_t m, uint32_t n, uint32_t k, float alpha, const float *a,
                       size_t lda, const float *b, size_t ldb, float *c, size_t ldc)
{
    if (m == 1) {
        uint32_t j = 0;
        for (; j + 6 <= n; j += 6)
            nt_tile_avx2(1, 6, k, alpha, a, lda, b + (size_t)j * ldb, ldb, c + j, ldc);
        for (; j < n; ++j)
            nt_tile_avx2(1, 1, k, alpha, a, lda, b + (size_t)j * ldb, ldb, c + j, ldc);
        return;
    }
    for (uint32_t i0 = 0; i0 < m; i0 += DET_MB) {
        const uint32_t i1 = m - i0 < DET_MB ? m : i0 + DET_MB;
        uint32_t j = 0;
        for (; j + 3 <= n; j += 3) {
            const float *bj = b + (size_t)j * ldb;
            uint32_t i = i0;
            for (; i + 4 <= i1; i += 4)
                nt_tile_avx2(4, 3, k, alpha, a + (size_t)i * lda, lda, bj, ldb,
                             c + (size_t)i * ldc + j, ldc);
            for (; i < i1; ++i)
                nt_tile_avx2(1, 3, k, alpha, a + (size_t)i * lda, lda, bj, ldb,
                             c + (size_t)i * ldc + j, ldc);
        }
        for (; j < n; ++j) {
            uint32_t i = i0;
            for (; i + 4 <= i1; i += 4)
                nt_tile_avx2(4, 1, k, alpha, a + (size_t)i * lda, lda, b + (size_t)j * ldb, ldb,
                             c + (size_t)i * ldc + j, ldc);
            for (; i < i1; ++i)
                nt_tile_avx2(1, 1, k, alpha, a + (size_t)i * lda, lda, b + (size_t)j * ldb, ldb,
                             c + (size_t)i * ldc + j, ldc);
        }
    }
}

/* One row of C, up to 8 columns (cols live), in the lane order: lane p of column j is an
 * accumulator register acc[p] (one column per vector lane); lanes past k add fma(0, 0, .). */
T2 INL void nn_row_avx2(uint32_t cols, uint32_t k, const float *a, const float *b, size_t ldb,
                        float *c)
{
    static const int32_t ramp[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)cols),
                                          _mm256_loadu_si256((const __m256i *)ramp));
    const __m256 zero = _mm256_setzero_ps();
    __m256 acc[8];
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p)
        acc[p] = zero;
    for (uint32_t l0 = 0; l0 < k; l0 += 8) {
#pragma GCC unroll 8
        for (uint32_t p = 0; p < 8; ++p) {
            if (l0 + p < k) {
                const float *bl = b + (size_t)(l0 + p) * ldb;
                const __m256 bv = cols >= 8 ? _mm256_loadu_ps(bl) : _mm256_maskload_ps(bl, mk);
                acc[p] = _mm256_fmadd_ps(_mm256_set1_ps(a[l0 + p]), bv, acc[p]);
            } else {
                acc[p] = _mm256_fmadd_ps(zero, zero, acc[p]);
            }
        }
    }
    __m256 v4[4], v2[2];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p)
        v4[p] = _mm256_add_ps(acc[p], acc[p + 4]);
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p)
        v2[p] = _mm256_add_ps(v4[p], v4[p + 2]);
    const __m256 r = _mm256_add_ps(v2[0], v2[1]);
    if (cols >= 8)
        _mm256_storeu_ps(c, r);
    else
        _mm256_maskstore_ps(c, mk, r);
}

T2 static void nn_avx2(uint32_t m, uint32_t n, uint32_t k, const float *a, size_t lda,
                       const float *b, size_t ldb, float *c, size_t ldc)
{
    for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < n; j += 8)
            nn_row_avx2(n - j < 8 ? n - j : 8, k, a + (size_t)i * lda, b + j, ldb,
                        c + (size_t)i * ldc + j);
}

/* ---- AVX-512: two outputs per register, 8 lanes each (lanes 0-7: column j, 8-15: j+1) ---- */

/* [x[0..8) | x[0..8)] of which the first `live` of each half exist (others +0). */
T5 INL __m512 bcast8_avx512(const float *x, uint32_t live)
{
    const __mmask16 mk = (__mmask16)(live >= 8 ? 0xffu : (1u << live) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(mk, x);
    return _mm512_shuffle_f32x4(v, v, 0x44); /* 128-bit chunks 0, 1, 0, 1 */
}

/* [x[0..8) | y[0..8)] of which the first `live` of each half exist (others +0). */
T5 INL __m512 pair8_avx512(const float *x, const float *y, uint32_t live)
{
    const __mmask16 mk = (__mmask16)(live >= 8 ? 0xffu : (1u << live) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(mk, x);
    /* lanes 8..15 from y[0..8): a masked load based 8 floats before y (masked lanes are never
     * read, so the address below y is not accessed) */
    return _mm512_mask_loadu_ps(v, (__mmask16)(mk << 8), (const float *)((uintptr_t)y - 32));
}

/* Lane 0 = the tree of lanes 0-7, lane 8 = the tree of lanes 8-15. */
T5 INL __m512 reduce8x2_avx512(__m512 v)
{
    const __m512 v4 = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));  /* p + (p + 4) */
    const __m512 v2 = _mm512_add_ps(v4, _mm512_permute_ps(v4, 0x4e));       /* p + (p + 2) */
    return _mm512_add_ps(v2, _mm512_permute_ps(v2, 0xb1));                  /* p + (p + 1) */
}

/* MR rows of A x 2 * NP rows of B: MR * NP registers, each two outputs of 8 lanes. */
T5 INL void nt_tile_avx512(const int MR, const int NP, uint32_t k, float alpha, const float *a,
                           size_t lda, const float *b, size_t ldb, float *c, size_t ldc)
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int q = 0; q < NP; ++q)
            acc[r][q] = _mm512_setzero_ps();
    for (uint32_t l = 0; l < k; l += 8) {
        const uint32_t live = k - l;
        __m512 av[4];
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r)
            av[r] = bcast8_avx512(a + (size_t)r * lda + l, live);
#pragma GCC unroll 4
        for (int q = 0; q < NP; ++q) {
            const __m512 bv = pair8_avx512(b + (size_t)(2 * q) * ldb + l,
                                           b + (size_t)(2 * q + 1) * ldb + l, live);
#pragma GCC unroll 4
            for (int r = 0; r < MR; ++r)
                acc[r][q] = _mm512_fmadd_ps(av[r], bv, acc[r][q]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int q = 0; q < NP; ++q) {
            float t[16];
            _mm512_storeu_ps(t, reduce8x2_avx512(acc[r][q]));
            c[(size_t)r * ldc + 2 * q] = alpha * t[0];
            c[(size_t)r * ldc + 2 * q + 1] = alpha * t[8];
        }
}

/* 4 x 8 tiles (one row of A: 1 x 8), 1 x 8 for the last rows; an odd last column goes
 * through the scalar path, which gives the same bits. */
T5 static void nt_avx512(uint32_t m, uint32_t n, uint32_t k, float alpha, const float *a,
                         size_t lda, const float *b, size_t ldb, float *c, size_t ldc)
{
    for (uint32_t i0 = 0; i0 < m; i0 += DET_MB) {
        const uint32_t i1 = m - i0 < DET_MB ? m : i0 + DET_MB;
        uint32_t j = 0;
        for (; j + 8 <= n; j += 8) {
            const float *bj = b + (size_t)j * ldb;
            uint32_t i = i0;
            for (; i + 4 <= i1; i += 4)
                nt_tile_avx512(4, 4, k, alpha, a + (size_t)i * lda, lda, bj, ldb,
                               c + (size_t)i * ldc + j, ldc);
            for (; i < i1; ++i)
                nt_tile_avx512(1, 4, k, alpha, a + (size_t)i * lda, lda, bj, ldb,
                               c + (size_t)i * ldc + j, ldc);
        }
        for (; j + 2 <= n; j += 2)
            for (uint32_t i = i0; i < i1; ++i)
                nt_tile_avx512(1, 1, k, alpha, a + (size_t)i * lda, lda, b + (size_t)j * ldb, ldb,
                               c + (size_t)i * ldc + j, ldc);
        if (j < n)
            nt_scalar(i1 - i0, 1, k, alpha, a + (size_t)i0 * lda, lda, b + (size_t)j * ldb, ldb,
                      c + (size_t)i0 * ldc + j, ldc);
    }
}

/* One row of C, up to 16 columns (cols live), in the lane order (as nn_row_avx2, 16
 * columns per register). */
T5 INL void nn_row_avx512(uint32_t cols, uint32_t k, const float *a, const float *b, size_t ldb,
                          float *c)
{
    const __mmask16 mk = (__mmask16)(cols >= 16 ? 0xffffu : (1u << cols) - 1u);
    const __m512 zero = _mm512_setzero_ps();
    __m512 acc[8];
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p)
        acc[p] = zero;
    for (uint32_t l0 = 0; l0 < k; l0 += 8) {
#pragma GCC unroll 8
        for (uint32_t p = 0; p < 8; ++p) {
            if (l0 + p < k) {
                const __m512 bv = _mm512_maskz_loadu_ps(mk, b + (size_t)(l0 + p) * ldb);
                acc[p] = _mm512_fmadd_ps(_mm512_set1_ps(a[l0 + p]), bv, acc[p]);
            } else {
                acc[p] = _mm512_fmadd_ps(zero, zero, acc[p]);
            }
        }
    }
    __m512 v4[4], v2[2];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p)
        v4[p] = _mm512_add_ps(acc[p], acc[p + 4]);
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p)
        v2[p] = _mm512_add_ps(v4[p], v4[p + 2]);
    _mm512_mask_storeu_ps(c, mk, _mm512_add_ps(v2[0], v2[1]));
}

T5 static void nn_avx512(uint32_t m, uint32_t n, uint32_t k, const float *a, size_t lda,
                         const float *b, size_t ldb, float *c, size_t ldc)
{
    for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < n; j += 16)
            nn_row_avx512(n - j < 16 ? n - j : 16, k, a + (size_t)i * lda, b + j, ldb,
                          c + (size_t)i * ldc + j);
}

#endif /* DET_X86 */

void lm_det_gemm_nt(lm_det_isa isa, uint32_t m, uint32_t n, uint32_t k, float alpha,
                    const float *a /* [m][lda] */, size_t lda, const float *b /* [n][ldb] */,
                    size_t ldb, float *c /* [m][ldc] */, size_t ldc)
{
#if DET_X86
    if (isa == LM_DET_AVX512) {
        nt_avx512(m, n, k, alpha, a, lda, b, ldb, c, ldc);
        return;
    }
    if (isa == LM_DET_AVX2) {
        nt_avx2(m, n, k, alpha, a, lda, b, ldb, c, ldc);
        return;
    }
#endif
    (void)isa;
    nt_scalar(m, n, k, alpha, a, lda, b, ldb, c, ldc);
}

void lm_det_gemm_nn(lm_det_isa isa, uint32_t m, uint32_t n, uint32_t k,
                    const float *a /* [m][lda] */, size_t lda, const float *b /* [k][ldb] */,
                    size_t ldb, float *c /* [m][ldc] */, size_t ldc)
{
#if DET_X86
    if (isa == LM_DET_AVX512) {
        nn_avx512(m, n, k, a, lda, b, ldb, c, ldc);
        return;
    }
    if (isa == LM_DET_AVX2) {
        nn_avx2(m, n, k, a, lda, b, ldb, c, ldc);
        return;
    }
#endif
    (void)isa;
    nn_scalar(m, n, k, a, lda, b, ldb, c, ldc);
}
