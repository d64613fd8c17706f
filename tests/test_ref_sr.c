/* test_ref_sr.c — the reference's float32 stochastic-rounding model (ref_sr.c): the rounding is
 * unbiased and leaves representable values alone, every kernel gives the same bits, members
 * are independent of the thread count, different seeds differ, and a member stays within
 * float32 noise of the MPFR reference, on the llama shape and on every architecture variant the
 * reference implements. */
#include "ref_sr.h"
#include "synth.h"
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
        CU_ASSERT_FATAL(ref_sr_run(&k[kern], &t.m, &rq, 42, &err) == LM_OK);
    }
#ifdef LM_TEST_HOOKS
    ref_sr_test_force_kernel = -1;
#endif
    CU_ASSERT(same_out(&k[0], &k[1]));
    CU_ASSERT(same_out(&k[0], &k[2]));
    CU_ASSERT_FATAL(ref_sr_ensemble(e1, 8, &t.m, &rq, 40, 1, &err) == LM_OK);
    CU_ASSERT_FATAL(ref_sr_ensemble(e2, 8, &t.m, &rq, 40, 3, &err) == LM_OK);
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
    CU_ASSERT_FATAL(ref_compute(&c, &t.m, &rq, &err) == LM_OK);
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
    CU_ASSERT_FATAL(ref_sr_ensemble(quiet, 4, &t.m, &rq, 7, 2, &err) == LM_OK);
    heard h = {0};
    ref_request rq2 = rq;
    rq2.progress = hear;
    rq2.progress_user = &h;
    CU_ASSERT_FATAL(ref_sr_ensemble(told, 4, &t.m, &rq2, 7, 2, &err) == LM_OK);
    CU_ASSERT_EQUAL(h.starts, 1);
    CU_ASSERT(h.calls >= 2);                      /* the start and at least one layer */
    CU_ASSERT(h.calls <= 1 + 4 * ((int)hp.n_layer + 1)); /* one per member layer at most */
    CU_ASSERT_EQUAL(h.n_member, 4);
    CU_ASSERT_EQUAL(h.backwards, 0);
    CU_ASSERT_DOUBLE_EQUAL(h.total, 4.0 * ref_macs(&t.m, &rq), 0.5); /* counts: exact */
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
    return worst;
}

/* The SR model is the reference's model on every variant it implements: scaled embeddings,
 * per-head Q/K norms, sandwich norms and GeGLU (gemma3), Q/K norms (qwen3), a sliding theta and
 * windows (swa-5to1, gemma3), sinks (sinks-alt), MoE routing and gating (moe: top-2 of 8;
 * moe-32x4: top-4 of 32 with windows and sinks). A member must stay within 1e-3 relative of
 * the MPFR reference on a 20-token request: float32 roundings through at most 6 layers of
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
        lm_model *m = NULL;
        CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, presets[p], 1, LM_TYPE_F32, &err), LM_OK);
        CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
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
        lm_model_free(m);
    }
}

void test_ref_sr_register(void)
{
    CU_pSuite s = CU_add_suite("ref_sr", NULL, NULL);
    CU_add_test(s, "test_ref_sr_round_unbiased", test_ref_sr_round_unbiased);
    CU_add_test(s, "test_ref_sr_kernels_threads_seeds", test_ref_sr_kernels_threads_seeds);
    CU_add_test(s, "test_ref_sr_variants_match_reference", test_ref_sr_variants_match_reference);
    CU_add_test(s, "test_ref_sr_ensemble_progress", test_ref_sr_ensemble_progress);
}
