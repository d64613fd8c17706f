/* speculative_verdict.h — the speculative-decoding verdict: does speculative decoding produce plain
 * decoding's tokens, chosen with plain decoding's processor history, at every step?
 *
 * Rules, on the two traces of one configuration (speculative_run.h), n_gen steps each:
 *   first_tok  = first step whose tokens differ (-1: none)
 *   first_hist = first step whose processor-history hashes differ (-1: none)
 *   1. first_hist >= 0 and (first_tok < 0 or first_hist <= first_tok): SEQ_MISMATCH — a token
 *      was chosen with another history than plain decoding's (a history after a differing
 *      token differs as a consequence and is not counted).
 *   2. first_tok >= 0 (histories equal up to it): at that step the two raw target rows came
 *      from the same context; err = max_i |spec_i - plain_i| and gap = how far plain's own
 *      token leads spec's token in plain's processed row (>= 0).
 *        err <= e and gap <= e_gap -> TIE_FLIP  (the verify chunk's logits differ from the
 *                                                single-step ones by rounding, and that flips
 *                                                a near tie: numerical, not a bug)
 *        otherwise                 -> SEQ_MISMATCH
 *      With MLX's rotating cache (rot=MAX/KEEP) a verify chunk's row i attends to max_size - 1
 *      older positions plus i + 1 chunk tokens, a single step to max_size keys in all, so past
 *      the window the verify rows see older keys than plain decoding's rows by the policy's
 *      definition. hx_seq_explain_policy re-judges such a SEQ_MISMATCH with the same decode
 *      under the exact-window policy (rot=MAX/KEEP/window: the same slots, rollbacks and
 *      chunks, only the later rows' masks differ): when that one passes, the difference is the
 *      policy's chunk dependence, SEMANTIC (passes), not a decoding bug. The same re-judging
 *      applies when the tokens agree but the rows differ by more than E (rule 3's NOISE, though
 *      beyond rounding).
 *   3. no difference: EXACT when every raw row is bitwise equal, else NOISE (the rows differ
 *      by rounding, the choices did not).
 *   4. a NaN or +-Inf in any of the speculative decode's raw rows turns a verdict less severe
 *      than NONFINITE (rules 2 and 3, and SEMANTIC from hx_seq_explain_policy) into
 *      NONFINITE, whatever plain decoding's rows hold: classify.h's rule 1, which no later
 *      rule or explanation overrides.
 * Processed rows are recomputed here from the raw ones: the penalties of one step transform
 * both rows alike, so the gap is measured on plain's raw row with the same transform the
 * engine applied (lm_penalty on the common history, rebuilt from prompt + tokens). */
#ifndef HX_SEQCHECK_H
#define HX_SEQCHECK_H

#include "model/classify.h"
#include "model/speculative_pair.h"
#include "kvd_speculative.h"

typedef struct hx_seq_verdict {
    hx_class cls;           /* EXACT, NOISE, TIE_FLIP or SEQ_MISMATCH */
    int64_t first_tok;      /* -1: equal tokens */
    int64_t first_hist;     /* -1: equal histories */
    double max_abs;         /* max |spec - plain| over the raw rows of the common prefix */
    double err, gap;        /* rule 2's numbers (NaN when rule 2 did not apply) */
    int64_t nonfinite_step; /* first step whose speculative raw row holds a NaN or Inf; -1 */
    char reason[400];
} hx_seq_verdict;

/* prompt [n_prompt] and pen: what both decodes used (to rebuild the processed rows). */
int hx_seq_judge(hx_seq_verdict *out, const hx_spec_pair *p, const int32_t *prompt,
                 uint32_t n_prompt, const lm_penalty_params *pen, double e, double e_gap,
                 lm_err *err);

/* Whether v (of cfg, judged with envelope e) is a difference that the exact-window
 * counterpart may explain: cfg uses MLX's rotating cache, and either the tokens differed
 * before any history did (SEQ_MISMATCH) or the tokens agree but the rows differ by more than
 * e (NOISE by rule 3, though beyond rounding). */
bool hx_seq_policy_question(const hx_seq_verdict *v, const hx_config *cfg, double e);
/* v: the MLX-policy verdict (hx_seq_policy_question true); window: the verdict of the same
 * configuration with rot_window set. A passing window verdict makes v SEMANTIC, its reason
 * naming both (NONFINITE when rule 4 applies to v); otherwise v keeps its class and its reason
 * says the exact window fails too. */
void hx_seq_explain_policy(hx_seq_verdict *v, const hx_seq_verdict *window);

#endif
