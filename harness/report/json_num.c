/* json_num.c — NaN/Inf-safe JSON numbers and a failure-counting object set. */
#include "report/json_num.h"

#include <math.h>

json_t *hx_json_num(double d)
{
    if (isnan(d))
        return json_string("NaN");
    if (isinf(d))
        return json_string(d > 0 ? "Infinity" : "-Infinity");
    return json_real(d);
}

int hx_json_put(json_t *o, const char *k, json_t *v)
{
    return o == NULL || v == NULL || json_object_set_new(o, k, v) != 0;
}
