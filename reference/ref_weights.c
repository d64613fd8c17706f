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
    float *buf = malloc(REF_WEIGHTS_CHUNK * sizeof *buf); /* [REF_WEIGHTS_CHUNK] */
    if (buf == NULL)
        rc = LM_FAIL(err, LM_E_NOMEM, "reference: out of memory");
    for (uint32_t i = 0; i < m->n_weights && rc == LM_OK; ++i) {
        const lm_weight *w = &m->weights[i];
        const lm_gguf_tensor *t = lm_gguf_tensor_find(g, w->name);
        if (t == NULL || t->n_elem != w->n_elem) {
            rc = LM_FAIL(err, LM_E_DISAGREE, "%s: reference: tensor '%s' is not in the file as "
                         "loaded", m->path, w->name);
            break;
        }
        const uint32_t be = ref_dequant_block_elems((uint32_t)t->type);
        if (be == 0 || t->n_elem % be != 0) { /* refused by ref_dequant before any output */
            rc = ref_dequant(NULL, (uint32_t)t->type, t->data, t->nbytes, t->n_elem, err);
            break;
        }
        if (be > REF_WEIGHTS_CHUNK) {
            rc = LM_FAIL(err, LM_E_UNSUPPORTED, "reference: tensor '%s' has blocks of %" PRIu32
                         " elements", w->name, be);
            break;
        }
        const uint64_t chunk = REF_WEIGHTS_CHUNK / be * be, block_bytes = t->nbytes / (t->n_elem / be);
        for (uint64_t off = 0; off < t->n_elem && rc == LM_OK; off += chunk) {
            const uint64_t n = t->n_elem - off < chunk ? t->n_elem - off : chunk;
            const uint8_t *data = (const uint8_t *)t->data + off / be * block_bytes;
            rc = ref_dequant(buf, (uint32_t)t->type, data, n / be * block_bytes, n, err);
            /* bitwise: NaN payloads and signed zeros must agree too; the element is looked for
             * only when the chunk differs */
            if (rc != LM_OK || memcmp(buf, w->data + off, n * sizeof *buf) == 0)
                continue;
            for (uint64_t j = 0; j < n; ++j)
                if (memcmp(&buf[j], &w->data[off + j], sizeof(float)) != 0) {
                    rc = LM_FAIL(err, LM_E_DISAGREE, "%s: tensor '%s' (%s) element %" PRIu64
                                 ": the engine loaded %.9g, the reference's dequantization "
                                 "gives %.9g", m->path, w->name,
                                 lm_tensor_type_name(t->type), off + j,
                                 (double)w->data[off + j], (double)buf[j]);
                    break;
                }
        }
    }
    free(buf);
    lm_gguf_close(g);
    return rc;
}
