/* util.h — small helpers the engine, the reference and the harness share (no arithmetic on
 * model data, no files): one-line text fields. */
#ifndef KVD_UTIL_H
#define KVD_UTIL_H

#include <stddef.h>

/* A one-line "key=value; ..." field value: src ("unknown" when NULL or empty) copied into
 * dst[n] (truncated to n - 1 bytes), with newlines and ';' (the part separator) turned into
 * spaces and trailing spaces dropped. */
void lm_field_copy(char *dst, size_t n, const char *src);

#endif
