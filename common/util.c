/* util.c — small shared helpers (util.h). */
#include "util.h"

#include <stdio.h>
#include <string.h>

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

void lm_words_append(char *buf, size_t n, size_t i, size_t count, const char *word)
{
    const size_t k = strlen(buf);
    const char *sep = i == 0 ? "" : i + 1 == count ? " or " : ", ";
    if (k < n)
        snprintf(buf + k, n - k, "%s%s", sep, word);
}
