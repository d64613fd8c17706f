/* golden_verdict.c — sets each configuration's golden status (match, mismatch, absent, stale). */
#include "judge/golden_verdict.h"

#include <stdio.h>
#include <string.h>

int hx_golden_judge(hx_report *r, const hx_golden *g, const char *const *keys,
                    const hx_golden_entry *now, hx_golden_counts *counts, lm_err *err)
{
    for (size_t i = 0; i < r->n_configs; ++i) {
        hx_config_report *c = &r->configs[i];
        if (c->skipped || c->cls == HX_ERROR) /* an adapter's run that left no bits */
            continue;
        hx_golden_entry e;
        bool found = false;
        int rc = hx_golden_find(g, r->case_name, c->config, keys[i], &e, &found, err);
        if (rc != LM_OK)
            return rc;
        snprintf(c->golden_key, sizeof c->golden_key, "%s", keys[i]);
        c->golden_note[0] = '\0';
        hx_golden_input in;
        snprintf(in.model_hash, sizeof in.model_hash, "%s", now[i].model_hash);
        snprintf(in.tokens_hash, sizeof in.tokens_hash, "%s", now[i].tokens_hash);
        in.version = now[i].version;
        in.engine_version = now[i].engine_version;
        char why[240];
        if (!found && hx_golden_find_stale(g, r->case_name, c->config, &in, why, sizeof why)) {
            c->golden = HX_GOLDEN_STALE;
            snprintf(c->golden_note, sizeof c->golden_note, "no golden under key %s, and one "
                     "blessed for other input: %.170s; re-bless (kvdrift bless)", keys[i], why);
        } else if (!found) {
            c->golden = HX_GOLDEN_ABSENT;
            snprintf(c->golden_note, sizeof c->golden_note, "no golden under key %s", keys[i]);
        } else if (hx_golden_input_differs(&e, &in, why, sizeof why)) {
            c->golden = HX_GOLDEN_STALE;
            snprintf(c->golden_note, sizeof c->golden_note, "golden blessed for other input: "
                     "%.190s; re-bless (kvdrift bless)", why);
        } else if (strcmp(e.hash_hex, now[i].hash_hex) == 0) {
            c->golden = HX_GOLDEN_MATCH;
            snprintf(c->golden_note, sizeof c->golden_note, "bits as blessed (key %s)", keys[i]);
        } else {
            c->golden = HX_GOLDEN_MISMATCH;
            int w = snprintf(c->golden_note, sizeof c->golden_note,
                             "capture XXH3 %.12s... differs from the golden %.12s... (key %s)",
                             now[i].hash_hex, e.hash_hex, keys[i]);
            /* Where did top-1 go at the summarized position. */
            if (w > 0 && (size_t)w < sizeof c->golden_note && now[i].n_top && e.n_top &&
                now[i].top_ids[0] != e.top_ids[0])
                snprintf(c->golden_note + w, sizeof c->golden_note - (size_t)w,
                         "; top-1 at position %u was id %d (%.9g), now id %d (%.9g)",
                         (unsigned)e.position, (int)e.top_ids[0], (double)e.top_logits[0],
                         (int)now[i].top_ids[0], (double)now[i].top_logits[0]);
        }
        counts->n[c->golden]++;
    }
    return LM_OK;
}
