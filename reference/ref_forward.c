/* ref_forward.c — the whole reference forward pass in MPFR, threaded over independent items.
 *
 * Order of work: layer by layer over all tokens at once (the causal mask makes this the same
 * mathematics as token-by-token decoding), so that each weight row is converted to MPFR once
 * per layer and reused for every token. Parallel loops hand out independent items (an output
 * row of a matrix product, a (token, head) attention pair, a token) to threads; every item is
 * computed by the same sequence of MPFR operations whichever thread runs it, so the results
 * never depend on the thread count. Shared by a group of processes (ref_group.h), each member
 * computes its range of every product's output rows and of the attention pairs (and of the
 * gated FFN's activation, with its gate and up rows), and one exchange per product gives all
 * members every value; the rest every member computes. */
#include "kvd_util.h"
#include "kvd_ref.h"
#include "ref_dotx.h"
#include "ref_group.h"
#include "ref_spans.h"
#include "ref_variants.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS ((int)REF_MAX_THREADS)
#define REF_MM_CHUNK 32u /* weight rows a matrix-product work item splits at once */
_Static_assert(REF_MM_CHUNK <= REF_DX_ROWS_MAX, "a work item's rows go to one ref_dx_dot_rows");

typedef struct fwd fwd;
typedef void (*item_fn)(fwd *f, void *ctx, uint64_t item, int tid);

struct fwd {
    const ref_model *m;
    const ref_hparams *hp;
    mpfr_prec_t prec;
    int nt;
    uint32_t n;          /* tokens */
    uint32_t q_dim;      /* n_head * head_dim */
    uint32_t kv_dim;     /* n_head_kv * head_dim */
    ref_scratch *scr;    /* [nt], the first n_ready initialized */
    mpfr_t **scores;     /* [nt][n]: attention probabilities of one (token, head) */
    int n_ready;
    mpfr_t *x;           /* [n][n_embd] residual stream */
    mpfr_t *h;           /* [n][n_embd] normalized input of a block */
    mpfr_t *q;           /* [n][q_dim] */
    mpfr_t *k;           /* [n][kv_dim] this layer, after RoPE */
    mpfr_t *v;           /* [n][kv_dim] */
    mpfr_t *att;         /* [n][q_dim] attention output */
    mpfr_t *g;           /* [n][n_ff] gate, then silu(gate) * up */
    mpfr_t *up;          /* [n][n_ff] */
    mpfr_t *cs;          /* [n][n_rot] (cos, sin) pairs per position */
    mpfr_t *cs_swa;      /* [n][n_rot] the same at the sliding layers' theta, or NULL (= cs) */
    mpfr_t *y;           /* [n][n_embd] a block's output before its post-norm (sandwich) */
    bool cs_ready;       /* cs is the same for every layer: computed in the first one */
    mpfr_t scale;        /* 1 / sqrt(head_dim) */
    uint64_t n_hsel;
    mpfr_t *hsel;        /* [n_pos][n_embd] final-normed rows of the logit positions */
    /* variants (ref_variants.h) */
    uint32_t layer;      /* the layer being computed (its window and sinks) */
    uint32_t ff_cur;     /* width of g and up in the current FFN (n_ff or n_ff_exp) */
    ref_rot_schedule rot; /* rotating-cache schedule; rot.start == NULL: plain causal cache */
    mpfr_t *router;      /* [n][n_expert] router logits */
    mpfr_t *gw;          /* [n][k] gate weights of the selected experts */
    mpfr_t *ye;          /* [n][n_embd] one expert's output for every token */
    mpfr_t *yk;          /* [n][k][n_embd] output of each selected expert */
    uint32_t *sel;       /* [n][k] selected experts, rank order */
    uint32_t *sel_all;   /* [n_layer][n][k] routing of every layer (the result's moe_sel) */
    double *margin_all;  /* [n_layer][n] router margins, rounded to double */
    /* matrix products (ref_dotx.h) unless mpfr_dot: */
    bool mpfr_dot;       /* every dot product by MPFR multiply-adds (ref_dot) instead */
    ref_dx_scratch *dxs; /* [nt] */
    ref_dx_row *dxr;     /* [nt][REF_MM_CHUNK] the weight rows a thread is on, split */
    mpfr_t *dxo;         /* [nt][REF_MM_CHUNK] their dot products */
    ref_dx_vec *dxv;     /* [n] the current product's input rows, split */
    ref_dx_range *vrange; /* [n] where their bits lie (ref_dx_vec_range) */
    uint64_t *vspan;     /* [n] the bits they span */
    /* attention's dot products (ref_dx_dot_vv) unless dx_attn is false (mpfr_dot, or vectors
     * too long for ref_dx_dot_vv): */
    bool dx_attn;
    uint32_t vvb;        /* their digit width (ref_dx_vv_bits) */
    ref_dx_vec *kx;      /* [n][n_head_kv] this layer's key of each position and head, split */
    ref_dx_vec *vx;      /* [kv_dim] this layer's value columns over the n positions, split */
    ref_dx_vec *qx, *px; /* [nt] a thread's query, and its probabilities by position, split */
    mpfr_t **pf;         /* [nt][n] a thread's probabilities at their positions, 0 elsewhere */
    atomic_int dx_fail;  /* a split ran out of memory */
    const ref_request *rq; /* for the progress callback */
    const ref_group *grp;  /* the members sharing the pass, or NULL (this process alone) */
    ref_group_buf xbuf;    /* their exchange buffer */
    double macs_done, macs_total, t0;
};

double ref_macs(const ref_model *m, const ref_request *rq)
{
    const ref_hparams *hp = &m->hp;
    const double e = hp->n_embd, q = (double)hp->n_head * hp->head_dim,
                 kv = (double)hp->n_head_kv * hp->head_dim, n = rq->n_tokens;
    double ffn = 3.0 * e * hp->n_ff;
    if (hp->n_expert > 0) /* the router, and every expert some token selected (at most all) */
        ffn = e * hp->n_expert + 3.0 * e * hp->n_ff_exp *
                                     (hp->n_expert < n * hp->n_expert_used
                                          ? (double)hp->n_expert : n * hp->n_expert_used) / n;
    const double lin = e * q + 2.0 * e * kv + q * e + ffn;
    const double att = 2.0 * q * n * (n + 1) / 2.0; /* q.k and p.v, causal */
    const double n_pos = rq->pos ? rq->n_pos : (double)(rq->n_tokens - rq->n_prompt + 1);
    return hp->n_layer * (lin * n + att) + n_pos * hp->n_vocab * e;
}

/* --- parallel loop --- */

typedef struct par_job {
    fwd *f;
    item_fn fn;
    void *ctx;
    uint64_t n_items;
    atomic_uint_fast64_t next;
} par_job;

typedef struct par_arg {
    par_job *job;
    int tid;
} par_arg;

static void *par_worker(void *p)
{
    par_arg *a = p;
    par_job *j = a->job;
    for (;;) {
        uint64_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n_items)
            break;
        j->fn(j->f, j->ctx, i, a->tid);
    }
    /* MPFR keeps per-thread caches (constants, exp tables) that a dying thread would leak */
    if (a->tid != 0)
        mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
    return NULL;
}

static int par_for(fwd *f, uint64_t n_items, item_fn fn, void *ctx, lm_err *err)
{
    par_job job = {.f = f, .fn = fn, .ctx = ctx, .n_items = n_items};
    atomic_init(&job.next, 0);
    int nt = f->nt;
    if ((uint64_t)nt > n_items)
        nt = (int)(n_items ? n_items : 1);
    par_arg args[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int started = 0;
    for (int t = 1; t < nt; ++t) {
        args[t] = (par_arg){&job, t};
        if (pthread_create(&th[t], NULL, par_worker, &args[t]) != 0)
            break;
        started = t;
    }
    args[0] = (par_arg){&job, 0};
    par_worker(&args[0]); /* the calling thread works too; a failed create only slows us */
    for (int t = 1; t <= started; ++t)
        pthread_join(th[t], NULL);
    (void)err;
    return LM_OK;
}

/* --- matrix product: out[t][r] (+)= in[t] . W[r] (+ b[r]) for t < n_rows --- */

typedef struct mm_ctx {
    uint64_t chunk;   /* output rows per work item */
    uint32_t bits, wbits; /* digit widths of the input rows and of the weight rows */
    mpfr_t *in;       /* [n_rows][n_in] */
    const float *w;   /* [n_out][n_in] */
    const float *b;   /* [n_out] or NULL */
    mpfr_t *out;      /* [n_rows][n_out] */
    uint64_t n_rows, n_in, n_out;
    uint64_t r_lo, r_hi; /* the output rows this process computes */
    bool accumulate;  /* out += product (residual) instead of out = product */
} mm_ctx;

/* Output rows per work item: a thread splits a block of up to REF_MM_CHUNK weight rows once
 * and then takes each input row's digits against all of them, so an input row is read from
 * memory once per block rather than once per kernel call (the input digits of all tokens
 * exceed the caches; a block of split rows stays in L2); small matrices keep at least ~4 items
 * per thread so that every thread has work. The numbers do not depend on it. */
static uint64_t rows_per_item(const fwd *f, uint64_t n_out)
{
    uint64_t c = n_out / (4 * (uint64_t)f->nt);
    return c < 1 ? 1 : (c > REF_MM_CHUNK ? REF_MM_CHUNK : c);
}

/* Output o = the dot product u, plus b[r] (rounded), added to o (rounded) when accumulating. */
static void mm_store(fwd *f, mm_ctx *c, mpfr_ptr u, uint64_t t, uint64_t r, int tid)
{
    ref_scratch *s = &f->scr[tid];
    mpfr_ptr o = c->out[t * c->n_out + r];
    if (c->b) {
        mpfr_set_flt(s->t, c->b[r], MPFR_RNDN);
        mpfr_add(u, u, s->t, MPFR_RNDN);
    }
    if (c->accumulate)
        mpfr_add(o, o, u, MPFR_RNDN);
    else
        mpfr_set(o, u, MPFR_RNDN);
}

/* Rows [r0, r1) with MPFR multiply-adds (ref_dot), one row at a time. */
static void mm_rows_mpfr(fwd *f, mm_ctx *c, uint64_t r0, uint64_t r1, int tid)
{
    ref_scratch *s = &f->scr[tid];
    for (uint64_t r = r0; r < r1; ++r) {
        ref_row_set_flt(s, c->w + r * c->n_in, c->n_in); /* exact */
        for (uint64_t t = 0; t < c->n_rows; ++t) {
            ref_dot(s->u, c->in + t * c->n_in, s->row, c->n_in, s);
            mm_store(f, c, s->u, t, r, tid);
        }
    }
}

/* Rows [r0, r1), r1 - r0 <= REF_MM_CHUNK, by the exact split dot product: the rows are split
 * once, then each input row against all of them. */
static void mm_rows(fwd *f, mm_ctx *c, uint64_t r0, uint64_t r1, int tid)
{
    const ref_dx_row *w[REF_MM_CHUNK];
    ref_dx_row *rows = f->dxr + (size_t)tid * REF_MM_CHUNK;
    mpfr_ptr o[REF_MM_CHUNK];
    for (uint64_t r = r0; r < r1; ++r) {
        lm_err e = {0};
        if (ref_dx_row_split(&rows[r - r0], c->w + r * c->n_in, c->n_in, c->wbits, &e) !=
            LM_OK) {
            atomic_store(&f->dx_fail, 1);
            return;
        }
        w[r - r0] = &rows[r - r0];
        o[r - r0] = f->dxo[(size_t)tid * REF_MM_CHUNK + (r - r0)];
    }
    for (uint64_t t = 0; t < c->n_rows; ++t) {
        ref_dx_dot_rows(o, &f->dxv[t], w, (uint32_t)(r1 - r0), &f->dxs[tid]);
        for (uint64_t r = r0; r < r1; ++r)
            mm_store(f, c, o[r - r0], t, r, tid);
    }
}

static void mm_item(fwd *f, void *p, uint64_t item, int tid)
{
    mm_ctx *c = p;
    const uint64_t r0 = c->r_lo + item * c->chunk;
    const uint64_t r1 = r0 + c->chunk < c->r_hi ? r0 + c->chunk : c->r_hi;
    if (f->mpfr_dot)
        mm_rows_mpfr(f, c, r0, r1, tid);
    else
        mm_rows(f, c, r0, r1, tid);
}

/* Input row t split into digits once for every output row, from its range (pick_widths). */
static void split_item(fwd *f, void *p, uint64_t t, int tid)
{
    (void)tid;
    mm_ctx *c = p;
    lm_err e = {0};
    if (ref_dx_vec_split_range(&f->dxv[t], c->in + t * c->n_in, c->n_in, 1, f->vrange[t],
                               c->bits, ref_dx_k_cap_bits(f->prec, c->bits), &e) != LM_OK)
        atomic_store(&f->dx_fail, 1);
}

#define SPAN_ROWS 64u /* weight rows per item of span_item */

/* The ranges of a product's input rows in[t] (items t < n_in_rows, into f->vrange) and, when
 * hist is counted, the spans of every row of the weight matrix w (the other items, SPAN_ROWS
 * rows each, counted into hist: integer sums, in any order). */
typedef struct span_ctx {
    mpfr_t *in;                                   /* [n_in_rows][n_in] */
    const float *w;                               /* [n_w][n_in] */
    uint64_t n_in_rows, n_w, n_in;
    atomic_uint_fast64_t hist[REF_DX_SPAN_BINS]; /* weight rows by span */
} span_ctx;

static void span_item(fwd *f, void *p, uint64_t item, int tid)
{
    (void)tid;
    span_ctx *sc = p;
    if (item < sc->n_in_rows) {
        f->vrange[item] = ref_dx_vec_range(sc->in + item * sc->n_in, sc->n_in, 1);
        return;
    }
    const uint64_t r0 = (item - sc->n_in_rows) * SPAN_ROWS;
    const uint64_t r1 = r0 + SPAN_ROWS < sc->n_w ? r0 + SPAN_ROWS : sc->n_w;
    uint64_t h[REF_DX_SPAN_BINS] = {0};
    ref_spans_count(h, sc->w, sc->n_in, r0, r1);
    for (uint32_t b = 0; b < REF_DX_SPAN_BINS; ++b)
        if (h[b])
            atomic_fetch_add(&sc->hist[b], h[b]);
}

/* The ranges of in's n_in_rows rows into f->vrange (none: 0) and w's histogram [n_w][n_in]
 * into hist: the one kept with the model, else counted over the whole matrix and kept. */
static int spans(fwd *f, mpfr_t *in, uint64_t n_in_rows, const float *w, uint64_t n_w,
                 uint64_t n_in, uint64_t *hist, lm_err *err)
{
    span_ctx sc = {.in = in, .w = w, .n_in_rows = n_in_rows, .n_w = n_w, .n_in = n_in};
    for (uint32_t b = 0; b < REF_DX_SPAN_BINS; ++b)
        atomic_init(&sc.hist[b], 0);
    const bool kept = ref_spans_find(f->m, w, n_w, n_in, hist);
    const uint64_t items = n_in_rows + (kept ? 0 : (n_w + SPAN_ROWS - 1) / SPAN_ROWS);
    int st = par_for(f, items, span_item, &sc, err);
    if (st != LM_OK || kept)
        return st;
    for (uint32_t b = 0; b < REF_DX_SPAN_BINS; ++b)
        hist[b] = atomic_load(&sc.hist[b]);
    ref_spans_keep(f->m, w, n_w, n_in, hist);
    return LM_OK;
}

/* c's digit widths (ref_dx_widths) for its input rows and its whole weight matrix; the
 * numbers do not depend on them. */
static int pick_widths(fwd *f, mm_ctx *c, lm_err *err)
{
    uint64_t h[REF_DX_SPAN_BINS];
    int st = spans(f, c->in, c->n_rows, c->w, c->n_out, c->n_in, h, err);
    if (st != LM_OK)
        return st;
    for (uint64_t t = 0; t < c->n_rows; ++t)
        f->vspan[t] = ref_dx_range_span(f->vrange[t]);
    ref_dx_widths(h, f->vspan, c->n_rows, f->prec, c->n_in, &c->bits, &c->wbits);
    return LM_OK;
}

/* This process's range of out's columns (ref_group_range), computed and not yet shared. */
static int matmul_part(fwd *f, mpfr_t *out, mpfr_t *in, const float *w, const float *b,
                       uint64_t n_rows, uint64_t n_in, uint64_t n_out, bool accumulate,
                       lm_err *err)
{
    uint64_t lo, hi;
    ref_group_range(f->grp, f->grp ? f->grp->rank : 0, n_out, &lo, &hi);
    mm_ctx c = {rows_per_item(f, hi - lo), REF_DX_BITS, REF_DX_BITS, in, w, b, out, n_rows,
                n_in, n_out, lo, hi, accumulate};
    int st = LM_OK;
    if (!f->mpfr_dot && hi > lo)
        st = pick_widths(f, &c, err);
    if (st == LM_OK && !f->mpfr_dot && hi > lo)
        st = par_for(f, n_rows, split_item, &c, err);
    if (st == LM_OK && hi > lo)
        st = par_for(f, (hi - lo + c.chunk - 1) / c.chunk, mm_item, &c, err);
    if (st == LM_OK && atomic_load(&f->dx_fail))
        st = LM_FAIL(err, LM_E_NOMEM, "reference: out of memory in a matrix product");
    if (st != LM_OK)
        return st;
    f->macs_done += (double)n_rows * (double)n_in * (double)n_out;
    if (f->rq->progress) {
        ref_progress pr = {.layer = f->layer, .n_layer = f->hp->n_layer, .done = f->macs_done,
                           .total = f->macs_total, .elapsed_s = lm_now_s() - f->t0, .m = f->m,
                           .rq = f->rq};
        f->rq->progress(f->rq->progress_user, &pr);
    }
    return LM_OK;
}

/* Every member's columns of out [n_rows][n_out], computed from in [n_rows][n_in] with status
 * st, to every member (no group: st). */
static int share_cols(fwd *f, mpfr_t *out, mpfr_t *in, uint64_t n_rows, uint64_t n_in,
                      uint64_t n_out, int st, lm_err *err)
{
    if (f->grp == NULL)
        return st;
    uint8_t dig[16] = {0};
    const uint64_t n_vals = n_rows * n_in;
    if (st == LM_OK && ref_group_digest(dig, &in, &n_vals, 1) != LM_OK)
        st = LM_FAIL(err, LM_E_NOMEM, "reference: out of memory");
    return ref_group_share(f->grp, out, n_rows, n_out, n_out, 1, f->prec, dig, st, &f->xbuf,
                           err);
}

static int matmul(fwd *f, mpfr_t *out, mpfr_t *in, const float *w, const float *b, uint64_t n_rows,
                  uint64_t n_in, uint64_t n_out, bool accumulate, lm_err *err)
{
    int st = matmul_part(f, out, in, w, b, n_rows, n_in, n_out, accumulate, err);
    return share_cols(f, out, in, n_rows, n_in, n_out, st, err);
}

/* --- cost calibration --- */

/* acc[b] += uses * n_in * (rows of w [n_w][n_in] of span b). */
static int count_matrix(fwd *f, double *acc, const float *w, uint64_t n_w, uint64_t n_in,
                        double uses, lm_err *err)
{
    uint64_t h[REF_DX_SPAN_BINS];
    int st = spans(f, NULL, 0, w, n_w, n_in, h, err);
    for (uint32_t b = 0; st == LM_OK && b < REF_DX_SPAN_BINS; ++b)
        acc[b] += (double)h[b] * (double)n_in * uses;
    return st;
}

double ref_calibrate_s_per_mac(const ref_model *m, const ref_request *rq, int n_threads)
{
    const ref_hparams *hp = &m->hp;
    fwd f = {.m = m, .nt = n_threads < 1 ? 1 : (n_threads > MAX_THREADS ? MAX_THREADS
                                                                          : n_threads)};
    lm_err err = {0};
    const uint64_t e = hp->n_embd, q = (uint64_t)hp->n_head * hp->head_dim,
                   kv = (uint64_t)hp->n_head_kv * hp->head_dim, fe = hp->n_ff_exp;
    const double n = rq->n_tokens,
                 n_pos = rq->pos ? rq->n_pos : (double)(rq->n_tokens - rq->n_prompt + 1);
    /* every selected expert runs every token (ref_macs) */
    const double used = hp->n_expert == 0 ? 0.0
                        : (hp->n_expert < n * hp->n_expert_used ? (double)hp->n_expert
                                                                : n * hp->n_expert_used);
    double acc[REF_DX_SPAN_BINS] = {0};
    int st = LM_OK;
    for (uint32_t l = 0; st == LM_OK && l < hp->n_layer; ++l) {
        const ref_layer *L = &m->layers[l];
        st = count_matrix(&f, acc, L->wq, q, e, n, &err);
        if (st == LM_OK)
            st = count_matrix(&f, acc, L->wk, kv, e, n, &err);
        if (st == LM_OK)
            st = count_matrix(&f, acc, L->wv, kv, e, n, &err);
        if (st == LM_OK)
            st = count_matrix(&f, acc, L->wo, e, q, n, &err);
        if (L->ffn_gate_inp == NULL) {
            if (st == LM_OK)
                st = count_matrix(&f, acc, L->w_gate, hp->n_ff, e, n, &err);
            if (st == LM_OK)
                st = count_matrix(&f, acc, L->w_up, hp->n_ff, e, n, &err);
            if (st == LM_OK)
                st = count_matrix(&f, acc, L->w_down, e, hp->n_ff, n, &err);
            continue;
        }
        if (st == LM_OK)
            st = count_matrix(&f, acc, L->ffn_gate_inp, hp->n_expert, e, n, &err);
        for (uint32_t x = 0; st == LM_OK && x < hp->n_expert; ++x) {
            const double uses = n * used / hp->n_expert;
            st = count_matrix(&f, acc, L->ffn_gate_exps + (uint64_t)x * fe * e, fe, e, uses,
                              &err);
            if (st == LM_OK)
                st = count_matrix(&f, acc, L->ffn_up_exps + (uint64_t)x * fe * e, fe, e, uses,
                                  &err);
            if (st == LM_OK)
                st = count_matrix(&f, acc, L->ffn_down_exps + (uint64_t)x * e * fe, e, fe,
                                  uses, &err);
        }
    }
    if (st == LM_OK)
        st = count_matrix(&f, acc, m->output, hp->n_vocab, e, n_pos, &err);
    if (st != LM_OK)
        return 0.0;
    /* the weights as integers: 2^40 in all */
    double total = 0.0;
    for (uint32_t b = 0; b < REF_DX_SPAN_BINS; ++b)
        total += acc[b];
    uint64_t hist[REF_DX_SPAN_BINS];
    for (uint32_t b = 0; b < REF_DX_SPAN_BINS; ++b)
        hist[b] = total > 0.0 ? (uint64_t)llround(acc[b] / total * 0x1p40) : 0;
    return ref_dx_calibrate(rq->prec ? rq->prec : REF_DEFAULT_PREC, e, hist);
}

double ref_fixed_cost_s(const ref_model *m, int n_threads)
{
    const ref_layer *L = &m->layers[0];
    const uint64_t n_in = m->hp.n_embd, q = (uint64_t)m->hp.n_head * m->hp.head_dim;
    const uint64_t rows = q < 256 ? q : 256; /* the first rows of layer 0's wq: a few ms */
    if (m->weights == NULL || L->wq == NULL || rows == 0)
        return 0.0;
    double elems = 0.0;
    for (uint32_t i = 0; i < m->n_weights; ++i)
        elems += (double)m->weights[i].n_elem;
    ref_dx_row r;
    memset(&r, 0, sizeof r);
    lm_err err = {0};
    int st = ref_dx_row_split(&r, L->wq, n_in, REF_DX_BITS, &err); /* its buffers, untimed */
    const double t0 = lm_now_s();
    for (uint64_t i = 0; i < rows && st == LM_OK; ++i)
        st = ref_dx_row_split(&r, L->wq + i * n_in, n_in, REF_DX_BITS, &err);
    const double split = (lm_now_s() - t0) / (double)(rows * n_in);
    ref_dx_row_free(&r);
    if (st != LM_OK)
        return 0.0;
    const int nt = n_threads < 1 ? 1 : n_threads;
    return elems * split / nt;
}

/* --- per-token items --- */

typedef struct norm_ctx {
    mpfr_t *in;   /* [*][n_embd] */
    mpfr_t *out;  /* [*][n_embd] */
    const float *w;
    const uint32_t *rows; /* NULL: item t reads row t; else row rows[t] */
} norm_ctx;

static void norm_item(fwd *f, void *p, uint64_t t, int tid)
{
    norm_ctx *c = p;
    uint64_t e = f->hp->n_embd;
    uint64_t src = c->rows ? c->rows[t] : t;
    ref_rmsnorm(c->out + t * e, c->in + src * e, c->w, e, f->hp->rms_eps, &f->scr[tid]);
}

static void rope_item(fwd *f, void *p, uint64_t t, int tid)
{
    (void)p;
    const ref_hparams *hp = f->hp;
    if (hp->n_rot == 0)
        return;
    if (!f->cs_ready) {
        ref_rope_cos_sin(f->cs + t * hp->n_rot, (uint32_t)t, hp->rope_theta, f->m->rope_freqs,
                         hp->n_rot, hp->rope_yarn_factor, hp->n_ctx_orig_yarn);
        if (f->cs_swa != NULL)
            ref_rope_cos_sin(f->cs_swa + t * hp->n_rot, (uint32_t)t, hp->rope_theta_swa,
                             f->m->rope_freqs, hp->n_rot, hp->rope_yarn_factor,
                             hp->n_ctx_orig_yarn);
    }
    /* a sliding layer turns by the sliding theta when the model has one */
    const bool swa = f->cs_swa != NULL && f->m->layers[f->layer].window != 0;
    mpfr_t *cs = (swa ? f->cs_swa : f->cs) + t * hp->n_rot;
    for (uint32_t h = 0; h < hp->n_head; ++h)
        ref_rope_apply(f->q + t * f->q_dim + h * hp->head_dim, cs, hp->n_rot, hp->rope_type,
                       &f->scr[tid]);
    for (uint32_t h = 0; h < hp->n_head_kv; ++h)
        ref_rope_apply(f->k + t * f->kv_dim + h * hp->head_dim, cs, hp->n_rot, hp->rope_type,
                       &f->scr[tid]);
}

/* Per-head RMSNorm of Q and K over head_dim (eps = rms_eps), before RoPE: item = (token, head)
 * over the n_head query heads then the n_head_kv key heads. */
static void qk_norm_item(fwd *f, void *p, uint64_t item, int tid)
{
    (void)p;
    const ref_hparams *hp = f->hp;
    const ref_layer *L = &f->m->layers[f->layer];
    const uint64_t per = hp->n_head + hp->n_head_kv, t = item / per, h = item % per;
    mpfr_t *x = h < hp->n_head ? f->q + t * f->q_dim + h * hp->head_dim
                               : f->k + t * f->kv_dim + (h - hp->n_head) * hp->head_dim;
    ref_rmsnorm(x, x, h < hp->n_head ? L->attn_q_norm : L->attn_k_norm, hp->head_dim,
                hp->rms_eps, &f->scr[tid]);
}

/* The columns [lo, hi) of g and up an activation item works on. */
typedef struct act_ctx {
    uint64_t lo, hi;
} act_ctx;

static void geglu_item(fwd *f, void *p, uint64_t t, int tid)
{
    const act_ctx *c = p;
    uint64_t nff = f->ff_cur;
    ref_scratch *s = &f->scr[tid];
    for (uint64_t i = c->lo; i < c->hi; ++i) {
        mpfr_ptr g = f->g[t * nff + i];
        ref_gelu_tanh(g, g, s);
        mpfr_mul(g, g, f->up[t * nff + i], MPFR_RNDN);
    }
}

/* Candidate key positions of token t: the rotating schedule's list, or 0..t. */
static uint64_t cand_count(const fwd *f, uint64_t t)
{
    return f->rot.start ? f->rot.start[t + 1] - f->rot.start[t] : t + 1;
}

static uint64_t cand_pos(const fwd *f, uint64_t t, uint64_t a)
{
    return f->rot.start ? f->rot.vis[f->rot.start[t] + a] : a;
}

/* attn_item by exact dot products: scores RN(q . k_j) (then times the scale, rounded), and
 * outputs o[d] = RN(sum_j p_j v_j[d]) over the positions t sees, each rounded once
 * (ref_dx_dot_vv); the probabilities sit at their positions in a vector that is zero at the
 * positions t does not see, so one split of it serves every column of v. */
static void attn_item_dx(fwd *f, uint64_t t, uint64_t h, int tid)
{
    const ref_hparams *hp = f->hp;
    const ref_layer *L = &f->m->layers[f->layer];
    ref_scratch *s = &f->scr[tid];
    ref_dx_scratch *dxs = &f->dxs[tid];
    const uint64_t hd = hp->head_dim, nkv = hp->n_head_kv;
    const uint64_t kvh = h / (hp->n_head / nkv);
    mpfr_t *sc = f->scores[tid], *pf = f->pf[tid];
    ref_dx_vec *qx = &f->qx[tid], *px = &f->px[tid];
    lm_err e = {0};
    if (ref_dx_vec_split(qx, f->q + t * f->q_dim + h * hd, hd, 1, f->vvb,
                         ref_dx_k_cap_bits(f->prec, f->vvb), &e) != LM_OK) {
        atomic_store(&f->dx_fail, 1);
        return;
    }
    const uint64_t nc = cand_count(f, t);
    uint64_t m = 0, end = 0;
    for (uint64_t a = 0; a < nc; ++a) {
        const uint64_t j = cand_pos(f, t, a);
        if (!ref_window_visible((uint32_t)t, (uint32_t)j, L->window))
            continue;
        ref_dx_dot_vv(sc[m], qx, &f->kx[j * nkv + kvh], dxs);
        mpfr_mul(sc[m], sc[m], f->scale, MPFR_RNDN);
        ++m;
        end = j + 1 > end ? j + 1 : end;
    }
    ref_softmax_sink(sc, m, L->sinks ? &L->sinks[h] : NULL, s);
    for (uint64_t j = 0; j < end; ++j)
        mpfr_set_zero(pf[j], 1);
    for (uint64_t a = 0, i = 0; a < nc; ++a) {
        const uint64_t j = cand_pos(f, t, a);
        if (ref_window_visible((uint32_t)t, (uint32_t)j, L->window))
            mpfr_set(pf[j], sc[i++], MPFR_RNDN);
    }
    if (ref_dx_vec_split(px, pf, end, 1, f->vvb, ref_dx_k_cap_bits(f->prec, f->vvb), &e) !=
        LM_OK) {
        atomic_store(&f->dx_fail, 1);
        return;
    }
    mpfr_t *o = f->att + t * f->q_dim + h * hd;
    for (uint64_t d = 0; d < hd; ++d)
        ref_dx_dot_vv(o[d], px, &f->vx[kvh * hd + d], dxs);
}

/* Splits this layer's keys (item < n: position item, every kv head) and value columns (item
 * n + c: column c of v over all positions) for attn_item_dx. */
static void kv_split_item(fwd *f, void *p, uint64_t item, int tid)
{
    (void)p;
    (void)tid;
    const uint64_t hd = f->hp->head_dim, nkv = f->hp->n_head_kv;
    const uint32_t kc = ref_dx_k_cap_bits(f->prec, f->vvb);
    lm_err e = {0};
    int st = LM_OK;
    if (item < f->n)
        for (uint64_t g = 0; g < nkv && st == LM_OK; ++g)
            st = ref_dx_vec_split(&f->kx[item * nkv + g], f->k + item * f->kv_dim + g * hd, hd,
                                  1, f->vvb, kc, &e);
    else
        st = ref_dx_vec_split(&f->vx[item - f->n], f->v + (item - f->n), f->n, f->kv_dim,
                              f->vvb, kc, &e);
    if (st != LM_OK)
        atomic_store(&f->dx_fail, 1);
}

/* One (token t, head h) pair: attention over the positions t sees (causal, the layer's window,
 * the rotating schedule), visited in increasing position; the layer's sink logit, if any,
 * joins the softmax denominator. */
static void attn_item(fwd *f, void *p, uint64_t item, int tid)
{
    item += *(const uint64_t *)p; /* the first pair this process computes */
    const ref_hparams *hp = f->hp;
    const ref_layer *L = &f->m->layers[f->layer];
    ref_scratch *s = &f->scr[tid];
    uint64_t t = item / hp->n_head, h = item % hp->n_head;
    uint64_t hd = hp->head_dim;
    uint64_t kvh = h / (hp->n_head / hp->n_head_kv);
    mpfr_t *q = f->q + t * f->q_dim + h * hd;
    mpfr_t *sc = f->scores[tid];
    const uint64_t nc = cand_count(f, t);
    if (f->dx_attn) {
        attn_item_dx(f, t, h, tid);
        return;
    }
    uint64_t m = 0;
    for (uint64_t a = 0; a < nc; ++a) {
        const uint64_t j = cand_pos(f, t, a);
        if (!ref_window_visible((uint32_t)t, (uint32_t)j, L->window))
            continue;
        ref_dot(sc[m], q, f->k + j * f->kv_dim + kvh * hd, hd, s);
        mpfr_mul(sc[m], sc[m], f->scale, MPFR_RNDN);
        ++m;
    }
    ref_softmax_sink(sc, m, L->sinks ? &L->sinks[h] : NULL, s);
    mpfr_t *o = f->att + t * f->q_dim + h * hd;
    for (uint64_t d = 0; d < hd; ++d) {
        /* sum_j p_j v_j[d], j in increasing position */
        mpfr_set_zero(s->acc, 1);
        uint64_t i = 0;
        for (uint64_t a = 0; a < nc; ++a) {
            const uint64_t j = cand_pos(f, t, a);
            if (!ref_window_visible((uint32_t)t, (uint32_t)j, L->window))
                continue;
            mpfr_mul(s->t, sc[i++], f->v[j * f->kv_dim + kvh * hd + d], MPFR_RNDN);
            mpfr_add(s->acc, s->acc, s->t, MPFR_RNDN);
        }
        mpfr_set(o[d], s->acc, MPFR_RNDN);
    }
}

/* Every (token, head) pair: this process's range of them, then every member's to all. */
static int attention(fwd *f, lm_err *err)
{
    const uint64_t n_items = (uint64_t)f->n * f->hp->n_head;
    uint64_t lo, hi;
    ref_group_range(f->grp, f->grp ? f->grp->rank : 0, n_items, &lo, &hi);
    int st = LM_OK;
    if (f->dx_attn && hi > lo)
        st = par_for(f, (uint64_t)f->n + f->kv_dim, kv_split_item, NULL, err);
    if (st == LM_OK)
        st = par_for(f, hi - lo, attn_item, &lo, err);
    if (st == LM_OK && atomic_load(&f->dx_fail))
        st = LM_FAIL(err, LM_E_NOMEM, "reference: out of memory in attention");
    if (f->grp != NULL) { /* the pairs read q and k after RoPE, and v */
        uint8_t dig[16] = {0};
        mpfr_t *const in[3] = {f->q, f->k, f->v};
        const uint64_t n_in[3] = {(uint64_t)f->n * f->q_dim, (uint64_t)f->n * f->kv_dim,
                                  (uint64_t)f->n * f->kv_dim};
        if (st == LM_OK && ref_group_digest(dig, in, n_in, 3) != LM_OK)
            st = LM_FAIL(err, LM_E_NOMEM, "reference: out of memory");
        st = ref_group_share(f->grp, f->att, 1, 0, n_items * f->hp->head_dim, f->hp->head_dim,
                             f->prec, dig, st, &f->xbuf, err);
    }
    return st;
}

/* Routing of token t: top-k of the router logits and the gate weights. */
static void route_item(fwd *f, void *p, uint64_t t, int tid)
{
    (void)p;
    const ref_hparams *hp = f->hp;
    const uint32_t k = hp->n_expert_used;
    mpfr_t *lg = f->router + t * hp->n_expert;
    ref_moe_topk(f->sel + t * k, lg, hp->n_expert, k);
    ref_moe_gate(f->gw + t * k, lg, hp->n_expert, f->sel + t * k, k, (int)hp->moe_gating,
                 &f->scr[tid]);
}

static void swiglu_item(fwd *f, void *p, uint64_t t, int tid);
static void swiglu_oai_item(fwd *f, void *p, uint64_t t, int tid);

/* g = act(h . Wg^T (+ bg), h . Wu^T (+ bu)), f->ff_cur = nff columns: each member computes its
 * columns of both products and of the activation, then one exchange shares g. */
static int ffn_gated(fwd *f, const float *wg, const float *bg, const float *wu, const float *bu,
                     item_fn act, lm_err *err)
{
    const uint64_t n = f->n, e = f->hp->n_embd, nff = f->ff_cur;
    act_ctx c;
    ref_group_range(f->grp, f->grp ? f->grp->rank : 0, nff, &c.lo, &c.hi);
    int st = matmul_part(f, f->g, f->h, wg, bg, n, e, nff, false, err);
    if (st == LM_OK)
        st = matmul_part(f, f->up, f->h, wu, bu, n, e, nff, false, err);
    if (st == LM_OK)
        st = par_for(f, n, act, &c, err);
    return share_cols(f, f->g, f->h, n, e, nff, st, err);
}

/* MoE FFN of the current layer on f->h: every expert computed for every token (simple; the
 * reference is not the place for sparsity), each token keeping its selected experts' outputs,
 * then x += sum over ranks r of w_r * y_r (left to right). */
static int moe_ffn(fwd *f, const ref_layer *L, lm_err *err)
{
    const ref_hparams *hp = f->hp;
    const uint64_t n = f->n, e = hp->n_embd, fe = hp->n_ff_exp, k = hp->n_expert_used;
    int st;
    if ((st = matmul(f, f->router, f->h, L->ffn_gate_inp, L->ffn_gate_inp_b, n, e, hp->n_expert,
                     false, err))
        || (st = par_for(f, n, route_item, NULL, err)))
        return st;
    if (f->sel_all != NULL) { /* keep this layer's routing and margins for the caller */
        memcpy(f->sel_all + (uint64_t)f->layer * n * k, f->sel, n * k * sizeof *f->sel);
        mpfr_t mg;
        mpfr_init2(mg, f->prec);
        for (uint64_t t = 0; t < n; ++t) {
            ref_moe_margin(mg, f->router + t * hp->n_expert, hp->n_expert, f->sel + t * k,
                           (uint32_t)k);
            f->margin_all[(uint64_t)f->layer * n + t] = mpfr_get_d(mg, MPFR_RNDN);
        }
        mpfr_clear(mg);
    }
    f->ff_cur = (uint32_t)fe;
    for (uint32_t x = 0; x < hp->n_expert; ++x) {
        if (!ref_moe_expert_used(f->sel, n * k, x))
            continue;
        const float *bg = L->ffn_gate_exps_b ? L->ffn_gate_exps_b + (uint64_t)x * fe : NULL;
        const float *bu = L->ffn_up_exps_b ? L->ffn_up_exps_b + (uint64_t)x * fe : NULL;
        const float *bd = L->ffn_down_exps_b ? L->ffn_down_exps_b + (uint64_t)x * e : NULL;
        if ((st = ffn_gated(f, L->ffn_gate_exps + (uint64_t)x * fe * e, bg,
                            L->ffn_up_exps + (uint64_t)x * fe * e, bu,
                            hp->act == REF_ACT_SWIGLU_OAI ? swiglu_oai_item : swiglu_item, err))
            || (st = matmul(f, f->ye, f->g, L->ffn_down_exps + (uint64_t)x * e * fe, bd, n, fe,
                            e, false, err)))
            return st;
        for (uint64_t t = 0; t < n; ++t)
            for (uint64_t r = 0; r < k; ++r)
                if (f->sel[t * k + r] == x)
                    for (uint64_t i = 0; i < e; ++i)
                        mpfr_set(f->yk[(t * k + r) * e + i], f->ye[t * e + i], MPFR_RNDN);
    }
    f->ff_cur = hp->n_ff;
    ref_scratch *s = &f->scr[0];
    for (uint64_t t = 0; t < n; ++t)
        for (uint64_t i = 0; i < e; ++i) {
            mpfr_set_zero(s->acc, 1);
            for (uint64_t r = 0; r < k; ++r) {
                mpfr_mul(s->t, f->gw[t * k + r], f->yk[(t * k + r) * e + i], MPFR_RNDN);
                mpfr_add(s->acc, s->acc, s->t, MPFR_RNDN);
            }
            mpfr_add(f->x[t * e + i], f->x[t * e + i], s->acc, MPFR_RNDN);
        }
    return LM_OK;
}

static void swiglu_oai_item(fwd *f, void *p, uint64_t t, int tid)
{
    const act_ctx *c = p;
    uint64_t nff = f->ff_cur;
    for (uint64_t i = c->lo; i < c->hi; ++i)
        ref_swiglu_oai(f->g[t * nff + i], f->g[t * nff + i], f->up[t * nff + i], &f->scr[tid]);
}

static void swiglu_item(fwd *f, void *p, uint64_t t, int tid)
{
    const act_ctx *c = p;
    uint64_t nff = f->ff_cur;
    ref_scratch *s = &f->scr[tid];
    for (uint64_t i = c->lo; i < c->hi; ++i) {
        mpfr_ptr g = f->g[t * nff + i];
        ref_silu(s->u, g, s);
        mpfr_mul(g, s->u, f->up[t * nff + i], MPFR_RNDN);
    }
}

/* x += in . W^T (+ b), or with a post-norm (sandwich): x += rmsnorm(in . W^T (+ b)) * post. */
static int block_out(fwd *f, mpfr_t *in, const float *w, const float *b, uint64_t n_in,
                     const float *post, lm_err *err)
{
    const uint64_t n = f->n, e = f->hp->n_embd;
    if (post == NULL)
        return matmul(f, f->x, in, w, b, n, n_in, e, true, err);
    int st = matmul(f, f->y, in, w, b, n, n_in, e, false, err);
    norm_ctx pc = {f->y, f->y, post, NULL};
    if (st == LM_OK)
        st = par_for(f, n, norm_item, &pc, err);
    for (uint64_t i = 0; st == LM_OK && i < n * e; ++i)
        mpfr_add(f->x[i], f->x[i], f->y[i], MPFR_RNDN);
    return st;
}

/* --- checks --- */

int ref_model_supported(const ref_model *m, lm_err *err)
{
    const ref_hparams *hp = &m->hp;
    const char *name = m->path ? m->path : "model";
    /* the architectures are the reference's rules (ref_hparams.c); a feature value that the
     * reference does not compute is refused below */
    if (!ref_arch_known(hp->arch))
        return LM_FAIL(err, LM_E_UNSUPPORTED,
                       "%s: architecture '%s' is not implemented by the reference", name, hp->arch);
    if (hp->rope_type != REF_ROPE_NORM && hp->rope_type != REF_ROPE_NEOX)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: RoPE type %d is not implemented by the reference",
                       name, (int)hp->rope_type);
    if (hp->norm_place != REF_NORM_PRE && hp->norm_place != REF_NORM_SANDWICH)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: norm placement %d is not implemented by the "
                       "reference", name, (int)hp->norm_place);
    if (hp->act != REF_ACT_SWIGLU && hp->act != REF_ACT_GEGLU_TANH
        && !(hp->act == REF_ACT_SWIGLU_OAI && hp->n_expert > 0)) /* swiglu_oai: experts only */
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: FFN activation %d is not implemented by the "
                       "reference", name, (int)hp->act);
    if (hp->n_layer == 0 || hp->n_embd == 0 || hp->n_head == 0 || hp->n_head_kv == 0 ||
        hp->head_dim == 0 || hp->n_ff == 0 || hp->n_vocab == 0 || hp->n_head % hp->n_head_kv ||
        hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return LM_FAIL(err, LM_E_INPUT, "%s: inconsistent hyperparameters for the reference", name);
    if (m->tok_embd == NULL || m->output == NULL || m->output_norm == NULL || m->layers == NULL)
        return LM_FAIL(err, LM_E_INPUT, "%s: missing weights", name);
    /* variants: sliding windows, sinks and MoE (gating 0..2) are implemented (ref_variants.h) */
    if (hp->n_expert > 0 && (hp->moe_gating > 2 || hp->n_expert_used == 0
                             || hp->n_expert_used > hp->n_expert))
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: MoE gating %u with %u of %u experts is not "
                       "implemented by the reference", name, hp->moe_gating, hp->n_expert_used,
                       hp->n_expert);
    return LM_OK;
}

int ref_request_check(const ref_model *m, const ref_request *rq, lm_err *err)
{
    int st = ref_model_supported(m, err);
    if (st)
        return st;
    if (rq->n_tokens == 0 || rq->tokens == NULL)
        return LM_FAIL(err, LM_E_INPUT, "reference: no tokens");
    if (rq->n_prompt == 0 || rq->n_prompt > rq->n_tokens)
        return LM_FAIL(err, LM_E_INPUT, "reference: n_prompt %u must be in 1..%u", rq->n_prompt,
                       rq->n_tokens);
    for (uint32_t i = 0; i < rq->n_tokens; ++i)
        if (rq->tokens[i] < 0 || (uint32_t)rq->tokens[i] >= m->hp.n_vocab)
            return LM_FAIL(err, LM_E_INPUT, "token id %d at index %u is out of range (n_vocab %u)",
                           (int)rq->tokens[i], i, m->hp.n_vocab);
    if (m->hp.n_ctx_train != 0 && rq->n_tokens > m->hp.n_ctx_train)
        return LM_FAIL(err, LM_E_INPUT, "reference: %u tokens exceed the model's context of %u",
                       rq->n_tokens, m->hp.n_ctx_train);
    if (rq->pos) {
        if (rq->n_pos == 0)
            return LM_FAIL(err, LM_E_INPUT, "reference: empty logit position list");
        for (uint32_t i = 0; i < rq->n_pos; ++i) {
            if (rq->pos[i] >= rq->n_tokens)
                return LM_FAIL(err, LM_E_INPUT, "logit position %u is out of range (%u tokens)",
                               rq->pos[i], rq->n_tokens);
            if (i && rq->pos[i] <= rq->pos[i - 1])
                return LM_FAIL(err, LM_E_INPUT, "logit positions must be strictly increasing");
        }
    }
    uint32_t prec = rq->prec ? rq->prec : REF_DEFAULT_PREC;
    if (prec < REF_MIN_PREC || prec > REF_MAX_PREC)
        return LM_FAIL(err, LM_E_INPUT, "precision %u bits is out of range (%u..%u)", prec,
                       REF_MIN_PREC, REF_MAX_PREC);
    if (rq->n_threads < 0)
        return LM_FAIL(err, LM_E_INPUT, "thread count %d is negative", rq->n_threads);
    if (rq->rot_max_size != 0 && (rq->rot_max_size < 2 || rq->rot_keep >= rq->rot_max_size))
        return LM_FAIL(err, LM_E_INPUT, "rotating cache max_size %u keep %u: need max_size >= 2 "
                       "and keep < max_size", rq->rot_max_size, rq->rot_keep);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t need = ref_memory_estimate(m, rq);
    if (pages > 0 && page > 0 && need / (uint64_t)page > (uint64_t)pages)
        return LM_FAIL(err, LM_E_INPUT, "reference: %u tokens at %u bits need about %.1f GiB, "
                       "more than this machine's %.1f GiB", rq->n_tokens, prec,
                       (double)need / 1073741824.0,
                       (double)pages * (double)page / 1073741824.0);
    return LM_OK;
}

uint64_t ref_memory_estimate(const ref_model *m, const ref_request *rq)
{
    const ref_hparams *hp = &m->hp;
    uint64_t prec = rq->prec ? rq->prec : REF_DEFAULT_PREC;
    uint64_t per_value = sizeof(mpfr_t) + 8 * ((prec + 63) / 64);
    uint64_t n = rq->n_tokens, e = hp->n_embd;
    uint64_t q = (uint64_t)hp->n_head * hp->head_dim, kv = (uint64_t)hp->n_head_kv * hp->head_dim;
    uint64_t ff = hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp;
    /* x, h, q, att, k, v, g, up, rope table and one attention score row (each thread holds
     * one of n) per token; MoE: router, gates, expert outputs */
    uint64_t per_token = 2 * e + 2 * q + 2 * kv + 2 * ff + (hp->n_rot ? hp->n_rot : 1) + 1;
    if (hp->n_expert > 0)
        per_token += hp->n_expert + hp->n_expert_used + e + (uint64_t)hp->n_expert_used * e;
    uint64_t n_pos = rq->pos ? rq->n_pos : n - (rq->n_prompt ? rq->n_prompt : n) + 1;
    uint64_t kept = 2 * (uint64_t)hp->n_layer * rq->n_prompt * kv + n_pos * hp->n_vocab +
                    (hp->n_layer + 1ull) * rq->n_prompt * e;
    /* saturating: a request this large is refused anyway */
    long double total = ((long double)per_token * n + kept) * per_value + (long double)kept * 8;
    return total >= 1.8e19L ? UINT64_MAX : (uint64_t)total;
}

/* --- the pass --- */

void ref_result_free(ref_result *r)
{
    if (r == NULL)
        return;
    uint64_t kv = (uint64_t)r->n_layer * r->n_prompt * r->n_kv_head * r->head_dim;
    ref_vec_free(r->k, kv);
    ref_vec_free(r->v, kv);
    ref_vec_free(r->hidden, (r->n_layer + 1ull) * r->n_prompt * r->n_embd);
    ref_vec_free(r->logits, (uint64_t)r->n_pos * r->n_vocab);
    free(r->pos);
    free(r->moe_sel);
    free(r->moe_margin);
    free(r);
}

static void fwd_free(fwd *f)
{
    const ref_hparams *hp = f->hp;
    uint64_t n = f->n;
    ref_vec_free(f->x, n * hp->n_embd);
    ref_vec_free(f->h, n * hp->n_embd);
    ref_vec_free(f->q, n * f->q_dim);
    ref_vec_free(f->att, n * f->q_dim);
    ref_vec_free(f->k, n * f->kv_dim);
    ref_vec_free(f->v, n * f->kv_dim);
    ref_vec_free(f->g, n * (hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp));
    ref_vec_free(f->up, n * (hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp));
    ref_vec_free(f->cs, n * (hp->n_rot ? hp->n_rot : 1));
    ref_vec_free(f->cs_swa, n * (hp->n_rot ? hp->n_rot : 1));
    ref_vec_free(f->y, n * hp->n_embd);
    ref_vec_free(f->hsel, f->n_hsel * hp->n_embd);
    if (hp->n_expert > 0) {
        ref_vec_free(f->router, n * hp->n_expert);
        ref_vec_free(f->gw, n * hp->n_expert_used);
        ref_vec_free(f->ye, n * hp->n_embd);
        ref_vec_free(f->yk, n * hp->n_expert_used * hp->n_embd);
        free(f->sel);
    }
    ref_rot_schedule_free(&f->rot);
    for (int t = 0; t < f->n_ready; ++t) {
        ref_scratch_clear(&f->scr[t]);
        ref_vec_free(f->scores[t], n);
        if (f->dxs)
            ref_dx_scratch_clear(&f->dxs[t]);
        for (uint32_t g = 0; f->dxr && g < REF_MM_CHUNK; ++g)
            ref_dx_row_free(&f->dxr[(size_t)t * REF_MM_CHUNK + g]);
    }
    for (uint64_t t = 0; f->dxv && t < n; ++t)
        ref_dx_vec_free(&f->dxv[t]);
    for (uint64_t i = 0; f->kx && i < n * hp->n_head_kv; ++i)
        ref_dx_vec_free(&f->kx[i]);
    for (uint64_t i = 0; f->vx && i < f->kv_dim; ++i)
        ref_dx_vec_free(&f->vx[i]);
    for (int t = 0; t < f->nt; ++t) {
        if (f->qx)
            ref_dx_vec_free(&f->qx[t]);
        if (f->px)
            ref_dx_vec_free(&f->px[t]);
        if (f->pf)
            ref_vec_free(f->pf[t], n);
    }
    free(f->kx);
    free(f->vx);
    free(f->qx);
    free(f->px);
    free(f->pf);
    free(f->dxs);
    free(f->dxr);
    free(f->dxv);
    free(f->vspan);
    free(f->vrange);
    ref_vec_free(f->dxo, (uint64_t)f->nt * REF_MM_CHUNK);
    free(f->scr);
    free(f->scores);
    ref_group_buf_free(&f->xbuf);
    mpfr_clear(f->scale);
}

static int default_threads(void)
{
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : (c > MAX_THREADS ? MAX_THREADS : (int)c);
}

/* The group computing the pass: the request's, else the process's; NULL when alone. */
static const ref_group *pass_group(const ref_request *rq)
{
    const ref_group *grp = rq->group ? rq->group : ref_group_get();
    return grp != NULL && grp->size > 1 ? grp : NULL;
}

/* Rank 0 tells the other members what to compute, then every member checks the request and
 * they agree (from here every member reaches the same agreements). */
static int pass_begin(const ref_group *grp, const ref_model *m, const ref_request *rq,
                      lm_err *err)
{
    int st = LM_OK;
    if (grp != NULL && grp->rank == 0 && grp->begin != NULL &&
        (st = grp->begin(grp, m, rq, err)) != LM_OK)
        return st;
    return ref_group_agree(grp, ref_request_check(m, rq, err), err);
}

/* The pass's scalars: precision, threads, widths, the attention scale 1/sqrt(head_dim). */
static void fwd_init(fwd *f, const ref_model *m, const ref_request *rq, const ref_group *grp)
{
    const ref_hparams *hp = &m->hp;
    *f = (fwd){.m = m, .hp = hp, .n = rq->n_tokens, .mpfr_dot = rq->mpfr_dot, .rq = rq,
               .macs_total = ref_macs(m, rq), .t0 = lm_now_s(), .grp = grp};
    atomic_init(&f->dx_fail, 0);
    f->prec = rq->prec ? rq->prec : REF_DEFAULT_PREC;
    f->nt = rq->n_threads ? rq->n_threads
                          : (grp != NULL && grp->threads > 0 ? grp->threads : default_threads());
    if (f->nt > MAX_THREADS)
        f->nt = MAX_THREADS;
    f->q_dim = hp->n_head * hp->head_dim;
    f->kv_dim = hp->n_head_kv * hp->head_dim;
    f->ff_cur = hp->n_ff;
    mpfr_init2(f->scale, f->prec);
    mpfr_set_ui(f->scale, hp->head_dim, MPFR_RNDN);
    mpfr_rec_sqrt(f->scale, f->scale, MPFR_RNDN);
}

/* Width of g and up: the dense FFN's or the experts', whichever is wider. */
static uint64_t ffn_width(const ref_hparams *hp)
{
    return hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp;
}

/* The result's header and logit positions (the request's, or the default ones: the last
 * prompt position and every one after it); NULL when out of memory. */
static ref_result *result_new(const fwd *f, const ref_request *rq)
{
    ref_result *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    const ref_hparams *hp = f->hp;
    *r = (ref_result){.prec = (uint32_t)f->prec, .n_layer = hp->n_layer,
                      .n_prompt = rq->n_prompt, .n_kv_head = hp->n_head_kv,
                      .head_dim = hp->head_dim, .n_vocab = hp->n_vocab,
                      .n_embd = hp->n_embd};
    r->n_pos = rq->pos ? rq->n_pos : rq->n_tokens - rq->n_prompt + 1;
    r->pos = malloc(r->n_pos * sizeof *r->pos);
    if (r->pos != NULL && rq->pos != NULL)
        memcpy(r->pos, rq->pos, rq->n_pos * sizeof *r->pos);
    for (uint32_t i = 0; r->pos != NULL && rq->pos == NULL && i < r->n_pos; ++i)
        r->pos[i] = rq->n_prompt - 1 + i;
    return r;
}

/* The MoE buffers of f and r (router logits, gates, expert outputs, the kept routing). */
static bool alloc_moe(fwd *f, ref_result *r)
{
    const ref_hparams *hp = f->hp;
    const uint64_t n = f->n, e = hp->n_embd, k = hp->n_expert_used;
    f->router = ref_vec_new(n * hp->n_expert, f->prec);
    f->gw = ref_vec_new(n * k, f->prec);
    f->ye = ref_vec_new(n * e, f->prec);
    f->yk = ref_vec_new(n * k * e, f->prec);
    f->sel = malloc(n * k * sizeof *f->sel);
    r->moe_k = hp->n_expert_used;
    r->moe_n_tokens = (uint32_t)n;
    r->moe_sel = calloc((size_t)hp->n_layer * n * k, sizeof *r->moe_sel);
    r->moe_margin = malloc((size_t)hp->n_layer * n * sizeof *r->moe_margin);
    f->sel_all = r->moe_sel;
    f->margin_all = r->moe_margin;
    return f->router && f->gw && f->ye && f->yk && f->sel && r->moe_sel && r->moe_margin;
}

/* Attention's split vectors (ref_dx_dot_vv) when it uses them. */
static bool alloc_dx_attn(fwd *f)
{
    const uint64_t n = f->n;
    f->vvb = ref_dx_vv_bits(n > f->hp->head_dim ? n : f->hp->head_dim, f->prec);
    f->dx_attn = !f->mpfr_dot && f->vvb != 0;
    if (!f->dx_attn)
        return true;
    f->kx = calloc(n * f->hp->n_head_kv, sizeof *f->kx);
    f->vx = calloc(f->kv_dim, sizeof *f->vx);
    f->qx = calloc((size_t)f->nt, sizeof *f->qx);
    f->px = calloc((size_t)f->nt, sizeof *f->px);
    f->pf = calloc((size_t)f->nt, sizeof *f->pf);
    for (int t = 0; f->pf && t < f->nt; ++t)
        if ((f->pf[t] = ref_vec_new(n, f->prec)) == NULL)
            return false;
    return f->kx && f->vx && f->qx && f->px && f->pf;
}

/* Every activation, result and per-thread buffer of the pass (values at f->prec). */
static int alloc_buffers(fwd *f, ref_result *r, lm_err *err)
{
    const ref_hparams *hp = f->hp;
    const uint64_t n = f->n, e = hp->n_embd, ffw = ffn_width(hp), rot = hp->n_rot ? hp->n_rot : 1;
    const uint64_t kvl = (uint64_t)r->n_prompt * f->kv_dim;
    const bool own_swa = hp->rope_theta_swa != 0.0f && hp->rope_theta_swa != hp->rope_theta;
    bool ok = hp->n_expert == 0 || alloc_moe(f, r);
    f->n_hsel = r->n_pos;
    f->x = ref_vec_new(n * e, f->prec);
    f->h = ref_vec_new(n * e, f->prec);
    f->q = ref_vec_new(n * f->q_dim, f->prec);
    f->att = ref_vec_new(n * f->q_dim, f->prec);
    f->k = ref_vec_new(n * f->kv_dim, f->prec);
    f->v = ref_vec_new(n * f->kv_dim, f->prec);
    f->g = ref_vec_new(n * ffw, f->prec);
    f->up = ref_vec_new(n * ffw, f->prec);
    f->cs = ref_vec_new(n * rot, f->prec);
    f->cs_swa = own_swa ? ref_vec_new(n * rot, f->prec) : NULL;
    f->y = ref_vec_new(n * e, f->prec);
    f->hsel = ref_vec_new(f->n_hsel * e, f->prec);
    r->k = ref_vec_new(hp->n_layer * kvl, f->prec);
    r->v = ref_vec_new(hp->n_layer * kvl, f->prec);
    r->hidden = ref_vec_new((hp->n_layer + 1ull) * r->n_prompt * e, f->prec);
    r->logits = ref_vec_new((uint64_t)r->n_pos * hp->n_vocab, f->prec);
    f->scr = aligned_alloc(64, (size_t)f->nt * sizeof *f->scr); /* sizeof is a multiple of 64 */
    if (f->scr)
        memset(f->scr, 0, (size_t)f->nt * sizeof *f->scr);
    f->scores = calloc((size_t)f->nt, sizeof *f->scores);
    f->dxs = calloc((size_t)f->nt, sizeof *f->dxs);
    f->dxr = calloc((size_t)f->nt * REF_MM_CHUNK, sizeof *f->dxr);
    f->dxo = ref_vec_new((uint64_t)f->nt * REF_MM_CHUNK, f->prec);
    f->dxv = calloc(n, sizeof *f->dxv);
    f->vspan = calloc(n, sizeof *f->vspan);
    f->vrange = calloc(n, sizeof *f->vrange);
    ok = alloc_dx_attn(f) && ok;
    if (!ok || !f->dxs || !f->dxr || !f->dxv || !f->vspan || !f->vrange || !f->dxo ||
        !r->pos || !f->x || !f->h || !f->q || !f->att || !f->k || !f->v || !f->g || !f->up ||
        !f->cs || (own_swa && !f->cs_swa) || !f->y || !f->hsel || !r->k || !r->v || !r->hidden ||
        !r->logits || !f->scr || !f->scores)
        return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory");
    return LM_OK;
}

/* Each thread's scratch: MPFR temporaries and a weight row up to the widest product input,
 * its attention score row, and the split dot product's scratch (vectors up to that width and
 * attention's probabilities over n positions: the products of elements off the grid need one
 * slot each). */
static int init_scratch(fwd *f, lm_err *err)
{
    const ref_hparams *hp = f->hp;
    const uint64_t n = f->n, e = hp->n_embd, ffw = ffn_width(hp);
    uint64_t max_in = e > f->q_dim ? e : f->q_dim;
    max_in = hp->n_ff > max_in ? hp->n_ff : max_in;
    max_in = ffw > max_in ? ffw : max_in;
    for (int t = 0; t < f->nt; ++t) {
        int st;
        if ((f->scores[t] = ref_vec_new(n, f->prec)) == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory");
        if ((st = ref_scratch_init(&f->scr[t], f->prec, max_in, err)) != LM_OK) {
            ref_vec_free(f->scores[t], n);
            return st;
        }
        if ((st = ref_dx_scratch_init(&f->dxs[t], f->prec, max_in > n ? max_in : n, err)) !=
            LM_OK) {
            ref_scratch_clear(&f->scr[t]);
            ref_vec_free(f->scores[t], n);
            return st;
        }
        f->n_ready = t + 1;
    }
    return LM_OK;
}

/* The group's exchange buffer, sized for the largest exchange: one product's outputs, the
 * attention pairs or the logits. */
static int init_exchange(fwd *f, const ref_result *r, lm_err *err)
{
    const ref_hparams *hp = f->hp;
    const uint64_t n = f->n, ffw = ffn_width(hp), logits = (uint64_t)r->n_pos * hp->n_vocab;
    uint64_t x_vals = hp->n_embd > f->q_dim ? hp->n_embd : f->q_dim;
    x_vals = ffw > x_vals ? ffw : x_vals;
    x_vals = hp->n_expert > x_vals ? hp->n_expert : x_vals;
    x_vals = n * x_vals > logits ? n * x_vals : logits;
    return ref_group_buf_init(&f->xbuf, f->grp, x_vals, f->prec, err);
}

/* Everything a pass holds, set up: the rotating schedule, buffers, scratch, exchange. */
static int fwd_setup(fwd *f, ref_result *r, const ref_request *rq, lm_err *err)
{
    int st = LM_OK;
    if (rq->rot_max_size != 0 &&
        (st = ref_rot_schedule_make_turns(&f->rot, rq->rot_max_size, rq->rot_keep, rq->rot_step,
                                          rq->rot_turn_at ? rq->rot_turn_at : rq->n_prompt,
                                          rq->rot_turn_d, rq->n_prompt, rq->n_tokens, err)))
        return st;
    if ((st = alloc_buffers(f, r, err)) || (st = init_scratch(f, err)))
        return st;
    return init_exchange(f, r, err);
}

/* x = tok_embd[id] (exact), times sqrt(n_embd) at full precision when the model scales. */
static void embed(fwd *f, const int32_t *tokens)
{
    const ref_hparams *hp = f->hp;
    const uint64_t n = f->n, e = hp->n_embd;
    for (uint64_t t = 0; t < n; ++t) {
        const float *row = f->m->tok_embd + (uint64_t)tokens[t] * e;
        for (uint64_t i = 0; i < e; ++i)
            mpfr_set_flt(f->x[t * e + i], row[i], MPFR_RNDN);
    }
    if (hp->embd_scale != 0.0f) {
        mpfr_ptr c = f->scr[0].u;
        mpfr_sqrt_ui(c, hp->n_embd, MPFR_RNDN);
        for (uint64_t i = 0; i < n * e; ++i)
            mpfr_mul(f->x[i], f->x[i], c, MPFR_RNDN);
    }
}

/* Layer f->layer's attention block: norm, Q/K/V, per-head norms, RoPE; K and V of the prompt
 * positions kept into r; attention; output projection (and post-norm) into x. */
static int attention_block(fwd *f, ref_result *r, lm_err *err)
{
    const ref_hparams *hp = f->hp;
    const ref_layer *L = &f->m->layers[f->layer];
    const uint64_t n = f->n, e = hp->n_embd, kvl = (uint64_t)r->n_prompt * f->kv_dim;
    norm_ctx nc = {f->x, f->h, L->attn_norm, NULL};
    int st;
    if ((st = par_for(f, n, norm_item, &nc, err)) ||
        (st = matmul(f, f->q, f->h, L->wq, L->bq, n, e, f->q_dim, false, err)) ||
        (st = matmul(f, f->k, f->h, L->wk, L->bk, n, e, f->kv_dim, false, err)) ||
        (st = matmul(f, f->v, f->h, L->wv, L->bv, n, e, f->kv_dim, false, err)) ||
        (L->attn_q_norm != NULL &&
         (st = par_for(f, n * (hp->n_head + hp->n_head_kv), qk_norm_item, NULL, err))) ||
        (st = par_for(f, n, rope_item, NULL, err)))
        return st;
    f->cs_ready = true;
    for (uint64_t i = 0; i < kvl; ++i) {
        mpfr_set(r->k[f->layer * kvl + i], f->k[i], MPFR_RNDN);
        mpfr_set(r->v[f->layer * kvl + i], f->v[i], MPFR_RNDN);
    }
    if ((st = attention(f, err)))
        return st;
    return block_out(f, f->att, L->wo, L->bo, f->q_dim, L->attn_post_norm, err);
}

/* Layer f->layer's FFN block: norm, then the mixture of experts or the gated FFN, into x. */
static int ffn_block(fwd *f, lm_err *err)
{
    const ref_hparams *hp = f->hp;
    const ref_layer *L = &f->m->layers[f->layer];
    norm_ctx fc = {f->x, f->h, L->ffn_norm, NULL};
    int st = par_for(f, f->n, norm_item, &fc, err);
    if (st != LM_OK)
        return st;
    if (L->ffn_gate_inp != NULL)
        return moe_ffn(f, L, err);
    if ((st = ffn_gated(f, L->w_gate, NULL, L->w_up, NULL,
                        hp->act == REF_ACT_GEGLU_TANH ? geglu_item : swiglu_item, err)))
        return st;
    return block_out(f, f->g, L->w_down, NULL, hp->n_ff, L->ffn_post_norm, err);
}

/* Logits only where asked: the final norm of those rows, then the output projection. */
static int output_logits(fwd *f, ref_result *r, lm_err *err)
{
    const ref_hparams *hp = f->hp;
    f->layer = hp->n_layer;
    norm_ctx oc = {f->x, f->hsel, f->m->output_norm, r->pos};
    int st = par_for(f, r->n_pos, norm_item, &oc, err);
    if (st != LM_OK)
        return st;
    return matmul(f, r->logits, f->hsel, f->m->output, NULL, r->n_pos, hp->n_embd, hp->n_vocab,
                  false, err);
}

/* The residual stream x of the prompt positions into hidden state i of r (0: the embedding,
 * l + 1: after layer l). */
static void keep_hidden(const fwd *f, ref_result *r, uint32_t i)
{
    const uint64_t n = (uint64_t)r->n_prompt * r->n_embd;
    for (uint64_t j = 0; j < n; ++j)
        mpfr_set(r->hidden[i * n + j], f->x[j], MPFR_RNDN);
}

/* The whole forward pass on f's buffers; every member ends with the same numbers in r, or
 * none keeps them. */
static int forward(fwd *f, ref_result *r, const ref_request *rq, lm_err *err)
{
    const ref_hparams *hp = f->hp;
    if (rq->progress) {
        ref_progress pr = {.n_layer = hp->n_layer, .total = f->macs_total, .m = f->m, .rq = rq};
        rq->progress(rq->progress_user, &pr);
    }
    embed(f, rq->tokens);
    keep_hidden(f, r, 0);
    int st = LM_OK;
    for (uint32_t l = 0; st == LM_OK && l < hp->n_layer; ++l) {
        f->layer = l;
        if ((st = attention_block(f, r, err)) == LM_OK && (st = ffn_block(f, err)) == LM_OK)
            keep_hidden(f, r, l + 1);
    }
    if (st != LM_OK || (st = output_logits(f, r, err)) != LM_OK)
        return st;
    const uint64_t kv = (uint64_t)hp->n_layer * r->n_prompt * f->kv_dim;
    mpfr_t *const res[4] = {r->k, r->v, r->hidden, r->logits};
    const uint64_t res_n[4] = {kv, kv, (hp->n_layer + 1ull) * r->n_prompt * hp->n_embd,
                               (uint64_t)r->n_pos * hp->n_vocab};
    return ref_group_same(f->grp, res, res_n, 4, err);
}

int ref_run(ref_result **out, const ref_model *m, const ref_request *rq, lm_err *err)
{
    *out = NULL;
    const ref_group *grp = pass_group(rq);
    int st = pass_begin(grp, m, rq, err);
    if (st != LM_OK)
        return st;
    fwd f;
    fwd_init(&f, m, rq, grp);
    ref_result *r = result_new(&f, rq);
    st = r == NULL ? LM_FAIL(err, LM_E_NOMEM, "reference: out of memory")
                   : fwd_setup(&f, r, rq, err);
    /* a failure while setting up: the others learn it at the same point */
    if ((st = ref_group_agree(grp, st, err)) == LM_OK)
        st = forward(&f, r, rq, err);
    fwd_free(&f);
    if (st != LM_OK) {
        ref_result_free(r);
        return st;
    }
    *out = r;
    return LM_OK;
}

int ref_compute(ref_capture *out, const ref_model *m, const ref_request *rq, lm_err *err)
{
    memset(out, 0, sizeof *out);
    ref_result *r;
    int st = ref_run(&r, m, rq, err);
    if (st)
        return st;
    st = ref_result_to_capture(out, r, m, rq, err);
    ref_result_free(r);
    return st;
}
