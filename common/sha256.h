/* sha256.h — SHA-256 (FIPS 180-4) of a file, for checking the model_sha256 a dump names
 * against the model file (the digest other tools print: sha256sum, Hugging Face). */
#ifndef HX_SHA256_H
#define HX_SHA256_H

#include "kvd_common.h"

#include <stddef.h>
#include <stdint.h>

typedef struct hx_sha256 {
    uint32_t h[8];
    uint64_t len;        /* bytes hashed so far */
    uint8_t block[64];
    size_t fill;         /* bytes in block */
} hx_sha256;

void hx_sha256_init(hx_sha256 *s);
void hx_sha256_update(hx_sha256 *s, const void *data, size_t n);
void hx_sha256_final(hx_sha256 *s, uint8_t out[32]);
/* The file's digest as 64 lowercase hex digits + NUL; LM_E_IO naming path when unreadable. */
int hx_sha256_file_hex(char out[65], const char *path, lm_err *err);

#endif
