/* util.h — small helpers the engine, the reference and the harness share (no arithmetic on
 * model data, no files): one-line text fields, word lists for messages. */
#ifndef KVD_UTIL_H
#define KVD_UTIL_H

#include <stddef.h>

/* A one-line "key=value; ..." field value: src ("unknown" when NULL or empty) copied into
 * dst[n] (truncated to n - 1 bytes), with newlines and ';' (the part separator) turned into
 * spaces and trailing spaces dropped. */
void lm_field_copy(char *dst, size_t n, const char *src);

/* Appends word i of count to the NUL-terminated list in buf[n] as "a, b or c" does (no
 * separator before word 0, " or " before the last, ", " otherwise); truncates at n. */
void lm_words_append(char *buf, size_t n, size_t i, size_t count, const char *word);

#endif
