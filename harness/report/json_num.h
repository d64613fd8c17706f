/* json_num.h — the two jansson helpers every report.json writer shares. */
#ifndef KVD_JSON_NUM_H
#define KVD_JSON_NUM_H

#include <jansson.h>

/* JSON has no NaN or Inf: such values are written as the strings "NaN", "Infinity",
 * "-Infinity" (REPORT-SCHEMA.md, "numbers"); others as a JSON real. */
json_t *hx_json_num(double d);
/* Sets o[k] = v (taking v's reference); 1 when v is NULL (a failed allocation) or the set
 * fails, else 0, so that callers can sum the failures of a whole object. */
int hx_json_put(json_t *o, const char *k, json_t *v);

#endif
