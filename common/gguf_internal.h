/* gguf_internal.h — entry points of the GGUF reader that only kvdrift's own tests, fuzz
 * target and GGUF writer (gguf_write.c) use (not part of the public API in kvd_gguf.h). */
#ifndef KVD_GGUF_INTERNAL_H
#define KVD_GGUF_INTERNAL_H

#include "kvd_gguf.h"

/* Parses and validates a GGUF image already in memory, exactly as lm_gguf_open does for a
 * mapped file. bytes[size] is borrowed: it must outlive the handle. name is used in messages. */
int lm_gguf_open_memory(lm_gguf **out, const char *name, const void *bytes, uint64_t size,
                        lm_err *err);

/* Bytes of one scalar value of type t (u8 .. f64, bool); 0 for STR, ARR and unknown types. */
uint64_t lm_gguf_vtype_size(lm_gguf_vtype t);

#endif
