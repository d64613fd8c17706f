/* adapter.h — another engine behind an adapter (adapters/, docs/ADAPTERS.md): what it says of
 * itself (`ADAPTER --describe`, a JSON document on stdout) and the configurations of its knobs
 * that a sweep runs.
 *
 * The description (protocol 1; other keys are ignored):
 *   {"protocol": 1,
 *    "adapter": "llamacpp",                       name, [A-Za-z0-9_.-]{1,31}
 *    "engine": "llama.cpp",                       free text
 *    "engine_version": "llama-cpp-python 0.3.36",  free text, non-empty: the version its
 *                                                 goldens are pinned to (another reads as
 *                                                 stale in check)
 *    "engine_build": "CPU : AVX2 = 1 | ...",      optional free text: what of the build or
 *                                                 machine may change its bits (part of its
 *                                                 goldens' key, like a platform)
 *    "profile": "f32",                            the profile when no knob value names one
 *    "knobs": [
 *      {"name": "type_k",                         [a-z0-9_]{1,31}, unique
 *       "values": ["f32", "f16"],                 1..HX_ADAPTER_MAX_VALUES strings of
 *                                                 [A-Za-z0-9_.+-]{1,31}, unique
 *       "default": "f16",                         one of values: the baseline's setting
 *       "profiles": {"f16": "f16kv"}},            optional: value -> profile (kvd_profile.h)
 *      ...]}
 * A configuration is one value per knob (the default where the sweep gives no axis); the
 * profile it implies is the one its knob values name (first knob first), else "profile". Two
 * knob values naming different profiles: the first knob's wins, and hx_adapter_profile says
 * which were passed over (no profile combines two roundings).
 *
 * Everything is checked on parsing (hx_adapter_desc_parse): a malformed description is
 * LM_E_INPUT with one line naming the key.
 *
 * `ADAPTER --describe` exiting with status HX_ADAPTER_NOT_INSTALLED says the engine is not
 * installed on this machine (plan/adapter_resolve.h: LM_E_UNSUPPORTED; check and bless skip a
 * case naming it, as they skip one whose model file is absent). */
#ifndef HX_ADAPTER_H
#define HX_ADAPTER_H

#include "kvd_common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HX_ADAPTER_MAX_KNOBS 16
#define HX_ADAPTER_MAX_VALUES 32
#define HX_ADAPTER_NAME_MAX 32     /* knob names, values, the adapter's name (NUL included) */
#define HX_ADAPTER_TEXT_MAX 256    /* engine, engine_version, engine_build */
/* The exit status of `--describe` that says "not installed here". */
#define HX_ADAPTER_NOT_INSTALLED 3
/* The describe document's largest size (bytes on stdout). */
#define HX_ADAPTER_DESCRIBE_MAX (64u << 10)

typedef struct hx_adapter_knob {
    char name[HX_ADAPTER_NAME_MAX];
    uint32_t n_values;
    char values[HX_ADAPTER_MAX_VALUES][HX_ADAPTER_NAME_MAX];
    char profile[HX_ADAPTER_MAX_VALUES][8]; /* "" when the value names none */
    uint32_t def;                           /* index of the default value */
} hx_adapter_knob;

typedef struct hx_adapter_desc {
    char adapter[HX_ADAPTER_NAME_MAX];
    char engine[HX_ADAPTER_TEXT_MAX];
    char engine_version[HX_ADAPTER_TEXT_MAX];
    char engine_build[HX_ADAPTER_TEXT_MAX]; /* "" when not given */
    char profile[8];                        /* the default profile */
    uint32_t n_knobs;
    hx_adapter_knob knobs[HX_ADAPTER_MAX_KNOBS];
} hx_adapter_desc;

/* One configuration: value index per knob ([n_knobs] of the description). */
typedef struct hx_adapter_config {
    uint8_t value[HX_ADAPTER_MAX_KNOBS];
} hx_adapter_config;

/* Parses and validates text [n] (what the adapter printed); what names the adapter in the
 * error line. */
int hx_adapter_desc_parse(hx_adapter_desc *out, const char *text, size_t n, const char *what,
                          lm_err *err);

/* The sweep's axes: each "KEY=V1,V2,..." of axes [n_axes] names a knob and values from its
 * declared list (each knob at most once; a value not declared is LM_E_INPUT naming the knob
 * and the declared values). The configurations are the cross product in axis order (the last
 * axis fastest), other knobs at their default; the baseline (every knob at its default) is
 * not added. *out is malloc'd [*n]. */
int hx_adapter_plan(hx_adapter_config **out, size_t *n, const hx_adapter_desc *d,
                    const char *const *axes, size_t n_axes, lm_err *err);

/* The configuration with every knob at its default. */
void hx_adapter_default(hx_adapter_config *out, const hx_adapter_desc *d);
bool hx_adapter_config_equal(const hx_adapter_config *a, const hx_adapter_config *b,
                             const hx_adapter_desc *d);

/* The configuration's name: "ADAPTER:KEY=VALUE:..." over the knobs that differ from their
 * default ("ADAPTER" alone for the baseline), in the description's knob order. */
void hx_adapter_config_name(char *buf, size_t cap, const hx_adapter_desc *d,
                            const hx_adapter_config *c);

/* The profile configuration c implies (see above); passed_over (when non-NULL, cap bytes) gets
 * "KEY=VALUE (PROFILE), ..." of knob values whose profile lost to an earlier one, "" when none. */
const char *hx_adapter_profile(const hx_adapter_desc *d, const hx_adapter_config *c,
                               char *passed_over, size_t cap);

#endif
