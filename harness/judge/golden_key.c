/* golden_key.c — per-configuration golden keys (golden_key.h). */
#include "judge/golden_key.h"

#include "kvd_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Hashes the cos then the sin table of one theta, [n_pos][n_rot/2] each. */
static int hash_tables(XXH3_state_t *st, const lm_model *m, float theta, uint32_t n_pos,
                       lm_err *err)
{
    const size_t n = (size_t)n_pos * (m->hp.n_rot / 2);
    float *tab = malloc((2 * n + 1) * sizeof *tab);
    if (tab == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "golden key: no memory for %u RoPE positions",
                       (unsigned)n_pos);
    lm_rope_table(m, theta, n_pos, tab, tab + n);
    int rc = XXH3_64bits_update(st, tab, 2 * n * sizeof *tab) == XXH_OK
                 ? LM_OK
                 : LM_FAIL(err, LM_E_INTERNAL, "golden key: XXH3 update failed");
    free(tab);
    return rc;
}

int hx_golden_rope_probe(char out[17], const lm_model *m, uint32_t n_pos, lm_err *err)
{
    if (n_pos == 0)
        return LM_FAIL(err, LM_E_INTERNAL, "golden key: RoPE probe of 0 positions");
    XXH3_state_t *st = XXH3_createState();
    if (st == NULL || XXH3_64bits_reset(st) != XXH_OK) {
        XXH3_freeState(st);
        return LM_FAIL(err, LM_E_NOMEM, "golden key: cannot create an XXH3 state");
    }
    const lm_hparams *hp = &m->hp;
    int rc = hash_tables(st, m, hp->rope_theta, n_pos, err);
    if (rc == LM_OK && hp->rope_theta_swa != 0.0f && hp->rope_theta_swa != hp->rope_theta)
        rc = hash_tables(st, m, hp->rope_theta_swa, n_pos, err);
    if (rc == LM_OK)
        snprintf(out, 17, "%016llx", (unsigned long long)XXH3_64bits_digest(st));
    XXH3_freeState(st);
    return rc;
}

void hx_golden_key_make(hx_golden_key *k, const hx_fingerprint *fp, const char *backend,
                        const char *describe, const char *rope)
{
    bool has = describe && *describe;
    snprintf(k->text, sizeof k->text, "arch=%s; compiler=%s; flags=%s; rope=%s; backend=%s%s%s",
             fp->arch, fp->compiler, fp->flags, rope, backend, has ? "; " : "",
             has ? describe : "");
    hx_text_id16(k->id, k->text);
}

void hx_golden_key_of(hx_golden_key *k, const hx_fingerprint *fp, const char *backend,
                      const char *rope)
{
    const lm_backend_info *b = lm_backend_find(backend, strlen(backend));
    char desc[512] = "";
    if (b && b->describe)
        b->describe(desc, sizeof desc, false);
    hx_golden_key_make(k, fp, backend, desc, rope);
}

void hx_golden_key_adapter(hx_golden_key *k, const hx_fingerprint *fp, const hx_adapter_desc *d,
                           uint32_t n_pos)
{
    snprintf(k->text, sizeof k->text, "arch=%s; adapter=%s; engine=%s; build=%s; positions=%u",
             fp->arch, d->adapter, d->engine, d->engine_build, (unsigned)n_pos);
    hx_text_id16(k->id, k->text);
}
