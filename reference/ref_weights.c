/* ref_weights.c — checks the engine's dequantized float32 weights against the reference's own
 * dequantization of the same file (ref_dequant.c), so that a dequantization defect in the
 * engine cannot enter the reference unseen. The GGUF container is read with the shared reader
 * (it only locates bytes; every value is decoded here). */
#include "kvd_ref.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int ref_weights_check(const lm_model *m, lm_err *err)
{
    if (m->path == NULL || m->weights == NULL || m->n_weights == 0)
        return LM_OK;
    lm_gguf *g = NULL;
    int rc = lm_gguf_open(&g, m->path, err);
    if (rc)
        return rc;
    float *buf = NULL;
    uint64_t cap = 0;
    for (uint32_t i = 0; i < m->n_weights && rc == LM_OK; ++i) {
        const lm_weight *w = &m->weights[i];
        const lm_gguf_tensor *t = lm_gguf_tensor_find(g, w->name);
        if (t == NULL || t->n_elem != w->n_elem) {
            rc = LM_FAIL(err, LM_E_DISAGREE, "%s: reference: tensor '%s' is not in the file as "
                         "loaded", m->path, w->name);
            break;
        }
        if (t->n_elem > cap) {
            free(buf);
            cap = t->n_elem;
            buf = malloc((size_t)cap * sizeof *buf);
            if (buf == NULL) {
                rc = LM_FAIL(err, LM_E_NOMEM, "reference: out of memory");
                break;
            }
        }
        if ((rc = ref_dequant(buf, (uint32_t)t->type, t->data, t->nbytes, t->n_elem, err)))
            break;
        /* bitwise: NaN payloads and signed zeros must agree too; the element is looked for
         * only when the tensor differs */
        if (memcmp(buf, w->data, (size_t)t->n_elem * sizeof(float)) == 0)
            continue;
        for (uint64_t j = 0; j < t->n_elem; ++j) {
            if (memcmp(&buf[j], &w->data[j], sizeof(float)) != 0) {
                rc = LM_FAIL(err, LM_E_DISAGREE, "%s: tensor '%s' (%s) element %" PRIu64 ": the "
                             "engine loaded %.9g, the reference's dequantization gives %.9g",
                             m->path, w->name, lm_tensor_type_name(t->type), j,
                             (double)w->data[j], (double)buf[j]);
                break;
            }
        }
    }
    free(buf);
    lm_gguf_close(g);
    return rc;
}
