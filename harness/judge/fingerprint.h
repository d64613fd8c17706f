/* fingerprint.h — the platform fingerprint reports carry: everything that can change float32
 * bits between machines and builds of the same source (a golden is keyed by the subset that
 * can change its own configuration's bits: golden_key.h).
 *
 * Parts: CPU architecture and model; ISA features that select different kernels (AVX2,
 * AVX512F, FMA, FMA4); what each registered backend's describe hook reports (blas: the
 * OpenBLAS build and the core it picked at run time, which OPENBLAS_CORETYPE changes); compiler
 * (__VERSION__) and the numerics build flags (KVD_BUILD_FLAGS from the Makefile); the C
 * library's version and its libm variant: glibc resolves expf and friends by CPU (an FMA build
 * when FMA and AVX2 are usable, else SSE2), so the variant is reported both as the predicted
 * name and as a probe — an XXH3 of expf/logf/sinf/cosf/powf bits over 4096 fixed inputs —
 * which catches any other libm difference too. */
#ifndef HX_FINGERPRINT_H
#define HX_FINGERPRINT_H

#include "kvd_common.h"

typedef struct hx_fingerprint {
    char arch[32];       /* uname machine, e.g. "x86_64" */
    char cpu[128];       /* /proc/cpuinfo model name */
    char isa[64];        /* e.g. "avx2+avx512f+fma" */
    char backends[320];  /* the backends' describe(brief=false) parts, in registry order, "; " joined */
    char backends_brief[128]; /* their describe(brief=true) words, space joined */
    char compiler[96];   /* "gcc 12.2.0" */
    char flags[128];     /* KVD_BUILD_FLAGS */
    char libc[64];       /* "glibc 2.36" */
    char libm[64];       /* "expf=fma probe=1a2b3c4d" */
    char text[1024];     /* every part, "key=value; " joined: the string that is hashed */
    char id[17];         /* first 16 hex digits of XXH3-128(text): the golden-file key */
    char short_text[480]; /* a readable one-liner: backends' words, isa, compiler, libc, libm, id */
} hx_fingerprint;

/* Detects this process's platform. Parts that cannot be read become "unknown" (never an
 * error: an unknown part still separates goldens, it only makes them less portable). */
void hx_fingerprint_detect(hx_fingerprint *out);

/* The first 16 hex digits of XXH3-128(text): the ids of platforms and golden keys. */
void hx_text_id16(char out[17], const char *text);

/* Recomputes text, id and short_text from the parts (used by detect; lets tests build one). */
void hx_fingerprint_finish(hx_fingerprint *fp);

#endif
