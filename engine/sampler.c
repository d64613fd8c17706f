/* sampler.c — greedy argmax and seeded temperature / top-k / top-p sampling.
 *
 * PRNG: xoshiro256** (Blackman & Vigna), its 256-bit state filled from the seed by splitmix64,
 * as the authors recommend. One draw per sampled token: u = (next() >> 40) * 2^-24, a uniform
 * float in [0, 1) with 24 random bits (exact in float).
 *
 * Sampling order of operations, fixed: candidates = every id whose logit is not NaN; sorted by
 * logit descending, ties by id ascending; cut to the first top_k; weights
 * w_i = exp((l_i - l_0) / T) in double (l_0 the largest); top-p keeps the shortest prefix
 * whose weight sum reaches top_p * total (summed left to right in double); then the token is
 * the first prefix index whose running sum exceeds u * kept_total. */
#include "kvd_engine.h"

#include <math.h>
#include <stdlib.h>

struct lm_sampler {
    lm_sampler_params p;
    uint32_t n_vocab;
    uint64_t s[4];    /* xoshiro256** state */
    int32_t *ids;     /* [n_vocab] candidate ids, sorted */
    double *w;        /* [n_vocab] candidate weights */
};

int32_t lm_argmax(const float *logits, uint32_t n)
{
    int32_t best = -1;
    for (uint32_t i = 0; i < n; ++i) {
        if (isnan(logits[i]))
            continue;
        /* strictly greater: ties keep the lowest id */
        if (best < 0 || logits[i] > logits[best])
            best = (int32_t)i;
    }
    return best < 0 ? 0 : best; /* all NaN: id 0, the only defined choice left */
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(uint64_t s[4])
{
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

int lm_sampler_create(lm_sampler **out, const lm_sampler_params *p, uint32_t n_vocab, lm_err *err)
{
    *out = NULL;
    if (n_vocab == 0)
        return LM_FAIL(err, LM_E_INPUT, "sampler: empty vocabulary");
    if (isnan(p->temperature) || isnan(p->top_p))
        return LM_FAIL(err, LM_E_INPUT, "sampler: temperature and top-p must be numbers");
    if (p->top_p <= 0.0f)
        return LM_FAIL(err, LM_E_INPUT, "sampler: top-p %g must be > 0", (double)p->top_p);
    lm_sampler *s = calloc(1, sizeof *s);
    if (s == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "sampler: out of memory");
    s->ids = malloc((size_t)n_vocab * sizeof *s->ids);
    s->w = malloc((size_t)n_vocab * sizeof *s->w);
    if (s->ids == NULL || s->w == NULL) {
        lm_sampler_free(s);
        return LM_FAIL(err, LM_E_NOMEM, "sampler: out of memory");
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; ++i)
        s->s[i] = splitmix64(&x);
    *out = s;
    return LM_OK;
}

void lm_sampler_free(lm_sampler *s)
{
    if (s == NULL)
        return;
    free(s->ids);
    free(s->w);
    free(s);
}

/* qsort has no context argument: the logits being sorted are passed through a thread-local
 * pointer set right before each sort. */
static _Thread_local const float *sort_logits;

static int by_logit_desc(const void *pa, const void *pb)
{
    const int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    const float la = sort_logits[a], lb = sort_logits[b];
    if (la > lb)
        return -1;
    if (la < lb)
        return 1;
    return (a > b) - (a < b);
}

int32_t lm_sample(lm_sampler *s, const float *logits)
{
    if (!(s->p.temperature > 0.0f))
        return lm_argmax(logits, s->n_vocab);

    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_vocab; ++i)
        if (!isnan(logits[i]))
            s->ids[n++] = (int32_t)i;
    if (n == 0)
        return 0;
    sort_logits = logits;
    qsort(s->ids, n, sizeof *s->ids, by_logit_desc);
    if (s->p.top_k > 0 && s->p.top_k < n)
        n = s->p.top_k;

    const double top = (double)logits[s->ids[0]];
    const double temp = (double)s->p.temperature;
    double total = 0.0;
    for (uint32_t i = 0; i < n; ++i) {
        const double l = (double)logits[s->ids[i]];
        /* +Inf at the top: only the +Inf entries get weight */
        s->w[i] = isinf(top) ? (l == top ? 1.0 : 0.0) : exp((l - top) / temp);
        total += s->w[i];
    }
    if (s->p.top_p < 1.0f) {
        const double target = (double)s->p.top_p * total;
        double acc = 0.0;
        uint32_t keep = 0;
        while (keep < n) {
            acc += s->w[keep++];
            if (acc >= target)
                break;
        }
        n = keep;
        total = acc;
    }
    const double u = (double)(xoshiro_next(s->s) >> 40) * (1.0 / 16777216.0);
    const double r = u * total;
    double acc = 0.0;
    for (uint32_t i = 0; i < n; ++i) {
        acc += s->w[i];
        if (acc > r)
            return s->ids[i];
    }
    return s->ids[n - 1]; /* r within rounding of total */
}
