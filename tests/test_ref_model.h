/* test_ref_model.h — a small llama model built by hand in memory (no GGUF), for the reference
 * tests: every hyperparameter and weight chosen by the test, weights uniform in [-scale, scale)
 * from the documented splitmix64 PRNG (tu_rand_f32). Free with trm_free, never lm_model_free. */
#ifndef KVD_TEST_REF_MODEL_H
#define KVD_TEST_REF_MODEL_H

#include "kvd_model.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct trm {
    lm_model m;
    lm_layer *layers; /* [n_layer] */
    float *arena;     /* every weight */
} trm;

static inline float *trm_fill(float **cur, uint64_t n, float scale, float offset, uint64_t *rng)
{
    float *p = *cur;
    for (uint64_t i = 0; i < n; ++i)
        p[i] = offset + scale * tu_rand_f32(rng);
    *cur += n;
    return p;
}

/* Builds a model with the given shape; biases when with_bias. hp.arch = "llama". */
static inline void trm_build(trm *t, const lm_hparams *hp, bool with_bias, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->m.hp = *hp;
    uint64_t e = hp->n_embd, qd = (uint64_t)hp->n_head * hp->head_dim,
             kd = (uint64_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff, V = hp->n_vocab;
    uint64_t per = e + qd * e + 2 * kd * e + e * qd + qd + 2 * kd + e + e + 3 * ff * e;
    uint64_t total = V * e * 2 + e + per * hp->n_layer;
    t->arena = malloc(total * sizeof(float));
    t->layers = calloc(hp->n_layer, sizeof *t->layers);
    CU_ASSERT_FATAL(t->arena != NULL && t->layers != NULL);
    float *cur = t->arena;
    uint64_t rng = seed;
    t->m.tok_embd = trm_fill(&cur, V * e, 1.0f, 0.0f, &rng);
    t->m.output_norm = trm_fill(&cur, e, 0.25f, 1.0f, &rng);
    t->m.output = hp->tied_output ? t->m.tok_embd : trm_fill(&cur, V * e, 1.0f, 0.0f, &rng);
    float ws = 1.0f / (float)e; /* keeps activations of order 1 */
    for (uint32_t l = 0; l < hp->n_layer; ++l) {
        lm_layer *L = &t->layers[l];
        L->attn_norm = trm_fill(&cur, e, 0.25f, 1.0f, &rng);
        L->wq = trm_fill(&cur, qd * e, 4.0f * ws, 0.0f, &rng);
        L->wk = trm_fill(&cur, kd * e, 4.0f * ws, 0.0f, &rng);
        L->wv = trm_fill(&cur, kd * e, 2.0f * ws, 0.0f, &rng);
        L->wo = trm_fill(&cur, e * qd, 2.0f * ws, 0.0f, &rng);
        if (with_bias) {
            L->bq = trm_fill(&cur, qd, 0.1f, 0.0f, &rng);
            L->bk = trm_fill(&cur, kd, 0.1f, 0.0f, &rng);
            L->bv = trm_fill(&cur, kd, 0.1f, 0.0f, &rng);
            L->bo = trm_fill(&cur, e, 0.1f, 0.0f, &rng);
        }
        L->ffn_norm = trm_fill(&cur, e, 0.25f, 1.0f, &rng);
        L->w_gate = trm_fill(&cur, ff * e, 4.0f * ws, 0.0f, &rng);
        L->w_up = trm_fill(&cur, ff * e, 4.0f * ws, 0.0f, &rng);
        L->w_down = trm_fill(&cur, e * ff, 2.0f / (float)ff, 0.0f, &rng);
    }
    t->m.layers = t->layers;
    for (int i = 0; i < 16; ++i)
        t->m.content_hash[i] = (uint8_t)(seed >> (8 * (i % 8))) ^ (uint8_t)i;
    t->m.path = NULL;
}

static inline void trm_free(trm *t)
{
    free(t->arena);
    free(t->layers);
    memset(t, 0, sizeof *t);
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
