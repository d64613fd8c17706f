/* fuzz_util.h — what the libFuzzer targets share: the entry point's prototype, a NUL-terminated
 * copy of the input, a per-process scratch file for readers that take a path (written with
 * plain stdio: no fsync, so a run stays fast), and the XXH3-128 trailer fix-up that lets inputs
 * reach the parsers behind a checksum. */
#ifndef KVD_FUZZ_UTIL_H
#define KVD_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* malloc'd copy of data[size] plus a NUL (the parsers of text take C strings). */
static inline char *fz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s != NULL) {
        if (size)
            memcpy(s, data, size);
        s[size] = '\0';
    }
    return s;
}

static char fz_scratch_path[256];

static inline void fz_scratch_remove(void)
{
    unlink(fz_scratch_path);
}

/* Writes bytes[n] to this process's scratch file and returns its path (static buffer); the
 * file is removed when the process exits. */
static inline const char *fz_scratch(const void *bytes, size_t n, const char *ext)
{
    char *path = fz_scratch_path;
    const size_t cap = sizeof fz_scratch_path;
    const char *dir = getenv("TMPDIR");
    if (path[0] == '\0')
        atexit(fz_scratch_remove);
    snprintf(path, cap, "%s/kvdrift-fuzz-%ld%s", dir && *dir ? dir : "/tmp", (long)getpid(),
             ext);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        abort();
    if (n && fwrite(bytes, 1, n, f) != n)
        abort();
    fclose(f);
    return path;
}

/* A copy of data whose last 16 bytes are replaced by the XXH3-128 (canonical) of the rest, as the
 * capture and envelope writers store it; NULL when size < 16. */
static inline uint8_t *fz_with_xxh3_trailer(const uint8_t *data, size_t size)
{
    if (size < 16)
        return NULL;
    uint8_t *b = malloc(size);
    if (b == NULL)
        return NULL;
    memcpy(b, data, size);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(b, size - 16));
    memcpy(b + size - 16, c.digest, 16);
    return b;
}

#endif
