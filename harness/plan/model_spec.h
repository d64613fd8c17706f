/* model_spec.h — a MODEL value (`synth:tiny:seed=3`, `${KVDRIFT_MODELS}/x.gguf`, a path) into
 * the GGUF file to load: the one resolver that case files (check, bless) and `kvdrift sweep`
 * share. */
#ifndef HX_MODEL_SPEC_H
#define HX_MODEL_SPEC_H

#include "kvd_common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hx_model_spec {
    bool synth;        /* synth:PRESET[:seed=N] */
    char *path;        /* expanded file path (when !synth) */
    char preset[64];   /* synthetic preset name (when synth) */
    bool has_seed;
    uint64_t seed;
} hx_model_spec;

/* Parses a model value into spec (free spec->path with free()): `synth:PRESET[:seed=N]`, or a
 * path in which ${KVDRIFT_MODELS} expands to the models folder (lm_models_dir) and
 * ${KVDRIFT_CACHE} to the cache folder (lm_cache_dir). */
int hx_model_spec_parse(hx_model_spec *spec, const char *text, lm_err *err);

/* The GGUF path for spec in path[cap]. A file: its path, and *absent set when it does not
 * exist (ENOENT; any other stat error is LM_E_IO). A synthetic preset: written into the cache
 * folder (lm_cache_open(cache_dir): NULL means $KVDRIFT_CACHE or the default) as
 * synth-PRESET-seedN.gguf (seed 0 when none is given) by hx_synth_cache_write on every call:
 * its bytes depend only on preset, seed and synth.c, so a copy left by an older synth.c is
 * never used, and the presets take milliseconds (a replaced copy is reported through log). */
int hx_model_resolve(char *path, size_t cap, bool *absent, const hx_model_spec *spec,
                     const char *cache_dir, lm_log_fn log, void *log_user, lm_err *err);

/* A short report label: the file name without ".gguf", or synth-PRESET-seedN. */
void hx_model_label(char *label, size_t cap, const hx_model_spec *spec);

#endif
