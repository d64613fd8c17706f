/* test_threadpool.c — the forward pass's fork-join pool: every row of [0, n) is visited
 * exactly once, by contiguous parts, for any n and thread count; NULL pools run serially. */
#include "../engine/threadpool.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct visit {
    unsigned char *seen; /* [n] visit counts */
    uint32_t calls;      /* calls of count_calls: only used where the pool runs serially */
} visit;

static void mark(void *arg, uint32_t begin, uint32_t end)
{
    visit *v = arg;
    for (uint32_t i = begin; i < end; ++i)
        v->seen[i]++; /* parts are disjoint, so no two threads touch one element */
}

static void count_calls(void *arg, uint32_t begin, uint32_t end)
{
    visit *v = arg;
    v->calls++;
    for (uint32_t i = begin; i < end; ++i)
        v->seen[i]++;
}

static void test_threadpool_covers_every_row_once(void)
{
    static const int threads[] = {1, 2, 3, 8};
    static const uint32_t ns[] = {0, 1, 2, 7, 8, 9, 100, 1001};
    for (size_t t = 0; t < 4; ++t) {
        lm_pool *p = NULL;
        lm_err err = {0};
        CU_ASSERT_FATAL(lm_pool_create(&p, threads[t], &err) == LM_OK);
        CU_ASSERT((p == NULL) == (threads[t] <= 1));
        for (int round = 0; round < 20; ++round) /* many generations through one pool */
            for (size_t k = 0; k < 8; ++k) {
                visit v = {calloc(ns[k] + 1, 1), 0};
                CU_ASSERT_FATAL(v.seen != NULL);
                lm_pool_for(p, ns[k], 1, mark, &v);
                for (uint32_t i = 0; i < ns[k]; ++i)
                    CU_ASSERT_EQUAL(v.seen[i], 1);
                CU_ASSERT_EQUAL(v.seen[ns[k]], 0);
                free(v.seen);
            }
        lm_pool_free(p);
    }
    lm_pool_free(NULL);
}

/* Below 2 * min_rows rows the caller does all the work in one call. */
static void test_threadpool_small_work_stays_serial(void)
{
    lm_pool *p = NULL;
    lm_err err = {0};
    CU_ASSERT_FATAL(lm_pool_create(&p, 2, &err) == LM_OK);
    visit v = {calloc(8, 1), 0};
    CU_ASSERT_FATAL(v.seen != NULL);
    lm_pool_for(p, 7, 4, count_calls, &v);
    CU_ASSERT_EQUAL(v.calls, 1);
    for (int i = 0; i < 7; ++i)
        CU_ASSERT_EQUAL(v.seen[i], 1);
    free(v.seen);
    lm_pool_free(p);
}

static void sleep_us(long us)
{
    const struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

/* Rows from 1 on take a millisecond each: a thread that claims such a part keeps the caller
 * waiting past its spin, so the caller sleeps and the part's end must wake it. */
static void mark_slow(void *arg, uint32_t begin, uint32_t end)
{
    if (begin > 0)
        sleep_us(1000);
    mark(arg, begin, end);
}

/* Jobs 300 us apart (longer than any spin: the workers are asleep when each job is published)
 * and jobs whose parts outlast the caller's spin: every row is still visited exactly once and
 * no wake-up is lost (a lost one hangs, which the alarm turns into a failure). */
static void test_threadpool_wakes_sleeping_threads(void)
{
    static const int threads[] = {2, 3};
    alarm(60);
    for (size_t t = 0; t < 2; ++t) {
        lm_pool *p = NULL;
        lm_err err = {0};
        CU_ASSERT_FATAL(lm_pool_create(&p, threads[t], &err) == LM_OK);
        for (int round = 0; round < 40; ++round) {
            const uint32_t n = 2 + (uint32_t)round % 7;
            visit v = {calloc(n, 1), 0};
            CU_ASSERT_FATAL(v.seen != NULL);
            sleep_us(300);
            lm_pool_for(p, n, 1, round % 2 ? mark_slow : mark, &v);
            for (uint32_t i = 0; i < n; ++i)
                CU_ASSERT_EQUAL(v.seen[i], 1);
            free(v.seen);
        }
        lm_pool_free(p);
    }
    alarm(0);
}

void test_threadpool_register(void)
{
    CU_pSuite s = CU_add_suite("threadpool", NULL, NULL);
    CU_add_test(s, "test_threadpool_covers_every_row_once", test_threadpool_covers_every_row_once);
    CU_add_test(s, "test_threadpool_small_work_stays_serial", test_threadpool_small_work_stays_serial);
    CU_add_test(s, "test_threadpool_wakes_sleeping_threads", test_threadpool_wakes_sleeping_threads);
}
