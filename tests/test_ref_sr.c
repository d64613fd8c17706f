/* test_ref_sr.c — the reference's float32 stochastic-rounding model (ref_sr.c): the rounding is
 * unbiased and leaves representable values alone, every kernel gives the same bits, members
 * are independent of the thread count, different seeds differ, and a member stays within
 * float32 noise of the MPFR reference, on the llama shape and on every architecture variant the
 * reference implements. */
#include "ref_sr.h"
#include "plan/synth.h"
#include "test_ref_model.h"

#include <math.h>
#include <stdio.h>

/* SR of 1 + f ulp (ulp = 2^-23) over 2^16 random words: the mean must be 1 + f ulp within
 * 6 standard deviations of the mean of 2^16 Bernoulli(f) draws (sd <= 0.5 / 256 ulp), and
 * only the two neighbours may occur. */
static void test_ref_sr_round_unbiased(void)
{
    const double fr[] = {0.5, 0.3, 0.01, 0.99};
    for (size_t k = 0; k < sizeof fr / sizeof *fr; ++k) {
        const double t = 1.0 + fr[k] * 0x1p-23;
        double sum = 0.0;
        bool only_neighbours = true;
        for (uint32_t i = 0; i < 65536; ++i) {
            uint32_t r = i * 0x9e3779b9u; /* equidistributed words */
            r ^= r >> 16;
            r *= 0x7feb352du;
            r ^= r >> 15;
            float f = ref_sr_round(t, r);
            only_neighbours &= f == 1.0f || f == 1.0f + 0x1p-23f;
            sum += ((double)f - 1.0) * 0x1p23;
        }
        CU_ASSERT(only_neighbours);
        CU_ASSERT(fabs(sum / 65536.0 - fr[k]) < 6.0 * 0.5 / 256.0);
        /* negative values are the mirror image */
        CU_ASSERT(ref_sr_round(-t, 0) == -1.0f);
    }
    /* representable values, zeros, NaN and Inf are unchanged */
    for (uint32_t r = 0; r < 1000; ++r) {
        CU_ASSERT(ref_sr_round(0.75, r * 0x01000193u) == 0.75f);
        CU_ASSERT(ref_sr_round(-0x1.fffffep+20, r * 0x01000193u) == -0x1.fffffep+20f);
    }
    CU_ASSERT(ref_sr_round(0.0, 12345) == 0.0f);
    CU_ASSERT(isnan(ref_sr_round((double)NAN, 7)));
    CU_ASSERT(ref_sr_round((double)INFINITY, 7) == INFINITY);
    /* the resolution is 2^-29 ulp: 1 + 2^-52 (2^-29 ulp above 1) rounds up with the largest
     * word only (its top 29 bits are all ones), 1 - 2^-53 (2^-29 ulp of [0.5, 1) below 1) with
     * every word but zero */
    CU_ASSERT(ref_sr_round(1.0 + 0x1p-52, 0xffffffffu) == 1.0f + 0x1p-23f);
    CU_ASSERT(ref_sr_round(1.0 + 0x1p-52, 0xfffffff7u) == 1.0f);
    CU_ASSERT(ref_sr_round(1.0 - 0x1p-53, 0x8u) == 1.0f);
    CU_ASSERT(ref_sr_round(1.0 - 0x1p-53, 0x7u) == 1.0f - 0x1p-24f);
}

#ifdef LM_TEST_HOOKS
/* Chi-square of counts against a uniform expectation over n bins. */
static double chi2_uniform(const uint32_t *count, unsigned n, double total)
{
    const double e = total / n;
    double x = 0.0;
    for (unsigned b = 0; b < n; ++b)
        x += ((double)count[b] - e) * ((double)count[b] - e) / e;
    return x;
}

/* The coins of a matrix product (A_t(i) ^ B_r(i), ref_sr.c) on 40 tokens x 37 rows x 130 terms
 * (192400 words):
 *   - only the 29 bits sr29 adds are set, and each of them is 1 in half of all the words
 *     within 6 standard deviations of a binomial count (the coins are pairwise independent, so
 *     the count's variance is N / 4: sd = 0.5 / sqrt(N), tolerance 0.0068);
 *   - the top 8 bits are uniform over 256 values, and the top 4 bits of a coin and of its
 *     neighbour along the reduction (term i + 1), across tokens (t + 1) and across rows (r + 1)
 *     are uniform over the 256 pairs: chi-square with 255 degrees of freedom within 6 standard
 *     deviations of its mean (255 +- 6 sqrt(510)); too large is bias or dependence, too small
 *     is a sequence more even than random (a Weyl counter without the hash). A chi-square needs
 *     independent samples, and ref_sr.c's coins are independent only where their (token, row)
 *     pairs at one term form no cycle, so each statistic samples outputs along a path: the
 *     diagonal (t, t) for single coins and pairs along i (non-overlapping: terms 2j, 2j + 1),
 *     (t, r_t), (t + 1, r_t) with r_t = (t + i) mod 37 across tokens, and (t_r, r), (t_r, r + 1)
 *     with t_r = (r + i) mod 40 across rows.
 * Row streams keyed like the token streams (A_t = B_t: coins 0 on the outputs t = r) fail the
 * diagonal statistics by orders of magnitude. The words are the same whatever the kernel and the token group a token falls in (groups from
 * token 0 and from token 3). */
static void test_ref_sr_mm_coins_uniform(void)
{
    enum { NT = 40, NR = 37, NI = 130 };
    const size_t n = (size_t)NT * NR * NI;
    uint64_t *c = malloc(n * sizeof *c), *c3 = malloc(n * sizeof *c3), *cs = malloc(n * sizeof *cs);
    CU_ASSERT_FATAL(c != NULL && c3 != NULL && cs != NULL);
    CU_ASSERT_EQUAL_FATAL(ref_sr_test_mm_coins(c, 5, 3, 0, NT, NR, NI), LM_OK);
#define COIN(t, r, i) c[((size_t)(t) * NR + (r)) * NI + (i)]
    uint64_t high = 0;
    uint32_t ones[29] = {0}, top8[256] = {0}, pair_i[256] = {0}, pair_t[256] = {0},
             pair_r[256] = {0};
    for (size_t k = 0; k < n; ++k) {
        high |= c[k] >> 29;
        for (unsigned b = 0; b < 29; ++b)
            ones[b] += (uint32_t)(c[k] >> b & 1);
    }
    double n8 = 0, ni = 0, nt = 0, nr = 0;
    for (unsigned i = 0; i < NI; ++i) {
        for (unsigned t = 0; t < NR; ++t, ++n8)
            top8[COIN(t, t, i) >> 21]++;
        for (unsigned t = 0; t < NR && i % 2 == 0; ++t, ++ni)
            pair_i[COIN(t, t, i) >> 25 << 4 | COIN(t, t, i + 1) >> 25]++;
        for (unsigned t = 0; t + 1 < NR; ++t, ++nt) { /* r_t all distinct: a path */
            const unsigned r = (t + i) % NR;
            pair_t[COIN(t, r, i) >> 25 << 4 | COIN(t + 1, r, i) >> 25]++;
        }
        for (unsigned r = 0; r + 1 < NR; ++r, ++nr) {
            const unsigned t = (r + i) % NT;
            pair_r[COIN(t, r, i) >> 25 << 4 | COIN(t, r + 1, i) >> 25]++;
        }
    }
#undef COIN
    CU_ASSERT_EQUAL(high, 0);
    int bits_ok = 0;
    for (unsigned b = 0; b < 29; ++b)
        bits_ok += fabs(ones[b] / (double)n - 0.5) < 6.0 * 0.5 / sqrt((double)n);
    CU_ASSERT_EQUAL(bits_ok, 29);
    const double lo = 255.0 - 6.0 * sqrt(510.0), hi = 255.0 + 6.0 * sqrt(510.0);
    const double x8 = chi2_uniform(top8, 256, n8), xi = chi2_uniform(pair_i, 256, ni),
                 xt = chi2_uniform(pair_t, 256, nt), xr = chi2_uniform(pair_r, 256, nr);
    if (!(x8 > lo && x8 < hi && xi > lo && xi < hi && xt > lo && xt < hi && xr > lo && xr < hi))
        fprintf(stderr, "\n  chi-square: top8 %.1f, pairs along i %.1f, t %.1f, r %.1f\n", x8, xi,
                xt, xr);
    CU_ASSERT(x8 > lo && x8 < hi);
    CU_ASSERT(xi > lo && xi < hi);
    CU_ASSERT(xt > lo && xt < hi);
    CU_ASSERT(xr > lo && xr < hi);
    /* token 3's words when its group starts at token 3, with each kernel's fills */
    for (int kern = 0; kern < 2; ++kern) {
        ref_sr_test_force_kernel = kern;
        CU_ASSERT_EQUAL_FATAL(ref_sr_test_mm_coins(c3, 5, 3, 3, NT - 3, NR, NI), LM_OK);
        CU_ASSERT(memcmp(c3, c + (size_t)3 * NR * NI, (n - (size_t)3 * NR * NI) * sizeof *c) == 0);
    }
    ref_sr_test_force_kernel = -1;
    /* another seed or site: other words */
    CU_ASSERT_EQUAL_FATAL(ref_sr_test_mm_coins(cs, 6, 3, 0, NT, NR, NI), LM_OK);
    CU_ASSERT(memcmp(cs, c, n * sizeof *c) != 0);
    CU_ASSERT_EQUAL_FATAL(ref_sr_test_mm_coins(cs, 5, 4, 0, NT, NR, NI), LM_OK);
    CU_ASSERT(memcmp(cs, c, n * sizeof *c) != 0);
    free(c);
    free(c3);
    free(cs);
}

/* The rounding of a matrix product is unbiased at every term: 64 tokens x 64 rows of
 * 1 + sum_{i>=1} k_i 2^-25 (x = 1, w_0 = 1, w_i = k_i 2^-25, k_i = 1 + i % 3: every multiply-add
 * lands 1/4, 1/2 or 3/4 ulp past a float of [1, 2)), plus a bias b = 2^-25, and in a second
 * product added into out = 0.5 + 2^-24 (a half-ulp add). Unbiased SR keeps the expectation
 * exact at each step, so the mean over the 4096 outputs equals the exact value within 6
 * standard deviations: each output's error is a sum of at most 65 roundings of variance
 * <= ulp^2 / 4, and coins of different outputs are pairwise independent, so the mean's sd is
 * <= sqrt(65 / 4 / 4096) ulp = 0.063 ulp (tolerance 0.38 ulp, ulp = 2^-23). Each output
 * alone is within 24 ulp, 6 of its standard deviations (sqrt(65 / 4) ulp; the coins are fixed by
 * seed 9, so the check is deterministic). Truncation (coins 0) would be 32 ulp low in the mean
 * and in every output; coins 0 on the 64 outputs t = r alone (row streams keyed like the token
 * streams) move the mean by 0.5 ulp. */
static void test_ref_sr_matmul_unbiased(void)
{
    enum { NT = 64, NR = 64, NI = 64 };
    float *in = malloc(NT * NI * sizeof *in), *w = malloc(NR * NI * sizeof *w),
          *b = malloc(NR * sizeof *b), *out = malloc(NT * NR * sizeof *out);
    CU_ASSERT_FATAL(in && w && b && out);
    double exact = 1.0;
    for (unsigned i = 1; i < NI; ++i)
        exact += (1 + i % 3) * 0x1p-25;
    for (unsigned k = 0; k < NT * NI; ++k)
        in[k] = 1.0f;
    for (unsigned r = 0; r < NR; ++r) {
        b[r] = 0x1p-25f;
        for (unsigned i = 0; i < NI; ++i)
            w[r * NI + i] = i == 0 ? 1.0f : (float)(1 + i % 3) * 0x1p-25f;
    }
    for (int acc = 0; acc < 2; ++acc) {
        const double want = exact + 0x1p-25 + (acc ? 0.5 + 0x1p-24 : 0.0);
        for (unsigned k = 0; k < NT * NR; ++k)
            out[k] = 0.5f + 0x1p-24f;
        CU_ASSERT_EQUAL_FATAL(ref_sr_test_matmul(out, in, w, b, NT, NI, NR, acc, 9), LM_OK);
        double sum = 0.0;
        bool in_range = true;
        for (unsigned k = 0; k < NT * NR; ++k) {
            sum += ((double)out[k] - want) * 0x1p23;
            in_range &= fabs((double)out[k] - want) <= 24 * 0x1p-23;
        }
        const double mean = sum / (NT * NR);
        if (!(fabs(mean) < 6.0 * sqrt(65.0 / 4.0 / (NT * NR))))
            fprintf(stderr, "\n  acc %d: mean error %.3f ulp\n", acc, mean);
        CU_ASSERT(fabs(mean) < 6.0 * sqrt(65.0 / 4.0 / (NT * NR)));
        CU_ASSERT(in_range);
    }
    free(in);
    free(w);
    free(b);
    free(out);
}
#endif

static bool same_out(const ref_sr_out *a, const ref_sr_out *b)
{
    size_t kv = (size_t)a->n_layer * a->n_prompt * a->kv_dim;
    size_t nl = (size_t)a->n_pos * a->n_vocab;
    return memcmp(a->k, b->k, kv * 4) == 0 && memcmp(a->v, b->v, kv * 4) == 0 &&
           memcmp(a->logits, b->logits, nl * 4) == 0;
}

static void test_ref_sr_kernels_threads_seeds(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NEOX);
    hp.n_embd = 40; /* several 8-lane groups and an odd tail */
    hp.n_ff = 52;
    hp.n_vocab = 37;
    trm_build(&t, &hp, true, 11);
    int32_t tok[11] = {1, 5, 9, 2, 7, 3, 10, 4, 8, 6, 0};
    ref_request rq = {.tokens = tok, .n_tokens = 11, .n_prompt = 9};
    lm_err err = {0};
    ref_sr_out k[3], e1[8], e2[8];
    for (int kern = 0; kern < 3; ++kern) {
#ifdef LM_TEST_HOOKS
        ref_sr_test_force_kernel = kern;
#endif
        CU_ASSERT_FATAL(ref_sr_run(&k[kern], &t.r, &rq, 42, &err) == LM_OK);
    }
#ifdef LM_TEST_HOOKS
    ref_sr_test_force_kernel = -1;
#endif
    CU_ASSERT(same_out(&k[0], &k[1]));
    CU_ASSERT(same_out(&k[0], &k[2]));
    CU_ASSERT_FATAL(ref_sr_ensemble(e1, 8, &t.r, &rq, 40, 1, &err) == LM_OK);
    CU_ASSERT_FATAL(ref_sr_ensemble(e2, 8, &t.r, &rq, 40, 3, &err) == LM_OK);
    int same_threads = 0, differ_seed = 0;
    for (int i = 0; i < 8; ++i) {
        same_threads += same_out(&e1[i], &e2[i]);
        differ_seed += i > 0 && !same_out(&e1[i], &e1[0]);
    }
    CU_ASSERT_EQUAL(same_threads, 8);
    CU_ASSERT_EQUAL(differ_seed, 7);
    CU_ASSERT(same_out(&e1[2], &k[0])); /* member 2 of seed 40 is seed 42 */
    /* within float32 noise of the MPFR reference: |x - R| <= 1e-4 (1 + |R|), a few hundred
     * float32 roundings of order-1 values on this 2-layer model (measured ~1e-6) */
    ref_capture c;
    CU_ASSERT_FATAL(ref_compute(&c, &t.r, &rq, &err) == LM_OK);
    double worst = 0.0;
    for (size_t i = 0; i < (size_t)c.n_pos * c.n_vocab; ++i) {
        double d = fabs((double)k[0].logits[i] - c.logits[i]) / (1.0 + fabs(c.logits[i]));
        worst = d > worst ? d : worst;
    }
    for (size_t i = 0; i < (size_t)c.n_layer * c.n_prompt * c.n_kv_head * c.head_dim; ++i) {
        double d = fabs((double)k[0].k[i] - c.k[i]) / (1.0 + fabs(c.k[i]));
        worst = d > worst ? d : worst;
    }
    CU_ASSERT(worst < 1e-4);
    CU_ASSERT(worst > 0.0); /* rounding really happened */
    ref_capture_free(&c);
    for (int i = 0; i < 8; ++i) {
        ref_sr_out_free(&e1[i]);
        ref_sr_out_free(&e2[i]);
    }
    for (int i = 0; i < 3; ++i)
        ref_sr_out_free(&k[i]);
    trm_free(&t);
}

#ifdef LM_TEST_HOOKS
/* A token's bits do not depend on the lanes, token groups and padding of the request: the
 * K and V of the first 7 tokens of an 11-token request (two groups of 8, 5 lanes of padding)
 * equal those of the same 7 tokens alone (one group, 1 lane of padding), with each kernel. */
static void test_ref_sr_token_groups(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NEOX);
    hp.n_embd = 40;
    trm_build(&t, &hp, true, 11);
    int32_t tok[11] = {1, 5, 9, 2, 7, 3, 10, 4, 8, 6, 0};
    const ref_request rq11 = {.tokens = tok, .n_tokens = 11, .n_prompt = 9},
                      rq7 = {.tokens = tok, .n_tokens = 7, .n_prompt = 7};
    lm_err err = {0};
    for (int kern = 0; kern < 3; ++kern) { /* 2: AVX-512 where the CPU has it, else the best */
        ref_sr_test_force_kernel = kern;
        ref_sr_out a, b;
        CU_ASSERT_FATAL(ref_sr_run(&a, &t.r, &rq11, 3, &err) == LM_OK);
        CU_ASSERT_FATAL(ref_sr_run(&b, &t.r, &rq7, 3, &err) == LM_OK);
        int same = 0;
        for (uint32_t l = 0; l < a.n_layer; ++l) {
            const size_t n7 = (size_t)7 * a.kv_dim;
            same += memcmp(a.k + l * (size_t)9 * a.kv_dim, b.k + l * n7, n7 * 4) == 0;
            same += memcmp(a.v + l * (size_t)9 * a.kv_dim, b.v + l * n7, n7 * 4) == 0;
        }
        CU_ASSERT_EQUAL(same, 2 * (int)a.n_layer);
        ref_sr_out_free(&a);
        ref_sr_out_free(&b);
    }
    ref_sr_test_force_kernel = -1;
    trm_free(&t);
}
#endif

/* What an envelope's progress callback heard. */
typedef struct heard {
    int calls, starts;
    uint32_t n_member;
    double total, last_done;
    int backwards; /* reports whose done went down */
} heard;

static void hear(void *user, const ref_progress *pr)
{
    heard *h = user;
    h->calls++;
    h->starts += pr->done <= 0.0;
    h->n_member = pr->n_member;
    h->total = pr->total;
    h->backwards += pr->done < h->last_done;
    h->last_done = pr->done;
}

/* The ensemble reports its start and every member's layers (2 threads, so reports may come
 * from either), counted over all members; listening changes no bit. */
static void test_ref_sr_ensemble_progress(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NEOX);
    trm_build(&t, &hp, true, 11);
    int32_t tok[6] = {1, 5, 9, 2, 7, 3};
    ref_request rq = {.tokens = tok, .n_tokens = 6, .n_prompt = 5};
    lm_err err = {0};
    ref_sr_out quiet[4], told[4];
    CU_ASSERT_FATAL(ref_sr_ensemble(quiet, 4, &t.r, &rq, 7, 2, &err) == LM_OK);
    heard h = {0};
    ref_request rq2 = rq;
    rq2.progress = hear;
    rq2.progress_user = &h;
    CU_ASSERT_FATAL(ref_sr_ensemble(told, 4, &t.r, &rq2, 7, 2, &err) == LM_OK);
    CU_ASSERT_EQUAL(h.starts, 1);
    CU_ASSERT(h.calls >= 2);                      /* the start and at least one layer */
    CU_ASSERT(h.calls <= 1 + 4 * ((int)hp.n_layer + 1)); /* one per member layer at most */
    CU_ASSERT_EQUAL(h.n_member, 4);
    CU_ASSERT_EQUAL(h.backwards, 0);
    CU_ASSERT_DOUBLE_EQUAL(h.total, 4.0 * ref_macs(&t.r, &rq), 0.5); /* counts: exact */
    CU_ASSERT(h.last_done <= h.total);
    for (int i = 0; i < 4; ++i) {
        CU_ASSERT(same_out(&quiet[i], &told[i]));
        ref_sr_out_free(&quiet[i]);
        ref_sr_out_free(&told[i]);
    }
    trm_free(&t);
}

/* largest |x - R| / (1 + |R|) over a member's logits and K against the MPFR capture */
static double worst_vs_ref(const ref_sr_out *o, const ref_capture *c)
{
    double worst = 0.0;
    for (size_t i = 0; i < (size_t)c->n_pos * c->n_vocab; ++i)
        worst = fmax(worst, fabs((double)o->logits[i] - c->logits[i]) / (1.0 + fabs(c->logits[i])));
    for (size_t i = 0; i < (size_t)c->n_layer * c->n_prompt * c->n_kv_head * c->head_dim; ++i)
        worst = fmax(worst, fabs((double)o->k[i] - c->k[i]) / (1.0 + fabs(c->k[i])));
    CU_ASSERT_EQUAL(o->n_embd, c->n_embd);
    for (size_t i = 0; i < (c->n_layer + 1ull) * c->n_prompt * c->n_embd; ++i)
        worst = fmax(worst, fabs((double)o->hidden[i] - c->hidden[i]) / (1.0 + fabs(c->hidden[i])));
    return worst;
}

/* The SR model is the reference's model on every variant it implements: scaled embeddings,
 * per-head Q/K norms, sandwich norms and GeGLU (gemma3), Q/K norms (qwen3), a sliding theta and
 * windows (swa-5to1, gemma3), sinks (sinks-alt), MoE routing and gating (moe: top-2 of 8;
 * moe-32x4: top-4 of 32 with windows and sinks). A member must stay within 1e-3 relative of
 * the MPFR reference on a 20-token request (logits, K and every hidden state): float32 roundings through at most 6 layers of
 * order-1 activations measure 5e-8..4e-5 here; a variant the SR model leaves out moves
 * logits by 1..14 (measured with gemma3 and qwen3 computed as plain llama). */
static void test_ref_sr_variants_match_reference(void)
{
    static const char *const presets[] = {"gemma3",    "qwen3", "swa-5to1", "sinks-alt",
                                          "moe",       "moe-32x4", "tiny"};
    for (size_t p = 0; p < sizeof presets / sizeof *presets; ++p) {
        char path[1024];
        snprintf(path, sizeof path, "%s/sr-%s.gguf", tu_tmpdir(), presets[p]);
        lm_err err = {0};
        ref_model *m = NULL;
        CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, presets[p], 1, LM_TYPE_F32, &err), LM_OK);
        CU_ASSERT_EQUAL_FATAL(ref_model_open(&m, path, &err), LM_OK);
        int32_t tok[20];
        for (uint32_t i = 0; i < 20; ++i)
            tok[i] = (int32_t)((1 + 7919u * i) % m->hp.n_vocab);
        ref_request rq = {.tokens = tok, .n_tokens = 20, .n_prompt = 16};
        ref_capture c;
        ref_sr_out o;
        CU_ASSERT_EQUAL_FATAL(ref_compute(&c, m, &rq, &err), LM_OK);
        CU_ASSERT_EQUAL_FATAL(ref_sr_run(&o, m, &rq, 7, &err), LM_OK);
        const double w = worst_vs_ref(&o, &c);
        if (!(w < 1e-3))
            fprintf(stderr, "\n  %s: SR member vs reference %.3g\n", presets[p], w);
        CU_ASSERT(w < 1e-3);
        CU_ASSERT(w > 0.0);
        ref_sr_out_free(&o);
        ref_capture_free(&c);
        ref_model_free(m);
    }
}

void test_ref_sr_register(void)
{
    CU_pSuite s = CU_add_suite("ref_sr", NULL, NULL);
    CU_add_test(s, "test_ref_sr_round_unbiased", test_ref_sr_round_unbiased);
    CU_add_test(s, "test_ref_sr_kernels_threads_seeds", test_ref_sr_kernels_threads_seeds);
#ifdef LM_TEST_HOOKS
    CU_add_test(s, "test_ref_sr_mm_coins_uniform", test_ref_sr_mm_coins_uniform);
    CU_add_test(s, "test_ref_sr_matmul_unbiased", test_ref_sr_matmul_unbiased);
    CU_add_test(s, "test_ref_sr_token_groups", test_ref_sr_token_groups);
#endif
    CU_add_test(s, "test_ref_sr_variants_match_reference", test_ref_sr_variants_match_reference);
    CU_add_test(s, "test_ref_sr_ensemble_progress", test_ref_sr_ensemble_progress);
}
