/* threadpool.c — fork-join pool: n - 1 workers plus the caller, one generation per job.
 *
 * A job of n rows is cut into n_threads contiguous parts (part(), fixed by n and the thread
 * count alone). The parts are claimed from one shared word, `state` (the job's generation in
 * the high 32 bits, the next unclaimed part in the low 32), by whichever threads are running:
 * the caller claims parts too, and may end up running all of them. The caller then waits only
 * for parts that a worker has claimed, i.e. for a worker that is running the job, never for
 * one that is asleep or descheduled; a worker that arrives after the last part was claimed
 * finds nothing and waits for the next generation. Which thread runs a part changes nothing
 * in what the part computes.
 *
 * Waiting: a worker with nothing to do spins for WORKER_SPIN_NS (the gaps between the
 * back-to-back jobs of a decode step are shorter), then sleeps on a condition variable; the
 * caller wakes sleepers only when `sleepers` says there are some. The caller waits for claimed
 * parts by spinning for CALLER_SPIN_NS, then sleeping until the last part signals. Each side
 * publishes its flag (sleepers, caller_waiting) before re-checking the other side's word, and
 * the other side writes its word before reading the flag (all sequentially consistent), so
 * at least one of them sees the other: no wake-up is lost. A spin bounded in time rather than
 * in pause instructions costs the same on every CPU (a pause takes from about 3 to 150 cycles
 * depending on the model), and keeps an idle worker from holding a core that another thread
 * on a loaded machine needs. */
#include "threadpool.h"

#include "kvd_defects.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#define WORKER_SPIN_NS 20000 /* a worker's spin for the next job before it sleeps */
#define CALLER_SPIN_NS 20000 /* the caller's spin for claimed parts before it sleeps */
#define SPIN_CHECK 16        /* pauses between two reads of the clock */

static inline void cpu_relax(void)
{
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

#define MAX_THREADS 64

typedef struct worker_arg {
    struct lm_pool *p;
    int index;
} worker_arg;

struct lm_pool {
    int n_threads; /* parts per job: the workers plus the caller */
    pthread_t th[MAX_THREADS];
    worker_arg wa[MAX_THREADS]; /* worker i's argument; lives as long as the pool */
    pthread_mutex_t mu;
    pthread_cond_t start;  /* sleeping workers wait here for a new generation */
    pthread_cond_t done;   /* the sleeping caller waits here for the last claimed part */
    _Atomic uint64_t state; /* generation << 32 | next unclaimed part */
    _Atomic uint32_t generation; /* the current job's generation (what workers wait on) */
    _Atomic uint32_t finished;   /* parts of the current job completed */
    _Atomic int sleepers;        /* workers asleep (or about to sleep) on `start` */
    _Atomic bool caller_waiting; /* the caller asleep (or about to sleep) on `done` */
    _Atomic bool quit;
    uint32_t gen; /* the last generation published (the caller's own counter) */
    /* the current job: written before its generation is published, read by a thread only
     * after it has claimed one of its parts */
    lm_pool_fn fn;
    void *arg;
    uint32_t n;
};

static void part(const lm_pool *p, uint32_t index, uint32_t *begin, uint32_t *end)
{
    const uint64_t n = p->n, t = (uint64_t)p->n_threads;
    *begin = (uint32_t)(n * (uint64_t)index / t);
    *end = (uint32_t)(n * (uint64_t)(index + 1) / t);
    if (LM_DEFECT_ON(NULL, LM_DEFECT_THREAD_SPLIT_SKIPS_ROW) && index > 0 && *begin < *end)
        *begin += 1; /* test defect: an off-by-one split leaves this part's first row undone */
}

/* Claims and runs parts of generation gen until none is left (or a later job has started). */
static void run_parts(lm_pool *p, uint32_t gen)
{
    const uint32_t n_parts = (uint32_t)p->n_threads;
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(s >> 32) != gen || (uint32_t)s >= n_parts)
            return;
        if (!atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* s now holds the current word */
        /* part (uint32_t)s is ours: the job cannot end before it is finished */
        uint32_t b, e;
        part(p, (uint32_t)s, &b, &e);
        if (b < e)
            p->fn(p->arg, b, e);
        if (atomic_fetch_add(&p->finished, 1) + 1 == n_parts && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
        s = atomic_load_explicit(&p->state, memory_order_acquire);
    }
}

/* true when the pool is quitting or a generation other than seen is published. */
static bool job_or_quit(lm_pool *p, uint32_t seen)
{
    return atomic_load(&p->quit) || atomic_load(&p->generation) != seen;
}

static void *worker(void *varg)
{
    lm_pool *p = ((worker_arg *)varg)->p;
    uint32_t seen = 0;
    for (;;) {
        if (!job_or_quit(p, seen)) {
            const int64_t until = now_ns() + WORKER_SPIN_NS;
            bool ready = false;
            while (!ready && now_ns() < until)
                for (int i = 0; i < SPIN_CHECK && !(ready = job_or_quit(p, seen)); ++i)
                    cpu_relax();
            if (!ready) {
                pthread_mutex_lock(&p->mu);
                atomic_fetch_add(&p->sleepers, 1);
                while (!job_or_quit(p, seen))
                    pthread_cond_wait(&p->start, &p->mu);
                atomic_fetch_sub(&p->sleepers, 1);
                pthread_mutex_unlock(&p->mu);
            }
        }
        if (atomic_load(&p->quit))
            break;
        seen = atomic_load(&p->generation);
        run_parts(p, seen);
    }
    return NULL;
}

int lm_pool_create(lm_pool **out, int n_threads, lm_err *err)
{
    *out = NULL;
    if (n_threads <= 1)
        return LM_OK;
    if (n_threads > MAX_THREADS)
        n_threads = MAX_THREADS;
    lm_pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "thread pool: out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    p->n_threads = 1;
    for (int i = 1; i < n_threads; ++i) {
        p->wa[i] = (worker_arg){p, i};
        if (pthread_create(&p->th[i], NULL, worker, &p->wa[i]) != 0)
            break;
        p->n_threads = i + 1;
    }
    if (p->n_threads == 1) {
        lm_pool_free(p);
        return LM_OK; /* no worker could start: run serially rather than fail */
    }
    *out = p;
    return LM_OK;
}

void lm_pool_free(lm_pool *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, true);
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; ++i)
        pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    free(p);
}

void lm_pool_for(lm_pool *p, uint32_t n, uint32_t min_rows, lm_pool_fn fn, void *arg)
{
    if (p == NULL || n < 2 * (min_rows ? min_rows : 1)) {
        if (n > 0)
            fn(arg, 0, n);
        return;
    }
    const uint32_t n_parts = (uint32_t)p->n_threads;
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    const uint32_t gen = ++p->gen;
    atomic_store_explicit(&p->state, (uint64_t)gen << 32, memory_order_release); /* the job */
    atomic_store(&p->generation, gen);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->start);
        pthread_mutex_unlock(&p->mu);
    }
    run_parts(p, gen);
    if (atomic_load(&p->finished) == n_parts)
        return;
    const int64_t until = now_ns() + CALLER_SPIN_NS;
    bool all = false;
    while (!all && now_ns() < until)
        for (int i = 0; i < SPIN_CHECK && !(all = atomic_load(&p->finished) == n_parts); ++i)
            cpu_relax();
    if (all)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_waiting, true);
    while (atomic_load(&p->finished) < n_parts)
        pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->caller_waiting, false);
    pthread_mutex_unlock(&p->mu);
}
