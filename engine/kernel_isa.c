/* kernel_isa.c — which instruction-set level a BLAS library's kernel set needs, against the
 * CPU's (kernel_isa.h). */
#include "kernel_isa.h"

#include <stdio.h>
#include <strings.h>

const char *lm_isa_level_name(lm_isa_level l)
{
    switch (l) {
    case LM_ISA_SSE3: return "sse3";
    case LM_ISA_AVX: return "avx";
    case LM_ISA_AVX2: return "avx2";
    case LM_ISA_AVX512: return "avx512";
    case LM_ISA_UNKNOWN: break;
    }
    return "unknown";
}

lm_isa_level lm_cpu_isa_level(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return LM_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return LM_ISA_AVX2;
    if (__builtin_cpu_supports("avx"))
        return LM_ISA_AVX;
    if (__builtin_cpu_supports("sse3"))
        return LM_ISA_SSE3;
#endif
    return LM_ISA_UNKNOWN;
}

typedef struct kernel_level {
    const char *name;
    lm_isa_level level;
} kernel_level;

/* OpenBLAS's x86 core names (openblas_get_corename(): a DYNAMIC_ARCH build's list, which is
 * also what OPENBLAS_CORETYPE takes; compared without case, since a build for one core spells
 * its name in capitals) and the newest vector instructions each kernel set uses:
 *   Katmai .. Nehalem, the Athlon/Opteron/Barcelona/Bobcat and VIA Nano sets: SSE to SSE4.2,
 *     128-bit (all counted as sse3, the oldest level told apart);
 *   Sandybridge: AVX; Bulldozer, Piledriver, Steamroller: AVX with FMA4/FMA3;
 *   Haswell, Zen: AVX2 + FMA3. Excavator: the set for AMD's Excavator, an AVX2 CPU, counted
 *     avx2 so that the CPU it is made for is not told its kernels are old;
 *   SkylakeX, Cooperlake (+ AVX512-BF16), SapphireRapids: AVX-512.
 * "Unknown" and names not listed: LM_ISA_UNKNOWN (never warned about). */
static const kernel_level openblas_cores[] = {
    {"Katmai", LM_ISA_SSE3},       {"Coppermine", LM_ISA_SSE3},  {"Northwood", LM_ISA_SSE3},
    {"Prescott", LM_ISA_SSE3},     {"Banias", LM_ISA_SSE3},      {"Atom", LM_ISA_SSE3},
    {"Core2", LM_ISA_SSE3},        {"Penryn", LM_ISA_SSE3},      {"Dunnington", LM_ISA_SSE3},
    {"Nehalem", LM_ISA_SSE3},      {"Athlon", LM_ISA_SSE3},      {"Opteron", LM_ISA_SSE3},
    {"Opteron_SSE3", LM_ISA_SSE3}, {"Barcelona", LM_ISA_SSE3},   {"Nano", LM_ISA_SSE3},
    {"Bobcat", LM_ISA_SSE3},       {"Sandybridge", LM_ISA_AVX},  {"Bulldozer", LM_ISA_AVX},
    {"Piledriver", LM_ISA_AVX},    {"Steamroller", LM_ISA_AVX},  {"Excavator", LM_ISA_AVX2},
    {"Haswell", LM_ISA_AVX2},      {"Zen", LM_ISA_AVX2},         {"SkylakeX", LM_ISA_AVX512},
    {"Cooperlake", LM_ISA_AVX512}, {"SapphireRapids", LM_ISA_AVX512},
};

/* BLIS's x86 sub-configurations (bli_arch_string()) and the newest vector instructions of
 * their kernels: generic (portable C, counted with the oldest level), penryn (SSE3/SSSE3):
 * sse3; sandybridge (AVX), bulldozer, piledriver, steamroller (AVX with FMA4/FMA3): avx;
 * haswell, zen, zen2, zen3 (AVX2 + FMA3), excavator (made for an AVX2 CPU, as in OpenBLAS's
 * table): avx2; skx, knl, zen4: avx512. */
static const kernel_level blis_configs[] = {
    {"generic", LM_ISA_SSE3},     {"penryn", LM_ISA_SSE3},     {"sandybridge", LM_ISA_AVX},
    {"bulldozer", LM_ISA_AVX},    {"piledriver", LM_ISA_AVX},  {"steamroller", LM_ISA_AVX},
    {"excavator", LM_ISA_AVX2},   {"haswell", LM_ISA_AVX2},    {"zen", LM_ISA_AVX2},
    {"zen2", LM_ISA_AVX2},        {"zen3", LM_ISA_AVX2},       {"skx", LM_ISA_AVX512},
    {"knl", LM_ISA_AVX512},       {"zen4", LM_ISA_AVX512},
};

static lm_isa_level lookup(const kernel_level *t, size_t n, const char *name)
{
    for (size_t i = 0; name != NULL && i < n; ++i)
        if (strcasecmp(t[i].name, name) == 0)
            return t[i].level;
    return LM_ISA_UNKNOWN;
}

lm_isa_level lm_openblas_core_level(const char *core)
{
    return lookup(openblas_cores, sizeof openblas_cores / sizeof openblas_cores[0], core);
}

lm_isa_level lm_blis_config_level(const char *config)
{
    return lookup(blis_configs, sizeof blis_configs / sizeof blis_configs[0], config);
}

bool lm_kernels_older(lm_isa_level kernels, lm_isa_level cpu)
{
    return kernels != LM_ISA_UNKNOWN && cpu != LM_ISA_UNKNOWN && kernels < cpu;
}

const char *lm_openblas_core_for(lm_isa_level cpu)
{
    switch (cpu) {
    case LM_ISA_AVX512: return "SkylakeX"; /* Cooperlake too where the CPU has AVX512-BF16 */
    case LM_ISA_AVX2: return "Haswell";
    case LM_ISA_AVX: return "Sandybridge";
    case LM_ISA_SSE3:
    case LM_ISA_UNKNOWN: break;
    }
    return NULL;
}

bool lm_openblas_warning(char *buf, size_t n, const char *core, lm_isa_level cpu,
                         const char *coretype)
{
    const lm_isa_level k = lm_openblas_core_level(core);
    if (n > 0)
        buf[0] = '\0';
    if (!lm_kernels_older(k, cpu))
        return false;
    const char *kn = lm_isa_level_name(k), *cn = lm_isa_level_name(cpu);
    const char *fit = lm_openblas_core_for(cpu);
    if (coretype != NULL && *coretype != '\0')
        snprintf(buf, n,
                 "OPENBLAS_CORETYPE=%s makes OpenBLAS run its %s kernels (%s) on this %s CPU: "
                 "the blas backend runs slower than this CPU allows; a kernel set for %s "
                 "(OPENBLAS_CORETYPE=%s) or a newer OpenBLAS is faster where it computes correctly",
                 coretype, core, kn, cn, cn, fit);
    else
        snprintf(buf, n,
                 "OpenBLAS runs its %s kernels (%s) on this %s CPU, which it does not know: the "
                 "blas backend runs slower than this CPU allows; set OPENBLAS_CORETYPE=%s (kernels "
                 "for %s%s) or install a newer OpenBLAS",
                 core, kn, cn, fit, cn,
                 cpu == LM_ISA_AVX512 ? "; Cooperlake where the CPU has AVX512-BF16" : "");
    return true;
}

bool lm_blis_warning(char *buf, size_t n, const char *config, lm_isa_level cpu)
{
    const lm_isa_level k = lm_blis_config_level(config);
    if (n > 0)
        buf[0] = '\0';
    if (!lm_kernels_older(k, cpu))
        return false;
    snprintf(buf, n,
             "BLIS runs its %s kernels (%s) on this %s CPU, not a configuration made for it: "
             "the blis backend runs slower than this CPU allows; a BLIS that picks a %s "
             "configuration for this CPU would be faster",
             config, lm_isa_level_name(k), lm_isa_level_name(cpu), lm_isa_level_name(cpu));
    return true;
}

void lm_kernels_mark(char *buf, size_t n, lm_isa_level kernels, lm_isa_level cpu)
{
    if (lm_kernels_older(kernels, cpu))
        snprintf(buf, n, "(%s-kernels-on-%s-cpu)", lm_isa_level_name(kernels),
                 lm_isa_level_name(cpu));
    else if (n > 0)
        buf[0] = '\0';
}
