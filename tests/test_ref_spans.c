/* test_ref_spans.c — the weight-span histograms kept with a model (ref_spans.c): after a pass,
 * every matrix's kept histogram equals one counted afresh over the whole matrix (no sampling:
 * an output matrix of 5000 rows counts all 5000), a second pass reads them and gives the same
 * numbers, the cost calibration leaves them kept for the pass, keeping and finding from
 * several threads at once loses and mixes nothing, and a release keeps nothing. */
#include "kvd_ref.h"
#include "ref_spans.h"
#include "test_ref_model.h"

#include <pthread.h>

/* m's kept histogram of w [n_out][n_in] is there and equals a fresh whole-matrix count. */
static bool kept_equals_fresh(const ref_model *m, const float *w, uint64_t n_out, uint64_t n_in)
{
    uint64_t kept[REF_DX_SPAN_BINS], fresh[REF_DX_SPAN_BINS] = {0}, rows = 0;
    if (!ref_spans_find(m, w, n_out, n_in, kept))
        return false;
    ref_spans_count(fresh, w, n_in, 0, n_out);
    for (uint32_t b = 0; b < REF_DX_SPAN_BINS; ++b)
        rows += kept[b];
    return memcmp(kept, fresh, sizeof kept) == 0 && rows == n_out;
}

static bool all_kept(const trm *t, const lm_hparams *hp)
{
    const uint64_t e = hp->n_embd, q = (uint64_t)hp->n_head * hp->head_dim,
                   kv = (uint64_t)hp->n_head_kv * hp->head_dim;
    bool ok = kept_equals_fresh(&t->r, t->r.output, hp->n_vocab, e);
    for (uint32_t l = 0; l < hp->n_layer; ++l) {
        const lm_layer *L = &t->layers[l];
        ok = ok && kept_equals_fresh(&t->r, L->wq.f, q, e)
             && kept_equals_fresh(&t->r, L->wk.f, kv, e)
             && kept_equals_fresh(&t->r, L->wv.f, kv, e)
             && kept_equals_fresh(&t->r, L->wo.f, e, q)
             && kept_equals_fresh(&t->r, L->w_gate.f, hp->n_ff, e)
             && kept_equals_fresh(&t->r, L->w_up.f, hp->n_ff, e)
             && kept_equals_fresh(&t->r, L->w_down.f, e, hp->n_ff);
    }
    return ok;
}

/* Output rows of three span classes (rounded to 4 and 12 significant bits, and as drawn), so
 * a sample could miss the histogram's shape; 5000 rows, past the 4096 a sample would take. */
static void test_ref_spans_kept_whole_matrix(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NORM);
    hp.n_vocab = 5000;
    trm_build(&t, &hp, false, 21);
    float *out = (float *)t.r.output;
    for (uint64_t r = 0; r < hp.n_vocab; ++r)
        for (uint64_t i = 0; r % 3 != 2 && i < hp.n_embd; ++i) {
            int ex;
            const float fr = frexpf(out[r * hp.n_embd + i], &ex), sc = r % 3 ? 0x1p12f : 0x1p4f;
            out[r * hp.n_embd + i] = ldexpf(roundf(fr * sc) / sc, ex);
        }
    CU_ASSERT_FALSE(ref_spans_find(&t.r, t.r.output, hp.n_vocab, hp.n_embd,
                                   (uint64_t[REF_DX_SPAN_BINS]){0}));
    int32_t tok[3] = {1, 2, 3};
    ref_request rq = {.tokens = tok, .n_tokens = 3, .n_prompt = 2, .n_threads = 2};
    ref_result *a, *b;
    lm_err err = {0};
    CU_ASSERT_FATAL(ref_run(&a, &t.r, &rq, &err) == LM_OK);
    CU_ASSERT(all_kept(&t, &hp));
    CU_ASSERT_FATAL(ref_run(&b, &t.r, &rq, &err) == LM_OK); /* reads the kept histograms */
    bool same = true;
    for (uint64_t i = 0; i < (uint64_t)a->n_pos * a->n_vocab; ++i)
        same = same && mpfr_equal_p(a->logits[i], b->logits[i]) &&
               mpfr_signbit(a->logits[i]) == mpfr_signbit(b->logits[i]);
    CU_ASSERT(same);
    ref_result_free(a);
    ref_result_free(b);
    trm_free(&t);
}

/* The cost calibration counts every matrix the pass multiplies by and keeps the counts. */
static void test_ref_spans_calibration_keeps(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NEOX);
    trm_build(&t, &hp, false, 22);
    int32_t tok[2] = {4, 5};
    ref_request rq = {.tokens = tok, .n_tokens = 2, .n_prompt = 2};
    const double s = ref_calibrate_s_per_mac(&t.r, &rq, 2);
    CU_ASSERT(isfinite(s) && s > 0.0 && s < 1e-3);
    CU_ASSERT(all_kept(&t, &hp));
    trm_free(&t);
}

enum { N_MAT = 300, N_THR = 4 };

typedef struct keeper {
    const ref_model *m;
    const float *base;
    int id;
    int bad;
} keeper;

/* Matrix i: w = base + i, i + 1 rows, histogram bin b = (i * 7 + b) % 1000. */
static void fake_hist(uint64_t *h, int i)
{
    for (uint32_t b = 0; b < REF_DX_SPAN_BINS; ++b)
        h[b] = (uint64_t)((i * 7 + (int)b) % 1000);
}

static void *keep_all(void *p)
{
    keeper *k = p;
    uint64_t h[REF_DX_SPAN_BINS], got[REF_DX_SPAN_BINS];
    for (int j = 0; j < N_MAT; ++j) {
        const int i = (j * 37 + k->id * 101) % N_MAT; /* every thread in its own order */
        fake_hist(h, i);
        ref_spans_keep(k->m, k->base + i, (uint64_t)i + 1, 9, h);
        k->bad += !ref_spans_find(k->m, k->base + i, (uint64_t)i + 1, 9, got) ||
                  memcmp(got, h, sizeof h) != 0;
    }
    return NULL;
}

static void test_ref_spans_threads_and_release(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NORM);
    trm_build(&t, &hp, false, 23);
    static float base[N_MAT];
    keeper k[N_THR];
    pthread_t th[N_THR];
    for (int i = 0; i < N_THR; ++i) {
        k[i] = (keeper){&t.r, base, i, 0};
        CU_ASSERT_FATAL(pthread_create(&th[i], NULL, keep_all, &k[i]) == 0);
    }
    int bad = 0;
    for (int i = 0; i < N_THR; ++i) {
        pthread_join(th[i], NULL);
        bad += k[i].bad;
    }
    uint64_t h[REF_DX_SPAN_BINS], got[REF_DX_SPAN_BINS];
    for (int i = 0; i < N_MAT; ++i) {
        fake_hist(h, i);
        bad += !ref_spans_find(&t.r, base + i, (uint64_t)i + 1, 9, got) ||
               memcmp(got, h, sizeof h) != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* a matrix is known by its pointer and shape together */
    CU_ASSERT_FALSE(ref_spans_find(&t.r, base + 3, 5, 9, got));
    CU_ASSERT_FALSE(ref_spans_find(&t.r, base + 3, 4, 8, got));
    /* a released model keeps nothing; keeping again attaches a new table */
    ref_model_release(&t.r);
    CU_ASSERT_PTR_NULL(t.r.spans);
    CU_ASSERT_FALSE(ref_spans_find(&t.r, base + 3, 4, 9, got));
    ref_spans_keep(&t.r, base, 1, 9, h);
    CU_ASSERT_TRUE(ref_spans_find(&t.r, base, 1, 9, got));
    trm_free(&t);
}

void test_ref_spans_register(void)
{
    CU_pSuite s = CU_add_suite("ref_spans", NULL, NULL);
    CU_add_test(s, "test_ref_spans_kept_whole_matrix", test_ref_spans_kept_whole_matrix);
    CU_add_test(s, "test_ref_spans_calibration_keeps", test_ref_spans_calibration_keeps);
    CU_add_test(s, "test_ref_spans_threads_and_release", test_ref_spans_threads_and_release);
}
