/* backend.c — the backend factory: picks a compute backend by name. */
#include "backend.h"

#include "kvd_engine.h"

#include <string.h>

/* Each backend file exposes one constructor; the factory is the only place that names them,
 * so adding a backend (cuda later) touches this table and nothing in the forward pass. */
int lm_backend_naive_create(lm_backend **out, int n_threads, lm_err *err);
int lm_backend_blas_create(lm_backend **out, int n_threads, lm_err *err);
int lm_backend_det_create(lm_backend **out, int n_threads, lm_err *err);
int lm_backend_det_create_named(lm_backend **out, const char *name, int n_threads, lm_err *err);
int lm_backend_sr_create_named(lm_backend **out, const char *name, int n_threads, lm_err *err);

typedef struct backend_entry {
    const char *name;
    int (*create)(lm_backend **out, int n_threads, lm_err *err);
} backend_entry;

static const backend_entry backends[] = {
    {"naive", lm_backend_naive_create},
    {"blas", lm_backend_blas_create},
    {"det", lm_backend_det_create},
};

/* The table above in words, for "unknown backend" messages everywhere. */
static const char expected[] = "naive, blas or det";

bool lm_backend_known(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; ++i)
        if (strlen(backends[i].name) == len && memcmp(backends[i].name, name, len) == 0)
            return true;
    return false;
}

const char *lm_backend_expected(void)
{
    return expected;
}

int lm_backend_create(lm_backend **out, const char *name, int n_threads, lm_err *err)
{
    *out = NULL;
    if (name == NULL)
        name = "blas";
    if (n_threads < 0)
        return LM_FAIL(err, LM_E_INPUT, "threads %d: must be >= 0", n_threads);
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; ++i)
        if (strcmp(name, backends[i].name) == 0)
            return backends[i].create(out, n_threads, err);
    /* "naive-sr[:seed=N]": the seed travels in the name, so lm_ctx_params needs no new field. */
    if (strncmp(name, "naive-sr", 8) == 0 && (name[8] == '\0' || name[8] == ':'))
        return lm_backend_sr_create_named(out, name, n_threads, err);
    if (strncmp(name, "det:", 4) == 0) /* det:isa=NAME, a forced kernel path */
        return lm_backend_det_create_named(out, name, n_threads, err);
    return LM_FAIL(err, LM_E_INPUT, "backend '%s': unknown (expected %s)", name, expected);
}

void lm_backend_destroy(lm_backend *be)
{
    if (be != NULL)
        be->vt->destroy(be);
}
