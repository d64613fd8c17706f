/* kvcache_rotating.c — slot bookkeeping of the rotating KV cache (semantics in
 * kvcache_rotating.h). */
#include "kvcache_rotating.h"
#include "kvd_defects.h"

#include <stdlib.h>
#include <string.h>

int lm_rotcache_init(lm_rotcache *rc, uint32_t max_size, uint32_t keep, uint32_t max_chunk,
                     lm_err *err)
{
    memset(rc, 0, sizeof *rc);
    if (max_size < 2 || keep >= max_size || max_chunk == 0)
        return LM_FAIL(err, LM_E_INPUT,
                       "rotating cache: need max_size >= 2, keep < max_size, chunk >= 1 "
                       "(got max_size %u, keep %u, chunk %u)",
                       max_size, keep, max_chunk);
    uint64_t cap;
    if (lm_add_u64(&cap, (uint64_t)max_size + max_chunk, 0) != 0 || cap - 1 > UINT32_MAX / 8)
        return LM_FAIL(err, LM_E_INPUT, "rotating cache: max_size %u + chunk %u too large",
                       max_size, max_chunk);
    rc->max_size = max_size;
    rc->keep = keep;
    rc->max_chunk = max_chunk;
    rc->cap = (uint32_t)(cap - 1);
    rc->pos = malloc(rc->cap * sizeof(int32_t));
    rc->tmp = malloc(rc->cap * sizeof(int32_t));
    rc->gather = malloc(rc->cap * sizeof(uint32_t));
    if (rc->pos == NULL || rc->tmp == NULL || rc->gather == NULL) {
        lm_rotcache_release(rc);
        return LM_FAIL(err, LM_E_NOMEM, "rotating cache: out of memory");
    }
    lm_rotcache_reset(rc);
    return LM_OK;
}

void lm_rotcache_release(lm_rotcache *rc)
{
    if (rc == NULL)
        return;
    free(rc->pos);
    free(rc->tmp);
    free(rc->gather);
    memset(rc, 0, sizeof *rc);
}

void lm_rotcache_reset(lm_rotcache *rc)
{
    rc->size = rc->idx = rc->offset = rc->rollback_min = 0;
    for (uint32_t s = 0; s < rc->cap; ++s)
        rc->pos[s] = -1;
}

/* gather[0..size) = the slots in increasing position (positions are distinct). The layout is
 * always the first min(keep, size) positions in slots [0, keep) followed by a rotated run of
 * increasing positions (a circular buffer over [keep, size)), so the order is read off from
 * the slot of the smallest position after keep; an insertion sort backs this up should the
 * layout ever be otherwise (it is then still correct, only slower). */
static void temporal_order(lm_rotcache *rc)
{
    if (LM_DEFECT_ON(NULL, LM_DEFECT_ROT_CONCAT_SLOT_ORDER)) {
        /* test defect: the slot order taken for the temporal order (true until the in-place
         * ring wraps) */
        for (uint32_t s = 0; s < rc->size; ++s)
            rc->gather[s] = s;
        return;
    }
    const uint32_t keep = rc->keep < rc->size ? rc->keep : rc->size;
    uint32_t start = keep;
    for (uint32_t s = keep + 1; s < rc->size; ++s)
        start = rc->pos[s] < rc->pos[start] ? s : start;
    for (uint32_t s = 0; s < keep; ++s)
        rc->gather[s] = s;
    for (uint32_t s = keep; s < rc->size; ++s)
        rc->gather[s] = keep + (start - keep + (s - keep)) % (rc->size - keep);
    bool sorted = true;
    for (uint32_t s = 1; s < rc->size; ++s)
        sorted = sorted && rc->pos[rc->gather[s - 1]] < rc->pos[rc->gather[s]];
    if (sorted)
        return;
    for (uint32_t a = 1; a < rc->size; ++a) {
        const uint32_t g = rc->gather[a];
        uint32_t b = a;
        while (b > 0 && rc->pos[rc->gather[b - 1]] > rc->pos[g]) {
            rc->gather[b] = rc->gather[b - 1];
            --b;
        }
        rc->gather[b] = g;
    }
}

/* Keeps gather[0..keep) and gather[keep + drop ..), shifting down; returns the new count. */
static uint32_t drop_after_keep(lm_rotcache *rc, uint32_t count, uint32_t drop)
{
    const uint32_t keep = rc->keep < count ? rc->keep : count;
    for (uint32_t s = keep; s + drop < count; ++s)
        rc->gather[s] = rc->gather[s + drop];
    return count - drop;
}

static void finish_moves(lm_rotcache *rc, uint32_t n_move, lm_rotcache_plan *plan)
{
    bool moved = false;
    for (uint32_t s = 0; s < n_move; ++s) {
        rc->tmp[s] = rc->pos[rc->gather[s]];
        moved = moved || rc->gather[s] != s;
    }
    moved = moved || n_move != rc->size;
    for (uint32_t s = 0; s < n_move; ++s)
        rc->pos[s] = rc->tmp[s];
    for (uint32_t s = n_move; s < rc->cap; ++s)
        rc->pos[s] = -1;
    plan->moved = moved;
    plan->n_move = n_move;
    plan->gather = rc->gather;
    rc->size = n_move;
}

int lm_rotcache_update(lm_rotcache *rc, uint32_t n, lm_rotcache_plan *plan, lm_err *err)
{
    if (n == 0 || n > rc->max_chunk)
        return LM_FAIL(err, LM_E_INPUT, "rotating cache: chunk of %u tokens (allowed 1..%u)", n,
                       rc->max_chunk);
    if ((uint64_t)rc->offset + n > INT32_MAX)
        return LM_FAIL(err, LM_E_INPUT, "rotating cache: position overflow");
    memset(plan, 0, sizeof *plan);
    plan->pos0 = rc->offset;
    if (n > 1) {
        /* concat: temporal order, trim to max_size - 1, append */
        temporal_order(rc);
        uint32_t count = rc->size;
        if (count + 1 > rc->max_size)
            count = drop_after_keep(rc, count, count + 1 - rc->max_size);
        finish_moves(rc, count, plan);
        plan->write0 = rc->size;
        rc->size += n;
        rc->idx = rc->size;
    } else {
        /* in place: trim to max_size in the current layout, then the circular write */
        for (uint32_t s = 0; s < rc->size; ++s)
            rc->gather[s] = s;
        uint32_t count = rc->size;
        if (count > rc->max_size) {
            count = drop_after_keep(rc, count, count - rc->max_size);
            rc->idx = rc->max_size;
        }
        finish_moves(rc, count, plan);
        if (rc->idx == rc->max_size)
            rc->idx = rc->keep;
        plan->write0 = rc->idx;
        if (rc->idx == rc->size)
            ++rc->size;
        else /* written over an older position: no rollback past this token */
            rc->rollback_min = rc->offset + 1;
        ++rc->idx;
    }
    for (uint32_t i = 0; i < n; ++i)
        rc->pos[plan->write0 + i] = (int32_t)(rc->offset + i);
    rc->offset += n;
    plan->n_kv = rc->size;
    plan->kv_pos = rc->pos;
    return LM_OK;
}

int lm_rotcache_rollback(lm_rotcache *rc, uint32_t n_past, lm_err *err)
{
    if (n_past > rc->offset)
        return LM_FAIL(err, LM_E_INPUT, "rotating cache: rollback to %u beyond %u positions",
                       n_past, rc->offset);
    if (n_past < rc->rollback_min)
        return LM_FAIL(err, LM_E_INPUT, "rotating cache: cannot roll back to %u: position %u "
                       "was written over an older one", n_past, rc->rollback_min - 1);
    const uint32_t drop = rc->offset - n_past;
    if (drop > rc->size)
        return LM_FAIL(err, LM_E_INPUT, "rotating cache: rollback of %u positions, %u cached",
                       drop, rc->size);
    for (uint32_t s = rc->size - drop; s < rc->size; ++s)
        if (rc->pos[s] < (int32_t)n_past) /* not the tail: the layout is not the appended one */
            return LM_FAIL(err, LM_E_INPUT, "rotating cache: positions >= %u are not the last "
                           "slots", n_past);
    for (uint32_t s = rc->size - drop; s < rc->size; ++s)
        rc->pos[s] = -1;
    rc->size -= drop;
    rc->idx = rc->size;
    rc->offset = n_past;
    return LM_OK;
}

void lm_rotcache_apply(const lm_rotcache_plan *p, float *rows, uint32_t dim, float *tmp)
{
    if (!p->moved)
        return;
    for (uint32_t s = 0; s < p->n_move; ++s)
        memcpy(tmp + (size_t)s * dim, rows + (size_t)p->gather[s] * dim, dim * sizeof(float));
    memcpy(rows, tmp, (size_t)p->n_move * dim * sizeof(float));
}

bool lm_rotcache_sees(const lm_rotcache *rc, uint32_t q_pos, int32_t k_pos)
{
    if (k_pos < 0 || (uint32_t)k_pos > q_pos)
        return false;
    return !rc->window || (uint32_t)k_pos < rc->keep || q_pos - (uint32_t)k_pos < rc->max_size - rc->keep;
}

uint32_t lm_rotcache_visible(const lm_rotcache *rc, uint32_t pos0, uint32_t i, int32_t *out)
{
    uint32_t m = 0;
    for (uint32_t s = 0; s < rc->size; ++s)
        if (lm_rotcache_sees(rc, pos0 + i, rc->pos[s]))
            out[m++] = rc->pos[s];
    for (uint32_t a = 1; a < m; ++a) { /* ascending */
        const int32_t v = out[a];
        uint32_t b = a;
        while (b > 0 && out[b - 1] > v) {
            out[b] = out[b - 1];
            --b;
        }
        out[b] = v;
    }
    return m;
}
