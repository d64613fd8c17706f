/* weight_tiles.c — products whose B is a weight kept in its file's type (backend.h,
 * lm_gemm_nt_blocks): B's rows decoded a tile at a time into per-thread scratch, each tile
 * then multiplied by the backend's own float32 kernel.
 *
 * A tile is rows [j0, j0 + t) of one product's B, each row decoded (lm_type_to_f32, the
 * arena's decoder) from the block holding column col0 to the block holding column
 * col0 + k - 1 into a row of `width` floats, whole blocks; the kernel reads the tile from
 * column col0 % block_elems with ldb = width. t is about LM_WTILE_FLOATS / width rows, so
 * that a tile stays in L2 while the kernel reads it, every row of A of the call reusing the
 * decoded tile (prefill decodes each block once per call, whatever its rows); for a
 * chunk-invariant backend fewer when the batch has so few rows that every thread would not
 * get four tiles; a multiple of 8 (det's panels) from 8 rows on.
 *
 * Threads: a backend with a pool and gemm_nt_tile or gemm_nt_local (det; blas: one
 * OpenBLAS thread per call) runs the tiles on its pool's threads, claimed one after another
 * from one counter over all the batch's products, each thread decoding into its own slot of
 * the scratch; the others run them in order on the calling thread through gemm_nt (naive and
 * naive-sr: one thread; blis: its library's threads inside each call). An output's bits do
 * not depend on which tile or thread computes it for a backend whose output (i, j) depends
 * only on row i of A, row j of B and k (naive, naive-sr, det: backend_naive.c,
 * backend_naive_sr.c, det_kernels.h); blas and blis call their library on tile shapes rather
 * than on the whole B (backend_blas.c says what that changes). */
#include "backend.h"

#include "kvd_engine.h"
#include "threadpool.h"

#include <stdatomic.h>
#include <stdlib.h>

#define LM_WTILE_FLOATS (96u * 1024u) /* floats of one decoded tile (384 KiB: L2) */
#define MAX_BLOCK_ELEMS 256u          /* the largest block of the loadable types (QK_K) */

lm_nt_part lm_nt_weight(const lm_wt *w, uint64_t row0, uint32_t n, uint32_t k, float *c,
                        size_t ldc)
{
    if (w->f != NULL || w->q == NULL)
        return (lm_nt_part){n, w->f != NULL ? w->f + row0 * k : NULL, k, c, ldc, {0}};
    const lm_nt_blocks bq = {w->q + row0 * w->row_bytes, w->row_bytes, w->type, 0};
    return (lm_nt_part){n, NULL, 0, c, ldc, bq};
}

lm_nt_part lm_nt_sub(const lm_nt_part *p, uint32_t r0, uint32_t k0, uint32_t n, float *c,
                     size_t ldc)
{
    lm_nt_part q = *p;
    q.n = n;
    q.c = c;
    q.ldc = ldc;
    if (p->bq.data != NULL) {
        q.bq.data = p->bq.data + (size_t)r0 * p->bq.row_bytes;
        q.bq.col0 = p->bq.col0 + k0;
    } else {
        q.b = p->b + (size_t)r0 * p->ldb + k0;
    }
    return q;
}

/* Floats of one slot: a tile, and at least one row of k_max columns starting mid-block. */
static size_t slot_floats(uint32_t k_max)
{
    size_t f = (size_t)k_max + 2 * MAX_BLOCK_ELEMS;
    f = f > LM_WTILE_FLOATS ? f : LM_WTILE_FLOATS;
    return (f + 15) / 16 * 16; /* each slot 64-byte aligned */
}

/* The kernel that multiplies one tile on a pool thread (gemm_nt_tile, else gemm_nt_local),
 * or NULL when the backend runs tiles on the calling thread through gemm_nt. */
typedef void (*tile_fn)(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                        const float *a, size_t lda, const float *b, size_t ldb, float *c,
                        size_t ldc);
static tile_fn tile_kernel(const lm_backend *be)
{
    if (be->pool == NULL)
        return NULL;
    return be->vt->gemm_nt_tile != NULL ? be->vt->gemm_nt_tile : be->vt->gemm_nt_local;
}

/* Slots: one per pool thread for a backend that runs tiles there, else one. */
static uint32_t slots_of(const lm_backend *be)
{
    return tile_kernel(be) != NULL ? (uint32_t)be->n_threads : 1u;
}

size_t lm_wtile_bytes(uint32_t k_max, uint32_t slots)
{
    return (size_t)slots * slot_floats(k_max) * sizeof(float);
}

int lm_backend_reserve_wtiles(lm_backend *be, uint32_t k_max, lm_err *err)
{
    const size_t per = slot_floats(k_max);
    const uint32_t slots = slots_of(be);
    if (be->wtile != NULL && be->wtile_floats >= per && be->wtile_slots >= slots)
        return LM_OK;
    float *t = aligned_alloc(64, (size_t)slots * per * sizeof(float));
    if (t == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "backend %s: cannot allocate %zu bytes of weight tiles",
                       be->vt->name, (size_t)slots * per * sizeof(float));
    free(be->wtile);
    be->wtile = t;
    be->wtile_floats = per;
    be->wtile_slots = slots;
    return LM_OK;
}

/* The tiles of up to LM_NT_BATCH_MAX products sharing A, numbered one after the other
 * (product i's are [first[i], first[i + 1])), claimed from one counter. */
typedef struct tile_job {
    lm_backend *be;
    uint32_t m, k;
    float alpha;
    const float *a; /* [m][lda] */
    size_t lda;
    const lm_nt_part *p;
    uint32_t rows[LM_NT_BATCH_MAX];  /* rows of B per tile */
    uint32_t width[LM_NT_BATCH_MAX]; /* floats of a decoded row */
    uint32_t off[LM_NT_BATCH_MAX];   /* column col0 within the decoded row */
    uint32_t first[LM_NT_BATCH_MAX + 1];
    tile_fn local;                   /* the pool threads' kernel, or NULL: gemm_nt */
    atomic_uint next;
} tile_job;

/* Decodes rows [j0, j0 + t) of q's B (k columns from col0) into tile [t][width]. */
static void decode_tile(float *tile, const lm_nt_blocks *q, uint32_t j0, uint32_t t,
                        uint32_t k, uint32_t width)
{
    const lm_to_f32_fn fn = lm_type_to_f32(q->type);
    const uint32_t be = (uint32_t)lm_tensor_type_block_elems((lm_tensor_type)q->type);
    const size_t bb = lm_tensor_type_block_bytes((lm_tensor_type)q->type);
    if (k == 0)
        return;
    const uint8_t *src = q->data + (size_t)j0 * q->row_bytes + (size_t)(q->col0 / be) * bb;
    for (uint32_t r = 0; r < t; ++r)
        fn(src + (size_t)r * q->row_bytes, tile + (size_t)r * width, width / be);
}

static void run_tile(tile_job *j, uint32_t tile, float *scratch)
{
    uint32_t i = 0;
    while (tile >= j->first[i + 1])
        ++i;
    const lm_nt_part *p = &j->p[i];
    const uint32_t j0 = (tile - j->first[i]) * j->rows[i];
    const uint32_t t = p->n - j0 < j->rows[i] ? p->n - j0 : j->rows[i];
    decode_tile(scratch, &p->bq, j0, t, j->k, j->width[i]);
    const float *b = scratch + j->off[i];
    if (j->local != NULL)
        j->local(j->be, j->m, t, j->k, j->alpha, j->a, j->lda, b, j->width[i], p->c + j0,
                 p->ldc);
    else
        j->be->vt->gemm_nt(j->be, j->m, t, j->k, j->alpha, j->a, j->lda, b, j->width[i],
                           p->c + j0, p->ldc);
}

/* A pool part: slot `begin` of the scratch, tiles claimed until none is left. */
static void tiles_on_thread(void *arg, uint32_t begin, uint32_t end)
{
    (void)end;
    tile_job *j = arg;
    float *scratch = j->be->wtile + (size_t)begin * j->be->wtile_floats;
    const uint32_t total = j->first[LM_NT_BATCH_MAX];
    for (uint32_t t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed); t < total;
         t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed))
        run_tile(j, t, scratch);
}

void lm_gemm_nt_blocks(lm_backend *be, uint32_t m, uint32_t k, float alpha, const float *a,
                       size_t lda, const lm_nt_part *p, uint32_t count)
{
    LM_ASSERT(count <= LM_NT_BATCH_MAX && be->wtile != NULL);
    const uint32_t slots = slots_of(be) < be->wtile_slots ? slots_of(be) : be->wtile_slots;
    tile_job j = {.be = be, .m = m, .k = k, .alpha = alpha, .a = a, .lda = lda, .p = p,
                  .local = slots > 1 ? tile_kernel(be) : NULL};
    uint64_t n_all = 0;
    for (uint32_t i = 0; i < count; ++i)
        n_all += p[i].n;
    const uint32_t fair = (uint32_t)((n_all + 4u * slots - 1) / (4u * slots));
    j.first[0] = 0;
    for (uint32_t i = 0; i < LM_NT_BATCH_MAX; ++i) {
        uint32_t tiles = 0;
        if (i < count && p[i].n > 0 && m > 0) {
            const uint32_t be_el =
                (uint32_t)lm_tensor_type_block_elems((lm_tensor_type)p[i].bq.type);
            const uint32_t b0 = p[i].bq.col0 / be_el;
            const uint32_t b1 = (p[i].bq.col0 + k + be_el - 1) / be_el;
            j.off[i] = p[i].bq.col0 - b0 * be_el;
            j.width[i] = (b1 - b0) * be_el;
            LM_ASSERT(j.width[i] <= be->wtile_floats);
            uint32_t t = (uint32_t)(be->wtile_floats / (j.width[i] ? j.width[i] : 1u));
            /* smaller tiles for balance only where no bit depends on the tile's shape (a
             * chunk-invariant backend's output depends on its rows of A and B alone); blas's
             * tiles stay the same at every thread count, so its bits do too */
            if (slots > 1 && fair < t && (be->flags & LM_BE_CHUNK_INVARIANT))
                t = fair;
            if (t >= 8)
                t -= t % 8;
            j.rows[i] = t ? t : 1;
            tiles = (p[i].n + j.rows[i] - 1) / j.rows[i];
        }
        j.first[i + 1] = j.first[i] + tiles;
    }
    atomic_init(&j.next, 0);
    const double macs = (double)m * (double)n_all * k;
    lm_pool *pool = slots > 1 && macs >= LM_POOL_MIN_MACS ? be->pool : NULL;
    if (j.local != NULL && be->vt->tiles_begin != NULL)
        be->vt->tiles_begin(be);
    lm_pool_for(pool, slots, 1, tiles_on_thread, &j);
}
