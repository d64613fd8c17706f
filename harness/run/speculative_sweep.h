/* speculative_sweep.h — `kvdrift sweep --spec K,...`: the speculative-decoding check after the
 * numerical sweep (its options, its runs, its table). */
#ifndef KVD_SWEEP_SPEC_H
#define KVD_SWEEP_SPEC_H

#include "model/config.h"
#include "judge/envelope.h"
#include "kvd_speculative.h"
#include "model/report.h"

#include <stdio.h>

/* The options of this group, as `kvdrift sweep` names them. */
typedef enum hx_spec_opt {
    HX_OPT_SPEC = 1000,     /* --spec LIST */
    HX_OPT_DRAFT,           /* --draft D */
    HX_OPT_REPEAT_PENALTY,  /* --repeat-penalty F */
    HX_OPT_REPEAT_LAST_N,   /* --repeat-last-n N */
    HX_OPT_FREQ_PENALTY,    /* --frequency-penalty F */
    HX_OPT_PRESENCE_PENALTY /* --presence-penalty F */
} hx_spec_opt;

#define HX_SPEC_LONG_OPTIONS                                                                    \
    {"spec", required_argument, NULL, HX_OPT_SPEC},                                             \
        {"draft", required_argument, NULL, HX_OPT_DRAFT},                                       \
        {"repeat-penalty", required_argument, NULL, HX_OPT_REPEAT_PENALTY},                     \
        {"repeat-last-n", required_argument, NULL, HX_OPT_REPEAT_LAST_N},                       \
        {"frequency-penalty", required_argument, NULL, HX_OPT_FREQ_PENALTY},                    \
        {"presence-penalty", required_argument, NULL, HX_OPT_PRESENCE_PENALTY}

#define HX_SPEC_USAGE                                                                           \
    "\nSpeculative decoding check (a table after the sweep's, also DIR/spec.txt; SEQ_MISMATCH\n"  \
    "fails, exit 1):\n"                                                                         \
    "      --spec LIST         speculative decoding check: drafted tokens per round, e.g. 0,2,4\n" \
    "                          (0 = plain decoding, the comparison every K > 0 is checked\n"  \
    "                          against, token for token and processor history step by step,\n" \
    "                          for every configuration of the other axes; CONFIG key spec=K)\n" \
    "      --draft D           the draft: self:L (the model's first L layers, default self:1),\n" \
    "                          a GGUF path or synth:PRESET (same vocabulary; CONFIG draft=D)\n" \
    "      --repeat-penalty F  logits processors of both decodes, llama.cpp's names and\n"   \
    "      --repeat-last-n N   semantics (defaults 1.0, 64, 0.0, 0.0)\n"                       \
    "      --frequency-penalty F\n"                                                            \
    "      --presence-penalty F\n"

typedef struct hx_spec_opts {
    const char *spec_list; /* NULL: no check */
    const char *draft;     /* NULL: "self:1" */
    lm_penalty_params pen;
} hx_spec_opts;

void hx_spec_opts_init(hx_spec_opts *o);
/* Parses one option of the group (opt an hx_spec_opt); LM_E_INPUT naming it. */
int hx_spec_opts_set(hx_spec_opts *o, int opt, const char *arg, lm_err *err);

/* Runs the check for every configuration x every K > 0 of the list (speculative_check.h) into
 * out (rows malloc'd). draft_path: the draft model's resolved file (NULL for self:L). env: the
 * sweep's envelope (its largest logits E and E_gap decide what a near tie is). */
int hx_spec_check_run(hx_spec_report *out, const lm_model *m, const char *draft_path,
                      const int32_t *prompt, uint32_t n_prompt, uint32_t n_gen,
                      const hx_config *configs, size_t n_configs, const hx_spec_opts *o,
                      const hx_envelope *env, lm_err *err);
/* Its table and verdict line. */
void hx_spec_print(FILE *f, const hx_spec_report *s);

#endif
