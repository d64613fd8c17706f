/* config.h — one engine configuration (a CONFIG string such as `blas:step=2048` or
 * `naive:step=1:threads=2`) parsed into a struct and formatted back canonically. */
#ifndef HX_CONFIG_H
#define HX_CONFIG_H

#include "kvd_common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Attention variant axis (`attn=`). DEFAULT means "whatever the engine does by default" and is
 * omitted from the canonical string, so adding the axis later does not rename old configs. */
typedef enum hx_attn { HX_ATTN_DEFAULT = 0, HX_ATTN_DENSE = 1, HX_ATTN_STREAM = 2 } hx_attn;

#define HX_CONFIG_STR_MAX 96 /* longest canonical string + NUL */

typedef struct hx_config {
    char backend[16]; /* "naive", "blas" (lm_backend_known) */
    uint32_t step;    /* prefill chunk size in tokens; 0 = the whole prompt in one chunk ("full") */
    uint32_t threads; /* 0 = not specified (the engine's default) */
    hx_attn attn;
    uint64_t sr_seed; /* backend "naive-sr" only (the sweep's noise ensemble, never parsed or
                         formatted): the stochastic-rounding seed; 0 elsewhere */
} hx_config;

/* Grammar: BACKEND[:KEY=VALUE]... with keys step (integer >= 1 or "full"), threads (integer
 * >= 1), attn (dense|stream); each key at most once, in any order. A missing step means full.
 * Unknown backend, unknown key, duplicate key or malformed value: LM_E_INPUT naming the
 * string and the reason. */
int hx_config_parse(hx_config *out, const char *s, lm_err *err);

/* Canonical form: backend, then step=N|full always, then threads=T when nonzero, then attn=A
 * when not default. parse(format(c)) == c for every valid c. Returns the length written
 * (truncated like snprintf when n is too small). */
int hx_config_format(char *buf, size_t n, const hx_config *c);

/* The configuration's baseline: same backend, threads and attn, one chunk (step = full). */
hx_config hx_config_baseline(const hx_config *c);
bool hx_config_equal(const hx_config *a, const hx_config *b);

/* "dense", "stream" or "default". */
const char *hx_attn_name(hx_attn a);
/* The backends a configuration may name: lm_backend_known (kvd_engine.h, the one list). */

#endif
