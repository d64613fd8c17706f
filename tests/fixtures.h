/* fixtures.h — test fixtures several suites share (not a suite itself: the Makefile treats
 * every tests/test_*.c as one): a small llama model built by hand in memory (no GGUF, every
 * hyperparameter and weight scale chosen by the test), the forward pass written out plainly
 * in float64 (an independent second opinion for the engine and the reference), and random
 * float vectors from the documented splitmix64 PRNG (tu_rand_f32), and a command run with its
 * output captured (tf_run_cmd). */
#ifndef KVD_TEST_FIXTURES_H
#define KVD_TEST_FIXTURES_H

#include "kvd_model.h"
#include "ref_model.h"
#include "test_util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tf_model {
    lm_model m;        /* layers, weights: pointers into the fields below */
    ref_model r;       /* the reference's view of the same weights (tf_ref_sync) */
    lm_layer *layers;  /* [n_layer] */
    ref_layer *rlayers; /* [n_layer] */
    float *arena;      /* every weight */
} tf_model;

/* Weight distributions of tf_model_build: a weight matrix or bias is s x U[-1, 1) with s its
 * field here; an RMSNorm weight is 1 + norm x U[-1, 1). */
typedef struct tf_scales {
    float embd;          /* tok_embd, and output when not tied */
    float norm;          /* attn_norm, ffn_norm, output_norm: 1 + norm x U */
    float wq, wk, wv, wo;
    float w_gate_up;     /* w_gate and w_up */
    float w_down;
    float bias;          /* bq, bk, bv, bo (only when with_bias) */
} tf_scales;

/* Builds a model of shape hp (biases when with_bias; output tied when hp->tied_output) with
 * weights drawn from splitmix64(seed) in a fixed order: tok_embd, output_norm, output, then
 * per layer attn_norm, wq, wk, wv, wo, [bq, bk, bv, bo], ffn_norm, w_gate, w_up, w_down.
 * content_hash is derived from seed; path is NULL. Free with tf_model_free, never
 * lm_model_free. Fails the running test fatally when out of memory. */
void tf_model_build(tf_model *t, const lm_hparams *hp, bool with_bias, const tf_scales *sc,
                    uint64_t seed);
void tf_model_free(tf_model *t);
/* t->r from t->m: the same hyperparameters, weights, windows and content hash, as the reference
 * would read them from a file holding this model (tf_model_build calls it; a test that changes
 * t->m afterwards calls it again). */
void tf_ref_sync(tf_model *t);
/* The reference's own view of the file m was loaded from (ref_model_open of m->path); fails the
 * running test fatally when it cannot be opened. Free with ref_model_free. */
ref_model *tf_ref_open(const lm_model *m);
/* ref_compute of rq on the reference's own view of m's file (tf_ref_open, freed again). */
struct ref_capture;
struct ref_request;
int tf_ref_compute(struct ref_capture *out, const lm_model *m, const struct ref_request *rq,
                   lm_err *err);

/* The synthetic model of kvdrift synth's preset (float32 weights, seed), written under
 * tu_tmpdir() and loaded; fails the running test fatally when it cannot be. Free with
 * lm_model_free. */
lm_model *tf_synth_load(const char *preset, uint64_t seed);

/* x[i] = offset + scale x tu_rand_f32(st), i < n; returns x. */
float *tf_fill(float *x /* [n] */, size_t n, float scale, float offset, uint64_t *st);

/* A malloc'ed vector of n (at least one element allocated) filled as tf_fill(.., scale, 0);
 * fails the running test fatally when out of memory. */
float *tf_rand_vec(size_t n, float scale, uint64_t *st);

/* The forward pass of m over tok[n] (positions 0..n-1, causal), in float64, written
 * independently of engine/ and reference/: RMSNorm, projections (+ biases), RoPE (NORM
 * pairs (2i, 2i+1), NEOX pairs (i, i + n_rot/2), first n_rot dims of each head), GQA
 * attention with a max-subtracted softmax, SwiGLU FFN, output norm and projection. Returns
 * the malloc'ed logits [n][n_vocab]; k_last, when not NULL, receives the last layer's K
 * (after RoPE) [n][n_head_kv * head_dim], x_last the residual stream after the last layer
 * [n][n_embd]. Sums run in index order. */
double *tf_forward_f64(const lm_model *m, const int32_t *tok /* [n] */, size_t n,
                       double *k_last, double *x_last);

/* Runs a kvdrift command in this process, cmd(argc, argv), with stdout and stderr both sent to
 * a file under tu_tmpdir(); its text (truncated to cap - 1 bytes) into out[cap]. Returns the
 * command's exit code. */
int tf_run_cmd(int (*cmd)(int, char **), int argc, char **argv, char *out, size_t cap);

/* hx_judge_run_all on p: the report, or the running test fails fatally (after printing the
 * judge's message). */
struct hx_judge_params;
struct hx_report;
struct hx_report *tf_judge(const struct hx_judge_params *p);

/* Writes capture c as a dump folder dir (docs/DUMP-FORMAT.md; created, with kv/): dump.json
 * (tokens, n_prompt = c's, logits_positions), logits.npy and, when c holds K/V,
 * kv/layerNN_k.npy and kv/layerNN_v.npy, and, when it holds hidden states, hidden/embed.npy
 * and hidden/layerNN.npy (those it holds), as float64 (every float32 value exactly); the
 * running test fails fatally when it cannot. */
struct hx_capture;
void tf_write_dump(const char *dir, const struct hx_capture *c);

/* Synth preset i (hx_synth_preset_name), the large ones (n_embd > 256: smollm2-135m) shrunk to
 * 2 layers and at most 1024 vocabulary entries, their matrix and head shapes kept, written with
 * seed to path[1024] = tu_tmpdir()/TAG-NAME.gguf and loaded; *name is the preset's. NULL past
 * the last preset (a failure fails the running test fatally); the presets too large for a
 * test (hx_synth_preset_large) at n_embd 256, 4/2 heads (their head size kept), 6 layers and
 * at most 8 experts of 64, top-2. The caller frees the model and removes path. */
lm_model *tf_preset_model(size_t i, const char *tag, uint64_t seed, const char **name,
                          char path[1024]);

#endif
