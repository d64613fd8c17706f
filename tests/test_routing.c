/* test_routing.c — MoE routing capture and routing-flip classification (TIE vs real). */
#include "model/report.h"
#include "run/routing.h"
#include "run/sweep.h"
#include "fixtures.h"
#include "plan/synth.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_TOK 40u

static lm_model *load(const char *preset)
{
    char path[512];
    snprintf(path, sizeof path, "%s/routing-%s.gguf", tu_tmpdir(), preset);
    lm_err err = {0};
    lm_model *m = NULL;
    if (hx_synth_write(path, preset, 3, LM_TYPE_F32, &err) != LM_OK ||
        lm_model_load(&m, path, &err) != LM_OK)
        printf("\n  %s: %s\n", preset, err.msg);
    return m;
}

static void tokens(int32_t *t, uint32_t n, uint32_t n_vocab)
{
    uint64_t s = tu_seed() ^ 0x707u;
    for (uint32_t i = 0; i < n; ++i)
        t[i] = (int32_t)(3 + tu_rand_u64(&s) % (n_vocab - 3));
}

static hx_config cfg_of(const char *backend, uint32_t step)
{
    hx_config c = {.step = step, .threads = 1};
    snprintf(c.backend, sizeof c.backend, "%s", backend);
    return c;
}

static void test_routing_flips_classified(void)
{
    static const char *const presets[] = {"moe", "moe-32x4"};
    /* Router logits are O(1) sums of 64 float products: float32 rounding moves them by
     * ~1e-6; 1e-4 is the band inside which a flip is rounding (TIE), far wider than that
     * noise and far below a typical margin (~0.3). */
    const float tie_tol = 1e-4f;
    for (int p = 0; p < 2; ++p) {
        lm_model *m = load(presets[p]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        int32_t t[N_TOK];
        tokens(t, N_TOK, m->hp.n_vocab);
        hx_routing truth, other;
        lm_err err = {0};
        hx_config base = cfg_of("naive", 0);
        CU_ASSERT_FATAL(hx_routing_capture(&truth, m, &base, t, N_TOK, &err) == LM_OK);
        hx_routing_flips f[8];
        CU_ASSERT_FATAL(m->hp.n_layer <= 8);
        static const uint32_t steps[] = {1, 3, 7};
        uint32_t blas_flips = 0;
        float min_margin = INFINITY;
        for (int b = 0; b < 2; ++b)
            for (int s = 0; s < 3; ++s) {
                hx_config c = cfg_of(b ? "blas" : "naive", steps[s]);
                CU_ASSERT_FATAL(hx_routing_capture(&other, m, &c, t, N_TOK, &err) == LM_OK);
                CU_ASSERT_FATAL(hx_routing_compare(f, &truth, &other, tie_tol, &err) == LM_OK);
                for (uint32_t il = 0; il < m->hp.n_layer; ++il) {
                    if (b == 0) /* naive: chunk-size invariant, routing included */
                        CU_ASSERT_EQUAL(f[il].n_flip, 0);
                    CU_ASSERT_EQUAL(f[il].n_flip, f[il].n_tie); /* never a real flip */
                    CU_ASSERT(f[il].min_margin >= 0.0f);
                    blas_flips += b ? f[il].n_flip : 0;
                    min_margin = f[il].min_margin < min_margin ? f[il].min_margin : min_margin;
                }
                hx_routing_free(&other);
            }
        /* a real flip: layer 0 routed by layer 1's router */
        const lm_wt r0 = m->layers[0].ffn_gate_inp;
        m->layers[0].ffn_gate_inp = m->layers[1].ffn_gate_inp;
        CU_ASSERT_FATAL(hx_routing_capture(&other, m, &base, t, N_TOK, &err) == LM_OK);
        m->layers[0].ffn_gate_inp = r0;
        CU_ASSERT_FATAL(hx_routing_compare(f, &truth, &other, tie_tol, &err) == LM_OK);
        printf("\n  %s: blas steps 1,3,7 vs naive one chunk: %u routing flips (all TIE); "
               "smallest router margin %.3g", presets[p], blas_flips, (double)min_margin);
        printf("\n  %s: swapped router: layer 0 %u of %u positions flipped (%u TIE), first at %u",
               presets[p], f[0].n_flip, N_TOK, f[0].n_tie, f[0].first_pos);
        CU_ASSERT(f[0].n_flip > f[0].n_tie);
        CU_ASSERT(f[0].first_pos < N_TOK);
        hx_routing_free(&other);
        hx_routing_free(&truth);
        lm_model_free(m);
    }
    printf("\n");
}

/* The sweep's section: reference routing as the truth, a measured TIE band, no real flip for
 * legitimate configurations; the reference's routing equals the naive engine's here (margins
 * far above float rounding). */
static void test_routing_report_against_reference(void)
{
    lm_model *m = load("moe");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int32_t t[N_TOK];
    tokens(t, N_TOK, m->hp.n_vocab);
    hx_config cfg[2] = {cfg_of("naive", 0), cfg_of("blas", 3)};
    char path[512];
    snprintf(path, sizeof path, "%s/routing-report.txt", tu_tmpdir());
    FILE *f = fopen(path, "w+");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    lm_err err = {0};
    /* a report holding the two configurations gets the counts too (report.json/md) */
    hx_report *rep = NULL;
    hx_config_report *cr = NULL;
    CU_ASSERT_EQUAL_FATAL(hx_report_create(&rep, "routing", &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_report_add_config(rep, &cr, "naive:step=full", &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_report_add_config(rep, &cr, "blas:step=3", &err), LM_OK);
    rep->configs[1].routing_flips = 99; /* must be overwritten with the measured count */
    hx_routing_result rr;
    ref_model *rm = tf_ref_open(m);
    CU_ASSERT_EQUAL_FATAL(hx_routing_measure(&rr, m, rm, t, N_TOK, cfg, 2, 127, 8, 1, &err),
                          LM_OK);
    ref_model_free(rm);
    CU_ASSERT(rr.measured);
    CU_ASSERT_EQUAL(rr.members, 8u);
    CU_ASSERT(rr.members_sr); /* the reference's own float32 SR model implements MoE */
    CU_ASSERT(rr.tie_tol > 0.0f); /* the members' margins moved: a measured band */
    CU_ASSERT_EQUAL(rr.n_real, 0);
    hx_routing_to_report(rep, &rr, cfg);
    for (size_t i = 0; i < 2; ++i) {
        CU_ASSERT(rep->configs[i].routing_checked);
        CU_ASSERT_EQUAL(rep->configs[i].routing_flips, 0u);
        CU_ASSERT_EQUAL(rep->configs[i].routing_real, 0u);
        CU_ASSERT_EQUAL(rep->configs[i].routing_tie_band, rr.tie_tol); /* float32: its band */
    }
    hx_report_print_routing(f, rep, &rr);
    hx_routing_result_free(&rr);
    hx_report_free(rep);
    rewind(f);
    char buf[4096];
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    buf[got] = '\0';
    fclose(f);
    CU_ASSERT(strstr(buf, "MoE routing flips vs the reference") != NULL);
    CU_ASSERT(strstr(buf, "8 reference float32 SR runs") != NULL);
    CU_ASSERT(strstr(buf, "naive:step=full") != NULL && strstr(buf, "blas:step=3") != NULL);
    lm_model_free(m);
}

/* The TIE band's ensemble members are seeded configurations: each seed must reach the backend
 * in full (a 20-digit seed does not fit hx_config.backend), so two members with different seeds
 * route with different margins, and the same seed twice reproduces its bits. */
static void test_routing_ensemble_members_differ(void)
{
    char name[LM_BACKEND_NAME_MAX];
    const hx_config big = {.backend = "naive-sr", .sr_seed = 7743487051867518001ull};
    CU_ASSERT_STRING_EQUAL(hx_config_backend_name(name, sizeof name, &big),
                           "naive-sr:seed=7743487051867518001");
    const hx_config plain = {.backend = "naive", .sr_seed = 5};
    CU_ASSERT_STRING_EQUAL(hx_config_backend_name(name, sizeof name, &plain), "naive");
    lm_model *m = load("moe");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int32_t t[N_TOK];
    tokens(t, N_TOK, m->hp.n_vocab);
    hx_routing r[3];
    lm_err err = {0};
    const uint64_t seeds[3] = {7743487051867518001ull, 7743487051867518002ull,
                               7743487051867518001ull};
    for (int i = 0; i < 3; ++i) {
        const hx_config c = {.backend = "naive-sr", .threads = 1, .sr_seed = seeds[i]};
        CU_ASSERT_FATAL(hx_routing_capture(&r[i], m, &c, t, N_TOK, &err) == LM_OK);
    }
    const size_t nm = (size_t)r[0].n_layer * r[0].n_pos * sizeof *r[0].margin;
    CU_ASSERT_NOT_EQUAL(memcmp(r[0].margin, r[1].margin, nm), 0);
    CU_ASSERT_EQUAL(memcmp(r[0].margin, r[2].margin, nm), 0);
    for (int i = 0; i < 3; ++i)
        hx_routing_free(&r[i]);
    lm_model_free(m);
}

/* A configuration under a precision profile routes under that profile, and is judged with the
 * TIE band of its own rounding: bf16 (which rounds the router's weights and input) moves the
 * margins of the capture, its band measured from naive-sr runs under bf16 is wider than the
 * float32 band, every bf16 flip of the moe presets falls inside it, and the float32
 * configuration keeps the float32 band. */
static void test_routing_profile_band(void)
{
    static const char *const presets[] = {"moe", "moe-32x4"};
    for (int p = 0; p < 2; ++p) {
        lm_model *m = load(presets[p]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        int32_t t[N_TOK];
        tokens(t, N_TOK, m->hp.n_vocab);
        hx_config cfg[2] = {cfg_of("naive", 0), cfg_of("naive", 0)};
        snprintf(cfg[1].profile, sizeof cfg[1].profile, "bf16");
        lm_err err = {0};
        hx_routing f32, bf16;
        CU_ASSERT_FATAL(hx_routing_capture(&f32, m, &cfg[0], t, N_TOK, &err) == LM_OK);
        CU_ASSERT_FATAL(hx_routing_capture(&bf16, m, &cfg[1], t, N_TOK, &err) == LM_OK);
        const size_t nm = (size_t)f32.n_layer * f32.n_pos * sizeof *f32.margin;
        CU_ASSERT_NOT_EQUAL(memcmp(f32.margin, bf16.margin, nm), 0);
        hx_routing_free(&f32);
        hx_routing_free(&bf16);
        hx_routing_result rr;
        ref_model *rm = tf_ref_open(m);
        CU_ASSERT_EQUAL_FATAL(hx_routing_measure(&rr, m, rm, t, N_TOK, cfg, 2, 127, 8, 1, &err),
                              LM_OK);
        ref_model_free(rm);
        CU_ASSERT_EQUAL(rr.cfg_tol[0], rr.tie_tol);
        CU_ASSERT(rr.cfg_tol[1] > rr.tie_tol);
        CU_ASSERT_EQUAL(rr.n_real, 0u);
        printf("\n  %s: float32 band %.3g, bf16 band %.3g, bf16 flips %u (%u TIE)", presets[p],
               (double)rr.tie_tol, (double)rr.cfg_tol[1], rr.n_flip[1], rr.n_tie[1]);
        hx_routing_result_free(&rr);
        lm_model_free(m);
    }
    printf("\n");
}

/* Routing is a step of the sweep: its TIE band uses the sweep's own ensemble size, and the
 * counts land in the sweep's report without any further call. */
static void test_routing_sweep_step(void)
{
    lm_model *m = load("moe");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int32_t t[12];
    tokens(t, 12, m->hp.n_vocab);
    const hx_config cfg[2] = {cfg_of("naive", 0), cfg_of("naive", 5)};
    char cache[600];
    snprintf(cache, sizeof cache, "%s/routing-sweep-cache", tu_tmpdir());
    ref_model *rm = tf_ref_open(m);
    const hx_sweep_params p = {.model = m, .ref = rm, .prompt = t, .n_prompt = 12, .n_gen = 2,
                               .configs = cfg, .n_configs = 2, .ensemble = 9,
                               .cache_dir = cache, .ref_threads = 1, .quiet = true};
    hx_sweep_result *r = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_sweep_run_all(&r, &p, &err), LM_OK);
    CU_ASSERT(r->routing.measured);
    CU_ASSERT_EQUAL(r->routing.members, 9u);
    CU_ASSERT_EQUAL(r->routing.n_configs, 2u);
    for (size_t i = 0; i < 2; ++i)
        CU_ASSERT(r->report->configs[i].routing_checked);
    hx_sweep_result_free(r);
    lm_model_free(m);
    ref_model_free(rm);
}

static void test_routing_bad_input(void)
{
    lm_model *m = load("tiny");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int32_t t[4] = {1, 5, 6, 7};
    hx_routing r;
    lm_err err = {0};
    hx_config c = cfg_of("naive", 0);
    CU_ASSERT_EQUAL(hx_routing_capture(&r, m, &c, t, 4, &err), LM_E_INPUT);
    CU_ASSERT(strstr(err.msg, "mixture-of-experts") != NULL);
    lm_model_free(m);
    hx_routing a = {.n_layer = 2, .n_pos = 3, .k = 2}, b = {.n_layer = 2, .n_pos = 4, .k = 2};
    hx_routing_flips f[2];
    lm_err e2 = {0};
    CU_ASSERT_EQUAL(hx_routing_compare(f, &a, &b, 0.0f, &e2), LM_E_INPUT);
}

/* hx_routing_compare on hand-built captures (one routed layer, k = 2, 4 positions): expert
 * sets compare as sets (the same experts in another rank order are no flip); a flip counts as
 * a tie when the truth's margin is <= tie_tol, equality included; a dense layer is skipped. */
static void test_routing_compare_rules(void)
{
    uint32_t ts[2][4][2] = {{{1, 2}, {3, 0}, {5, 6}, {7, 4}}, {{0, 0}, {0, 0}, {0, 0}, {0, 0}}};
    uint32_t os[2][4][2] = {{{2, 1}, {3, 1}, {5, 7}, {7, 4}}, {{1, 1}, {1, 1}, {1, 1}, {1, 1}}};
    float tm[2][4] = {{0.5f, 0.25f, 0.125f, 0.0f}, {INFINITY, INFINITY, INFINITY, INFINITY}};
    float om[2][4] = {{0}};
    bool moe[2] = {true, false};
    const hx_routing truth = {.n_layer = 2, .n_pos = 4, .k = 2, .sel = &ts[0][0][0],
                              .margin = &tm[0][0], .moe = moe};
    const hx_routing other = {.n_layer = 2, .n_pos = 4, .k = 2, .sel = &os[0][0][0],
                              .margin = &om[0][0], .moe = moe};
    hx_routing_flips f[2];
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_routing_compare(f, &truth, &other, 0.25f, &err) == LM_OK);
    CU_ASSERT_EQUAL(f[0].n_flip, 2u);       /* positions 1 and 2; position 0 is a reordering */
    CU_ASSERT_EQUAL(f[0].n_tie, 2u);        /* margins 0.25 (== tie_tol) and 0.125 */
    CU_ASSERT_EQUAL(f[0].first_pos, 1u);
    CU_ASSERT_EQUAL(f[0].min_margin, 0.0f);
    CU_ASSERT_EQUAL(f[1].n_flip, 0u);       /* dense layer */
    CU_ASSERT_EQUAL(f[1].first_pos, UINT32_MAX);
    CU_ASSERT_FATAL(hx_routing_compare(f, &truth, &other, 0.2f, &err) == LM_OK);
    CU_ASSERT_EQUAL(f[0].n_tie, 1u);        /* only 0.125 */
}

void test_routing_register(void)
{
    CU_pSuite s = CU_add_suite("routing", NULL, NULL);
    CU_add_test(s, "test_routing_flips_classified", test_routing_flips_classified);
    CU_add_test(s, "test_routing_compare_rules", test_routing_compare_rules);
    CU_add_test(s, "test_routing_report_against_reference",
                test_routing_report_against_reference);
    CU_add_test(s, "test_routing_ensemble_members_differ", test_routing_ensemble_members_differ);
    CU_add_test(s, "test_routing_profile_band", test_routing_profile_band);
    CU_add_test(s, "test_routing_sweep_step", test_routing_sweep_step);
    CU_add_test(s, "test_routing_bad_input", test_routing_bad_input);
}
