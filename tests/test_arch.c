/* test_arch.c — architectures checked against llama.cpp on models kvdrift writes itself:
 * synth:qwen3moe loads with the routing its row fixes, judged against llama.cpp's logits of
 * the same file (tests/data/dumps/llama.cpp-synth-qwen3moe-f32kv) it is NOISE under the f32
 * profile, and the same judge with the routing's renormalisation left out fails; files whose
 * keys ask for a variant the row does not compute are refused with one line. */
#include "commands.h"
#include "dump.h"
#include "fixtures.h"
#include "judge_run.h"
#include "kvd_gguf.h"
#include "synth.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DUMPS "tests/data/dumps/"

/* The 27 prompt tokens of the qwen3moe dump: BOS + kvdrift's tokenization of "Once upon a
 * time, there was a little girl named Lily. She loved to play outside in the park with her
 * friends." with synth's vocabulary. */
static const int32_t prompt[27] = {1,   334, 338, 339, 343, 287, 347, 350, 339,
                                   356, 360, 365, 369, 286, 372, 376, 377, 381,
                                   388, 390, 345, 393, 437, 419, 443, 278, 286};

/* synth:qwen3moe's configuration as loaded: qwen3 attention, every layer 16 experts of 48,
 * top-4, softmax renormalised (gating 1) although the file carries no routing key. */
static void test_arch_qwen3moe_loads(void)
{
    lm_model *m = tf_synth_load("qwen3moe", 0);
    CU_ASSERT_STRING_EQUAL(m->hp.arch, "qwen3moe");
    CU_ASSERT(m->hp.qk_norm);
    CU_ASSERT_EQUAL(m->hp.rope_type, LM_ROPE_NEOX);
    CU_ASSERT_EQUAL(m->hp.n_expert, 16);
    CU_ASSERT_EQUAL(m->hp.n_expert_used, 4);
    CU_ASSERT_EQUAL(m->hp.n_ff_exp, 48);
    CU_ASSERT_EQUAL(m->hp.moe_gating, 1);
    for (uint32_t l = 0; l < m->hp.n_layer; ++l) {
        const lm_layer *L = &m->layers[l];
        CU_ASSERT(L->ffn_gate_inp != NULL && L->ffn_gate_exps != NULL && L->w_gate == NULL);
        CU_ASSERT(L->attn_q_norm != NULL && L->attn_k_norm != NULL);
    }
    lm_model_free(m);
}

/* A header-only qwen3moe file (no tensors: the loader reads the keys first) with the keys of
 * a small model plus extra[n_extra] set by the caller's writer calls. */
typedef int (*extra_fn)(lm_gguf_writer *w, lm_err *err);

static const char *header_file(const char *name, bool experts, extra_fn extra)
{
    lm_gguf_writer *w = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_create(&w, &err), LM_OK);
    int rc = lm_gguf_w_str(w, "general.architecture", "qwen3moe", &err);
    static const struct { const char *k; uint32_t v; } keys[] = {
        {"qwen3moe.context_length", 2048}, {"qwen3moe.embedding_length", 64},
        {"qwen3moe.block_count", 1},       {"qwen3moe.feed_forward_length", 192},
        {"qwen3moe.attention.head_count", 8}, {"qwen3moe.attention.head_count_kv", 4},
        {"qwen3moe.expert_count", 16},     {"qwen3moe.expert_used_count", 4},
    };
    for (size_t i = 0; rc == LM_OK && i < (experts ? 8u : 6u); ++i)
        rc = lm_gguf_w_u32(w, keys[i].k, keys[i].v, &err);
    if (rc == LM_OK && extra != NULL)
        rc = extra(w, &err);
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s.gguf", tu_tmpdir(), name);
    if (rc == LM_OK)
        rc = lm_gguf_writer_save(w, path, &err);
    lm_gguf_writer_free(w);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    return path;
}

static int no_norm(lm_gguf_writer *w, lm_err *err)
{
    return lm_gguf_w_bool(w, "qwen3moe.expert_weights_norm", false, err);
}
static int gating_sigmoid(lm_gguf_writer *w, lm_err *err)
{
    return lm_gguf_w_u32(w, "qwen3moe.expert_gating_func", 2, err);
}
static int shared_expert(lm_gguf_writer *w, lm_err *err)
{
    return lm_gguf_w_u32(w, "qwen3moe.expert_shared_count", 1, err);
}
static int scaled(lm_gguf_writer *w, lm_err *err)
{
    return lm_gguf_w_f32(w, "qwen3moe.expert_weights_scale", 2.5f, err);
}
static int grouped(lm_gguf_writer *w, lm_err *err)
{
    return lm_gguf_w_u32(w, "qwen3moe.expert_group_count", 4, err);
}

/* Keys asking for routing the qwen3moe row does not compute: refused with one line naming the
 * key (LM_E_UNSUPPORTED, exit 2 from a command); no expert_count: LM_E_INPUT; the same file
 * with only the row's own keys gets past the keys (to the first missing tensor). */
static void test_arch_qwen3moe_refuses_other_routing(void)
{
    static const struct { const char *name; bool experts; extra_fn f; int rc; const char *msg; }
    cases[] = {
        {"q3m-no-norm", true, no_norm, LM_E_UNSUPPORTED, "expert_weights_norm false is not qwen3moe's routing"},
        {"q3m-gating2", true, gating_sigmoid, LM_E_UNSUPPORTED, "expert_gating_func 2 with"},
        {"q3m-shared", true, shared_expert, LM_E_UNSUPPORTED, "expert_shared_count 1"},
        {"q3m-scaled", true, scaled, LM_E_UNSUPPORTED, "expert_weights_scale 2.5 is not supported"},
        {"q3m-grouped", true, grouped, LM_E_UNSUPPORTED, "expert_group_count 4"},
        {"q3m-dense", false, NULL, LM_E_INPUT, "missing metadata key 'qwen3moe.expert_count'"},
        {"q3m-plain", true, NULL, LM_E_INPUT, "missing tensor 'token_embd.weight'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const char *path = header_file(cases[i].name, cases[i].experts, cases[i].f);
        lm_model *m = NULL;
        lm_err err = {0};
        CU_ASSERT_EQUAL(lm_model_load(&m, path, &err), cases[i].rc);
        CU_ASSERT_PTR_NULL(m);
        if (strstr(err.msg, cases[i].msg) == NULL)
            fprintf(stderr, "\n  %s: '%s' lacks '%s'\n", cases[i].name, err.msg, cases[i].msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, cases[i].msg));
        CU_ASSERT_PTR_NULL(strchr(err.msg, '\n'));
    }
    char out[4096];
    char *argv[] = {"run", (char *)header_file("q3m-no-norm", true, no_norm), "-p", "hi", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_run, 4, argv, out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "expert_weights_norm false"));
}

static hx_report *judge(const lm_model *m, hx_dump *d, const char *cache)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", tu_tmpdir(), cache);
    const char *prof[] = {"f32"};
    hx_judge_params p = {.model = m, .prompt = prompt, .n_prompt = 27, .dumps = &d,
                         .n_dumps = 1, .profiles = prof, .n_profiles = 1, .cache_dir = dir,
                         .ref_threads = 1, .quiet = true};
    hx_report *r = NULL;
    lm_err err = {0};
    int rc = hx_judge_run_all(&r, &p, &err);
    if (rc != LM_OK)
        fprintf(stderr, "judge: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    return r;
}

/* llama.cpp's logits of synth:qwen3moe (27 positions, F32 KV cache, flash attention off) are
 * NOISE under the f32 profile: every position's error against the MPFR reference is within
 * the f32 envelope E (measured by the stochastic-rounding ensemble, safety factor 2), so err/E
 * <= 1 (measured 0.29). Both engines round float32 in different orders (ggml's blocked dot
 * products and softmax), which is exactly what E bounds; a different routing rule is not:
 * the same judge with the top-k weights left unrenormalised (moe_gating 2, in the engine's
 * envelope runs and in the reference alike) moves every logit by far more than E and fails. */
static void test_arch_qwen3moe_judge_llamacpp(void)
{
    lm_model *m = tf_synth_load("qwen3moe", 0);
    hx_dump *d = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_dump_load(&d, DUMPS "llama.cpp-synth-qwen3moe-f32kv", m, m->path,
                                       &err), LM_OK);
    hx_report *r = judge(m, d, "arch-judge-clean");
    const hx_config_report *c = &r->configs[r->dumps[0].first_config];
    printf("\n  qwen3moe vs llama.cpp: %s err/E %.3g", hx_class_name(c->cls), c->worst_ratio);
    CU_ASSERT(c->cls == HX_NOISE || c->cls == HX_EXACT);
    CU_ASSERT(c->worst_ratio <= 1.0);
    CU_ASSERT_EQUAL(hx_report_exit_code(r, false), 0);
    hx_report_free(r);

    /* the defect: routing weights not renormalised; the path is cleared so that the
     * reference does not re-read the (correct) routing from the file, and the cache is
     * another folder so that nothing computed for the correct model is reused */
    char *path = m->path;
    m->path = NULL;
    m->hp.moe_gating = 2;
    r = judge(m, d, "arch-judge-defect");
    c = &r->configs[r->dumps[0].first_config];
    printf("; not renormalised: %s err/E %.3g\n", hx_class_name(c->cls), c->worst_ratio);
    CU_ASSERT(hx_class_fails(c->cls));
    CU_ASSERT(c->worst_ratio > 10.0);
    hx_report_free(r);
    m->path = path;
    hx_dump_free(d);
    lm_model_free(m);
}

void test_arch_register(void)
{
    CU_pSuite s = CU_add_suite("arch", NULL, NULL);
    CU_add_test(s, "test_arch_qwen3moe_loads", test_arch_qwen3moe_loads);
    CU_add_test(s, "test_arch_qwen3moe_refuses_other_routing",
                test_arch_qwen3moe_refuses_other_routing);
    CU_add_test(s, "test_arch_qwen3moe_judge_llamacpp", test_arch_qwen3moe_judge_llamacpp);
}
