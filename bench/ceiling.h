/* ceiling.h — this machine's own limits, measured, for the "bound" figures of a benchmark:
 * the rate at which n threads read memory, and the float32 multiply-add peak of n threads
 * (registers only). Each call is one short timed pass, so that a benchmark can interleave the
 * passes with the runs it judges and a shared machine's load hits both alike. */
#ifndef KVD_BENCH_CEILING_H
#define KVD_BENCH_CEILING_H

#include <stdbool.h>
#include <stddef.h>

/* A buffer to stream, filled once (every page touched). huge: transparent huge pages asked for
 * with madvise(MADV_HUGEPAGE) before the first touch; huge_bytes: how much of the process's
 * anonymous memory the kernel backs with huge pages after the fill (from
 * /proc/self/smaps_rollup; -1 where unknown). */
typedef struct bc_buf {
    unsigned char *p; /* [bytes], 2 MiB aligned */
    size_t bytes;
    bool huge;
    double huge_bytes;
    void *map; /* the mapping: [map_bytes] */
    size_t map_bytes;
} bc_buf;

/* Maps and fills b; exits 2 (with "PROG: ..." on stderr) when memory is short. */
void bc_buf_init(const char *prog, bc_buf *b, size_t bytes, bool huge);
void bc_buf_free(bc_buf *b);

/* The read loops bc_read_pass offers: 1, 2, 4 or 8 sequential streams per thread. */
#define BC_MAX_STREAMS 8

/* One read of all of b by n_threads threads started together, thread t streaming its own
 * contiguous part [t * bytes / n, (t + 1) * bytes / n) in `streams` (1, 2, 4 or 8) independent
 * sequential streams over consecutive sub-parts, 32-byte vector loads (AVX2; 8-byte loads
 * without it), two cache lines per stream per step. Returns GB/s: bytes over the time from
 * the first thread's start to the last one's end. */
double bc_read_pass(const bc_buf *b, int n_threads, int streams);

/* n_threads threads started together, each running independent chains of float32
 * multiply-adds on registers (12 chains of 16-lane FMAs with AVX-512, of 8-lane FMAs with
 * AVX2 + FMA, else fmaf on 12 scalars), long enough to take tens of milliseconds. Returns GFLOP/s (2 per multiply-add)
 * over the time from the first thread's start to the last one's end. */
double bc_fma_pass(int n_threads);

/* "avx512f", "avx2+fma" or "scalar": the instructions bc_fma_pass uses here (bc_read_pass:
 * AVX2 wherever there is AVX2). */
const char *bc_isa(void);

#endif
