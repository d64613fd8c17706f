/* dump.h — another engine's output imported for judging (`kvdrift judge`): a folder with a
 * manifest dump.json and NumPy arrays (docs/DUMP-FORMAT.md is the user's page).
 *
 * Manifest keys (others are ignored): tokens (array of ids: the prompt, then any ids the engine
 * was fed after it; required, non-empty), n_prompt (1..len(tokens); required),
 * logits_positions (strictly increasing positions < len(tokens), the position of each logits
 * row; a row at position p predicts token p+1; required, non-empty), tokens_generated (the
 * engine's own greedy continuation of the prompt; optional), model_sha256 (64 hex digits;
 * optional, checked against the model file when given), engine, settings (free text; optional).
 * Arrays: exactly one of logits.npy and logprobs.npy, shape [n_positions][n_vocab]; optional
 * kv/layerNN_k.npy and kv/layerNN_v.npy (NN = 00, 01, ...: every layer, both tensors, nothing
 * else in kv/), shape [n_prompt][n_kv_head][head_dim], K after RoPE; element types float32,
 * float16, float64 or bfloat16 bits as uint16 (npy.h). Optional hidden/embed.npy (the input of
 * layer 0, after any embedding scaling) and hidden/layerNN.npy (the residual stream after
 * layer NN), any subset of them and nothing else in hidden/, shape [n_prompt][n_embd].
 *
 * hx_dump_load checks everything against the model before anything is used: array shapes vs
 * the model's vocabulary, layers, KV heads, head size and embedding size; token ids vs the vocabulary; lengths
 * and positions vs the manifest; every element finite. Any mismatch is LM_E_INPUT with one
 * line naming the dump folder, the file and the field. */
#ifndef HX_DUMP_H
#define HX_DUMP_H

#include "kvd_model.h"

#include <stdbool.h>
#include <stdint.h>

#define HX_TOPK_ROW_MAX 64u /* most ids a top-k row holds */

typedef struct hx_dump {
    char *dir;                /* the folder as given */
    char *engine, *settings;  /* "" when absent */
    int32_t *tokens;          /* [n_tokens] */
    uint32_t n_tokens, n_prompt;
    uint32_t *positions;      /* [n_pos] */
    uint32_t n_pos, n_vocab;
    bool logprobs;            /* rows are log-probabilities (logprobs.npy), else logits */
    char row_dtype[16];       /* element type of the rows' file ("float32", ...) */
    float *rows;              /* [n_pos][n_vocab] */
    int32_t *generated;       /* [n_generated] tokens_generated, NULL when absent */
    uint32_t n_generated;
    bool has_generated;
    uint32_t n_layer;         /* layers of K/V (0 when kv/ is absent) */
    float **k, **v;           /* [n_layer] -> [n_prompt][n_kv_head][head_dim], NULL when absent */
    uint32_t n_hidden;        /* hidden states read (files in hidden/; 0 when absent) */
    uint32_t n_embd;          /* the model's, when hidden/ exists */
    float **hidden;           /* [n_hidden_slots] -> [n_prompt][n_embd]: [0] embed.npy,
                                 [l + 1] layerNN.npy with NN = l; NULL entries absent; NULL
                                 when there is no hidden/ */
    uint32_t n_hidden_slots;  /* entries of hidden: the model's n_layer + 1 */
    /* Top-k rows (a server's reply, `kvdrift probe`; never read from a folder): topk > 0 means
     * each row holds only the log-probabilities of the ids topk_ids lists (logprobs is true);
     * its other entries are NaN: unknown, never compared. */
    uint32_t topk;            /* ids per row at most; 0: full rows */
    int32_t *topk_ids;        /* [n_pos][topk] each row's ids, -1 past its last */
} hx_dump;

/* Loads and validates dir against m (model_path: the file m came from, for model_sha256). */
int hx_dump_load(hx_dump **out, const char *dir, const lm_model *m, const char *model_path,
                 lm_err *err);
void hx_dump_free(hx_dump *d);
/* Keeps the first n_tokens ids (n_prompt <= n_tokens < d->n_tokens; otherwise nothing changes)
 * and the logits rows at positions below n_tokens; tokens_generated and K/V stay. */
void hx_dump_truncate(hx_dump *d, uint32_t n_tokens);

#endif
