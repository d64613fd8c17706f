/* model_spec.c — MODEL values: parsing, and resolving to the GGUF file to load. */
#include "plan/model_spec.h"

#include "fs.h"
#include "kvd_util.h"
#include "plan/synth.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int hx_model_spec_parse(hx_model_spec *spec, const char *text, lm_err *err)
{
    memset(spec, 0, sizeof *spec);
    if (strncmp(text, "synth:", 6) == 0) {
        const char *p = text + 6;
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if (len == 0 || len >= sizeof spec->preset)
            return LM_FAIL(err, LM_E_INPUT, "model '%s': missing or overlong synthetic preset", text);
        for (size_t i = 0; i < len; ++i) {
            char ch = p[i];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'))
                return LM_FAIL(err, LM_E_INPUT, "model '%s': bad character in preset name", text);
        }
        memcpy(spec->preset, p, len);
        spec->synth = true;
        if (colon) {
            const char *s = colon + 1;
            if (strncmp(s, "seed=", 5) != 0 ||
                !lm_parse_u64(s + 5, strlen(s + 5), 0, UINT64_MAX, &spec->seed))
                return LM_FAIL(err, LM_E_INPUT, "model '%s': expected synth:PRESET[:seed=N]", text);
            spec->has_seed = true;
        }
        return LM_OK;
    }
    if (*text == '\0')
        return LM_FAIL(err, LM_E_INPUT, "model '': empty path");
    /* The two folders a path may name: the models folder (lm_models_dir) and the cache folder
     * (lm_cache_dir), each computed only when named. */
    char models[3072], cache[3072];
    models[0] = cache[0] = '\0';
    int rc = LM_OK;
    if (strstr(text, "${KVDRIFT_MODELS}") != NULL)
        rc = lm_models_dir(models, sizeof models, err);
    if (rc == LM_OK && strstr(text, "${KVDRIFT_CACHE}") != NULL)
        rc = lm_cache_dir(cache, sizeof cache, NULL, err);
    if (rc != LM_OK)
        return rc;
    const struct {
        const char *name, *value;
    } vars[] = {
        {"${KVDRIFT_MODELS}", models},
        {"${KVDRIFT_CACHE}", cache},
    };
    enum { n_vars = sizeof vars / sizeof vars[0] };
    size_t cap = strlen(text) + 1;
    for (size_t v = 0; v < n_vars; ++v)
        for (const char *q = strstr(text, vars[v].name); q; q = strstr(q + 1, vars[v].name))
            cap += strlen(vars[v].value);
    char *out = malloc(cap), *o = out;
    if (out == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (const char *p = text; *p;) {
        size_t v = 0;
        while (v < n_vars && strncmp(p, vars[v].name, strlen(vars[v].name)) != 0)
            ++v;
        if (v < n_vars) {
            o += sprintf(o, "%s", vars[v].value);
            p += strlen(vars[v].name);
        } else if (p[0] == '$' && p[1] == '{') {
            free(out);
            return LM_FAIL(err, LM_E_INPUT,
                           "model '%s': only ${KVDRIFT_MODELS} and ${KVDRIFT_CACHE} may be "
                           "expanded", text);
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    spec->path = out;
    return LM_OK;
}

int hx_model_resolve(char *path, size_t cap, bool *absent, const hx_model_spec *spec,
                     const char *cache_dir, lm_log_fn log, void *log_user, lm_err *err)
{
    *absent = false;
    if (!spec->synth) {
        int n = snprintf(path, cap, "%s", spec->path);
        if (n < 0 || (size_t)n >= cap)
            return LM_FAIL(err, LM_E_INPUT, "model path '%.64s...' is too long", spec->path);
        struct stat st;
        if (stat(spec->path, &st) != 0) {
            if (errno != ENOENT)
                return LM_FAIL(err, LM_E_IO, "model %s: %s", spec->path, strerror(errno));
            *absent = true;
        }
        return LM_OK;
    }
    const uint64_t seed = spec->has_seed ? spec->seed : 0;
    char dir[3072];
    int rc = lm_cache_open(dir, sizeof dir, cache_dir, err);
    if (rc != LM_OK)
        return rc;
    int n = snprintf(path, cap, "%s/synth-%s-seed%" PRIu64 ".gguf", dir, spec->preset, seed);
    if (n < 0 || (size_t)n >= cap)
        return LM_FAIL(err, LM_E_INPUT, "%s: synthetic model path is too long", dir);
    return hx_synth_cache_write(path, spec->preset, seed, log, log_user, err);
}

void hx_model_label(char *label, size_t cap, const hx_model_spec *spec)
{
    if (spec->synth) {
        snprintf(label, cap, "synth-%s-seed%" PRIu64, spec->preset,
                 spec->has_seed ? spec->seed : (uint64_t)0);
        return;
    }
    const char *slash = strrchr(spec->path, '/');
    snprintf(label, cap, "%s", slash ? slash + 1 : spec->path);
    char *dot = strrchr(label, '.');
    if (dot && strcmp(dot, ".gguf") == 0)
        *dot = '\0';
}
