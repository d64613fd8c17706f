/* probe_dump.h — a server's /v1/completions reply (probe_reply.h) as a top-k dump for the
 * judge (dump.h, topk > 0): each scored token placed at its position, its ids resolved, the
 * echoed prompt checked against kvdrift's token ids.
 *
 * Positions: the reply lists n_echo echoed prompt tokens (the prompt's last n_echo ids; a
 * server leaves out BOS) then the generated ones; token t at position q is scored by the row at
 * position q - 1 (the row at p predicts token p + 1), generated token j sits at n_prompt + j.
 * n_echo = len - usage.completion_tokens when usage is given, else (echo) the prompt's ids
 * after BOS.
 * Ids: a reply's id when given; else the token's text matched against the vocabulary's pieces
 * (lm_token_to_piece; a SentencePiece byte-fallback token only when no other piece matches),
 * and under SentencePiece, when no piece is the text, the piece with one leading space (a
 * server may strip it from a lone token). An echoed token must match kvdrift's id there; a
 * generated token must match exactly one id (else the path stops before it); an alternative
 * that matches no id or several is left out of its row and counted. */
#ifndef HX_PROBE_DUMP_H
#define HX_PROBE_DUMP_H

#include "kvd_model.h"
#include "model/dump.h"
#include "model/probe_reply.h"

#include <stdbool.h>
#include <stdint.h>

/* The vocabulary's pieces sorted for lookup by text (built once per model). */
typedef struct hx_piece_index hx_piece_index;
int hx_piece_index_create(hx_piece_index **out, const lm_model *m, lm_err *err);
void hx_piece_index_free(hx_piece_index *x);

typedef struct hx_probe_map {
    uint32_t n_echo, n_gen;      /* echoed prompt tokens, generated tokens placed */
    uint32_t n_alt_dropped;      /* alternatives whose text names no id or several */
    bool gen_cut;                /* a generated token's text named no id or several: the path
                                    stops before it */
    int64_t prompt_mismatch;     /* first echoed position whose token is not kvdrift's; -1 */
    char mismatch[200];          /* that, in one line */
} hx_probe_map;

/* Builds *out (name: its dir/settings). LM_E_INPUT with one line for a reply whose lengths do
 * not fit the prompt ("wrong length"), that scores nothing, or that holds more than
 * HX_TOPK_ROW_MAX ids in a row. A prompt mismatch is not an error here: map says it. */
int hx_probe_reply_dump(hx_dump **out, hx_probe_map *map, const hx_probe_reply *r,
                        const lm_model *m, const hx_piece_index *ix, const int32_t *prompt,
                        uint32_t n_prompt, bool echo, const char *name, lm_err *err);

#endif
