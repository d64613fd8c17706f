/* ref_cache.c — the on-disk cache of reference captures, keyed by everything that determines
 * the numbers. An entry is trusted only after its full hash check and a header match. */
#include "kvd_ref.h"

#include "fs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

static void add_u32(XXH3_state_t *st, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    XXH3_128bits_update(st, b, 4);
}

void ref_cache_key(char out[33], const ref_model *m, const ref_request *rq)
{
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, "kvdrift-ref-cache", 17);
    add_u32(st, REF_VERSION);
    add_u32(st, rq->mpfr_dot ? 1u : 0u);
    XXH3_128bits_update(st, m->content_hash, 16);
    add_u32(st, rq->n_tokens);
    for (uint32_t i = 0; i < rq->n_tokens; ++i)
        add_u32(st, (uint32_t)rq->tokens[i]);
    add_u32(st, rq->n_prompt);
    if (rq->pos) {
        add_u32(st, rq->n_pos);
        for (uint32_t i = 0; i < rq->n_pos; ++i)
            add_u32(st, rq->pos[i]);
    } else { /* the default positions, spelled out so that both forms share an entry */
        add_u32(st, rq->n_tokens - rq->n_prompt + 1);
        for (uint32_t p = rq->n_prompt - 1; p < rq->n_tokens; ++p)
            add_u32(st, p);
    }
    add_u32(st, rq->prec ? rq->prec : REF_DEFAULT_PREC);
    if (rq->rot_max_size != 0) { /* a rotating-cache schedule (absent: keys as before) */
        XXH3_128bits_update(st, "rot", 3);
        add_u32(st, rq->rot_max_size);
        add_u32(st, rq->rot_keep);
        add_u32(st, rq->rot_step);
        if (rq->rot_turn_at != 0) { /* two turns (absent: keys as before) */
            XXH3_128bits_update(st, "turn", 4);
            add_u32(st, rq->rot_turn_at);
            add_u32(st, rq->rot_turn_d);
        }
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    XXH3_freeState(st);
    for (int i = 0; i < 16; ++i)
        snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}

/* Does a capture read from the cache hold exactly what rq asks for? */
static bool matches(const ref_capture *c, const ref_model *m, const ref_request *rq)
{
    uint32_t prec = rq->prec ? rq->prec : REF_DEFAULT_PREC;
    if (c->version != REF_VERSION || c->prec != prec ||
        memcmp(c->model_hash, m->content_hash, 16) != 0 || c->n_tokens != rq->n_tokens ||
        c->n_prompt != rq->n_prompt || c->n_layer != m->hp.n_layer ||
        c->n_kv_head != m->hp.n_head_kv || c->head_dim != m->hp.head_dim ||
        c->n_vocab != m->hp.n_vocab ||
        memcmp(c->tokens, rq->tokens, rq->n_tokens * sizeof *rq->tokens) != 0)
        return false;
    if (rq->pos)
        return c->n_pos == rq->n_pos && memcmp(c->pos, rq->pos, rq->n_pos * sizeof *rq->pos) == 0;
    if (c->n_pos != rq->n_tokens - rq->n_prompt + 1)
        return false;
    for (uint32_t i = 0; i < c->n_pos; ++i)
        if (c->pos[i] != rq->n_prompt - 1 + i)
            return false;
    return true;
}

int ref_cached(ref_capture *out, const ref_model *m, const ref_request *rq, const char *cache_dir,
               bool *hit, lm_err *err)
{
    memset(out, 0, sizeof *out);
    if (hit)
        *hit = false;
    int st = ref_request_check(m, rq, err);
    if (st)
        return st;
    char dir[4096], key[33], path[4200];
    lm_err derr = {0};
    if (lm_cache_open(dir, sizeof dir, cache_dir, &derr) != LM_OK) {
        /* a cache that cannot be used costs time, not correctness: say so and compute */
        lm_log(rq->log, rq->log_user, "reference cache unusable (%s); computing without it",
               derr.msg);
        return ref_compute(out, m, rq, err);
    }
    ref_cache_key(key, m, rq);
    snprintf(path, sizeof path, "%s/%s.kvdref", dir, key);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        lm_err rerr = {0};
        if (ref_capture_read(out, path, &rerr) == LM_OK) {
            if (matches(out, m, rq)) {
                if (hit)
                    *hit = true;
                return LM_OK;
            }
            ref_capture_free(out);
            lm_log(rq->log, rq->log_user, "reference cache entry %s holds another request; "
                   "recomputed", path);
        } else {
            lm_log(rq->log, rq->log_user, "reference cache entry is corrupt (%s); recomputed",
                   rerr.msg);
        }
    }
    if ((st = ref_compute(out, m, rq, err)))
        return st;
    lm_err werr = {0};
    if (ref_capture_write(out, path, &werr) != LM_OK)
        lm_log(rq->log, rq->log_user, "reference cache entry not stored (%s)", werr.msg);
    return LM_OK;
}
