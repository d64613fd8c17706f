/* ceiling.c — this machine's read bandwidth and float32 FMA peak, measured by threads that
 * start together (ceiling.h). */
#include "ceiling.h"

#include "kvd_util.h" /* lm_now_s */

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__GNUC__) && defined(__x86_64__)
#define BC_X86 1
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma")))
#define AVX512 __attribute__((target("avx512f")))
#define INL static inline __attribute__((always_inline))
#else
#define BC_X86 0
#endif

#define MAX_THREADS 64
#define STEP 128u              /* bytes per stream per step: two cache lines */
#define HUGE_PAGE ((size_t)2 << 20)
#define FMA_CHAINS 12
#define FMA_STEPS 20000000L    /* steps of FMA_CHAINS multiply-adds per thread */

static bool have_avx2(void)
{
#if BC_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

static bool have_avx512(void)
{
#if BC_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

const char *bc_isa(void)
{
    return have_avx512() ? "avx512f" : have_avx2() ? "avx2+fma" : "scalar";
}

/* AnonHugePages of this process in bytes, or -1 where the kernel does not say. */
static double anon_huge_bytes(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    double kb = -1;
    char line[256];
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "AnonHugePages: %lf kB", &kb) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

void bc_buf_init(const char *prog, bc_buf *b, size_t bytes, bool huge)
{
    *b = (bc_buf){.bytes = bytes, .huge = huge, .map_bytes = bytes + HUGE_PAGE};
    b->map = mmap(NULL, b->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b->map == MAP_FAILED) {
        fprintf(stderr, "%s: cannot map %zu bytes: %s\n", prog, b->map_bytes, strerror(errno));
        exit(2);
    }
    b->p = (unsigned char *)(((uintptr_t)b->map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
#ifdef MADV_HUGEPAGE
    /* either way explicitly, so that the 4 KiB figure stays one under THP=always too */
    (void)madvise(b->p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
    const double h0 = anon_huge_bytes();
    for (size_t i = 0; i < bytes; i += 8) {
        const uint64_t v = (uint64_t)i * 0x9e3779b97f4a7c15u;
        memcpy(b->p + i, &v, sizeof v);
    }
    const double h1 = anon_huge_bytes();
    b->huge_bytes = h0 >= 0 && h1 >= 0 ? h1 - h0 : -1;
}

void bc_buf_free(bc_buf *b)
{
    if (b->map != NULL && b->map != MAP_FAILED)
        munmap(b->map, b->map_bytes);
    *b = (bc_buf){.p = NULL};
}

/* ---- the threads ---- */

typedef struct job {
    const unsigned char *p; /* [n] this thread's part (read passes) */
    size_t n;
    int streams;
    bool avx2;
    uint64_t sink; /* folded result, so that the work is observable */
    double t0, t1; /* start and end, lm_now_s */
    pthread_barrier_t *bar;
    void (*fn)(struct job *);
} job;

static volatile uint64_t g_sink;

static void *job_main(void *arg)
{
    job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = lm_now_s();
    j->fn(j);
    j->t1 = lm_now_s();
    return NULL;
}

/* Runs each j[i].fn on its own thread, all released together; seconds from the first start
 * to the last end. */
static double run_jobs(job *j, int n)
{
    pthread_t th[MAX_THREADS];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    for (int i = 0; i < n; ++i) {
        j[i].bar = &bar;
        if (pthread_create(&th[i], NULL, job_main, &j[i]) != 0) {
            fprintf(stderr, "ceiling: cannot start a thread\n");
            exit(2);
        }
    }
    double t0 = INFINITY, t1 = 0;
    for (int i = 0; i < n; ++i) {
        pthread_join(th[i], NULL);
        t0 = fmin(t0, j[i].t0);
        t1 = fmax(t1, j[i].t1);
        g_sink ^= j[i].sink;
    }
    pthread_barrier_destroy(&bar);
    return t1 - t0;
}

static int clamp_threads(int n)
{
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}

/* ---- reads ---- */

/* XOR of every 8-byte word of p[n] (n a multiple of S * STEP) read as S sequential streams
 * over its S consecutive sub-parts. */
static uint64_t read_words(const unsigned char *p, size_t n, int S)
{
    uint64_t acc[BC_MAX_STREAMS][2] = {{0}};
    const size_t part = n / (size_t)S;
    for (size_t i = 0; i < part; i += STEP)
        for (int s = 0; s < S; ++s)
            for (size_t w = 0; w < STEP; w += 16) {
                uint64_t x[2];
                memcpy(x, p + (size_t)s * part + i + w, sizeof x);
                acc[s][0] ^= x[0], acc[s][1] ^= x[1];
            }
    uint64_t r = 0;
    for (int s = 0; s < S; ++s)
        r ^= acc[s][0] ^ acc[s][1];
    return r;
}

#if BC_X86
/* read_words with 32-byte loads: 4 per stream per step, folded into one accumulator per
 * stream (XOR: one cycle, far faster than memory). */
AVX2 INL uint64_t read_avx2(const unsigned char *p, size_t n, const int S)
{
    __m256i acc[BC_MAX_STREAMS];
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s)
        acc[s] = _mm256_setzero_si256();
    const size_t part = n / (size_t)S;
    for (size_t i = 0; i < part; i += STEP)
#pragma GCC unroll 8
        for (int s = 0; s < S; ++s) {
            const __m256i *q = (const __m256i *)(p + (size_t)s * part + i);
            acc[s] = _mm256_xor_si256(acc[s],
                                      _mm256_xor_si256(_mm256_xor_si256(_mm256_load_si256(q),
                                                                        _mm256_load_si256(q + 1)),
                                                       _mm256_xor_si256(_mm256_load_si256(q + 2),
                                                                        _mm256_load_si256(q + 3))));
        }
    __m256i r = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s)
        r = _mm256_xor_si256(r, acc[s]);
    return (uint64_t)_mm256_extract_epi64(r, 0) ^ (uint64_t)_mm256_extract_epi64(r, 3);
}
AVX2 static uint64_t read_avx2_1(const unsigned char *p, size_t n) { return read_avx2(p, n, 1); }
AVX2 static uint64_t read_avx2_2(const unsigned char *p, size_t n) { return read_avx2(p, n, 2); }
AVX2 static uint64_t read_avx2_4(const unsigned char *p, size_t n) { return read_avx2(p, n, 4); }
AVX2 static uint64_t read_avx2_8(const unsigned char *p, size_t n) { return read_avx2(p, n, 8); }
#endif

static void read_job(job *j)
{
#if BC_X86
    if (j->avx2) {
        j->sink = j->streams == 1   ? read_avx2_1(j->p, j->n)
                  : j->streams == 2 ? read_avx2_2(j->p, j->n)
                  : j->streams == 4 ? read_avx2_4(j->p, j->n)
                                    : read_avx2_8(j->p, j->n);
        return;
    }
#endif
    j->sink = read_words(j->p, j->n, j->streams);
}

double bc_read_pass(const bc_buf *b, int n_threads, int streams)
{
    n_threads = clamp_threads(n_threads);
    streams = streams <= 1 ? 1 : streams <= 2 ? 2 : streams <= 4 ? 4 : BC_MAX_STREAMS;
    const size_t unit = (size_t)streams * STEP;
    const size_t part = b->bytes / (size_t)n_threads / unit * unit;
    job j[MAX_THREADS];
    const bool avx2 = have_avx2();
    for (int i = 0; i < n_threads; ++i)
        j[i] = (job){.p = b->p + (size_t)i * part, .n = part, .streams = streams, .avx2 = avx2,
                     .fn = read_job};
    const double secs = run_jobs(j, n_threads);
    return (double)part * n_threads / secs * 1e-9;
}

/* ---- multiply-adds ---- */

/* FMA_CHAINS independent chains acc = acc * x + y (x < 1, y > 0: the values settle near
 * y / (1 - x), never overflow nor go subnormal). */
static void fma_scalar(job *j)
{
    float acc[FMA_CHAINS];
    for (int c = 0; c < FMA_CHAINS; ++c)
        acc[c] = (float)c;
    const float x = 0.999999f, y = 1e-3f;
    for (long i = 0; i < FMA_STEPS / 8; ++i) /* 8x fewer steps: each is one lane, not eight */
        for (int c = 0; c < FMA_CHAINS; ++c)
            acc[c] = fmaf(acc[c], x, y);
    float s = 0;
    for (int c = 0; c < FMA_CHAINS; ++c)
        s += acc[c];
    j->sink = (uint64_t)s;
}

#if BC_X86
AVX2 static void fma_avx2(job *j)
{
    __m256 acc[FMA_CHAINS];
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-3f);
#pragma GCC unroll 12
    for (int c = 0; c < FMA_CHAINS; ++c)
        acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < FMA_STEPS; ++i)
#pragma GCC unroll 12
        for (int c = 0; c < FMA_CHAINS; ++c)
            acc[c] = _mm256_fmadd_ps(acc[c], x, y);
    __m256 s = acc[0];
#pragma GCC unroll 12
    for (int c = 1; c < FMA_CHAINS; ++c)
        s = _mm256_add_ps(s, acc[c]);
    j->sink = (uint64_t)_mm_cvtss_f32(_mm256_castps256_ps128(s));
}

/* fma_avx2 on 16 lanes: FMA_STEPS / 2 steps, the same multiply-adds per thread. */
AVX512 static void fma_avx512(job *j)
{
    __m512 acc[FMA_CHAINS];
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-3f);
#pragma GCC unroll 12
    for (int c = 0; c < FMA_CHAINS; ++c)
        acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < FMA_STEPS / 2; ++i)
#pragma GCC unroll 12
        for (int c = 0; c < FMA_CHAINS; ++c)
            acc[c] = _mm512_fmadd_ps(acc[c], x, y);
    __m512 s = acc[0];
#pragma GCC unroll 12
    for (int c = 1; c < FMA_CHAINS; ++c)
        s = _mm512_add_ps(s, acc[c]);
    j->sink = (uint64_t)_mm512_reduce_add_ps(s);
}
#endif

double bc_fma_pass(int n_threads)
{
    n_threads = clamp_threads(n_threads);
    const bool avx512 = have_avx512(), avx2 = have_avx2();
    job j[MAX_THREADS];
    for (int i = 0; i < n_threads; ++i) {
        j[i] = (job){.fn = fma_scalar};
#if BC_X86
        if (avx512)
            j[i].fn = fma_avx512;
        else if (avx2)
            j[i].fn = fma_avx2;
#endif
    }
    const double secs = run_jobs(j, n_threads);
    const double lanes = avx512 || avx2 ? 8.0 * FMA_STEPS : FMA_STEPS / 8; /* per chain */
    return 2.0 * FMA_CHAINS * lanes * n_threads / secs * 1e-9;
}
