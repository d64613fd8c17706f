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
