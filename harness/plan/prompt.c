/* prompt.c — a prompt's text into token ids (prompt.h). */
#include "plan/prompt.h"

#include "kvd_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hx_prompt_tokenize(int32_t **out, uint32_t *n, const lm_model *m, const char *model_path,
                       const char *text, bool parse_special, const char *who, lm_err *err)
{
    *out = NULL;
    *n = 0;
    if (m->vocab == NULL)
        return LM_FAIL(err, LM_E_INPUT, "%s: model %s has no tokenizer; give token ids instead",
                       who, model_path);
    int32_t *ids = NULL;
    size_t k = 0;
    const int rc = lm_tokenize_ex(m->vocab, text, strlen(text), true, parse_special, &ids, &k,
                                  err);
    if (rc != LM_OK)
        return rc;
    if (lm_vocab_pre_note(m->vocab) != NULL)
        fprintf(stderr, "kvdrift: warning: %s: %s\n", model_path, lm_vocab_pre_note(m->vocab));
    if (k == 0 || k > UINT32_MAX / 2) {
        free(ids);
        return LM_FAIL(err, LM_E_INPUT, "%s: prompt tokenizes to %zu tokens", who, k);
    }
    *out = ids;
    *n = (uint32_t)k;
    return LM_OK;
}
