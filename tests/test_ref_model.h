/* test_ref_model.h — the reference tests' small llama model (tests/fixtures.h builds it):
 * weights uniform in [-scale, scale) with scales chosen from n_embd so that activations stay
 * of order 1, and a default small shape. Free with trm_free, never lm_model_free. */
#ifndef KVD_TEST_REF_MODEL_H
#define KVD_TEST_REF_MODEL_H

#include "fixtures.h"
#include "kvd_model.h"
#include "test_util.h"

#include <stdlib.h> /* the suites that include this rely on it */
#include <string.h>

typedef tf_model trm;

/* Builds a model with the given shape; biases when with_bias. hp.arch = "llama". */
static inline void trm_build(trm *t, const lm_hparams *hp, bool with_bias, uint64_t seed)
{
    const float ws = 1.0f / (float)hp->n_embd; /* keeps activations of order 1 */
    const tf_scales sc = {.embd = 1.0f, .norm = 0.25f, .wq = 4.0f * ws, .wk = 4.0f * ws,
                          .wv = 2.0f * ws, .wo = 2.0f * ws, .w_gate_up = 4.0f * ws,
                          .w_down = 2.0f / (float)hp->n_ff, .bias = 0.1f};
    tf_model_build(t, hp, with_bias, &sc, seed);
}

static inline void trm_free(trm *t)
{
    tf_model_free(t);
}

/* A default small shape: GQA (4 heads over 2 KV heads), partial rotary dims. */
static inline lm_hparams trm_hparams(lm_rope_type rope)
{
    lm_hparams hp;
    memset(&hp, 0, sizeof hp);
    strcpy(hp.arch, "llama");
    hp.n_vocab = 11;
    hp.n_embd = 8;
    hp.n_layer = 2;
    hp.n_head = 4;
    hp.n_head_kv = 2;
    hp.head_dim = 4;
    hp.n_ff = 12;
    hp.n_rot = 2;
    hp.n_ctx_train = 64;
    hp.rms_eps = 1e-5f;
    hp.rope_theta = 10000.0f;
    hp.rope_type = rope;
    hp.tied_output = false;
    return hp;
}

#endif
