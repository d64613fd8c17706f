/* test_kvcache_rotating.c — rotating KV cache bookkeeping: a hand-worked MLX example, the
 * invariant "every new token attends to at least max_size - 1 previous tokens, the first keep
 * included", equivalence with the plain cache when max_size covers the sequence, and row moves. */
#include "../engine/kvcache_rotating.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int visible_is(const lm_rotcache *rc, uint32_t pos0, uint32_t i, const int32_t *want,
                      uint32_t n_want)
{
    int32_t got[64];
    const uint32_t m = lm_rotcache_visible(rc, pos0, i, got);
    return m == n_want && memcmp(got, want, m * sizeof(int32_t)) == 0;
}

/* max_size 4, keep 1 (worked by hand from mlx_lm's _update_concat / _update_in_place). */
static void test_kvcache_rotating_worked_example(void)
{
    lm_rotcache rc;
    lm_rotcache_plan p;
    lm_err err = {0};
    CU_ASSERT_FATAL(lm_rotcache_init(&rc, 4, 1, 6, &err) == LM_OK);
    CU_ASSERT_EQUAL(rc.cap, 9u); /* max_size + step - 1 */
    CU_ASSERT(lm_rotcache_update(&rc, 6, &p, &err) == LM_OK); /* prefill 0..5 in one chunk */
    CU_ASSERT(p.write0 == 0 && p.n_kv == 6 && !p.moved);
    CU_ASSERT(visible_is(&rc, 0, 5, (const int32_t[]){0, 1, 2, 3, 4, 5}, 6));
    CU_ASSERT(visible_is(&rc, 0, 2, (const int32_t[]){0, 1, 2}, 3));
    /* pos 6: trim 6 -> 4 keeping slot 0, dropping positions 1, 2; wrap to keep: slot 1 */
    CU_ASSERT(lm_rotcache_update(&rc, 1, &p, &err) == LM_OK);
    CU_ASSERT(p.moved && p.n_move == 4 && p.write0 == 1 && p.n_kv == 4);
    CU_ASSERT(rc.pos[0] == 0 && rc.pos[1] == 6 && rc.pos[2] == 4 && rc.pos[3] == 5);
    CU_ASSERT(visible_is(&rc, 6, 0, (const int32_t[]){0, 4, 5, 6}, 4));
    CU_ASSERT(lm_rotcache_update(&rc, 1, &p, &err) == LM_OK); /* pos 7 overwrites pos 4 */
    CU_ASSERT(!p.moved && p.write0 == 2);
    CU_ASSERT(visible_is(&rc, 7, 0, (const int32_t[]){0, 5, 6, 7}, 4));
    /* a chunk of 3 (pos 8..10): temporal order 0,5,6,7, trimmed to 3 (drop 5), appended */
    CU_ASSERT(lm_rotcache_update(&rc, 3, &p, &err) == LM_OK);
    CU_ASSERT(p.moved && p.n_move == 3 && p.write0 == 3 && p.n_kv == 6);
    CU_ASSERT(visible_is(&rc, 8, 0, (const int32_t[]){0, 6, 7, 8}, 4));
    CU_ASSERT(visible_is(&rc, 8, 2, (const int32_t[]){0, 6, 7, 8, 9, 10}, 6));
    lm_rotcache_release(&rc);

    /* the same 6-token prompt in steps of 2: position 4 now sees 0, 2, 3, 4 (step-dependent) */
    CU_ASSERT_FATAL(lm_rotcache_init(&rc, 4, 1, 2, &err) == LM_OK);
    for (int c = 0; c < 3; ++c)
        CU_ASSERT(lm_rotcache_update(&rc, 2, &p, &err) == LM_OK);
    CU_ASSERT(visible_is(&rc, 4, 0, (const int32_t[]){0, 2, 3, 4}, 4));
    CU_ASSERT(visible_is(&rc, 4, 1, (const int32_t[]){0, 2, 3, 4, 5}, 5));
    /* bad input */
    CU_ASSERT(lm_rotcache_update(&rc, 3, &p, &err) == LM_E_INPUT);
    lm_rotcache_release(&rc);
    lm_err e2 = {0};
    CU_ASSERT(lm_rotcache_init(&rc, 4, 4, 2, &e2) == LM_E_INPUT);
    CU_ASSERT(strstr(e2.msg, "keep") != NULL);
}

/* Runs a prefill of n_prompt in chunks of step, then n_gen single tokens, checking after every
 * update that each new token sees itself, at least min(max_size - 1, pos) previous tokens, the
 * first min(keep, pos) positions, nothing from its future, and that rows follow their slots. */
static int run_schedule(uint32_t max_size, uint32_t keep, uint32_t step, uint32_t n_prompt,
                        uint32_t n_gen, int *plain)
{
    lm_rotcache rc;
    lm_rotcache_plan p;
    lm_err err = {0};
    if (lm_rotcache_init(&rc, max_size, keep, step, &err) != LM_OK)
        return 0;
    float *rows = malloc(rc.cap * 2 * sizeof(float)), *tmp = malloc(rc.cap * 2 * sizeof(float));
    int32_t *vis = malloc(rc.cap * sizeof(int32_t));
    int ok = 1;
    *plain = 1;
    uint32_t done = 0;
    const uint32_t total = n_prompt + n_gen;
    while (done < total && ok) {
        uint32_t n = done < n_prompt ? (n_prompt - done < step ? n_prompt - done : step) : 1;
        ok &= lm_rotcache_update(&rc, n, &p, &err) == LM_OK;
        lm_rotcache_apply(&p, rows, 2, tmp);
        for (uint32_t i = 0; i < n; ++i) { /* a row carries its position in both columns */
            rows[(size_t)(p.write0 + i) * 2] = (float)(done + i);
            rows[(size_t)(p.write0 + i) * 2 + 1] = (float)(done + i);
        }
        ok &= p.n_kv <= rc.cap && p.n_kv <= max_size + n - 1 + (n == 1);
        for (uint32_t s = 0; s < p.n_kv; ++s) {
            ok &= rows[(size_t)s * 2] == (float)p.kv_pos[s];
            *plain &= p.kv_pos[s] == (int32_t)s;
        }
        for (uint32_t i = 0; i < n; ++i) {
            const uint32_t q = done + i;
            const uint32_t m = lm_rotcache_visible(&rc, p.pos0, i, vis);
            const uint32_t need = q < max_size - 1 ? q : max_size - 1;
            ok &= m >= 1 && vis[m - 1] == (int32_t)q; /* itself, and nothing later */
            ok &= m - 1 >= need;
            for (uint32_t j = 0; j < keep && j < q; ++j)
                ok &= vis[j] == (int32_t)j;
        }
        done += n;
    }
    free(rows);
    free(tmp);
    free(vis);
    lm_rotcache_release(&rc);
    return ok;
}

static void test_kvcache_rotating_invariant(void)
{
    static const uint32_t steps[] = {1, 2, 3, 7, 16, 64};
    static const uint32_t sizes[][2] = {{2, 0}, {4, 1}, {8, 4}, {16, 4}, {33, 0}, {10, 9}};
    int plain;
    for (int s = 0; s < 6; ++s)
        for (int z = 0; z < 6; ++z) {
            const int ok = run_schedule(sizes[z][0], sizes[z][1], steps[s], 100, 30, &plain);
            if (!ok)
                printf("\n  rotating invariant broken: max_size %u keep %u step %u\n",
                       sizes[z][0], sizes[z][1], steps[s]);
            CU_ASSERT(ok);
            CU_ASSERT(!plain); /* 130 tokens overflow every size here: the layout changed */
        }
}

/* max_size >= sequence length: slot j always holds position j (the plain cache's layout). */
static void test_kvcache_rotating_large_is_plain(void)
{
    static const uint32_t steps[] = {1, 2, 3, 7, 16, 64, 100};
    int plain;
    for (int s = 0; s < 7; ++s) {
        CU_ASSERT(run_schedule(130, 4, steps[s], 100, 30, &plain));
        CU_ASSERT(plain);
        CU_ASSERT(run_schedule(131, 0, steps[s], 100, 30, &plain));
        CU_ASSERT(plain);
    }
}

void test_kvcache_rotating_register(void)
{
    CU_pSuite s = CU_add_suite("kvcache_rotating", NULL, NULL);
    CU_add_test(s, "test_kvcache_rotating_worked_example", test_kvcache_rotating_worked_example);
    CU_add_test(s, "test_kvcache_rotating_invariant", test_kvcache_rotating_invariant);
    CU_add_test(s, "test_kvcache_rotating_large_is_plain", test_kvcache_rotating_large_is_plain);
}
