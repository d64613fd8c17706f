/* fuzz_golden.c — libFuzzer target for golden files: the JSON is loaded through the real loader
 * (size cap, regular-file check, validation of every entry), then each case/config/platform
 * entry is looked up again. Any crash, sanitizer report or leak is a finding. */
#include "fuzz_util.h"
#include "judge/golden.h"

#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hx_golden *g = NULL;
    lm_err err = {0};
    const char *path = fz_scratch(data, size, ".json");
    if (hx_golden_load(&g, path, false, &err) != LM_OK)
        return 0;
    (void)hx_golden_count(g);
    /* every key path of the validated document, through the lookup used by check */
    json_error_t je;
    json_t *root = json_loadb((const char *)data, size, 0, &je);
    const char *ck, *fk, *pk;
    json_t *cv, *fv, *pv;
    json_object_foreach(json_object_get(root, "cases"), ck, cv)
        json_object_foreach(cv, fk, fv)
            json_object_foreach(fv, pk, pv) {
                hx_golden_entry e;
                bool found = false;
                lm_err e2 = {0};
                (void)hx_golden_find(g, ck, fk, pk, &e, &found, &e2);
            }
    json_decref(root);
    hx_golden_free(g);
    return 0;
}
