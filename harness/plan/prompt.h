/* prompt.h — a prompt's text into the token ids a run feeds: the one tokenization that the
 * commands' -p/-f and the case files' `prompt =` share. */
#ifndef HX_PROMPT_H
#define HX_PROMPT_H

#include "kvd_engine.h"

#include <stdbool.h>
#include <stdint.h>

/* Encodes text with m's vocabulary (BOS as the vocabulary adds it; parse_special: control
 * tokens written in the text become those tokens) into *out ([*n], malloc'd; the caller frees
 * it). When the vocabulary's pre-tokenizer is not implemented (lm_vocab_pre_note), one
 * warning line on stderr naming model_path. who names the prompt in errors ("-p", a case
 * file). LM_E_INPUT: m has no tokenizer, or the text encodes to 0 tokens or to more than
 * UINT32_MAX / 2 (room for generated tokens after the prompt in a uint32_t count). */
int hx_prompt_tokenize(int32_t **out, uint32_t *n, const lm_model *m, const char *model_path,
                       const char *text, bool parse_special, const char *who, lm_err *err);

#endif
