/* util.c — small shared helpers (kvd_util.h). */
#include "kvd_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

double lm_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool lm_parse_u64(const char *s, size_t len, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (s == NULL || len == 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; ++i) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        const uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool lm_parse_u32(const char *s, size_t len, uint32_t lo, uint32_t hi, uint32_t *out)
{
    uint64_t v;
    if (!lm_parse_u64(s, len, lo, hi, &v))
        return false;
    *out = (uint32_t)v;
    return true;
}

bool lm_parse_u32z(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    return s != NULL && lm_parse_u32(s, strlen(s), lo, hi, out);
}

bool lm_parse_u64z(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    return s != NULL && lm_parse_u64(s, strlen(s), lo, hi, out);
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

bool lm_parse_seed(const char *s, uint64_t *out)
{
    if (s == NULL)
        return false;
    if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
        return lm_parse_u64z(s, 0, UINT64_MAX, out);
    const char *h = s + 2;
    size_t len = strlen(h);
    if (len == 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; ++i) {
        const int d = hexval(h[i]);
        if (d < 0 || v >> 60 != 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

void lm_hex_encode(char *out, const uint8_t *bytes, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; ++i) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

bool lm_hex_decode(uint8_t *bytes, size_t n, const char *hex)
{
    if (hex == NULL || strlen(hex) != 2 * n)
        return false;
    for (size_t i = 0; i < n; ++i) {
        const int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

int64_t lm_index_of_u32(const uint32_t *v, size_t n, uint32_t x)
{
    for (size_t i = 0; i < n; ++i)
        if (v[i] == x)
            return (int64_t)i;
    return -1;
}

/* On the bits: a float is non-finite exactly when its exponent bits are all ones. Whole
 * blocks of 64 have no exit inside them and a fixed trip count, so the compiler vectorizes
 * them at -O2. */
static bool any_exponent_all_ones(const float *x, size_t n)
{
    const uint32_t exp_bits = 0x7f800000u;
    uint32_t any = 0;
    for (size_t i = 0; i < n; ++i) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        any |= (u & exp_bits) == exp_bits;
    }
    return any != 0;
}

bool lm_all_finite(const float *x, size_t n)
{
    enum { BLOCK = 64 };
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        if (any_exponent_all_ones(x + i, BLOCK))
            return false;
    return !any_exponent_all_ones(x + i, n - i);
}

void lm_field_copy(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", (src && *src) ? src : "unknown");
    for (char *p = dst; *p; ++p)
        if (*p == '\n' || *p == '\r' || *p == ';')
            *p = ' ';
    size_t len = strlen(dst);
    while (len && dst[len - 1] == ' ')
        dst[--len] = '\0';
}

void lm_words_append(char *buf, size_t n, size_t i, size_t count, const char *word,
                     const char *last)
{
    const size_t k = strlen(buf);
    const char *sep = i == 0 ? "" : i + 1 == count ? last : ", ";
    if (k < n)
        snprintf(buf + k, n - k, "%s%s", sep, word);
}

uint64_t lm_peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0 || ru.ru_maxrss <= 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* Linux: kilobytes */
}
