/* envelope_sr.c — the envelope from SR runs of the reference's model (contract in
 * envelope_sr.h). */
#include "run/envelope_sr.h"

#include "model/capture.h"
#include "judge/compare.h"
#include "ref_sr.h"
#include "kvd_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ref_request request_of(const ref_capture *ref)
{
    return (ref_request){.tokens = ref->tokens, .n_tokens = ref->n_tokens,
                         .n_prompt = ref->n_prompt, .pos = ref->pos, .n_pos = ref->n_pos,
                         .prec = ref->prec};
}

hx_member_source hx_envelope_source(const ref_model *m, const ref_capture *ref,
                                    const char *profile, bool engine_only)
{
    const ref_request rq = request_of(ref);
    return hx_ensemble_source(m, &rq, profile, engine_only, NULL, 0);
}

int hx_envelope_sr_mode(char *buf, size_t cap, const char *profile)
{
    const bool f32 = !lm_profile_rounds(lm_profile_find(profile)); /* "", "f32" (or unknown) */
    return snprintf(buf, cap, "%s%s%s", HX_ENVELOPE_SR_MODE,
                    f32 ? "" : ";profile=" LM_PROFILE_RULES ":", f32 ? "" : profile);
}

/* A capture that borrows a member's arrays (hx_capture's layout: per-layer K/V pointers, then
 * hidden-state pointers, in kv [3 * n_layer + 1]). */
static int as_capture(hx_capture *c, float **kv, const ref_sr_out *o, const ref_capture *ref)
{
    memset(c, 0, sizeof *c);
    c->shape = (hx_capture_shape){.n_layer = ref->n_layer, .n_kv_head = ref->n_kv_head,
                                  .head_dim = ref->head_dim, .n_vocab = ref->n_vocab,
                                  .n_prompt = ref->n_prompt, .n_tokens = ref->n_tokens,
                                  .n_pos = ref->n_pos};
    c->tokens = ref->tokens;
    c->positions = o->pos;
    c->logits = o->logits;
    c->k = kv;
    c->v = kv + ref->n_layer;
    const size_t per = (size_t)o->n_prompt * o->kv_dim;
    for (uint32_t l = 0; l < ref->n_layer; ++l) {
        c->k[l] = o->k + l * per;
        c->v[l] = o->v + l * per;
    }
    c->n_embd = o->n_embd;
    c->hidden = kv + 2 * ref->n_layer;
    for (uint32_t i = 0; i <= ref->n_layer; ++i)
        c->hidden[i] = o->hidden + (size_t)i * o->n_prompt * o->n_embd;
    return LM_OK;
}

int hx_envelope_from_ref_sr(hx_envelope **out, const ref_model *m, const ref_capture *ref,
                            const char *profile, uint32_t n_members, uint64_t seed,
                            int n_threads, double safety, ref_progress_fn progress,
                            void *progress_user, lm_err *err)
{
    *out = NULL;
    ref_sr_profile prof;
    hx_ensemble_ref_profile(&prof, profile);
    ref_request rq = request_of(ref);
    rq.sr_profile = &prof;
    rq.progress = progress;
    rq.progress_user = progress_user;
    ref_sr_out *mem = calloc(n_members ? n_members : 1, sizeof *mem);
    hx_capture *caps = calloc(n_members ? n_members : 1, sizeof *caps);
    const hx_capture **ptr = calloc(n_members ? n_members : 1, sizeof *ptr);
    const size_t n_ptr = 3 * (size_t)ref->n_layer + 1; /* per member: K, V, hidden states */
    float **kv = calloc((size_t)(n_members ? n_members : 1) * n_ptr, sizeof *kv);
    int rc = (!mem || !caps || !ptr || !kv)
                 ? LM_FAIL(err, LM_E_NOMEM, "envelope: out of memory")
                 : ref_sr_ensemble(mem, n_members, m, &rq, seed, n_threads, err);
    if (rc == LM_OK) {
        for (uint32_t i = 0; i < n_members; ++i) {
            as_capture(&caps[i], kv + (size_t)i * n_ptr, &mem[i], ref);
            ptr[i] = &caps[i];
        }
        rc = hx_envelope_from_ensemble(out, ptr, n_members, ref, safety, err);
    }
    for (uint32_t i = 0; mem && i < n_members; ++i)
        ref_sr_out_free(&mem[i]);
    free(mem);
    free(caps);
    free(ptr);
    free(kv);
    return rc;
}
