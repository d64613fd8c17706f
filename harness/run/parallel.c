/* parallel.c — hx_run_jobs (contract in parallel.h). */
#include "run/parallel.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct job_pool {
    uint32_t n;
    hx_job_fn run;
    hx_job_done_fn done;
    void *ctx;
    int *rc;      /* [n] */
    lm_err *errs; /* [n] */
    uint32_t next;
    bool stop; /* a job failed: claim no more */
    pthread_mutex_t mu;
} job_pool;

static void *job_worker(void *arg)
{
    job_pool *jp = arg;
    for (;;) {
        pthread_mutex_lock(&jp->mu);
        if (jp->stop || jp->next == jp->n) {
            pthread_mutex_unlock(&jp->mu);
            return NULL;
        }
        const uint32_t i = jp->next++;
        pthread_mutex_unlock(&jp->mu);
        jp->rc[i] = jp->run(jp->ctx, i, &jp->errs[i]);
        pthread_mutex_lock(&jp->mu);
        jp->stop |= jp->rc[i] != LM_OK;
        if (jp->done != NULL)
            jp->done(jp->ctx, i, jp->rc[i]);
        pthread_mutex_unlock(&jp->mu);
    }
}

int hx_run_jobs(uint32_t n, uint32_t jobs, hx_job_fn run, hx_job_done_fn done, void *ctx,
                lm_err *err)
{
    job_pool jp = {.n = n, .run = run, .done = done, .ctx = ctx,
                   .rc = calloc(n ? n : 1, sizeof *jp.rc),
                   .errs = calloc(n ? n : 1, sizeof *jp.errs)};
    if (jp.rc == NULL || jp.errs == NULL) {
        free(jp.rc), free(jp.errs);
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    pthread_mutex_init(&jp.mu, NULL);
    uint32_t nt = jobs < n ? jobs : n;
    nt = nt < HX_JOBS_MAX ? nt : HX_JOBS_MAX;
    pthread_t th[HX_JOBS_MAX];
    uint32_t started = 0;
    for (; nt > 1 && started < nt; ++started)
        if (pthread_create(&th[started], NULL, job_worker, &jp) != 0)
            break;
    if (started == 0)
        job_worker(&jp);
    for (uint32_t t = 0; t < started; ++t)
        pthread_join(th[t], NULL);
    pthread_mutex_destroy(&jp.mu);
    int rc = LM_OK;
    for (uint32_t i = 0; i < n && rc == LM_OK; ++i)
        if (jp.rc[i] != LM_OK)
            rc = LM_FAIL(err, jp.rc[i], "%s", jp.errs[i].msg);
    free(jp.rc), free(jp.errs);
    return rc;
}
