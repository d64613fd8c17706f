/* attention.c — dense causal attention of a chunk of queries over the KV cache.
 *
 * Per query head h (kv head g = h / (n_head / n_head_kv)), per causal block of queries
 * [i0, i1) (LM_ATTN_Q_BLOCK rows) attending to keys [0, n_kb), n_kb = pos0 + i1:
 *   S[i0:i1][0:n_kb] = scale * Q_h . K_g^T   backend gemm_nt on strided views of the cache
 *   causal mask: query i sees keys j <= pos0 + i; masked entries of P are +0.0f
 *   (bidirectional chunk, a->bidir: one block, every query sees keys [0, pos0 + n))
 *   P = softmax(S) row by row                 fixed order, see softmax_group
 *   O_h[i0:i1] = P[i0:i1][0:n_kb] . V_g       backend gemm_nn, [i1 - i0][head_dim]
 * The score matrix S [n][pos0 + n] of the whole chunk is materialised (dense) one head at a
 * time, or, on a backend with calling-thread products, one block per thread at a time (the
 * task path, dense_tasks); blocks skip the products above the diagonal, and the task path
 * also the scores past the last key a piece of a block's rows reads. With the naive backend
 * every element of S and O is a left-to-right dot product (O sums over the block's
 * n_kb keys, the masked ones adding exact zeros), so a query's result does not depend on how
 * many other queries share its chunk or its block. A row whose sum thereby met a non-finite
 * value at a key it cannot see (0 * NaN) is computed again without it: attention_mend.c. */

/* The elementwise loops here are independent per element (no reduction is reordered), so
 * vectorizing them changes no bit; -O2 alone does not vectorize loops in GCC 12, and the
 * selects in lm_expf are only if-converted when comparisons may be assumed not to trap
 * (no-trapping-math concerns floating-point exception flags, never values). It comes
 * before the includes so that lm_expf, inlined into those loops, gets the same options. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-loop-vectorize", "no-trapping-math")
#endif

#include "attention.h"

#include "attention_mend.h"
#include "expf.h"
#include "kvd_defects.h"

#include <stdatomic.h>

/* s[j] = lm_expf(s[j] - mx): a loop of its own so that it is vectorized. */
LM_VECTOR_CLONES static void exp_shifted(float *s /* [n] */, size_t n, float mx)
{
    for (size_t j = 0; j < n; ++j)
        s[j] = lm_expf(s[j] - mx);
}

/* s[j] = s[j] / t: a loop of its own so that it is vectorized (a division is correctly rounded
 * at every vector width). */
LM_VECTOR_CLONES static void divide_by(float *s /* [n] */, size_t n, float t)
{
    for (size_t j = 0; j < n; ++j)
        s[j] = s[j] / t;
}

/* Softmax of s[0..n_valid) in place, zeroes s[n_valid..n_total). Order: max over the valid
 * entries (exact, so its order is irrelevant: eight interleaved partial maxima), then
 * e_j = lm_expf(s_j - max), sum of e_j left to right in float from +0.0f, then p_j = e_j / sum
 * (a division, not a multiply by 1/sum). softmax_group runs up to SOFTMAX_GROUP rows at once:
 * their sums advance side by side, each still its own left-to-right chain (independent
 * chains, so no bit depends on the grouping; the sums no longer wait on one another's
 * latency). */
#define SOFTMAX_GROUP 4u

static void max_exp(float *s /* [n_valid] */, uint32_t n_valid, bool no_max)
{
    float m8[8];
    for (int l = 0; l < 8; ++l)
        m8[l] = s[0];
    size_t j8 = 0;
    for (; j8 + 8 <= n_valid; j8 += 8)
        for (int l = 0; l < 8; ++l)
            m8[l] = s[j8 + l] > m8[l] ? s[j8 + l] : m8[l];
    float mx = m8[0];
    for (int l = 1; l < 8; ++l)
        mx = m8[l] > mx ? m8[l] : mx;
    for (size_t j = j8; j < n_valid; ++j)
        mx = s[j] > mx ? s[j] : mx;
    if (no_max)
        mx = 0.0f; /* test defect: exponentials of the raw scores (overflow past ~88.7) */
    exp_shifted(s, n_valid, mx);
}

/* Rows s[r] [n_total[r]], r < g <= SOFTMAX_GROUP, each valid up to n_valid[r]. */
static void softmax_group(float *const *s, const uint32_t *n_valid, const uint32_t *n_total,
                          uint32_t g, bool no_max)
{
    float sum[SOFTMAX_GROUP] = {0.0f, 0.0f, 0.0f, 0.0f};
    uint32_t common = g == SOFTMAX_GROUP ? n_valid[0] : 0; /* entries every row sums */
    for (uint32_t r = 0; r < g; ++r) {
        max_exp(s[r], n_valid[r], no_max);
        common = n_valid[r] < common ? n_valid[r] : common;
    }
    for (size_t j = 0; j < common; ++j) {
        sum[0] += s[0][j];
        sum[1] += s[1][j];
        sum[2] += s[2][j];
        sum[3] += s[3][j];
    }
    for (uint32_t r = 0; r < g; ++r) {
        float *x = s[r];
        float t = sum[r];
        for (size_t j = common; j < n_valid[r]; ++j)
            t += x[j];
        divide_by(x, n_valid[r], t);
        for (size_t j = n_valid[r]; j < n_total[r]; ++j)
            x[j] = 0.0f;
    }
}

typedef struct softmax_job {
    float *scores;  /* [rows][ld]: row r holds chunk row row0 + r */
    size_t ld;
    uint32_t row0;
    uint32_t pos0;
    uint32_t n;
    bool mask_next; /* test defect LM_DEFECT_MASK_NEXT_TOKEN; false in release builds */
    bool no_max;    /* test defect LM_DEFECT_SOFTMAX_NO_MAX; false in release builds */
    bool bidir;     /* no mask inside the chunk */
} softmax_job;

/* The end row of the query block that starts at row i0 of a chunk of n queries. */
static uint32_t block_end(uint32_t n, uint32_t i0)
{
    return n - i0 < LM_ATTN_Q_BLOCK ? n : i0 + LM_ATTN_Q_BLOCK;
}

/* The keys the query block starting at row i0 can see: up to its last row's position, or
 * every key of the chunk when it is bidirectional. */
static uint32_t block_keys(uint32_t pos0, uint32_t n, bool bidir, uint32_t i0)
{
    return bidir ? pos0 + n : pos0 + block_end(n, i0);
}

/* The keys row i of the chunk reads, out of its block's n_kb: [0, pos0 + i + 1), one more
 * under the test defect LM_DEFECT_MASK_NEXT_TOKEN while inside the block; every key of the
 * chunk when it is bidirectional. Scores past these are never read. */
static uint32_t row_keys(const softmax_job *j, uint32_t i, uint32_t n_kb)
{
    if (j->bidir)
        return j->pos0 + j->n;
    const uint32_t n_valid = j->pos0 + i + 1;
    return j->mask_next && n_valid < n_kb ? n_valid + 1 : n_valid;
}

/* A block's P . V rows as lm_attn_pv_mend sees them: row r is chunk row i0 + r. */
typedef struct block_view {
    const softmax_job *sm;
    uint32_t i0;
    uint32_t n_kb;
} block_view;

static bool block_key_visible(const void *ctx, uint32_t r, uint32_t j)
{
    const block_view *b = ctx;
    return j < row_keys(b->sm, b->i0 + r, b->n_kb);
}

/* Rows [begin, end): row i reads row_keys of its block's n_kb keys. */
static void softmax_rows(void *arg, uint32_t begin, uint32_t end)
{
    const softmax_job *j = arg;
    for (uint32_t i0 = begin; i0 < end; i0 += SOFTMAX_GROUP) {
        const uint32_t g = end - i0 < SOFTMAX_GROUP ? end - i0 : SOFTMAX_GROUP;
        float *rows[SOFTMAX_GROUP];
        uint32_t n_valid[SOFTMAX_GROUP], n_kb[SOFTMAX_GROUP];
        for (uint32_t r = 0; r < g; ++r) {
            const uint32_t i = i0 + r;
            n_kb[r] = block_keys(j->pos0, j->n, j->bidir, i / LM_ATTN_Q_BLOCK * LM_ATTN_Q_BLOCK);
            n_valid[r] = row_keys(j, i, n_kb[r]);
            rows[r] = j->scores + (size_t)(i - j->row0) * j->ld;
        }
        softmax_group(rows, n_valid, n_kb, g, j->no_max);
    }
}

/* The KV head query head h reads: h / (n_head / n_head_kv), or the interleaved mapping
 * h % n_head_kv of another convention (test defect LM_DEFECT_GQA_INTERLEAVED). */
static uint32_t kv_head(const lm_attn_args *a, uint32_t h, bool gqa_interleaved)
{
    return gqa_interleaved ? h % a->n_head_kv : h / (a->n_head / a->n_head_kv);
}

/* The query block starting at row i0: its end row and the keys its rows can see. */
static void q_block(const lm_attn_args *a, uint32_t i0, uint32_t *i1, uint32_t *n_kb)
{
    *i1 = block_end(a->n, i0);
    *n_kb = block_keys(a->pos0, a->n, a->bidir, i0);
}

/* Backends with products on the calling thread (lm_backend_i.gemm_nt_local, gemm_nn_local)
 * run dense attention as n_head x n_blocks independent tasks, (query head h, causal block b):
 * S_b = scale * Q_h[b] . K_g^T, softmax of its rows, O_h[b] = P_b . V_g, all on one thread
 * into that thread's slot of the scratch ([min(n, LM_ATTN_Q_BLOCK)][n_kv] floats each). The
 * pool's threads claim tasks one after another, the blocks with most keys first; every task
 * computes exactly what the head-by-head path computes for its rows (the same products with
 * the same bits, the same softmax_group), so the split changes nothing. S is computed in
 * pieces of ATTN_QK_ROWS query rows, each only up to the last key its rows read (row_keys):
 * each score is its own product, and the scores past row_keys are never read
 * (softmax_rows writes their +0 probabilities), so this skips work without changing a bit;
 * P . V still sums over the block's n_kb keys. A piece is split off only while it reads at
 * most 3/4 of the block's keys, a chosen cut-off, not a measured one: each piece packs its
 * keys again (one float copied per ATTN_QK_ROWS multiply-adds), and in a block far from the
 * first key (a late chunk) a piece skips only a small fraction of its products; from there
 * the block's remaining rows are one product. */
#define ATTN_QK_ROWS 32u
static bool has_local(const lm_backend *be)
{
    return be->vt->gemm_nt_local != NULL && be->vt->gemm_nn_local != NULL;
}

static uint32_t dense_slots(const lm_backend *be)
{
    return has_local(be) && be->n_threads > 1 ? (uint32_t)be->n_threads : 1u;
}

size_t lm_attention_dense_scratch(const lm_backend *be, uint32_t n, uint32_t n_kv)
{
    const uint32_t rows = n < LM_ATTN_Q_BLOCK ? n : LM_ATTN_Q_BLOCK;
    const size_t slots_rows = (size_t)dense_slots(be) * rows;
    return (slots_rows > n ? slots_rows : n) * n_kv;
}

typedef struct attn_tasks {
    lm_backend *be;
    const lm_attn_args *a;
    softmax_job sm;     /* the chunk's softmax parameters (scores, row0: per task) */
    uint32_t n_blocks;
    uint32_t n_tasks;   /* n_head * n_blocks */
    bool gqa_interleaved;
    atomic_uint next;   /* the first task no thread has claimed */
} attn_tasks;

static void run_task(attn_tasks *t, uint32_t task, float *s /* [LM_ATTN_Q_BLOCK][n_kv] */)
{
    const lm_attn_args *a = t->a;
    lm_backend *be = t->be;
    const uint32_t n_kv = a->pos0 + a->n, hd = a->head_dim;
    const uint32_t h = task % a->n_head, b = t->n_blocks - 1 - task / a->n_head;
    const uint32_t g = kv_head(a, h, t->gqa_interleaved);
    const size_t q_stride = (size_t)a->n_head * hd, kv_stride = (size_t)a->n_head_kv * hd;
    const uint32_t i0 = b * LM_ATTN_Q_BLOCK;
    uint32_t i1, n_kb;
    q_block(a, i0, &i1, &n_kb);
    for (uint32_t r0 = i0, r1; r0 < i1; r0 = r1) { /* S: the keys each piece sees */
        r1 = i1 - r0 <= ATTN_QK_ROWS ? i1 : r0 + ATTN_QK_ROWS;
        uint32_t nk = row_keys(&t->sm, r1 - 1, n_kb);
        if (4u * (uint64_t)nk > 3u * (uint64_t)n_kb) /* the rest of the block in one piece */
            r1 = i1, nk = n_kb;
        be->vt->gemm_nt_local(be, r1 - r0, nk, hd, a->scale,
                              a->q + (size_t)h * hd + r0 * q_stride, q_stride,
                              a->k + (size_t)g * hd, kv_stride, s + (size_t)(r0 - i0) * n_kv,
                              n_kv);
    }
    softmax_job sm = t->sm;
    sm.scores = s;
    sm.row0 = i0;
    softmax_rows(&sm, i0, i1);
    lm_backend_perturb(be, s, i1 - i0, n_kb, n_kv, LM_SITE_SOFTMAX | h << 8);
    float *oh = a->out + (size_t)h * hd + i0 * q_stride; /* [i1 - i0][hd], stride q_stride */
    be->vt->gemm_nn_local(be, i1 - i0, hd, n_kb, s, n_kv, a->v + (size_t)g * hd, kv_stride, oh,
                          q_stride);
    const block_view view = {&t->sm, i0, n_kb};
    lm_attn_pv_mend(be, true, i1 - i0, hd, n_kb, s, n_kv, a->v + (size_t)g * hd, kv_stride, oh,
                    q_stride, block_key_visible, &view);
}

/* Part `begin` of the pool job: claims tasks until none is left, into scratch slot `begin`
 * (parts are disjoint, so no two running parts share a slot). */
static void task_part(void *arg, uint32_t begin, uint32_t end)
{
    (void)end;
    attn_tasks *t = arg;
    const uint32_t rows = t->a->n < LM_ATTN_Q_BLOCK ? t->a->n : LM_ATTN_Q_BLOCK;
    float *s = t->a->scores + (size_t)begin * rows * (t->a->pos0 + t->a->n);
    for (;;) {
        const uint32_t task = atomic_fetch_add(&t->next, 1);
        if (task >= t->n_tasks)
            return;
        run_task(t, task, s);
    }
}

/* Below LM_POOL_MIN_MACS multiply-adds (Q . K and P . V: a decode step over a few dozen
 * positions) the tasks stay on the calling thread. From there on even one query's heads are
 * split over the pool, so that the pool's threads do not idle (and sleep) through a step's
 * attention between its projections. */

static void dense_tasks(lm_backend *be, const lm_attn_args *a, const softmax_job *sm)
{
    attn_tasks t = {.be = be, .a = a, .sm = *sm,
                    .n_blocks = (a->n + LM_ATTN_Q_BLOCK - 1) / LM_ATTN_Q_BLOCK,
                    .gqa_interleaved = LM_DEFECT_ON(be->vt->name, LM_DEFECT_GQA_INTERLEAVED)};
    t.n_tasks = a->n_head * t.n_blocks;
    atomic_init(&t.next, 0);
    const double macs = 2.0 * a->n_head * a->n * (a->pos0 + a->n) * a->head_dim;
    const uint32_t slots = dense_slots(be);
    if (a->pool == NULL || slots < 2 || t.n_tasks < 2 || macs < LM_POOL_MIN_MACS)
        task_part(&t, 0, 1);
    else
        lm_pool_for(a->pool, slots, 1, task_part, &t);
}

void lm_attention_dense(lm_backend *be, const lm_attn_args *a)
{
    const uint32_t n_kv = a->pos0 + a->n;
    const uint32_t hd = a->head_dim;
    const size_t q_stride = (size_t)a->n_head * hd;     /* floats between query rows */
    const size_t kv_stride = (size_t)a->n_head_kv * hd; /* floats between cache positions */
    softmax_job job = {.scores = a->scores, .ld = n_kv, .pos0 = a->pos0, .n = a->n,
                       .mask_next = LM_DEFECT_ON(be->vt->name, LM_DEFECT_MASK_NEXT_TOKEN),
                       .no_max = LM_DEFECT_ON(be->vt->name, LM_DEFECT_SOFTMAX_NO_MAX),
                       .bidir = a->bidir};
    if (has_local(be)) {
        dense_tasks(be, a, &job);
        return;
    }
    const bool gqa_interleaved = LM_DEFECT_ON(be->vt->name, LM_DEFECT_GQA_INTERLEAVED);

    for (uint32_t h = 0; h < a->n_head; ++h) {
        const uint32_t g = kv_head(a, h, gqa_interleaved);
        const float *qh = a->q + (size_t)h * hd;  /* [n][hd], row stride q_stride */
        const float *kg = a->k + (size_t)g * hd;  /* [n_kv][hd], row stride kv_stride */
        const float *vg = a->v + (size_t)g * hd;  /* [n_kv][hd], row stride kv_stride */
        float *oh = a->out + (size_t)h * hd;      /* [n][hd], row stride q_stride */
        float *s = a->scores;                     /* [n][n_kv] */

        for (uint32_t i0 = 0; i0 < a->n; i0 += LM_ATTN_Q_BLOCK) {
            uint32_t i1, n_kb;
            q_block(a, i0, &i1, &n_kb);
            be->vt->gemm_nt(be, i1 - i0, n_kb, hd, a->scale, qh + i0 * q_stride, q_stride,
                            kg, kv_stride, s + (size_t)i0 * n_kv, n_kv);
        }
        lm_pool_for(a->pool, a->n, LM_POOL_MIN_SOFTMAX_ROWS, softmax_rows, &job);
        for (uint32_t i0 = 0; i0 < a->n; i0 += LM_ATTN_Q_BLOCK) {
            uint32_t i1, n_kb;
            q_block(a, i0, &i1, &n_kb);
            /* SR ensemble only: the probabilities P . V reads (row i0..i1, keys < n_kb) */
            lm_backend_perturb(be, s + (size_t)i0 * n_kv, i1 - i0, n_kb, n_kv,
                               LM_SITE_SOFTMAX | h << 8);
            be->vt->gemm_nn(be, i1 - i0, hd, n_kb, s + (size_t)i0 * n_kv, n_kv, vg,
                            kv_stride, oh + i0 * q_stride, q_stride);
            const block_view view = {&job, i0, n_kb};
            lm_attn_pv_mend(be, false, i1 - i0, hd, n_kb, s + (size_t)i0 * n_kv, n_kv, vg,
                            kv_stride, oh + i0 * q_stride, q_stride, block_key_visible, &view);
        }
    }
}
