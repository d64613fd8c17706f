/* det_kernels.c — the det backend's GEMM/GEMV kernels for AVX-512, AVX2 + FMA and plain C.
 * The summation orders are stated in det_kernels.h; every path below implements them exactly,
 * whatever its tile shape, packing or blocking: these only decide which outputs are computed
 * side by side and where the operands are read from, never the fmas of an output's lanes.
 *
 * Many rows of A (m >= DET_PACK_MIN_M, prefill; gemm_nt and gemm_nn alike): B is copied in
 * blocks of about DET_PACK_FLOATS floats (L2) into panels, block by block of the reduction
 * ([block][row][8], +0 past k; gemm_nn's columns through 8 x 8 register transposes), and
 * tiles run each group of rows of A (L1) against every panel of the block (one call per group
 * and chunk), over the reduction in chunks of at most DET_KC elements, the lanes saved between
 * chunks. AVX2: panels of 3 rows, 4 x 3 tiles (12 accumulators of 8 lanes); a full tile
 * combines its lanes in two vector trees (eight outputs: columns 0-1, stored as pairs of each
 * row; four: column 2), the others four outputs per tree. AVX-512: panels of 8 rows (the last
 * one padded with +0 rows), 6 x 8 tiles (24 registers of two outputs: a pair of B's rows is one
 * 16-float load), each row's eight outputs combined in one tree of four registers.
 * Few rows (decode, small chunks), unpacked: for one row (AVX2, and AVX-512 machines too: it
 * reads B faster than their 1 x 8 tiles), B's rows in DET_STREAMS contiguous ranges read side
 * by side, one row of each range per 1 x DET_STREAMS tile, so that B streams from memory as
 * DET_STREAMS long sequential reads; 4 x 3 tiles otherwise; AVX-512 4 x 8 (16 registers of
 * two outputs) for 2 to DET_PACK_MIN_M - 1 rows; gemm_nn one row of C at a time, 16 (AVX-512)
 * or 8 (AVX2) columns per register, the 8 lanes as 8 accumulator registers, masked at the
 * column edge. Smaller tiles at every edge. */
#include "det_kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#define DET_X86 1
#include <immintrin.h>
#else
#define DET_X86 0
#endif

#define DET_MB 64u /* rows of A per cache block in gemm_nt */
#define DET_KC 768u /* reduction elements per chunk of the packed path (a multiple of 8) */
#define DET_PACK_FLOATS (48u * 1024u) /* floats of packed B per block (192 KiB: L2) */
#define DET_STREAMS 6u /* sequential streams over B's rows in a one-row product */
#define DET_NR 3u /* rows of B per packed panel: the packed tiles are 4 x DET_NR */
#define DET_SV_PANEL (4u * DET_NR * 8u) /* saved lanes per panel: 4 x DET_NR outputs x 8 */
_Static_assert(DET_NR == 3u, "nt_ptile_avx2's registers and nt_prow_avx2's tail are for 3 rows");
#define DET_NR5 8u /* rows of B per AVX-512 packed panel: 4 pairs, the last panel +0-padded */
#define DET_MR5 6u /* rows of A per AVX-512 packed tile: 6 x 4 registers of two outputs */
#define DET_SV_PANEL5 (DET_MR5 * DET_NR5 * 8u) /* saved lanes per AVX-512 panel */

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
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
        return LM_DET_AVX512; /* gemm_nt's one row and every many-row product run AVX2 code */
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

/* ---- packed B (prefill): values copied into the order the tiles read them ---- */

/* Packed operand: `rows` rows of a [rows][k] matrix in panels of pw rows (the last panel has
 * rows % pw rows when that is not 0, or pw rows of which the missing ones are +0 when `pad`).
 * A panel of nr rows stores, for each 8-element block of the reduction in order, its rows'
 * 8 floats one after the other: [ceil(k / 8)][nr][8]; elements past k are +0. Packing copies
 * values and computes nothing, so a tile that reads a packed panel runs exactly the order it
 * runs on the unpacked rows. */
static size_t packed_panel_floats(uint32_t nr, uint32_t k)
{
    return (size_t)((k + 7u) / 8u) * nr * 8u;
}

/* Rows of gemm_nt's B: b[j][l] at b + j * ldb + l. */
static void pack_rows(uint32_t rows, uint32_t k, const float *b, size_t ldb, uint32_t pw, bool pad,
                      float *bp)
{
    const uint32_t kf = k & ~7u; /* elements in whole blocks */
    for (uint32_t j0 = 0; j0 < rows; j0 += pw) {
        const uint32_t live = rows - j0 < pw ? rows - j0 : pw, nr = pad ? pw : live;
        if (live < nr)
            memset(bp, 0, packed_panel_floats(nr, k) * sizeof *bp);
        for (uint32_t q = 0; q < live; ++q) {
            const float *src = b + (size_t)(j0 + q) * ldb;
            float *dst = bp + (size_t)q * 8u;
            uint32_t l = 0;
            for (; l < kf; l += 8u, dst += (size_t)nr * 8u)
                memcpy(dst, src + l, 8 * sizeof *dst);
            if (l < k) {
                memcpy(dst, src + l, (k - l) * sizeof *dst);
                memset(dst + (k - l), 0, (8u - (k - l)) * sizeof *dst);
            }
        }
        bp += packed_panel_floats(nr, k);
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

/* The lane tree of four outputs at once: [tree(x0), tree(x1), tree(x2), tree(x3)], each the
 * same three steps as reduce8_avx2 with the same operands in the same order
 * (p + (p + 4), then p + (p + 2), then 0 + 1). */
T2 INL __m128 reduce8x4_avx2(__m256 x0, __m256 x1, __m256 x2, __m256 x3)
{
    const __m256 u = _mm256_add_ps(_mm256_permute2f128_ps(x0, x1, 0x20),
                                   _mm256_permute2f128_ps(x0, x1, 0x31)); /* v4(x0) | v4(x1) */
    const __m256 w = _mm256_add_ps(_mm256_permute2f128_ps(x2, x3, 0x20),
                                   _mm256_permute2f128_ps(x2, x3, 0x31)); /* v4(x2) | v4(x3) */
    /* [v2(x0), v2(x2) | v2(x1), v2(x3)]: v4[p] + v4[p + 2] */
    const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(u, w, 0x44), _mm256_shuffle_ps(u, w, 0xee));
    /* [x0, x2, x0, x2 | x1, x3, x1, x3]: v2[0] + v2[1] */
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(s, s, 0x88), _mm256_shuffle_ps(s, s, 0xdd));
    return _mm_unpacklo_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
}

/* The lane tree of eight outputs at once: [tree(x0), ..., tree(x7)], the same three steps
 * with the same operands in the same order as reduce8_avx2: p + (p + 4) for x0 | x4, x1 | x5,
 * x2 | x6, x3 | x7 (128-bit halves), then p + (p + 2), then 0 + 1. */
T2 INL __m256 reduce8x8_avx2(__m256 x0, __m256 x1, __m256 x2, __m256 x3, __m256 x4, __m256 x5,
                             __m256 x6, __m256 x7)
{
#define V4(a, b) _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31))
    const __m256 u0 = V4(x0, x4), u1 = V4(x1, x5), u2 = V4(x2, x6), u3 = V4(x3, x7);
#undef V4
    /* [v2(x0), v2(x1) | v2(x4), v2(x5)] and [v2(x2), v2(x3) | v2(x6), v2(x7)] */
    const __m256 s0 = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, 0x44), _mm256_shuffle_ps(u0, u1, 0xee));
    const __m256 s1 = _mm256_add_ps(_mm256_shuffle_ps(u2, u3, 0x44), _mm256_shuffle_ps(u2, u3, 0xee));
    return _mm256_add_ps(_mm256_shuffle_ps(s0, s1, 0x88), _mm256_shuffle_ps(s0, s1, 0xdd));
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

/* Columns of gemm_nn's B (its rows as the reduction) in panels of pw columns, the layout of
 * pack_rows (pad as there): element (j, l) is b[l][j] at b + l * ldb + j. Each 8 x 8 piece (8 rows of the
 * reduction, 8 columns) is read as 8 row vectors (masked at the column edge, +0 past k) and
 * transposed in registers; column j's vector goes to its panel's slot. */
T2 static void pack_cols(uint32_t cols, uint32_t k, const float *b, size_t ldb, uint32_t pw,
                         bool pad, float *bp)
{
    const uint32_t nb = (k + 7u) / 8u;
    const size_t pf = packed_panel_floats(pw, k);
    const uint32_t last_nr = pad || cols % pw == 0 ? pw : cols % pw, full = (cols - 1u) / pw;
    if (pad && cols % pw != 0)
        memset(bp + full * pf, 0, pf * sizeof *bp);
    for (uint32_t j0 = 0; j0 < cols; j0 += 8u) {
        const uint32_t live = cols - j0 < 8u ? cols - j0 : 8u;
        for (uint32_t blk = 0; blk < nb; ++blk) {
            __m256 r[8];
#pragma GCC unroll 8
            for (uint32_t p = 0; p < 8u; ++p) {
                const uint32_t l = blk * 8u + p;
                const float *src = b + (size_t)l * ldb + j0;
                r[p] = l >= k ? _mm256_setzero_ps()
                              : live == 8u ? _mm256_loadu_ps(src) : load8_avx2(src, live);
            }
            /* 8 x 8 transpose: t[c][p] = r[p][c] */
            const __m256 u0 = _mm256_unpacklo_ps(r[0], r[1]), u1 = _mm256_unpackhi_ps(r[0], r[1]);
            const __m256 u2 = _mm256_unpacklo_ps(r[2], r[3]), u3 = _mm256_unpackhi_ps(r[2], r[3]);
            const __m256 u4 = _mm256_unpacklo_ps(r[4], r[5]), u5 = _mm256_unpackhi_ps(r[4], r[5]);
            const __m256 u6 = _mm256_unpacklo_ps(r[6], r[7]), u7 = _mm256_unpackhi_ps(r[6], r[7]);
            const __m256 v0 = _mm256_shuffle_ps(u0, u2, 0x44), v1 = _mm256_shuffle_ps(u0, u2, 0xee);
            const __m256 v2 = _mm256_shuffle_ps(u1, u3, 0x44), v3 = _mm256_shuffle_ps(u1, u3, 0xee);
            const __m256 v4 = _mm256_shuffle_ps(u4, u6, 0x44), v5 = _mm256_shuffle_ps(u4, u6, 0xee);
            const __m256 v6 = _mm256_shuffle_ps(u5, u7, 0x44), v7 = _mm256_shuffle_ps(u5, u7, 0xee);
            const __m256 t[8] = {
                _mm256_permute2f128_ps(v0, v4, 0x20), _mm256_permute2f128_ps(v1, v5, 0x20),
                _mm256_permute2f128_ps(v2, v6, 0x20), _mm256_permute2f128_ps(v3, v7, 0x20),
                _mm256_permute2f128_ps(v0, v4, 0x31), _mm256_permute2f128_ps(v1, v5, 0x31),
                _mm256_permute2f128_ps(v2, v6, 0x31), _mm256_permute2f128_ps(v3, v7, 0x31),
            };
            for (uint32_t c = 0; c < live; ++c) {
                const uint32_t j = j0 + c, pn = j / pw, nr = pn < full ? pw : last_nr;
                _mm256_store_ps(bp + pn * pf + ((size_t)blk * nr + j % pw) * 8u, t[c]);
            }
        }
    }
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

/* One row of A x DET_STREAMS rows of B, row q at b + q * sb (decode): nt_tile_avx2(1, 1)'s
 * accumulator and fma sequence for each, output q at c[q * sc]. */
T2 INL void gemv_tile_avx2(const int S, uint32_t k, float alpha, const float *a, const float *b,
                           size_t sb, float *c, size_t sc)
{
    __m256 acc[DET_STREAMS];
#pragma GCC unroll 8
    for (int q = 0; q < S; ++q)
        acc[q] = _mm256_setzero_ps();
    uint32_t l = 0;
    for (; l + 8 <= k; l += 8) {
        const __m256 av = _mm256_loadu_ps(a + l);
#pragma GCC unroll 8
        for (int q = 0; q < S; ++q)
            acc[q] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + (size_t)q * sb + l), acc[q]);
    }
    if (l < k) { /* lanes past k read as +0 */
        const __m256 av = load8_avx2(a + l, k - l);
#pragma GCC unroll 8
        for (int q = 0; q < S; ++q)
            acc[q] = _mm256_fmadd_ps(av, load8_avx2(b + (size_t)q * sb + l, k - l), acc[q]);
    }
#pragma GCC unroll 8
    for (int q = 0; q < S; ++q)
        c[(size_t)q * sc] = alpha * reduce8_avx2(acc[q]);
}

/* One row of A (decode, bound by reading B from memory): B's rows in DET_STREAMS contiguous
 * ranges of h = n / DET_STREAMS rows, and each tile takes the next row of every range (rows
 * i, h + i, 2h + i, ...), so that the matrix is read as DET_STREAMS long sequential streams;
 * the n % DET_STREAMS rows after the ranges get 1 x 1 tiles. */
T2 static void gemv_avx2(uint32_t n, uint32_t k, float alpha, const float *a, const float *b,
                         size_t ldb, float *c)
{
    const uint32_t h = n / DET_STREAMS;
    for (uint32_t i = 0; i < h; ++i)
        gemv_tile_avx2((int)DET_STREAMS, k, alpha, a, b + (size_t)i * ldb, (size_t)h * ldb, c + i,
                       h);
    for (uint32_t j = h * DET_STREAMS; j < n; ++j)
        gemv_tile_avx2(1, k, alpha, a, b + (size_t)j * ldb, 0, c + j, 0);
}

/* One row of A (decode): gemv_avx2; several rows: 4 x 3 tiles, 1 x 3 for the last rows. */
T2 static void nt_avx2(uint32_t m, uint32_t n, uint32_t k, float alpha, const float *a,
                       size_t lda, const float *b, size_t ldb, float *c, size_t ldc)
{
    if (m == 1) {
        gemv_avx2(n, k, alpha, a, b, ldb, c);
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

/* MR rows of A x a packed panel of NR <= DET_NR rows of B (pack_rows, pack_cols), over the
 * reduction elements [l0, l1) (l0 a multiple of 8; l1 = k or a multiple of 8): the same
 * MR * NR accumulators and fma sequence as nt_tile_avx2, B read as one contiguous stream from
 * block l0 / 8 at bp. The accumulators start at +0 when l0 = 0, else from their lanes saved
 * in sv ([MR * NR][8]); when l1 < k they are saved there (a later call continues the same
 * sequence), else combined by the lane tree, multiplied by alpha and stored to c. */
T2 INL void nt_ptile_avx2(const int MR, const int NR, uint32_t l0, uint32_t l1, uint32_t k,
                          float alpha, const float *a, size_t lda, const float *bp, float *sv,
                          float *c, size_t ldc)
{
    __m256 acc[4][3];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 3
        for (int q = 0; q < NR; ++q)
            acc[r][q] = l0 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(sv + (r * NR + q) * 8);
    const float *ap = a + l0, *const aend = a + (l1 & ~7u);
    for (; ap < aend; ap += 8, bp += NR * 8) {
        __m256 bv[3];
#pragma GCC unroll 3
        for (int q = 0; q < NR; ++q)
            bv[q] = _mm256_load_ps(bp + q * 8);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
            const __m256 av = _mm256_loadu_ps(ap + (size_t)r * lda);
#pragma GCC unroll 3
            for (int q = 0; q < NR; ++q)
                acc[r][q] = _mm256_fmadd_ps(av, bv[q], acc[r][q]);
        }
    }
    const uint32_t l = (uint32_t)(ap - a);
    if (l < l1) { /* the last block of k: packed B is +0 past k, A is read masked as +0 */
        __m256 bv[3];
#pragma GCC unroll 3
        for (int q = 0; q < NR; ++q)
            bv[q] = _mm256_load_ps(bp + q * 8);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
            const __m256 av = load8_avx2(a + (size_t)r * lda + l, k - l);
#pragma GCC unroll 3
            for (int q = 0; q < NR; ++q)
                acc[r][q] = _mm256_fmadd_ps(av, bv[q], acc[r][q]);
        }
    }
    if (l1 < k) {
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r)
#pragma GCC unroll 3
            for (int q = 0; q < NR; ++q)
                _mm256_store_ps(sv + (r * NR + q) * 8, acc[r][q]);
        return;
    }
    const __m128 al = _mm_set1_ps(alpha);
    int q0 = 0;
    if (MR == 4 && NR == 3) { /* columns 0 and 1: one tree of 8, rows' pairs stored as such */
        const __m256 t01 = _mm256_mul_ps(_mm256_set1_ps(alpha),
                                         reduce8x8_avx2(acc[0][0], acc[0][1], acc[1][0],
                                                        acc[1][1], acc[2][0], acc[2][1],
                                                        acc[3][0], acc[3][1]));
        const __m128 lo = _mm256_castps256_ps128(t01), hi = _mm256_extractf128_ps(t01, 1);
        _mm_storel_pi((__m64 *)c, lo);
        _mm_storeh_pi((__m64 *)(c + ldc), lo);
        _mm_storel_pi((__m64 *)(c + 2 * ldc), hi);
        _mm_storeh_pi((__m64 *)(c + 3 * ldc), hi);
        q0 = 2;
    }
#pragma GCC unroll 3
    for (int q = q0; q < NR; ++q) { /* column q of the tile: its MR rows in one tree */
        const __m256 z = _mm256_setzero_ps();
        float t[4];
        _mm_storeu_ps(t, _mm_mul_ps(al, reduce8x4_avx2(acc[0][q], MR > 1 ? acc[1][q] : z,
                                                       MR > 2 ? acc[2][q] : z,
                                                       MR > 3 ? acc[3][q] : z)));
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r)
            c[(size_t)r * ldc + q] = t[r];
    }
}

/* MR rows of A against every panel of a packed block of `rows` rows of B (bp at the block's
 * first panel), over [l0, l1) (block b0 = l0 / 8 onwards), lanes saved per panel in sv: the
 * tiles nt_ptile_avx2 runs one after the other in one call, DET_NR rows of B each, the last
 * panel with rows % DET_NR when that is not 0. */
T2 INL void nt_prow_avx2(const int MR, uint32_t rows, uint32_t l0, uint32_t l1, uint32_t k,
                         float alpha, const float *a, size_t lda, const float *bp, float *sv,
                         float *c, size_t ldc)
{
    const size_t pf = packed_panel_floats(DET_NR, k), b0 = l0 / 8u;
    uint32_t j = 0;
    for (; j + DET_NR <= rows; j += DET_NR, bp += pf, sv += DET_SV_PANEL)
        nt_ptile_avx2(MR, (int)DET_NR, l0, l1, k, alpha, a, lda, bp + b0 * DET_NR * 8, sv, c + j,
                      ldc);
    if (rows - j == 2)
        nt_ptile_avx2(MR, 2, l0, l1, k, alpha, a, lda, bp + b0 * 2 * 8, sv, c + j, ldc);
    else if (rows - j == 1)
        nt_ptile_avx2(MR, 1, l0, l1, k, alpha, a, lda, bp + b0 * 8, sv, c + j, ldc);
}

typedef void (*prow_fn)(uint32_t rows, uint32_t l0, uint32_t l1, uint32_t k, float alpha,
                        const float *a, size_t lda, const float *bp, float *sv, float *c,
                        size_t ldc);
/* NAME_MR: the prow_fn of FN (an inline nt_prow_*) for MR rows of A, compiled for target T. */
#define PROW(T, NAME, FN, MR)                                                                 \
    T static void NAME##_##MR(uint32_t rows, uint32_t l0, uint32_t l1, uint32_t k,            \
                              float alpha, const float *a, size_t lda, const float *bp,       \
                              float *sv, float *c, size_t ldc)                                \
    {                                                                                         \
        FN(MR, rows, l0, l1, k, alpha, a, lda, bp, sv, c, ldc);                               \
    }
PROW(T2, prow2, nt_prow_avx2, 1) PROW(T2, prow2, nt_prow_avx2, 2)
PROW(T2, prow2, nt_prow_avx2, 3) PROW(T2, prow2, nt_prow_avx2, 4)
static const prow_fn prow_avx2[4] = {prow2_1, prow2_2, prow2_3, prow2_4};

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


/* ---- AVX-512 packed tiles (prefill): two outputs per register, 8 lanes each ---- */

/* The lane trees of one row's eight outputs x0 = [o0 | o1], x1 = [o2 | o3], x2 = [o4 | o5],
 * x3 = [o6 | o7] in lanes 0..7, the steps of reduce8x8_avx2 with the same operands in the same
 * order: p + (p + 4) for each output, then p + (p + 2), then 0 + 1. */
T5 INL __m256 reduce8x8_avx512(__m512 x0, __m512 x1, __m512 x2, __m512 x3)
{
    /* [v4(o0), v4(o1), v4(o2), v4(o3)] and [v4(o4), ..., v4(o7)], 128 bits each */
    const __m512 u0 = _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, 0x88),
                                    _mm512_shuffle_f32x4(x0, x1, 0xdd));
    const __m512 u1 = _mm512_add_ps(_mm512_shuffle_f32x4(x2, x3, 0x88),
                                    _mm512_shuffle_f32x4(x2, x3, 0xdd));
    /* 128 bits c: [v2(o_c), v2(o_c+4)] */
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(u0, u1, 0x44), _mm512_shuffle_ps(u0, u1, 0xee));
    /* 128 bits c: [o_c, o_c+4, o_c, o_c+4] */
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(s, s, 0x88), _mm512_shuffle_ps(s, s, 0xdd));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, r));
}

/* [x[0..8) | x[0..8)]: one 256-bit broadcast load (AVX-512F). */
T5 INL __m512 bcast8_full_avx512(const float *x)
{
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(x))));
}

/* One block of the reduction: acc[r][q] += A's 8 floats of row r at a (both halves; `live`
 * of them exist, the others read as +0) x the pair of B's rows q of the packed block bp. */
T5 INL void ptile_block_avx512(const int MR, __m512 acc[][4], const float *bp, const float *a,
                               size_t lda, uint32_t live)
{
    __m512 bv[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q)
        bv[q] = _mm512_load_ps(bp + q * 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
        const float *ar = a + (size_t)r * lda;
        const __m512 av = live >= 8 ? bcast8_full_avx512(ar) : bcast8_avx512(ar, live);
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q)
            acc[r][q] = _mm512_fmadd_ps(av, bv[q], acc[r][q]);
    }
}

/* MR <= DET_MR5 rows of A x a packed panel of DET_NR5 rows of B (pack_rows, pack_cols with pad:
 * rows past the matrix are +0), of which the first `live` are stored, over [l0, l1) as
 * nt_ptile_avx2:
 * acc[r][q] holds the lanes of outputs 2q (low half) and 2q + 1 (high half) of row r, each
 * with the fma sequence of nt_ptile_avx2; lanes saved in sv ([MR * 4][16]) between chunks. */
T5 INL void nt_ptile_avx512(const int MR, uint32_t live, uint32_t l0, uint32_t l1, uint32_t k,
                            float alpha, const float *a, size_t lda, const float *bp, float *sv,
                            float *c, size_t ldc)
{
    __m512 acc[DET_MR5][4];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q)
            acc[r][q] = l0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(sv + (r * 4 + q) * 16);
    const float *ap = a + l0, *const aend = a + (l1 & ~7u);
    for (; ap < aend; ap += 8, bp += DET_NR5 * 8)
        ptile_block_avx512(MR, acc, bp, ap, lda, 8);
    const uint32_t l = (uint32_t)(ap - a);
    if (l < l1) /* the last block of k: packed B is +0 past k, A is read masked as +0 */
        ptile_block_avx512(MR, acc, bp, a + l, lda, k - l);
    if (l1 < k) {
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q)
                _mm512_store_ps(sv + (r * 4 + q) * 16, acc[r][q]);
        return;
    }
    const __m256 al = _mm256_set1_ps(alpha);
    const __mmask16 mk = (__mmask16)((1u << live) - 1u);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
        const __m256 t = _mm256_mul_ps(al, reduce8x8_avx512(acc[r][0], acc[r][1], acc[r][2],
                                                            acc[r][3]));
        _mm512_mask_storeu_ps(c + (size_t)r * ldc, mk, _mm512_castps256_ps512(t));
    }
}

/* MR rows of A against every panel of a packed block of `rows` rows of B (as nt_prow_avx2). */
T5 INL void nt_prow_avx512(const int MR, uint32_t rows, uint32_t l0, uint32_t l1, uint32_t k,
                           float alpha, const float *a, size_t lda, const float *bp, float *sv,
                           float *c, size_t ldc)
{
    const size_t pf = packed_panel_floats(DET_NR5, k), b0 = l0 / 8u;
    for (uint32_t j = 0; j < rows; j += DET_NR5, bp += pf, sv += DET_SV_PANEL5)
        nt_ptile_avx512(MR, rows - j < DET_NR5 ? rows - j : DET_NR5, l0, l1, k, alpha, a, lda,
                        bp + b0 * DET_NR5 * 8, sv, c + j, ldc);
}

PROW(T5, prow5, nt_prow_avx512, 1) PROW(T5, prow5, nt_prow_avx512, 2)
PROW(T5, prow5, nt_prow_avx512, 3) PROW(T5, prow5, nt_prow_avx512, 4)
PROW(T5, prow5, nt_prow_avx512, 5) PROW(T5, prow5, nt_prow_avx512, 6)
static const prow_fn prow_avx512[DET_MR5] = {prow5_1, prow5_2, prow5_3, prow5_4, prow5_5, prow5_6};

/* ---- many rows of A (prefill): B packed block by block, the tiles of one instruction set ---- */

typedef struct det_tiles {
    uint32_t pw;       /* rows of B per packed panel */
    bool pad;          /* the last panel padded with +0 rows to pw */
    uint32_t sv_panel; /* floats of saved lanes per panel */
    uint32_t mr;       /* rows of A per tile */
    const prow_fn *prow; /* [MR - 1]: MR = 1..mr rows of A against a packed block */
} det_tiles;

static const det_tiles tiles_avx2 = {DET_NR, false, DET_SV_PANEL, 4, prow_avx2};
static const det_tiles tiles_avx512 = {DET_NR5, true, DET_SV_PANEL5, DET_MR5, prow_avx512};

/* Many rows of A: B (gemm_nt's rows, or gemm_nn's columns when cols_of_b) in blocks of nc rows
 * packed into bp; for each block, rows of A t->mr at a time against every panel of the block
 * (the block stays in L2), the reduction in chunks of at most DET_KC elements so that the four
 * rows' chunk stays in L1 (sv holds each tile's lanes between chunks: the sequence of fmas per
 * lane is unchanged). */
static void packed_run(const det_tiles *t, uint32_t m, uint32_t n, uint32_t k, float alpha,
                       const float *a, size_t lda, const float *b, size_t ldb, int cols_of_b,
                       float *c, size_t ldc, float *bp, uint32_t nc, float *sv)
{
    const uint32_t nb = (k + 7) / 8, nch = (8 * nb + DET_KC - 1) / DET_KC;
    const uint32_t cb = (nb + nch - 1) / nch; /* blocks per chunk */
    for (uint32_t jc = 0; jc < n; jc += nc) {
        const uint32_t rows = n - jc < nc ? n - jc : nc;
        if (cols_of_b)
            pack_cols(rows, k, b + jc, ldb, t->pw, t->pad, bp);
        else
            pack_rows(rows, k, b + (size_t)jc * ldb, ldb, t->pw, t->pad, bp);
        for (uint32_t i = 0; i < m; i += t->mr) {
            const uint32_t mr = m - i < t->mr ? m - i : t->mr;
            for (uint32_t b0 = 0; b0 < nb; b0 += cb) {
                const uint32_t b1 = nb - b0 < cb ? nb : b0 + cb;
                const uint32_t l0 = 8 * b0, l1 = b1 == nb ? k : 8 * b1;
                t->prow[mr - 1](rows, l0, l1, k, alpha, a + (size_t)i * lda, lda, bp, sv,
                                c + (size_t)i * ldc + jc, ldc);
            }
        }
    }
}

#endif /* DET_X86 */

typedef struct pack_buf {
    float *p;      /* 64-byte aligned */
    size_t floats; /* capacity */
} pack_buf;

static pthread_key_t pack_key;
static pthread_once_t pack_once = PTHREAD_ONCE_INIT;
static bool pack_key_ok;

static void pack_buf_free(void *v)
{
    pack_buf *b = v;
    free(b->p);
    free(b);
}

static void pack_key_create(void)
{
    pack_key_ok = pthread_key_create(&pack_key, pack_buf_free) == 0;
}

/* This thread's packing buffer of at least `floats` floats: allocated on the thread's first
 * packed product, grown when a product needs more, reused by every later one (no allocation
 * and no fresh pages per product) and freed when the thread exits. NULL when out of memory. */
static float *thread_pack_buf(size_t floats)
{
    pthread_once(&pack_once, pack_key_create);
    if (!pack_key_ok)
        return NULL;
    pack_buf *b = pthread_getspecific(pack_key);
    if (b == NULL) {
        if ((b = calloc(1, sizeof *b)) == NULL)
            return NULL;
        if (pthread_setspecific(pack_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    if (b->floats < floats) {
        const size_t bytes = (floats * sizeof *b->p + 63) & ~(size_t)63;
        float *np = aligned_alloc(64, bytes);
        if (np == NULL)
            return NULL;
        free(b->p);
        b->p = np;
        b->floats = floats;
    }
    return b->p;
}

/* The packed path's block: rows of B per packed block (a multiple of the panel's pw rows,
 * about DET_PACK_FLOATS floats, at most n), with *bp this thread's pack buffer (room for the
 * block's panels, the last one padded to pw rows) followed by *sv, room for the saved lanes of
 * one row of tiles (sv_panel floats per panel); 0 (and *bp NULL) when the product has too few
 * rows of A to repay packing, or no memory: the unpacked tiles then compute the same bits. */
static uint32_t pack_block(uint32_t m, uint32_t n, uint32_t k, uint32_t pw, uint32_t sv_panel,
                           float **bp, float **sv)
{
    *bp = *sv = NULL;
    if (m < DET_PACK_MIN_M || k == 0)
        return 0;
    const size_t per_row = packed_panel_floats(1, k);
    uint32_t nc = (uint32_t)(DET_PACK_FLOATS / per_row);
    nc = nc < pw ? pw : nc - nc % pw;
    if (nc > n)
        nc = n;
    const size_t panels = (nc + pw - 1) / pw;
    const size_t bfl = (panels * pw * per_row + 15) & ~(size_t)15;
    const size_t svfl = (panels + 1) * sv_panel;
    if ((*bp = thread_pack_buf(bfl + svfl)) == NULL)
        return 0;
    *sv = *bp + bfl;
    return nc;
}

#if DET_X86
/* Many rows of A on the tiles of isa (AVX2 or AVX-512), B's rows (gemm_nt) or columns
 * (cols_of_b: gemm_nn) packed; false when pack_block declines (too few rows, no memory). */
static bool packed(lm_det_isa isa, uint32_t m, uint32_t n, uint32_t k, float alpha,
                   const float *a, size_t lda, const float *b, size_t ldb, int cols_of_b,
                   float *c, size_t ldc)
{
    const det_tiles *t = isa == LM_DET_AVX512 ? &tiles_avx512 : &tiles_avx2;
    float *bp, *sv;
    const uint32_t nc = pack_block(m, n, k, t->pw, t->sv_panel, &bp, &sv);
    if (nc == 0)
        return false;
    packed_run(t, m, n, k, alpha, a, lda, b, ldb, cols_of_b, c, ldc, bp, nc, sv);
    return true;
}
#endif

void lm_det_gemm_nt(lm_det_isa isa, uint32_t m, uint32_t n, uint32_t k, float alpha,
                    const float *a /* [m][lda] */, size_t lda, const float *b /* [n][ldb] */,
                    size_t ldb, float *c /* [m][ldc] */, size_t ldc)
{
#if DET_X86
    if (isa == LM_DET_AVX512 && m > 1 && m < DET_PACK_MIN_M) {
        nt_avx512(m, n, k, alpha, a, lda, b, ldb, c, ldc);
        return;
    }
    /* many rows: the packed tiles of isa; one row: the streaming AVX2 GEMV (nt_avx2) */
    if (isa == LM_DET_AVX2 || isa == LM_DET_AVX512) {
        if (!packed(isa, m, n, k, alpha, a, lda, b, ldb, 0, c, ldc))
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
    if (isa == LM_DET_AVX512 && m < DET_PACK_MIN_M) {
        nn_avx512(m, n, k, a, lda, b, ldb, c, ldc);
        return;
    }
    if (isa == LM_DET_AVX2 || isa == LM_DET_AVX512) { /* many rows: the packed tiles of isa */
        /* alpha 1: 1.0f * x == x for every float the tree can produce */
        if (!packed(isa, m, n, k, 1.0f, a, lda, b, ldb, 1, c, ldc))
            nn_avx2(m, n, k, a, lda, b, ldb, c, ldc);
        return;
    }
#endif
    (void)isa;
    nn_scalar(m, n, k, a, lda, b, ldb, c, ldc);
}
