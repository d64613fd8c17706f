/* fuzz_case.c — libFuzzer target for case files (INI text -> hx_case): the parser and every
 * validation behind it. Any crash, sanitizer report or leak is a finding. */
#include "plan/case.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fz_cstr(data, size);
    if (text == NULL)
        return 0;
    hx_case *c = NULL;
    lm_err err = {0};
    if (hx_case_parse_string(&c, text, "fuzz.case", &err) == LM_OK) {
        hx_config *v = NULL;
        size_t n = 0;
        lm_err e2 = {0};
        if (hx_case_configs(&v, &n, c, &e2) == LM_OK)
            free(v);
    }
    hx_case_free(c);
    free(text);
    return 0;
}
