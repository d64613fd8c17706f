/* test_ref_group.c — a reference pass shared by a group (ref_group.h) whose members are threads
 * of this process, exchanging through memory: bitwise the single-process result for 1 to 4
 * members (ranges of every size, empty ones included), a member's failure reaching every
 * member, and a member computing from another model refused. scripts/mpi.sh runs the same
 * over MPI. */
#include "kvd_ref.h"
#include "ref_dotx.h"
#include "ref_group.h"
#include "test_ref_model.h"

#include <pthread.h>

typedef struct tg_shared {
    pthread_barrier_t bar;
    void *bufs[4];
} tg_shared;

/* Every member publishes its buffer, then copies the others' parts out of theirs. */
static int tg_allgather(const ref_group *g, void *buf, const uint64_t *count,
                        const uint64_t *displ, lm_err *err)
{
    (void)err;
    tg_shared *s = g->user;
    s->bufs[g->rank] = buf;
    pthread_barrier_wait(&s->bar);
    for (int r = 0; r < g->size; ++r)
        if (r != g->rank)
            memcpy((char *)buf + displ[r], (const char *)s->bufs[r] + displ[r], count[r]);
    pthread_barrier_wait(&s->bar);
    return LM_OK;
}

typedef struct tg_member {
    ref_group g;
    const ref_model *m;
    ref_request rq;
    ref_result *res;
    int st;
    lm_err err;
} tg_member;

static void *tg_run(void *p)
{
    tg_member *a = p;
    a->rq.group = &a->g;
    a->st = ref_run(&a->res, a->m, &a->rq, &a->err);
    mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
    return NULL;
}

/* Runs rq on `size` members; member r uses models[r] and requests rqs[r]. */
static void tg_pass(tg_member *mem, int size, const ref_model *const *models,
                    const ref_request *rqs)
{
    tg_shared s;
    pthread_barrier_init(&s.bar, NULL, (unsigned)size);
    pthread_t th[4];
    for (int r = 0; r < size; ++r) {
        memset(&mem[r], 0, sizeof mem[r]);
        mem[r].g = (ref_group){.rank = r, .size = size, .threads = 1,
                               .allgather = tg_allgather, .user = &s};
        mem[r].m = models[r];
        mem[r].rq = rqs[r];
        CU_ASSERT_FATAL(pthread_create(&th[r], NULL, tg_run, &mem[r]) == 0);
    }
    for (int r = 0; r < size; ++r)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&s.bar);
}

/* Same value and sign (both NaN counts as the same). */
static bool identical(mpfr_srcptr a, mpfr_srcptr b)
{
    return (mpfr_nan_p(a) && mpfr_nan_p(b)) ||
           (mpfr_equal_p(a, b) && mpfr_signbit(a) == mpfr_signbit(b));
}

static bool same_result(const ref_result *a, const ref_result *b)
{
    const uint64_t kv = (uint64_t)a->n_layer * a->n_prompt * a->n_kv_head * a->head_dim;
    for (uint64_t i = 0; i < kv; ++i)
        if (!identical(a->k[i], b->k[i]) || !identical(a->v[i], b->v[i]))
            return false;
    for (uint64_t i = 0; i < (uint64_t)a->n_pos * a->n_vocab; ++i)
        if (!identical(a->logits[i], b->logits[i]))
            return false;
    return true;
}

static lm_hparams tg_hparams(void)
{
    lm_hparams hp = trm_hparams(LM_ROPE_NEOX);
    hp.n_vocab = 13; /* not a multiple of 4: members get ranges of 4, fewer, or none */
    hp.n_rot = 4;
    return hp;
}

static void test_ref_group_ranges(void)
{
    for (int size = 1; size <= 5; ++size)
        for (uint64_t n = 0; n <= 23; ++n) {
            ref_group g = {.size = size};
            uint64_t next = 0;
            for (int r = 0; r < size; ++r) {
                uint64_t lo, hi;
                g.rank = r;
                ref_group_range(&g, r, n, &lo, &hi);
                CU_ASSERT_EQUAL(lo, next); /* contiguous, in rank order, covering [0, n) */
                CU_ASSERT(hi >= lo);
                CU_ASSERT(lo % REF_DX_ROWS == 0 || lo == n);
                next = hi;
            }
            CU_ASSERT_EQUAL(next, n);
        }
}

static void test_ref_group_bitwise_any_size(void)
{
    trm t;
    lm_hparams hp = tg_hparams();
    trm_build(&t, &hp, true, 21);
    int32_t tok[7] = {1, 2, 3, 4, 5, 6, 7};
    ref_request rq = {.tokens = tok, .n_tokens = 7, .n_prompt = 5, .n_threads = 1};
    ref_result *one;
    lm_err err = {0};
    CU_ASSERT_FATAL(ref_run(&one, &t.r, &rq, &err) == LM_OK);
    const ref_model *models[4] = {&t.r, &t.r, &t.r, &t.r};
    const ref_request rqs[4] = {rq, rq, rq, rq};
    for (int size = 1; size <= 4; ++size) {
        tg_member mem[4];
        tg_pass(mem, size, models, rqs);
        for (int r = 0; r < size; ++r) {
            CU_ASSERT_EQUAL(mem[r].st, LM_OK);
            if (mem[r].st == LM_OK)
                CU_ASSERT(same_result(one, mem[r].res));
            ref_result_free(mem[r].res);
        }
    }
    ref_result_free(one);
    trm_free(&t);
}

/* A request only member 2 refuses: every member fails, the others naming rank 2. */
static void test_ref_group_failure_reaches_all(void)
{
    trm t;
    lm_hparams hp = tg_hparams();
    trm_build(&t, &hp, false, 22);
    int32_t tok[4] = {1, 2, 3, 4};
    ref_request rq = {.tokens = tok, .n_tokens = 4, .n_prompt = 4, .n_threads = 1};
    ref_request bad = rq;
    bad.prec = 20; /* below REF_MIN_PREC */
    const ref_model *models[3] = {&t.r, &t.r, &t.r};
    const ref_request rqs[3] = {rq, rq, bad};
    tg_member mem[3];
    tg_pass(mem, 3, models, rqs);
    for (int r = 0; r < 3; ++r) {
        CU_ASSERT_EQUAL(mem[r].st, LM_E_INPUT);
        CU_ASSERT_PTR_NULL(mem[r].res);
    }
    CU_ASSERT(strncmp(mem[0].err.msg, "rank 2: precision 20", 20) == 0);
    CU_ASSERT(strncmp(mem[2].err.msg, "precision 20", 12) == 0);
    trm_free(&t);
}

/* Member 1 holds a model with another final norm: its inputs to the output projection differ,
 * and every member refuses the pass instead of mixing rows of two models. */
static void test_ref_group_other_model_refused(void)
{
    trm a, b;
    lm_hparams hp = tg_hparams();
    trm_build(&a, &hp, false, 23);
    trm_build(&b, &hp, false, 23);
    ((float *)b.r.output_norm)[3] *= 2.0f;
    int32_t tok[4] = {1, 2, 3, 4};
    ref_request rq = {.tokens = tok, .n_tokens = 4, .n_prompt = 4, .n_threads = 1};
    const ref_model *models[2] = {&a.r, &b.r};
    const ref_request rqs[2] = {rq, rq};
    tg_member mem[2];
    tg_pass(mem, 2, models, rqs);
    for (int r = 0; r < 2; ++r) {
        CU_ASSERT_EQUAL(mem[r].st, LM_E_INPUT);
        CU_ASSERT_PTR_NULL(mem[r].res);
        CU_ASSERT_PTR_NOT_NULL(strstr(mem[r].err.msg, "do not compute alike"));
    }
    trm_free(&a);
    trm_free(&b);
}

void test_ref_group_register(void)
{
    CU_pSuite s = CU_add_suite("ref_group", NULL, NULL);
    CU_add_test(s, "test_ref_group_ranges", test_ref_group_ranges);
    CU_add_test(s, "test_ref_group_bitwise_any_size", test_ref_group_bitwise_any_size);
    CU_add_test(s, "test_ref_group_failure_reaches_all", test_ref_group_failure_reaches_all);
    CU_add_test(s, "test_ref_group_other_model_refused", test_ref_group_other_model_refused);
}
