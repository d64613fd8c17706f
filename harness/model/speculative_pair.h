/* speculative_pair.h — the two traces of one speculative-decoding check: plain decoding and
 * speculative decoding of one configuration, per generated token (run/speculative_run.h makes
 * them, judge/speculative_verdict.h judges them). */
#ifndef HX_SPECULATIVE_PAIR_H
#define HX_SPECULATIVE_PAIR_H

#include "model/config.h"

#include <stdint.h>

typedef struct hx_spec_side {
    int32_t *tokens;     /* [n_gen] */
    uint64_t *hist;      /* [n_gen] processor-history hash token i was chosen with */
    float *raw;          /* [n_gen][n_vocab] target logits of token i */
    uint32_t n_rounds, n_drafted, n_accepted;
} hx_spec_side;

typedef struct hx_spec_pair {
    hx_config cfg;       /* the speculative configuration (spec = K > 0) */
    uint32_t n_gen;
    uint32_t n_vocab;
    hx_spec_side plain;  /* spec = 0 */
    hx_spec_side spec;   /* spec = K with cfg.draft */
} hx_spec_pair;

#endif
