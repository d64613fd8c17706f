/* ref_weights.c — checks the engine's dequantized float32 weights against the reference's own
 * dequantization of the same file (ref_dequant.c), so that a dequantization defect in the
 * engine cannot enter the reference unseen. The GGUF container is read with the shared reader
 * (it only locates bytes; every value is decoded here). */
#include "kvd_ref.h"
#include "kvd_util.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* w's first `count` engine values against the reference's dequantization of t,
 * REF_WEIGHTS_CHUNK elements at a time (buf: [REF_WEIGHTS_CHUNK]). */
static int check_tensor(const char *path, const lm_weight *w, const lm_gguf_tensor *t,
                        uint64_t count, float *buf, lm_err *err)
{
    for (uint64_t off = 0; off < count; off += REF_WEIGHTS_CHUNK) {
        const uint64_t n = count - off < REF_WEIGHTS_CHUNK ? count - off : REF_WEIGHTS_CHUNK;
        int rc = ref_dequant_range(buf, (uint32_t)t->type, t->data, t->nbytes, t->n_elem, off, n,
                                   err);
        if (rc != LM_OK)
            return rc;
        /* bitwise: NaN payloads and signed zeros must agree too; the element is looked for
         * only when the chunk differs */
        if (memcmp(buf, w->data + off, n * sizeof *buf) == 0)
            continue;
        for (uint64_t j = 0; j < n; ++j)
            if (memcmp(&buf[j], &w->data[off + j], sizeof(float)) != 0)
                return LM_FAIL(err, LM_E_DISAGREE, "%s: tensor '%s' (%s) element %" PRIu64
                               ": the engine loaded %.9g, the reference's dequantization gives "
                               "%.9g", path, w->name, lm_tensor_type_name(t->type), off + j,
                               (double)w->data[off + j], (double)buf[j]);
    }
    return LM_OK;
}

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
        if (t == NULL || t->n_elem != w->n_elem)
            rc = LM_FAIL(err, LM_E_DISAGREE, "%s: reference: tensor '%s' is not in the file as "
                         "loaded", m->path, w->name);
        else
            rc = check_tensor(m->path, w, t, t->n_elem, buf, err);
    }
    free(buf);
    lm_gguf_close(g);
    return rc;
}

double ref_weights_check_s_per_weight(const lm_model *m)
{
    if (m->path == NULL || m->weights == NULL || m->n_weights == 0)
        return 0.0;
    const lm_weight *w = &m->weights[0]; /* the largest of the first few */
    for (uint32_t i = 1; i < m->n_weights && i < 16; ++i)
        w = m->weights[i].n_elem > w->n_elem ? &m->weights[i] : w;
    lm_err err = {0};
    lm_gguf *g = NULL;
    if (lm_gguf_open(&g, m->path, &err) != LM_OK)
        return 0.0;
    const lm_gguf_tensor *t = lm_gguf_tensor_find(g, w->name);
    float *buf = malloc(REF_WEIGHTS_CHUNK * sizeof *buf); /* [REF_WEIGHTS_CHUNK] */
    double s = 0.0;
    if (t != NULL && t->n_elem == w->n_elem && t->n_elem > 0 && buf != NULL) {
        /* its first chunks: a few ms */
        const uint64_t n = t->n_elem < 4u * REF_WEIGHTS_CHUNK ? t->n_elem : 4u * REF_WEIGHTS_CHUNK;
        const double t0 = lm_now_s();
        if (check_tensor(m->path, w, t, n, buf, &err) == LM_OK)
            s = (lm_now_s() - t0) / (double)n;
    }
    free(buf);
    lm_gguf_close(g);
    return s;
}
