/* test_model.c — llama model loading: real files, a synthetic round trip, shape errors. */
#include "kvd_model.h"
#include "plan/synth.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_model_stories260k_loads(void)
{
    const char *path = tu_model_path("stories260K.gguf");
    if (path == NULL)
        return;
    lm_err err = {0};
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    if (err.code)
        fprintf(stderr, "%s\n", err.msg);
    const lm_hparams *hp = &m->hp;
    CU_ASSERT_STRING_EQUAL(hp->arch, "llama");
    CU_ASSERT_EQUAL(hp->n_embd, 64);
    CU_ASSERT_EQUAL(hp->n_layer, 5);
    CU_ASSERT_EQUAL(hp->n_head, 8);
    CU_ASSERT_EQUAL(hp->n_head_kv, 4);
    CU_ASSERT_EQUAL(hp->head_dim, 8);
    CU_ASSERT_EQUAL(hp->n_rot, 8);
    CU_ASSERT_EQUAL(hp->n_ff, 172);
    CU_ASSERT_EQUAL(hp->n_vocab, 512);
    CU_ASSERT_EQUAL(hp->n_ctx_train, 2048);
    CU_ASSERT_EQUAL(hp->rms_eps, 1e-5f);       /* exact: the float stored in the file */
    CU_ASSERT_EQUAL(hp->rope_theta, 10000.0f); /* exact: the documented default */
    CU_ASSERT_EQUAL(hp->rope_type, LM_ROPE_NORM);
    CU_ASSERT_FALSE(hp->tied_output); /* stories260K stores output.weight separately */
    CU_ASSERT_PTR_NOT_NULL(m->vocab);
    CU_ASSERT_PTR_NOT_NULL(m->layers[4].w_down.f);
    CU_ASSERT_PTR_NULL(m->layers[0].bq);
    /* Weights are F32 in the file: read in place (no blocks to decode), the file's bytes. */
    CU_ASSERT_PTR_NULL(m->layers[3].w_down.q);
    lm_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, path, &err), LM_OK);
    const lm_gguf_tensor *t = lm_gguf_tensor_find(g, "blk.3.ffn_down.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(memcmp(t->data, m->layers[3].w_down.f, (size_t)t->nbytes), 0);
    t = lm_gguf_tensor_find(g, "output.weight");
    CU_ASSERT_EQUAL(memcmp(t->data, m->output.f, (size_t)t->nbytes), 0);
    lm_gguf_close(g);
    char hex[33];
    lm_model_hash_hex(m, hex);
    CU_ASSERT_EQUAL(strlen(hex), 32);
    lm_model_free(m);
}

static void test_model_tiny_random_f16_loads(void)
{
    const char *path = tu_model_path("llama-2-tiny-random.gguf");
    if (path == NULL)
        return;
    lm_err err = {0};
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    CU_ASSERT_EQUAL(m->hp.n_embd, 8);
    CU_ASSERT_EQUAL(m->hp.n_layer, 1);
    CU_ASSERT_EQUAL(m->hp.n_head, 2);
    CU_ASSERT_EQUAL(m->hp.n_head_kv, 2);
    CU_ASSERT_EQUAL(m->hp.n_ff, 32);
    CU_ASSERT_EQUAL(m->hp.n_vocab, 32000);
    CU_ASSERT_FALSE(m->hp.tied_output);
    /* F16 weights stay as stored (the mapping's bytes); each decodes to exactly its f16 value. */
    lm_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, path, &err), LM_OK);
    const lm_gguf_tensor *t = lm_gguf_tensor_find(g, "blk.0.attn_q.weight");
    CU_ASSERT_EQUAL(t->type, LM_TYPE_F16);
    CU_ASSERT_EQUAL(m->layers[0].wq.type, LM_TYPE_F16);
    CU_ASSERT_PTR_NULL(m->layers[0].wq.f);
    const uint8_t *b = t->data;
    float *wq = malloc((size_t)t->n_elem * sizeof *wq);
    CU_ASSERT_PTR_NOT_NULL_FATAL(wq);
    lm_wt_rows(wq, &m->layers[0].wq, 0, t->ne[1], (uint32_t)t->ne[0]);
    for (uint64_t i = 0; i < t->n_elem; ++i) {
        uint16_t h = (uint16_t)(b[2 * i] | b[2 * i + 1] << 8);
        CU_ASSERT_EQUAL(wq[i], lm_f16_to_f32(h));
        if (wq[i] != lm_f16_to_f32(h))
            break;
    }
    free(wq);
    lm_gguf_close(g);
    lm_model_free(m);
}

static void test_model_synth_round_trip(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/model_rt.gguf", tu_tmpdir());
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny", 7, LM_TYPE_F32, &err), LM_OK);
    hx_synth_params sp;
    CU_ASSERT_EQUAL_FATAL(hx_synth_preset(&sp, "tiny", &err), LM_OK);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    CU_ASSERT_EQUAL(m->hp.n_embd, sp.n_embd);
    CU_ASSERT_EQUAL(m->hp.n_layer, sp.n_layer);
    CU_ASSERT_EQUAL(m->hp.n_head, sp.n_head);
    CU_ASSERT_EQUAL(m->hp.n_head_kv, sp.n_head_kv);
    CU_ASSERT_EQUAL(m->hp.n_ff, sp.n_ff);
    CU_ASSERT_EQUAL(m->hp.n_vocab, sp.n_vocab);
    CU_ASSERT_EQUAL(m->hp.rope_theta, sp.rope_theta); /* exact: stored as f32 */
    CU_ASSERT_TRUE(m->hp.tied_output);
    CU_ASSERT_PTR_EQUAL(m->output.f, m->tok_embd.f);
    CU_ASSERT_PTR_EQUAL(m->output.q, m->tok_embd.q);
    CU_ASSERT_PTR_NOT_NULL(m->vocab);
    if (m->vocab != NULL)
        CU_ASSERT_EQUAL(lm_vocab_n_tokens(m->vocab), sp.n_vocab);
    lm_model_free(m);
}

/* Builds a 1-layer llama file with one tensor missing or misshapen, or an extra [8] tensor. */
static const char *write_variant(const char *name, const char *skip, const char *bad_shape,
                                 const char *extra)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", tu_tmpdir(), name);
    const uint64_t E = 8, F = 16, V = 4;
    lm_err err = {0};
    lm_gguf_writer *w = NULL;
    CU_ASSERT_FATAL(lm_gguf_writer_create(&w, &err) == LM_OK);
    lm_gguf_w_str(w, "general.architecture", "llama", &err);
    lm_gguf_w_u32(w, "llama.embedding_length", (uint32_t)E, &err);
    lm_gguf_w_u32(w, "llama.block_count", 1, &err);
    lm_gguf_w_u32(w, "llama.attention.head_count", 2, &err);
    lm_gguf_w_u32(w, "llama.feed_forward_length", (uint32_t)F, &err);
    lm_gguf_w_u32(w, "llama.context_length", 64, &err);
    static float zeros[64 * 64];
    struct { const char *n; uint64_t a, b; } ts[] = {
        {"token_embd.weight", E, V}, {"output_norm.weight", E, 1},
        {"blk.0.attn_norm.weight", E, 1}, {"blk.0.attn_q.weight", E, E},
        {"blk.0.attn_k.weight", E, E}, {"blk.0.attn_v.weight", E, E},
        {"blk.0.attn_output.weight", E, E}, {"blk.0.ffn_norm.weight", E, 1},
        {"blk.0.ffn_gate.weight", E, F}, {"blk.0.ffn_up.weight", E, F},
        {"blk.0.ffn_down.weight", F, E},
    };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) {
        if (skip && strcmp(ts[i].n, skip) == 0)
            continue;
        uint64_t ne[2] = {ts[i].a, ts[i].b};
        if (bad_shape && strcmp(ts[i].n, bad_shape) == 0)
            ne[1] += 1;
        CU_ASSERT(lm_gguf_w_tensor_f32(w, ts[i].n, LM_TYPE_F32, ne[1] == 1 ? 1 : 2, ne, zeros,
                                       &err) == LM_OK);
    }
    if (extra != NULL)
        CU_ASSERT(lm_gguf_w_tensor_f32(w, extra, LM_TYPE_F32, 1, (uint64_t[]){E}, zeros, &err)
                  == LM_OK);
    CU_ASSERT(lm_gguf_writer_save(w, path, &err) == LM_OK);
    lm_gguf_writer_free(w);
    return path;
}

static void test_model_missing_tensor_and_wrong_shape(void)
{
    lm_err err = {0};
    lm_model *m = NULL;
    const char *p = write_variant("ok.gguf", NULL, NULL, NULL);
    CU_ASSERT_EQUAL(lm_model_load(&m, p, &err), LM_OK);
    CU_ASSERT_PTR_NULL(m ? m->vocab : NULL); /* no tokenizer keys: no vocabulary */
    lm_model_free(m);

    p = write_variant("missing.gguf", "blk.0.ffn_up.weight", NULL, NULL);
    CU_ASSERT_EQUAL(lm_model_load(&m, p, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, p));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "missing tensor 'blk.0.ffn_up.weight'"));

    lm_err_clear(&err);
    p = write_variant("shape.gguf", NULL, "blk.0.attn_k.weight", NULL);
    CU_ASSERT_EQUAL(lm_model_load(&m, p, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'blk.0.attn_k.weight' has shape [8, 9"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "expected [8, 8]"));
}

/* A tensor the llama row does not read (a sandwich norm, an FFN bias, a layer past
 * block_count) is refused with one line naming it instead of being ignored. */
static void test_model_unused_tensor_refused(void)
{
    static const char *const extra[] = {"blk.0.post_ffw_norm.weight", "blk.0.ffn_gate.bias",
                                        "blk.1.attn_norm.weight"};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; ++i) {
        lm_err err = {0};
        lm_model *m = NULL;
        const char *p = write_variant("extra.gguf", NULL, NULL, extra[i]);
        CU_ASSERT_EQUAL(lm_model_load(&m, p, &err), LM_E_INPUT);
        CU_ASSERT_PTR_NULL(m);
        lm_model_free(m);
        char want[128];
        snprintf(want, sizeof want, "tensor '%s' is not part of a llama model", extra[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
        CU_ASSERT_PTR_NULL(strchr(err.msg, '\n'));
    }
}

/* Raw quantized bytes for a [ne0, ne1] tensor: random quants, block scales set to small
 * finite f16 values so that every dequantized weight is finite. */
static uint8_t *quant_bytes(lm_tensor_type type, uint64_t ne0, uint64_t ne1, uint64_t *st,
                            uint64_t *nbytes)
{
    size_t bb = lm_tensor_type_block_bytes(type);
    uint64_t nblk = ne0 * ne1 / 32;
    *nbytes = nblk * bb;
    uint8_t *b = malloc((size_t)*nbytes);
    for (uint64_t i = 0; i < *nbytes; ++i)
        b[i] = (uint8_t)tu_rand_u64(st);
    for (uint64_t k = 0; k < nblk; ++k) {
        b[k * bb] = 0x00;
        b[k * bb + 1] = 0x2c; /* d = 1/16 */
        if (type == LM_TYPE_Q4_1) {
            b[k * bb + 2] = 0x00;
            b[k * bb + 3] = 0xb8; /* m = -0.5 */
        }
    }
    return b;
}

/* A llama file with quantized and bf16 weights: the loader dequantizes each exactly as
 * lm_gguf_tensor_to_f32 does (compared bit for bit). */
static void test_model_quantized_weights(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/quant.gguf", tu_tmpdir());
    const uint64_t E = 32, F = 64, V = 8;
    lm_err err = {0};
    lm_gguf_writer *w = NULL;
    CU_ASSERT_FATAL(lm_gguf_writer_create(&w, &err) == LM_OK);
    lm_gguf_w_str(w, "general.architecture", "llama", &err);
    lm_gguf_w_u32(w, "llama.embedding_length", (uint32_t)E, &err);
    lm_gguf_w_u32(w, "llama.block_count", 1, &err);
    lm_gguf_w_u32(w, "llama.attention.head_count", 2, &err);
    lm_gguf_w_u32(w, "llama.attention.head_count_kv", 1, &err);
    lm_gguf_w_u32(w, "llama.feed_forward_length", (uint32_t)F, &err);
    lm_gguf_w_u32(w, "llama.context_length", 64, &err);
    static float ones[64 * 64];
    for (size_t i = 0; i < sizeof ones / sizeof ones[0]; ++i)
        ones[i] = 1.0f + (float)i / 1024.0f;
    uint64_t st = tu_seed();
    struct { const char *n; uint64_t a, b; int type; } ts[] = {
        {"token_embd.weight", E, V, LM_TYPE_BF16}, {"output_norm.weight", E, 1, LM_TYPE_F32},
        {"output.weight", E, V, LM_TYPE_F16},
        {"blk.0.attn_norm.weight", E, 1, LM_TYPE_F32}, {"blk.0.attn_q.weight", E, E, LM_TYPE_Q8_0},
        {"blk.0.attn_k.weight", E, 16, LM_TYPE_Q4_0}, {"blk.0.attn_v.weight", E, 16, LM_TYPE_Q4_1},
        {"blk.0.attn_q.bias", E, 1, LM_TYPE_F32},
        {"blk.0.attn_output.weight", E, E, LM_TYPE_Q8_0},
        {"blk.0.ffn_norm.weight", E, 1, LM_TYPE_F32},
        {"blk.0.ffn_gate.weight", E, F, LM_TYPE_Q4_0}, {"blk.0.ffn_up.weight", E, F, LM_TYPE_Q4_1},
        {"blk.0.ffn_down.weight", F, E, LM_TYPE_Q8_0},
    };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) {
        uint64_t ne[2] = {ts[i].a, ts[i].b};
        uint32_t nd = ts[i].b == 1 ? 1 : 2;
        if (ts[i].type <= LM_TYPE_F16 || ts[i].type == LM_TYPE_BF16) {
            CU_ASSERT(lm_gguf_w_tensor_f32(w, ts[i].n, (lm_tensor_type)ts[i].type, nd, ne, ones,
                                           &err) == LM_OK);
        } else {
            uint64_t nb;
            uint8_t *q = quant_bytes((lm_tensor_type)ts[i].type, ne[0], ne[1], &st, &nb);
            CU_ASSERT(lm_gguf_w_tensor_raw(w, ts[i].n, (lm_tensor_type)ts[i].type, nd, ne, q, nb,
                                           &err) == LM_OK);
            free(q);
        }
    }
    CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_save(w, path, &err), LM_OK);
    lm_gguf_writer_free(w);
    /* Each weight the same values whether kept in the file's blocks (decoded by lm_wt_rows)
     * or dequantized into the arena: lm_gguf_tensor_to_f32's. */
    lm_model *m = NULL, *ma = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load_mode(&m, path, LM_WEIGHTS_FILE, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_model_load_mode(&ma, path, LM_WEIGHTS_ARENA, &err), LM_OK);
    CU_ASSERT_EQUAL(m->hp.n_vocab, V);
    CU_ASSERT_EQUAL(m->hp.n_head_kv, 1);
    CU_ASSERT_FALSE(m->hp.tied_output);
    CU_ASSERT_PTR_NOT_NULL(m->layers[0].bq);
    CU_ASSERT_PTR_NULL(m->layers[0].bk);
    CU_ASSERT_PTR_NOT_NULL(m->layers[0].wk.q); /* Q4_0: blocks in the mapping */
    CU_ASSERT_PTR_NULL(m->layers[0].wk.f);
    CU_ASSERT_PTR_NOT_NULL(ma->layers[0].wk.f);
    lm_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, path, &err), LM_OK);
    const lm_model *both[2] = {m, ma};
    const char *names[] = {"token_embd.weight", "output.weight", "blk.0.attn_q.weight",
                           "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                           "blk.0.attn_output.weight", "blk.0.ffn_gate.weight",
                           "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"};
    static float want[64 * 64], got[64 * 64];
    for (int mi = 0; mi < 2; ++mi) {
        const lm_model *x = both[mi];
        const lm_wt *wts[] = {&x->tok_embd, &x->output, &x->layers[0].wq, &x->layers[0].wk,
                              &x->layers[0].wv, &x->layers[0].wo, &x->layers[0].w_gate,
                              &x->layers[0].w_up, &x->layers[0].w_down};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
            const lm_gguf_tensor *t = lm_gguf_tensor_find(g, names[i]);
            CU_ASSERT_PTR_NOT_NULL_FATAL(t);
            CU_ASSERT_EQUAL_FATAL(lm_gguf_tensor_to_f32(want, t, &err), LM_OK);
            CU_ASSERT_EQUAL(wts[i]->type, (uint32_t)t->type);
            lm_wt_rows(got, wts[i], 0, t->ne[1], (uint32_t)t->ne[0]);
            CU_ASSERT_EQUAL(memcmp(want, got, (size_t)t->n_elem * sizeof(float)), 0);
        }
    }
    /* One weight by hand: attn_k (Q4_0, d = 1/16), element 17 = high nibble of byte 1 - 8. */
    const lm_gguf_tensor *k = lm_gguf_tensor_find(g, "blk.0.attn_k.weight");
    const uint8_t *kb = k->data;
    CU_ASSERT_EQUAL(ma->layers[0].wk.f[17], (float)((kb[2 + 1] >> 4) - 8) / 16.0f);
    lm_gguf_close(g);
    lm_model_free(ma);
    lm_model_free(m);
}

static void test_model_unsupported_arch(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/qwen.gguf", tu_tmpdir());
    lm_err err = {0};
    lm_gguf_writer *w = NULL;
    CU_ASSERT_FATAL(lm_gguf_writer_create(&w, &err) == LM_OK);
    lm_gguf_w_str(w, "general.architecture", "qwen9", &err);
    CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_save(w, path, &err), LM_OK);
    lm_gguf_writer_free(w);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL(lm_model_load(&m, path, &err), LM_E_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'qwen9'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, lm_arch_expected())); /* the table's names */
}

/* The architecture table: unique names, every row found by name and listed in the expected
 * names, every required tensor name and key prefix present. */
static void test_model_arch_table(void)
{
    CU_ASSERT_FATAL(lm_arch_count() >= 1);
    CU_ASSERT_PTR_NULL(lm_arch_at(lm_arch_count()));
    CU_ASSERT_PTR_NULL(lm_arch_find("no-such-arch"));
    CU_ASSERT_PTR_NULL(lm_arch_find(NULL));
    for (size_t i = 0; i < lm_arch_count(); ++i) {
        const lm_arch *a = lm_arch_at(i);
        CU_ASSERT_PTR_EQUAL(lm_arch_find(a->name), a);
        CU_ASSERT(a->name[0] != '\0' && strlen(a->name) < sizeof(((lm_hparams *)0)->arch));
        CU_ASSERT(a->key_prefix != NULL && a->key_prefix[0] != '\0');
        CU_ASSERT_PTR_NOT_NULL(strstr(lm_arch_expected(), a->name));
        CU_ASSERT(a->rope_theta > 0.0f && a->rms_eps > 0.0f && a->rms_eps < 1.0f);
        const lm_arch_tensors *t = &a->tensors;
        const char *req[] = {t->tok_embd, t->output_norm, t->output, t->attn_norm, t->attn_q,
                             t->attn_k, t->attn_v, t->attn_output, t->ffn_norm, t->ffn_gate,
                             t->ffn_up, t->ffn_down};
        for (size_t j = 0; j < sizeof req / sizeof req[0]; ++j)
            CU_ASSERT(req[j] != NULL && req[j][0] != '\0');
    }
    /* a model loaded from a file carries its row */
    lm_model *m = tu_load_model("stories260K.gguf");
    if (m == NULL)
        return;
    CU_ASSERT_PTR_EQUAL(m->arch, lm_arch_find(m->hp.arch));
    CU_ASSERT_EQUAL(m->hp.rope_type, m->arch->rope_type);
    lm_model_free(m);
}


/* Writes a small model with quantized blocks (gemma3-4b's Q4_K_M-like mix, or moe-26b-a4b's
 * MXFP4 experts, shrunk), damages one block of one tensor (bytes at offset `at` inside block
 * `block` set to val[n]) and checks the load fails naming the tensor and the block. */
static void check_damaged(const char *preset, const char *tensor, uint64_t block, size_t at,
                          const uint8_t *val, size_t n, const char *type_name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/damaged-%s.gguf", tu_tmpdir(), preset);
    lm_err err = {0};
    hx_synth_params p;
    CU_ASSERT_EQUAL_FATAL(hx_synth_preset(&p, preset, &err), LM_OK);
    p.n_embd = 512, p.n_head = 2, p.n_head_kv = 1, p.n_ff = 512, p.n_vocab = 512;
    p.n_layer = 2, p.n_swa = 8;
    if (p.n_expert)
        p.n_expert = 4, p.n_expert_used = 2, p.n_ff_exp = 64;
    CU_ASSERT_EQUAL_FATAL(hx_synth_write_params(path, &p, 0, LM_TYPE_Q4_K, &err), LM_OK);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK); /* undamaged: loads */
    lm_model_free(m);
    lm_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, path, &err), LM_OK);
    const lm_gguf_tensor *t = lm_gguf_tensor_find(g, tensor);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_STRING_EQUAL(lm_tensor_type_name(t->type), type_name);
    const uint64_t off = (uint64_t)((const uint8_t *)t->data - (const uint8_t *)lm_gguf_bytes(g))
                         + block * lm_tensor_type_block_bytes(t->type) + at;
    const uint64_t size = lm_gguf_size(g);
    uint8_t *bytes = malloc(size);
    memcpy(bytes, lm_gguf_bytes(g), size);
    lm_gguf_close(g);
    memcpy(bytes + off, val, n);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_EQUAL(fwrite(bytes, 1, size, f), size);
    fclose(f);
    free(bytes);
    CU_ASSERT_EQUAL(lm_model_load(&m, path, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(m);
    char want[160];
    snprintf(want, sizeof want, "tensor '%s' (%s) block %llu of ", tensor, type_name,
             (unsigned long long)block);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "NaN or infinite scale"));
    if (strstr(err.msg, want) == NULL)
        fprintf(stderr, "\n  %s", err.msg);
}

/* A quantized block whose scale is NaN or infinite (f16 d or dmin; MXFP4's E8M0 0xFF, even
 * with codes whose products stay finite) makes the file unloadable, naming the block. */
static void test_model_damaged_scales(void)
{
    const uint8_t f16_nan[2] = {0x00, 0x7e}, f16_inf[2] = {0x00, 0x7c}, e8m0_nan[1] = {0xff};
    const uint8_t small_codes[17] = {0xff, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
                                     0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11};
    check_damaged("gemma3-4b", "blk.1.attn_q.weight", 3, 0, f16_nan, 2, "Q4_K");   /* d */
    check_damaged("gemma3-4b", "blk.0.attn_k.weight", 0, 2, f16_inf, 2, "Q4_K");   /* dmin */
    check_damaged("gemma3-4b", "token_embd.weight", 7, 208, f16_inf, 2, "Q6_K");   /* d */
    check_damaged("moe-26b-a4b", "blk.1.ffn_up_exps.weight", 5, 0, e8m0_nan, 1, "MXFP4");
    check_damaged("moe-26b-a4b", "blk.0.ffn_down_exps.weight", 2, 0, small_codes, 17, "MXFP4");
}

void test_model_register(void)
{
    CU_pSuite s = CU_add_suite("model", NULL, NULL);
    CU_add_test(s, "test_model_stories260k_loads", test_model_stories260k_loads);
    CU_add_test(s, "test_model_tiny_random_f16_loads", test_model_tiny_random_f16_loads);
    CU_add_test(s, "test_model_synth_round_trip", test_model_synth_round_trip);
    CU_add_test(s, "test_model_missing_tensor_and_wrong_shape",
                test_model_missing_tensor_and_wrong_shape);
    CU_add_test(s, "test_model_unused_tensor_refused", test_model_unused_tensor_refused);
    CU_add_test(s, "test_model_quantized_weights", test_model_quantized_weights);
    CU_add_test(s, "test_model_unsupported_arch", test_model_unsupported_arch);
    CU_add_test(s, "test_model_arch_table", test_model_arch_table);
    CU_add_test(s, "test_model_damaged_scales", test_model_damaged_scales);
}
