/* fuzz_probe_reply.c — libFuzzer target for /v1/completions replies and a server's
 * self-description (model/probe_reply.h). Checks, besides crashes, sanitizer reports and
 * leaks, the parser's promises on what it accepts: every log-probability finite and at most
 * the slack above 0, every given id non-negative, alternatives present exactly when k > 0. */
#include "model/probe_reply.h"
#include "fuzz_util.h"

#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hx_probe_reply *r = NULL;
    lm_err err = {0};
    if (hx_probe_reply_parse(&r, (const char *)data, size, &err) == LM_OK) {
        for (uint32_t i = 0; i < r->n; ++i) {
            const hx_probe_tok *t = &r->toks[i];
            if ((t->has_logprob && (!isfinite(t->logprob) || t->logprob > 1e-6)) ||
                t->id < -1 || (t->k > 0) != (t->top != NULL) || t->text == NULL)
                abort();
            for (uint32_t j = 0; j < t->k; ++j)
                if (!isfinite(t->top[j].logprob) || t->top[j].logprob > 1e-6 ||
                    t->top[j].id < -1 || t->top[j].text == NULL)
                    abort();
        }
    }
    hx_probe_reply_free(r);
    hx_server_info s = {0};
    hx_server_info_models(&s, (const char *)data, size);
    hx_server_info_props(&s, (const char *)data, size);
    hx_server_info_version(&s, (const char *)data, size);
    char msg[200];
    hx_probe_error_text(msg, sizeof msg, (const char *)data, size);
    (void)hx_probe_reply_completion_tokens((const char *)data, size);
    return 0;
}
