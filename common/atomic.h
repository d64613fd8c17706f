/* atomic.h — write a whole file so that readers see either the old or the new contents:
 * temp file in the same folder, write, fsync, rename, fsync of the folder. */
#ifndef HX_ATOMIC_H
#define HX_ATOMIC_H

#include "kvd_common.h"

#include <stddef.h>

/* On any failure the target is untouched and the temp file removed; LM_E_IO naming path. */
int hx_write_file_atomic(const char *path, const void *bytes, size_t n, lm_err *err);

/* hx_write_file_atomic of text and one newline (JSON documents end with one). Takes text, a
 * malloc'd NUL-terminated string, and frees it on every path; LM_E_NOMEM naming path. */
int hx_write_text_atomic(const char *path, char *text, lm_err *err);

/* Reads a whole file into a malloc'd, NUL-terminated buffer (*n excludes the NUL).
 * LM_E_IO when it cannot be opened or read. */
int hx_read_file(char **out, size_t *n, const char *path, lm_err *err);

#endif
