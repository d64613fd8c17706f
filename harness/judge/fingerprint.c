/* fingerprint.c — detect the platform parts that change float32 bits and hash them. */
#include "judge/fingerprint.h"

#include "model/capture.h"
#include "kvd_engine.h"
#include "kvd_util.h"

#include <gnu/libc-version.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <xxhash.h>

#ifndef KVD_BUILD_FLAGS
#define KVD_BUILD_FLAGS "unknown"
#endif

static void cpu_model(char *dst, size_t n)
{
    char line[512];
    const char *found = NULL;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                found = colon + 1;
                while (*found == ' ' || *found == '\t')
                    ++found;
            }
            break;
        }
    }
    lm_field_copy(dst, n, found);
    if (f)
        fclose(f);
}

/* Bits of the libm functions the engine uses, over fixed inputs spanning their ranges. */
static uint32_t libm_probe(void)
{
    enum { N = 4096 };
    static float out[5 * N];
    for (int i = 0; i < N; ++i) {
        volatile float x = -20.0f + 40.0f * (float)i / (float)N; /* volatile: no constant folding */
        out[5 * i + 0] = expf(x);
        out[5 * i + 1] = logf(fabsf(x) + 0.001f);
        out[5 * i + 2] = sinf(x * 100.0f);
        out[5 * i + 3] = cosf(x * 100.0f);
        out[5 * i + 4] = powf(10000.0f, x / 40.0f);
    }
    return (uint32_t)XXH3_64bits(out, sizeof out);
}

/* Appends sep (when buf is not empty) and part to the NUL-terminated buf[n] (truncating). */
static void append(char *buf, size_t n, const char *sep, const char *part)
{
    size_t k = strlen(buf);
    snprintf(buf + k, n - k, "%s%s", k ? sep : "", part);
}

/* Concatenates every registered backend's describe hook (backends without one add nothing). */
static void backend_parts(hx_fingerprint *fp)
{
    for (size_t i = 0; i < lm_backend_count(); ++i) {
        const lm_backend_info *b = lm_backend_at(i);
        bool seen = false; /* several rows may share one hook (the CUDA backends) */
        for (size_t j = 0; j < i && !seen; ++j)
            seen = lm_backend_at(j)->describe == b->describe;
        if (b->describe == NULL || seen)
            continue;
        char full[sizeof fp->backends], brief[sizeof fp->backends_brief];
        b->describe(full, sizeof full, false);
        b->describe(brief, sizeof brief, true);
        /* an empty full form: nothing on this machine decides the bits (det: every path
         * gives the same bits; cuda without a device) */
        if (full[0] != '\0')
            append(fp->backends, sizeof fp->backends, "; ", full);
        if (brief[0] == '\0')
            continue;
        append(fp->backends_brief, sizeof fp->backends_brief, " ", brief);
    }
}

void hx_fingerprint_detect(hx_fingerprint *fp)
{
    memset(fp, 0, sizeof *fp);
    struct utsname u;
    lm_field_copy(fp->arch, sizeof fp->arch, uname(&u) == 0 ? u.machine : NULL);
    cpu_model(fp->cpu, sizeof fp->cpu);
    const char *expf_variant = "unknown";
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2"), avx512f = __builtin_cpu_supports("avx512f");
    int fma = __builtin_cpu_supports("fma"), fma4 = __builtin_cpu_supports("fma4");
    snprintf(fp->isa, sizeof fp->isa, "%s%s%s%s%s", avx2 ? "avx2+" : "", avx512f ? "avx512f+" : "",
             fma ? "fma+" : "", fma4 ? "fma4+" : "", "sse2");
    /* glibc's x86_64 expf ifunc: the FMA build needs FMA and AVX2 usable. */
    expf_variant = (fma && avx2) ? "fma" : "sse2";
#else
    lm_field_copy(fp->isa, sizeof fp->isa, NULL);
#endif
    backend_parts(fp);
#if defined(__clang__)
    snprintf(fp->compiler, sizeof fp->compiler, "clang %s", __clang_version__);
#elif defined(__GNUC__)
    snprintf(fp->compiler, sizeof fp->compiler, "gcc %s", __VERSION__);
#else
    lm_field_copy(fp->compiler, sizeof fp->compiler, NULL);
#endif
    lm_field_copy(fp->flags, sizeof fp->flags, KVD_BUILD_FLAGS);
    snprintf(fp->libc, sizeof fp->libc, "glibc %s", gnu_get_libc_version());
    snprintf(fp->libm, sizeof fp->libm, "expf=%s probe=%08x", expf_variant,
             (unsigned)libm_probe());
    hx_fingerprint_finish(fp);
}

void hx_text_id16(char out[17], const char *text)
{
    XXH128_canonical_t can;
    XXH128_canonicalFromHash(&can, XXH3_128bits(text, strlen(text)));
    char hex[33];
    lm_hex_encode(hex, can.digest, 16);
    memcpy(out, hex, 16);
    out[16] = '\0';
}

void hx_fingerprint_finish(hx_fingerprint *fp)
{
    snprintf(fp->text, sizeof fp->text,
             "arch=%s; cpu=%s; isa=%s; %s%scompiler=%s; flags=%s; libc=%s; libm=%s", fp->arch,
             fp->cpu, fp->isa, fp->backends, fp->backends[0] ? "; " : "", fp->compiler,
             fp->flags, fp->libc, fp->libm);
    hx_text_id16(fp->id, fp->text);
    snprintf(fp->short_text, sizeof fp->short_text, "%s %s %s, %s, %s %s [%s]", fp->arch,
             fp->backends_brief[0] ? fp->backends_brief : "-", fp->isa, fp->compiler, fp->libc,
             fp->libm, fp->id);
}
