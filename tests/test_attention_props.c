/* test_attention_props.c — properties every attention implementation (dense, streaming,
 * masked dense) on every CPU backend must hold, whatever its block, tile or lane layout:
 * a key whose score exceeds every other visible score by far more than float's exp range
 * (200, while lm_expf(-88.8) is already 0) takes the whole probability, so each query that
 * sees it returns exactly that key's value row, at every key index (every lane of a max
 * reduction, every tail), and no query returns a non-finite value. A softmax whose max
 * misses one entry, or subtracts a max that is not the row's, overflows there. And a
 * non-finite value at a key a query cannot see never reaches that query. */
#include "../engine/attention.h"
#include "../engine/attention_stream.h"
#include "../engine/backend.h"
#include "kvd_engine.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HD = 8, NH = 2, NKV = 1, MAX_KV = 21 };

/* q [n][NH][HD]: component 0 of every head is 1, the rest 0. k [n_kv][NKV][HD]: small random
 * values, and key `big`'s component 0 is 200 (score 200 at scale 1). v random. */
static void fill(float *q, float *k, float *v, uint32_t n, uint32_t n_kv, uint32_t big,
                 uint64_t *st)
{
    for (uint32_t i = 0; i < n * NH * HD; ++i)
        q[i] = i % HD == 0 ? 1.0f : 0.0f;
    for (uint32_t i = 0; i < n_kv * NKV * HD; ++i) {
        k[i] = 0.5f * tu_rand_f32(st);
        v[i] = tu_rand_f32(st);
    }
    k[(size_t)big * NKV * HD] = 200.0f;
}

/* Query i (position pos0 + i) against out: the big key's value row when it is visible. */
static int check_out(const float *out, const float *v, uint32_t n, uint32_t pos0, uint32_t big,
                     const char *what, uint32_t n_kv)
{
    int bad = 0;
    for (uint32_t i = 0; i < n; ++i)
        for (uint32_t h = 0; h < NH; ++h) {
            const float *o = out + ((size_t)i * NH + h) * HD;
            for (uint32_t d = 0; d < HD; ++d) {
                const bool sees = pos0 + i >= big;
                const bool ok = sees ? o[d] == v[(size_t)big * NKV * HD + d] : isfinite(o[d]);
                if (!ok && bad++ == 0)
                    fprintf(stderr, "\n  %s: n_kv %u, big key %u, query %u head %u dim %u: %g\n",
                            what, n_kv, big, pos0 + i, h, d, (double)o[d]);
            }
        }
    return bad;
}

/* Scratch for the streaming (tiles of 4 keys) and the masked path, MAX_KV queries and keys. */
static size_t var_scratch_floats(void)
{
    const size_t masked = lm_attn_masked_scratch(MAX_KV, MAX_KV);
    const size_t stream = lm_attn_stream_scratch(HD, 4);
    return masked > stream ? masked : stream;
}

static void test_attention_props_dominant_key(void)
{
    const char *backends[3] = {"naive", "blas", "det"};
    uint64_t st = tu_seed();
    float q[MAX_KV * NH * HD], k[MAX_KV * NKV * HD], v[MAX_KV * NKV * HD], out[MAX_KV * NH * HD];
    const size_t var_floats = var_scratch_floats();
    float *var_scratch = malloc(var_floats * sizeof(float));
    CU_ASSERT_FATAL(var_scratch != NULL);
    int bad = 0;
    for (int b = 0; b < 3; ++b) {
        for (int threads = 1; threads <= 2; ++threads) {
            lm_backend *be = NULL;
            lm_err err = {0};
            CU_ASSERT_FATAL(lm_backend_create(&be, backends[b], threads, &err) == LM_OK);
            float *scores = malloc(lm_attention_dense_scratch(be, MAX_KV, MAX_KV) * sizeof(float));
            CU_ASSERT_FATAL(scores != NULL);
            for (uint32_t n_kv = 1; n_kv <= MAX_KV; ++n_kv)
                for (uint32_t big = 0; big < n_kv; ++big)
                    for (int chunk = 0; chunk < 2; ++chunk) {
                        /* decode: one query at the last position; prefill: every position */
                        const uint32_t n = chunk ? n_kv : 1, pos0 = n_kv - n;
                        fill(q, k, v, n, n_kv, big, &st);
                        const lm_attn_args a = {.n = n, .pos0 = pos0, .n_head = NH,
                                                .n_head_kv = NKV, .head_dim = HD, .scale = 1.0f,
                                                .q = q, .k = k, .v = v, .out = out,
                                                .scores = scores, .pool = be->pool};
                        lm_attention_dense(be, &a);
                        bad += check_out(out, v, n, pos0, big, backends[b], n_kv);
                        for (int impl = 0; impl < 2; ++impl) {
                            lm_attn_var_args va = {.n = n, .pos0 = pos0, .n_kv = n_kv,
                                                   .n_head = NH, .n_head_kv = NKV, .head_dim = HD,
                                                   .scale = 1.0f, .q = q, .k = k, .v = v,
                                                   .out = out, .tile = 4, .scratch = var_scratch,
                                                   .scratch_floats = var_floats};
                            if (impl == 0)
                                lm_attention_stream(be, &va);
                            else
                                lm_attention_masked(be, &va);
                            bad += check_out(out, v, n, pos0, big,
                                             impl == 0 ? "stream" : "masked", n_kv);
                        }
                    }
            free(scores);
            lm_backend_destroy(be);
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(var_scratch);
}

/* ---- a non-finite value behind the mask ---- */

enum { N_IMPL = 3 }; /* dense, stream, masked */
static const char *const impl_names[N_IMPL] = {"dense", "stream", "masked"};

/* Attention of queries at positions [pos0, n_kv) over keys [0, n_kv) with implementation impl
 * (dense: causal only, window 0), into out. */
static void attend(lm_backend *be, int impl, uint32_t n_kv, uint32_t pos0, uint32_t window,
                   const float *q, const float *k, const float *v, float *out, float *scores,
                   float *var_scratch, size_t var_floats)
{
    const uint32_t n = n_kv - pos0;
    if (impl == 0) {
        const lm_attn_args a = {.n = n, .pos0 = pos0, .n_head = NH, .n_head_kv = NKV,
                                .head_dim = HD, .scale = 1.0f, .q = q, .k = k, .v = v,
                                .out = out, .scores = scores, .pool = be->pool};
        lm_attention_dense(be, &a);
        return;
    }
    lm_attn_var_args va = {.n = n, .pos0 = pos0, .n_kv = n_kv, .window = window, .n_head = NH,
                           .n_head_kv = NKV, .head_dim = HD, .scale = 1.0f, .q = q, .k = k,
                           .v = v, .out = out, .tile = 4, .scratch = var_scratch,
                           .scratch_floats = var_floats};
    if (impl == 1)
        lm_attention_stream(be, &va);
    else
        lm_attention_masked(be, &va);
}

/* One component of key `bad`'s value row is NaN or +Inf. A query that sees that key returns a
 * non-finite value in that component; every other query returns what it returns when the row
 * is +0 (exactly on a chunk-invariant backend, whose products give a row the same bits alone
 * or among others; within 1e-5 elsewhere: a sum of at most MAX_KV products p v with
 * |p| <= 1 and |v| < 1, rounded in another order, differs by about MAX_KV * 2^-23 < 3e-6).
 * Without the mend, P = +0 times NaN or Inf puts NaN into the earlier queries of a block, a
 * tile or a window's union of keys. */
static void test_attention_props_nonfinite_value_hidden(void)
{
    const char *backends[4] = {"naive", "blas", "det", "naive-sr"};
    uint64_t st = tu_seed();
    float q[MAX_KV * NH * HD], k[MAX_KV * NKV * HD], v[MAX_KV * NKV * HD];
    float out[MAX_KV * NH * HD], ref[MAX_KV * NH * HD];
    const size_t var_floats = var_scratch_floats();
    float *var_scratch = malloc(var_floats * sizeof(float));
    CU_ASSERT_FATAL(var_scratch != NULL);
    int bad_rows = 0, checked = 0;
    for (int b = 0; b < 4; ++b)
        for (int threads = 1; threads <= 2; ++threads) {
            lm_backend *be = NULL;
            lm_err err = {0};
            CU_ASSERT_FATAL(lm_backend_create(&be, backends[b], threads, &err) == LM_OK);
            const bool exact = (be->flags & LM_BE_CHUNK_INVARIANT) != 0;
            float *scores = malloc(lm_attention_dense_scratch(be, MAX_KV, MAX_KV) * sizeof(float));
            CU_ASSERT_FATAL(scores != NULL);
            for (int impl = 0; impl < N_IMPL; ++impl)
                for (uint32_t window = 0; window <= (impl ? 3u : 0u); window += 3)
                    for (uint32_t n_kv = 2; n_kv <= MAX_KV; ++n_kv)
                        for (uint32_t bad = 0; bad < n_kv; ++bad) {
                            const uint32_t pos0 = (bad * 7u) % 3u == 0 ? 0 : n_kv / 3;
                            for (uint32_t i = 0; i < MAX_KV * NH * HD; ++i)
                                q[i] = tu_rand_f32(&st);
                            for (uint32_t i = 0; i < n_kv * NKV * HD; ++i) {
                                k[i] = tu_rand_f32(&st);
                                v[i] = tu_rand_f32(&st);
                            }
                            const uint32_t comp = bad % HD;
                            float *vb = v + (size_t)bad * NKV * HD;
                            memset(vb, 0, HD * sizeof *vb);
                            attend(be, impl, n_kv, pos0, window, q, k, v, ref, scores,
                                   var_scratch, var_floats);
                            vb[comp] = bad % 2 ? NAN : INFINITY;
                            attend(be, impl, n_kv, pos0, window, q, k, v, out, scores,
                                   var_scratch, var_floats);
                            for (uint32_t i = 0; i < n_kv - pos0; ++i)
                                for (uint32_t h = 0; h < NH; ++h) {
                                    const size_t at = ((size_t)i * NH + h) * HD;
                                    const bool sees = lm_attn_visible(pos0 + i, (int32_t)bad,
                                                                      window);
                                    bool ok = true;
                                    for (uint32_t d = 0; d < HD; ++d) {
                                        const float o = out[at + d], r = ref[at + d];
                                        if (sees)
                                            ok &= d != comp || !isfinite(o);
                                        else if (exact)
                                            ok &= memcmp(&o, &r, sizeof o) == 0;
                                        else
                                            ok &= fabsf(o - r) <= 1e-5f;
                                    }
                                    ++checked;
                                    if (!ok && bad_rows++ == 0)
                                        fprintf(stderr,
                                                "\n  %s %s window %u: n_kv %u, key %u %s, query "
                                                "%u head %u: %s\n",
                                                backends[b], impl_names[impl], window, n_kv, bad,
                                                bad % 2 ? "NaN" : "Inf", pos0 + i, h,
                                                sees ? "finite though it sees the key"
                                                     : "differs from the finite run");
                                }
                        }
            free(scores);
            lm_backend_destroy(be);
        }
    CU_ASSERT_EQUAL(bad_rows, 0);
    CU_ASSERT(checked > 10000);
    free(var_scratch);
}

void test_attention_props_register(void)
{
    CU_pSuite s = CU_add_suite("attention_props", NULL, NULL);
    CU_add_test(s, "test_attention_props_dominant_key", test_attention_props_dominant_key);
    CU_add_test(s, "test_attention_props_nonfinite_value_hidden",
                test_attention_props_nonfinite_value_hidden);
}
