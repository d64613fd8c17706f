/* test_drive.c — the one engine driver (harness/run/drive.c): a key a path does not honour is
 * refused with one line, the schedule is the CONFIG's (chunks of step, the two turns of turn=D),
 * and `trace` and `compare` of two configurations that differ in one CONFIG key agree on whether
 * the bits differ, for every key a plain run has. Runs on the synthetic "tiny" model. */
#include "kvd_engine.h"
#include "model/capture.h"
#include "model/config.h"
#include "fixtures.h"
#include "run/drive.h"
#include "run/runner.h"
#include "run/trace.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lm_model *tiny(void)
{
    return tf_synth_load("tiny", 7);
}

static hx_config parse(const char *s)
{
    hx_config c;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, s, &err), LM_OK);
    return c;
}

static void test_drive_keys_named(void)
{
    CU_ASSERT_EQUAL(hx_config_keys(&(hx_config){.backend = "naive"}), 0u);
    const struct {
        const char *cfg;
        unsigned key;
    } cases[] = {
        {"naive:step=3", HX_KEY_STEP},          {"naive:step=full:threads=2", HX_KEY_THREADS},
        {"naive:step=full:attn=stream", HX_KEY_ATTN}, {"naive:step=full:rot=8/2", HX_KEY_ROT},
        {"naive:step=full:profile=bf16", HX_KEY_PROFILE}, {"naive:step=4:turn=2", HX_KEY_TURN | HX_KEY_STEP},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        hx_config c = parse(cases[i].cfg);
        CU_ASSERT_EQUAL(hx_config_keys(&c), cases[i].key);
    }
    CU_ASSERT_STRING_EQUAL(hx_config_key_name(HX_KEY_ROT), "rot");
    CU_ASSERT_STRING_EQUAL(hx_config_key_name(HX_KEY_TURN), "turn");
}

/* A key outside the honoured set is refused with one line naming it and the path. */
static void test_drive_refuses_unhonoured_key(void)
{
    lm_err err = {0};
    hx_config c = parse("naive:step=4:rot=8/2");
    CU_ASSERT_EQUAL(hx_drive_check(&c, HX_KEYS_PLAIN, "trace", &err), LM_OK);
    CU_ASSERT_EQUAL(hx_drive_check(&c, HX_KEYS_PLAIN & ~HX_KEY_ROT, "forced run", &err),
                    LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "forced run: CONFIG key rot="));
    CU_ASSERT_PTR_NULL(strchr(err.msg, '\n'));
    lm_model *m = tiny();
    lm_err err2 = {0};
    hx_drive *d = (hx_drive *)&err2; /* must come back NULL */
    hx_config t = parse("naive:step=4:turn=2");
    CU_ASSERT_EQUAL(hx_drive_open(&d, m, &t, 32, HX_KEYS_ALL & ~HX_KEY_TURN, "speculative",
                                  &err2), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_PTR_NOT_NULL(strstr(err2.msg, "speculative: CONFIG key turn="));
    lm_model_free(m);
}

typedef struct calls {
    uint32_t pos0[64], n[64];
    size_t k;
} calls;

static int record(void *user, const lm_ctx *ctx, const hx_chunk *ch, lm_err *err)
{
    (void)ctx;
    (void)err;
    calls *c = user;
    if (c->k < 64) {
        c->pos0[c->k] = ch->pos0;
        c->n[c->k++] = ch->n;
    }
    return LM_OK;
}

/* Feeds tok[13] under cfg_s on a fresh drive (32 positions) and checks its calls against
 * want_pos0/want_n [n_want] and its final row, bit for bit, against lm_prefill's of the same
 * tokens in chunks of ref_step on the same (reset) context: naive is chunk-invariant. Returns
 * the open drive (the caller closes it). */
static hx_drive *feed_checked(lm_model *m, const char *cfg_s, const int32_t *tok,
                              const uint32_t *want_pos0, const uint32_t *want_n, size_t n_want,
                              uint32_t ref_step)
{
    lm_err err = {0};
    hx_config c = parse(cfg_s);
    hx_drive *d = NULL;
    CU_ASSERT_EQUAL_FATAL(hx_drive_open(&d, m, &c, 32, HX_KEYS_PLAIN, "test", &err), LM_OK);
    const size_t nv = m->hp.n_vocab;
    float *fin = malloc(nv * sizeof *fin), *ref = malloc(nv * sizeof *ref);
    CU_ASSERT_FATAL(fin != NULL && ref != NULL);
    calls rec = {0};
    CU_ASSERT_EQUAL_FATAL(hx_drive_feed(d, tok, 13, HX_ROWS_FINAL, fin, record, &rec, &err),
                          LM_OK);
    CU_ASSERT_EQUAL_FATAL(rec.k, n_want);
    for (size_t i = 0; i < n_want; ++i)
        CU_ASSERT(rec.pos0[i] == want_pos0[i] && rec.n[i] == want_n[i]);
    CU_ASSERT_EQUAL(lm_ctx_n_past(hx_drive_ctx(d)), 13);
    lm_ctx_reset(hx_drive_ctx(d));
    CU_ASSERT_EQUAL_FATAL(lm_prefill(hx_drive_ctx(d), tok, 13, ref_step, ref, &err), LM_OK);
    CU_ASSERT_EQUAL(memcmp(fin, ref, nv * sizeof *fin), 0);
    free(fin);
    free(ref);
    return d;
}

/* step=3:turn=2 over 13 tokens: hx_turn_split's n1 = 6 in chunks of 3, 2 single tokens, n2 = 5
 * in chunks of 3; positions continue after what the context holds. The final row equals
 * lm_prefill's of the same chunks on a fresh context (naive is chunk-invariant: bitwise). */
static void test_drive_feed_schedule(void)
{
    lm_model *m = tiny();
    lm_err err = {0};
    int32_t tok[13];
    for (int i = 0; i < 13; ++i)
        tok[i] = (int32_t)((7 * i + 3) % (int)m->hp.n_vocab);
    uint32_t n1, dec, n2;
    hx_turn_split(13, 2, &n1, &dec, &n2);
    CU_ASSERT(n1 == 6 && dec == 2 && n2 == 5);
    const uint32_t want_pos0[] = {0, 3, 6, 7, 8, 11}, want_n[] = {3, 3, 1, 1, 3, 2};
    hx_drive *d = feed_checked(m, "naive:step=3:turn=2", tok, want_pos0, want_n, 6, 3);
    lm_ctx *ctx = hx_drive_ctx(d);
    lm_ctx_reset(ctx);
    CU_ASSERT_EQUAL_FATAL(hx_drive_feed(d, tok, 13, HX_ROWS_NONE, NULL, NULL, NULL, &err), LM_OK);
    /* A second feed continues at the next position. */
    calls rec = {0};
    CU_ASSERT_EQUAL_FATAL(hx_drive_feed(d, tok, 2, HX_ROWS_NONE, NULL, record, &rec, &err),
                          LM_OK);
    CU_ASSERT(rec.k == 1 && rec.pos0[0] == 13 && rec.n[0] == 2);
    /* Past the context: one line, nothing fed. */
    int32_t many[20] = {0};
    CU_ASSERT_EQUAL(hx_drive_feed(d, many, 20, HX_ROWS_NONE, NULL, NULL, NULL, &err),
                    LM_E_INPUT);
    CU_ASSERT_EQUAL(lm_ctx_n_past(ctx), 15);
    hx_drive_close(d);
    lm_model_free(m);
}

/* prefix=5/2:step=3 over 13 tokens: the earlier request's calls (2, 2, 1 tokens in a context
 * of its own), then the rest in chunks of 3 at positions 5.. of ours. naive is chunk-invariant,
 * so the final row equals one prefill's bit for bit: the adopted rows are the computed ones. */
static void test_drive_prefix_schedule(void)
{
    lm_model *m = tiny();
    lm_err err = {0};
    int32_t tok[13];
    for (int i = 0; i < 13; ++i)
        tok[i] = (int32_t)((5 * i + 2) % (int)m->hp.n_vocab);
    hx_config c = parse("naive:step=3:prefix=5/2");
    CU_ASSERT(c.prefix == 5 && c.prefix_step == 2);
    CU_ASSERT_EQUAL(hx_config_keys(&c), HX_KEY_STEP | HX_KEY_PREFIX);
    const uint32_t want_pos0[] = {0, 2, 4, 5, 8, 11}, want_n[] = {2, 2, 1, 3, 3, 2};
    hx_drive *d = feed_checked(m, "naive:step=3:prefix=5/2", tok, want_pos0, want_n, 6, 0);
    hx_drive *d2 = NULL;
    calls rec = {0};
    /* A prefix as long as the prompt reuses all but its last token. */
    hx_config all = parse("naive:step=full:prefix=40");
    CU_ASSERT_EQUAL_FATAL(hx_drive_open(&d2, m, &all, 32, HX_KEYS_PLAIN, "test", &err), LM_OK);
    rec.k = 0;
    CU_ASSERT_EQUAL_FATAL(hx_drive_feed(d2, tok, 13, HX_ROWS_NONE, NULL, record, &rec, &err),
                          LM_OK);
    CU_ASSERT(rec.k == 2 && rec.n[0] == 12 && rec.pos0[1] == 12 && rec.n[1] == 1);
    hx_drive_close(d);
    hx_drive_close(d2);
    lm_model_free(m);
}

/* lm_ctx_adopt_prefix refuses what it cannot hand over: a non-empty target, more rows than the
 * source holds, a rotating cache on either side; and the grammar refuses prefix with rot. */
static void test_drive_prefix_refusals(void)
{
    lm_model *m = tiny();
    lm_err err = {0};
    const lm_ctx_params plain = {.backend = "naive", .n_ctx = 16};
    const lm_ctx_params rot = {.backend = "naive", .n_ctx = 16, .rot_max_size = 8, .rot_keep = 2};
    lm_ctx *a = NULL, *b = NULL, *r = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&a, m, &plain, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&b, m, &plain, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&r, m, &rot, &err), LM_OK);
    const int32_t tok[6] = {1, 2, 3, 4, 5, 6};
    CU_ASSERT_EQUAL_FATAL(lm_forward(a, tok, 6, LM_LOGITS_NONE, NULL, &err), LM_OK);
    lm_err e1 = {0}, e2 = {0}, e3 = {0};
    CU_ASSERT_EQUAL(lm_ctx_adopt_prefix(b, a, 7, &e1), LM_E_INPUT);
    CU_ASSERT_EQUAL(lm_ctx_adopt_prefix(r, a, 4, &e2), LM_E_INPUT);
    CU_ASSERT_EQUAL(lm_ctx_adopt_prefix(b, a, 4, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_ctx_n_past(b), 4);
    CU_ASSERT_EQUAL(lm_ctx_adopt_prefix(b, a, 4, &e3), LM_E_INPUT); /* b is not empty now */
    hx_config c;
    lm_err e4 = {0};
    CU_ASSERT_EQUAL(hx_config_parse(&c, "naive:step=4:rot=8/2:prefix=4", &e4), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e4.msg, "prefix= needs the plain cache"));
    /* batch and tp: their limits and words, and the canonical order */
    static const char *const bad[] = {"det:tp=3/tree", "det:tp=1/tree", "det:tp=9",
                                      "det:tp=3/fixed", "det:tp=2/ring",
                                      "det:batch=1/decode", "det:batch=65", "det:batch=4/prefill",
                                      "det:tp=0x2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        lm_err e = {0};
        CU_ASSERT_EQUAL(hx_config_parse(&c, bad[i], &e), LM_E_INPUT);
    }
    char s[HX_CONFIG_STR_MAX];
    c = parse("det:tp=4/tree:batch=4/decode:step=8:prefix=5");
    hx_config_format(s, sizeof s, &c);
    CU_ASSERT_STRING_EQUAL(s, "det:step=8:prefix=5:batch=4/decode:tp=4/tree");
    c = parse("det:tp=1:batch=1");
    CU_ASSERT(c.tp == 0 && c.batch == 0); /* 1 is the default: alone, one device */
    c = parse("blas:prefix=7/full:step=2");
    hx_config_format(s, sizeof s, &c);
    CU_ASSERT_STRING_EQUAL(s, "blas:step=2:prefix=7/full");
    hx_config back = parse(s);
    CU_ASSERT(hx_config_equal(&back, &c));
    lm_ctx_free(a);
    lm_ctx_free(b);
    lm_ctx_free(r);
    lm_model_free(m);
}

static void capture_hash(uint8_t h[16], const lm_model *m, const char *cfg_s,
                         const int32_t *prompt, uint32_t n_prompt)
{
    lm_err err = {0};
    hx_config cfg = parse(cfg_s);
    hx_run_request rq = {.prompt = prompt, .n_prompt = n_prompt, .n_gen = 4, .time_once = true};
    hx_capture *x = NULL;
    hx_run_stats st;
    CU_ASSERT_EQUAL_FATAL(hx_run_capture(&x, &st, m, &cfg, &rq, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_capture_hash(h, x, &err), LM_OK);
    hx_capture_free(x);
}

/* The fixed reduction is a tree fixed by k alone: det's and naive's bits (K/V, tokens, logits)
 * are the same at tp 1, 2, 4 and 8, and on one device with it; the ring order is another
 * (tp=2 differs from one device). blas is printed: its column shards change its shapes. */
static void test_drive_tp_fixed_invariant(void)
{
    lm_model *m = tiny();
    int32_t prompt[20];
    for (int i = 0; i < 20; ++i)
        prompt[i] = (int32_t)((11 * i + 3) % (int)m->hp.n_vocab);
    const char *backends[] = {"det", "naive", "blas"};
    static const char *const tps[] = {"1/fixed", "2/fixed", "4/fixed", "8/fixed"};
    for (size_t b = 0; b < 3; ++b) {
        uint8_t h0[16], h[16], plain[16], ring[16];
        char s[96];
        snprintf(s, sizeof s, "%s:step=4:tp=%s", backends[b], tps[0]);
        capture_hash(h0, m, s, prompt, 20);
        bool all_same = true;
        for (size_t t = 1; t < 4; ++t) {
            snprintf(s, sizeof s, "%s:step=4:tp=%s", backends[b], tps[t]);
            capture_hash(h, m, s, prompt, 20);
            all_same = all_same && memcmp(h, h0, 16) == 0;
        }
        snprintf(s, sizeof s, "%s:step=4", backends[b]);
        capture_hash(plain, m, s, prompt, 20);
        snprintf(s, sizeof s, "%s:step=4:tp=2", backends[b]);
        capture_hash(ring, m, s, prompt, 20);
        fprintf(stderr, "\n  %s: tp 1,2,4,8 fixed %s; ring tp=2 %s one device", backends[b],
                all_same ? "bitwise equal" : "differ", memcmp(ring, plain, 16) ? "differs from"
                                                                              : "equals");
        if (b < 2) {
            CU_ASSERT(all_same);
            CU_ASSERT(memcmp(ring, plain, 16) != 0);
        }
    }
    fprintf(stderr, "\n  ");
    lm_model_free(m);
}

/* Whether `compare` sees other bits: the two captures' hashes (K/V, tokens, forced logits). */
static bool compare_differs(const lm_model *m, const hx_config *a, const hx_config *b,
                            const int32_t *prompt, uint32_t n_prompt, uint32_t n_gen)
{
    lm_err err = {0};
    hx_run_request rq = {.prompt = prompt, .n_prompt = n_prompt, .n_gen = n_gen,
                         .time_once = true};
    hx_capture *xa = NULL, *xb = NULL;
    hx_run_stats st;
    CU_ASSERT_EQUAL_FATAL(hx_run_capture(&xa, &st, m, a, &rq, &err), LM_OK);
    rq.forced = xa->tokens + n_prompt; /* A's greedy path, as compare feeds both */
    rq.n_forced = n_gen;
    hx_capture *fa = NULL;
    CU_ASSERT_EQUAL_FATAL(hx_run_capture(&fa, &st, m, a, &rq, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_run_capture(&xb, &st, m, b, &rq, &err), LM_OK);
    uint8_t ha[16], hb[16];
    CU_ASSERT_EQUAL_FATAL(hx_capture_hash(ha, fa, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_capture_hash(hb, xb, &err), LM_OK);
    hx_capture_free(xa);
    hx_capture_free(fa);
    hx_capture_free(xb);
    return memcmp(ha, hb, 16) != 0;
}

static bool trace_differs(const lm_model *m, const hx_config *a, const hx_config *b,
                          const int32_t *prompt, uint32_t n_prompt, uint32_t n_gen)
{
    lm_err err = {0};
    hx_trace_params p = {.model = m, .prompt = prompt, .n_prompt = n_prompt, .n_gen = n_gen,
                         .a = *a, .b = *b};
    hx_trace_result *r = NULL;
    CU_ASSERT_EQUAL_FATAL(hx_trace_run(&r, &p, &err), LM_OK);
    const bool differs = r->first_diff >= 0;
    hx_trace_result_free(r);
    return differs;
}

/* For every CONFIG key of a plain run, a pair that differs only in that key: trace and compare
 * agree on whether the bits differ. attn, rot, profile, turn, prefix, batch and tp must differ (each
 * changes what or how the engine computes on this model and prompt), so a path that drops one
 * of them fails here. */
static void test_drive_trace_agrees_with_compare(void)
{
    lm_model *m = tiny();
    int32_t prompt[20];
    for (int i = 0; i < 20; ++i)
        prompt[i] = (int32_t)((13 * i + 5) % (int)m->hp.n_vocab);
    const struct {
        const char *key, *a, *b;
        bool must_differ;
    } pairs[] = {
        {"backend", "naive:step=full", "det:step=full", false},
        {"step", "blas:step=1", "blas:step=full", false},
        {"threads", "det:step=4:threads=1", "det:step=4:threads=2", false},
        {"attn", "naive:step=full:attn=dense", "naive:step=full:attn=stream", true},
        {"rot", "naive:step=4", "naive:step=4:rot=8/2", true},
        {"profile", "naive:step=full", "naive:step=full:profile=bf16", true},
        {"turn", "blas:step=4", "blas:step=4:turn=3", true},
        {"prefix", "blas:step=full", "blas:step=full:prefix=6/1", true},
        {"batch", "blas:step=4", "blas:step=4:batch=4", true},
        {"batch, decode", "blas:step=4", "blas:step=4:batch=4/decode", true},
        {"tp", "naive:step=4", "naive:step=4:tp=4", true},
        {"tp, tree", "det:step=4:tp=4", "det:step=4:tp=4/tree", true},
        {"tp, fixed", "det:step=4:tp=4", "det:step=4:tp=4/fixed", true},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; ++i) {
        hx_config a = parse(pairs[i].a), b = parse(pairs[i].b);
        const bool c = compare_differs(m, &a, &b, prompt, 20, 6);
        const bool t = trace_differs(m, &a, &b, prompt, 20, 6);
        if (c != t || (pairs[i].must_differ && !c))
            fprintf(stderr, "\n  key %s: %s vs %s: compare %s, trace %s\n", pairs[i].key,
                    pairs[i].a, pairs[i].b, c ? "differs" : "identical",
                    t ? "differs" : "identical");
        CU_ASSERT_EQUAL(c, t);
        if (pairs[i].must_differ)
            CU_ASSERT(c);
    }
    lm_model_free(m);
}

void test_drive_register(void)
{
    CU_pSuite s = CU_add_suite("drive", NULL, NULL);
    CU_add_test(s, "test_drive_keys_named", test_drive_keys_named);
    CU_add_test(s, "test_drive_refuses_unhonoured_key", test_drive_refuses_unhonoured_key);
    CU_add_test(s, "test_drive_feed_schedule", test_drive_feed_schedule);
    CU_add_test(s, "test_drive_prefix_schedule", test_drive_prefix_schedule);
    CU_add_test(s, "test_drive_prefix_refusals", test_drive_prefix_refusals);
    CU_add_test(s, "test_drive_tp_fixed_invariant", test_drive_tp_fixed_invariant);
    CU_add_test(s, "test_drive_trace_agrees_with_compare", test_drive_trace_agrees_with_compare);
}
