/* fuzz_config.c — libFuzzer target for CONFIG strings (BACKEND[:KEY=VALUE]...) and rotating-
 * cache lists. Checks the documented property parse(format(c)) == c for every string that
 * parses, besides crashes, sanitizer reports and leaks. */
#include "model/config.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fz_cstr(data, size);
    if (s == NULL)
        return 0;
    hx_config c, back;
    lm_err err = {0};
    if (hx_config_parse(&c, s, &err) == LM_OK) {
        char buf[256];
        int n = hx_config_format(buf, sizeof buf, &c);
        lm_err e2 = {0};
        if (n < 0 || (size_t)n >= sizeof buf || hx_config_parse(&back, buf, &e2) != LM_OK ||
            !hx_config_equal(&c, &back))
            abort(); /* the round trip the header promises is broken */
    }
    hx_config *v = NULL;
    size_t nv = 0;
    lm_err e3 = {0};
    (void)hx_config_cross_rot(&v, &nv, "fuzz", s, &e3); /* nv == 0: validates the list */
    free(v);
    free(s);
    return 0;
}
