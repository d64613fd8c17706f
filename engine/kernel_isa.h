/* kernel_isa.h — the instruction-set level a BLAS library's kernel set needs, against the
 * level this CPU runs: how the blas and blis backends tell that their library picked kernels
 * older than the CPU, and the one-line warning that says so and what to do. The decision is a
 * pure function of (kernel set name, CPU level), table-driven (kernel_isa.c). */
#ifndef KVD_KERNEL_ISA_H
#define KVD_KERNEL_ISA_H

#include <stdbool.h>
#include <stddef.h>

/* Vector instruction-set levels, oldest first; each includes the ones before it. */
typedef enum lm_isa_level {
    LM_ISA_UNKNOWN = 0, /* a kernel set no table names, or a CPU that is not x86 */
    LM_ISA_SSE3,        /* 128-bit SSE .. SSE4.2, no AVX (OpenBLAS Prescott .. Nehalem) */
    LM_ISA_AVX,         /* 256-bit AVX, FMA3/FMA4 at most (Sandybridge, Bulldozer) */
    LM_ISA_AVX2,        /* AVX2 + FMA3 (Haswell, Zen) */
    LM_ISA_AVX512,      /* AVX-512F (SkylakeX, Cooperlake) */
} lm_isa_level;

/* "unknown", "sse3", "avx", "avx2", "avx512". */
const char *lm_isa_level_name(lm_isa_level l);

/* The highest level this CPU and OS support (__builtin_cpu_supports, which checks that the OS
 * saves the vector registers too): avx512 needs AVX-512F, avx2 AVX2 and FMA, avx AVX, sse3
 * SSE3; LM_ISA_UNKNOWN off x86. */
lm_isa_level lm_cpu_isa_level(void);

/* The level an OpenBLAS core's kernels need, by openblas_get_corename()'s name; LM_ISA_UNKNOWN
 * for a name the table does not hold. */
lm_isa_level lm_openblas_core_level(const char *core);
/* The level a BLIS sub-configuration's kernels need, by bli_arch_string()'s name ("haswell",
 * "skx", "zen3", "generic"); LM_ISA_UNKNOWN for a name the table does not hold. */
lm_isa_level lm_blis_config_level(const char *config);

/* Whether kernels needing level `kernels` are older than a CPU at level `cpu`: both known and
 * kernels < cpu. An unknown level on either side never counts as older. */
bool lm_kernels_older(lm_isa_level kernels, lm_isa_level cpu);

/* The OpenBLAS core name to suggest through OPENBLAS_CORETYPE for a CPU at level cpu
 * ("SkylakeX" for avx512, "Haswell" for avx2, "Sandybridge" for avx); NULL for others. */
const char *lm_openblas_core_for(lm_isa_level cpu);

/* When OpenBLAS's core `core` is older than a CPU at level cpu, writes the one-line warning
 * (no newline: what runs, what it costs, what to do; coretype: the value of OPENBLAS_CORETYPE
 * in the environment, or NULL when unset, named as the cause when set) into buf[n] and returns
 * true; otherwise writes "" and returns false. */
bool lm_openblas_warning(char *buf, size_t n, const char *core, lm_isa_level cpu,
                         const char *coretype);
/* The same for BLIS's sub-configuration `config` (BLIS picks it from the CPU's model; a BLIS
 * built without this CPU's configuration falls back to an older one). */
bool lm_blis_warning(char *buf, size_t n, const char *config, lm_isa_level cpu);

/* "(sse3-kernels-on-avx512-cpu)" into buf[n] when kernels < cpu, else "": the mark the brief
 * platform word of a backend carries (no spaces). */
void lm_kernels_mark(char *buf, size_t n, lm_isa_level kernels, lm_isa_level cpu);

#endif
