/* test_synth.c — synthetic models: deterministic bytes, presets that load, a vocabulary the
 * tokenizer can use, logits that are peaked, and the command line's error handling. */
#include "cli/commands.h"
#include "fs.h"
#include "kvd_engine.h"
#include "plan/synth.h"
#include "plan/synth_quant.h"
#include "kvd_dequant.h"
#include "sha256.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

static const char *tmp_path(const char *name)
{
    static char p[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tu_tmpdir(), name);
    return p[k];
}

static void test_synth_deterministic(void)
{
    lm_err err = {0};
    const char *a = tmp_path("a.gguf"), *b = tmp_path("b.gguf"), *c = tmp_path("c.gguf");
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(a, "tiny", 42, LM_TYPE_F16, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(b, "tiny", 42, LM_TYPE_F16, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(c, "tiny", 43, LM_TYPE_F16, &err), LM_OK);
    size_t na, nb, nc;
    char *ba = slurp(a, &na), *bb = slurp(b, &nb), *bc = slurp(c, &nc);
    CU_ASSERT_FATAL(ba && bb && bc);
    CU_ASSERT_EQUAL(na, nb);
    CU_ASSERT_EQUAL(na, nc); /* same shapes: only the weights and the seed string differ */
    CU_ASSERT_EQUAL(memcmp(ba, bb, na), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(ba, bc, na), 0);
    /* The weights themselves differ, not just the recorded seed. */
    lm_model *ma = NULL, *mc = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&ma, a, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&mc, c, &err), LM_OK);
    float wa[64], wc[64]; /* the first row's first 64 values (n_embd >= 64) */
    CU_ASSERT_FATAL(ma->hp.n_embd >= 64);
    lm_wt_rows(wa, &ma->layers[0].wq, 0, 1, 64);
    lm_wt_rows(wc, &mc->layers[0].wq, 0, 1, 64);
    CU_ASSERT_NOT_EQUAL(memcmp(wa, wc, sizeof wa), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(ma->content_hash, mc->content_hash, 16), 0);
    lm_model_free(ma);
    lm_model_free(mc);
    free(ba);
    free(bb);
    free(bc);
}

/* Writes a preset (max_layers 0: all its layers; else at most that many) and checks that the
 * file loads with the preset's hyperparameters. */
static void check_preset_loads(const char *name, lm_tensor_type type, uint32_t max_layers)
{
    lm_err err = {0};
    hx_synth_params p;
    CU_ASSERT_EQUAL_FATAL(hx_synth_preset(&p, name, &err), LM_OK);
    const char *path = tmp_path("preset.gguf");
    if (max_layers == 0) {
        CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, name, 1, type, &err), LM_OK);
    } else {
        if (p.n_layer > max_layers)
            p.n_layer = max_layers;
        CU_ASSERT_EQUAL_FATAL(hx_synth_write_params(path, &p, 1, type, &err), LM_OK);
    }
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    CU_ASSERT_EQUAL(m->hp.n_embd, p.n_embd);
    CU_ASSERT_EQUAL(m->hp.n_layer, p.n_layer);
    CU_ASSERT_EQUAL(m->hp.n_head, p.n_head);
    CU_ASSERT_EQUAL(m->hp.n_head_kv, p.n_head_kv);
    CU_ASSERT_EQUAL(m->hp.head_dim, p.head_dim ? p.head_dim : p.n_embd / p.n_head);
    CU_ASSERT_EQUAL(m->hp.n_ff, p.n_ff);
    CU_ASSERT_EQUAL(m->hp.n_vocab, p.n_vocab);
    CU_ASSERT_EQUAL(m->hp.n_ctx_train, p.n_ctx);
    CU_ASSERT_EQUAL(m->hp.rope_theta, p.rope_theta); /* exact: written and read as f32 */
    CU_ASSERT_EQUAL(m->hp.tied_output, !p.output_copy && strcmp(p.arch, "gpt-oss") != 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m->vocab);
    CU_ASSERT_EQUAL(lm_vocab_n_tokens(m->vocab), p.n_vocab);
    CU_ASSERT_EQUAL(lm_vocab_bos(m->vocab), 1);
    CU_ASSERT_EQUAL(lm_vocab_eos(m->vocab), 2);
    lm_model_free(m);
}

static void test_synth_presets_load(void)
{
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(0), "tiny");
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(1), "smollm2-135m");
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(2), "swa-5to1"); /* issue-5 presets follow */
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(6), "tiny-draft");
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(7), "tiny-mask");
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(8), "gemma3");
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(9), "qwen3");
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(10), "qwen3moe");
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(11), "gptoss"); /* loaded by test_arch */
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(12), "gptoss-mxfp4");
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(13), "gptoss-20b"); /* test_synth_sizes */
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(14), "gemma3-4b");
    CU_ASSERT_STRING_EQUAL(hx_synth_preset_name(15), "moe-26b-a4b");
    CU_ASSERT_PTR_NULL(hx_synth_preset_name(16));
    check_preset_loads("gemma3", LM_TYPE_F32, 0);
    check_preset_loads("qwen3", LM_TYPE_F32, 0);
    check_preset_loads("qwen3moe", LM_TYPE_F32, 0);
    check_preset_loads("tiny", LM_TYPE_F32, 0);
    /* SmolLM2-135M's width, heads, vocabulary and context in BF16, cut to 2 of its 30 layers: the
     * layers are written and loaded by one loop, and all 30 (~270 MB) took ~6 s of the suite;
     * the full preset's depth is checked on the parameters below. */
    check_preset_loads("smollm2-135m", LM_TYPE_BF16, 2);
    hx_synth_params p;
    CU_ASSERT_EQUAL(hx_synth_preset(&p, "smollm2-135m", &(lm_err){0}), LM_OK);
    CU_ASSERT_EQUAL(p.n_embd, 576);
    CU_ASSERT_EQUAL(p.n_layer, 30);
    CU_ASSERT_EQUAL(p.n_head, 9);
    CU_ASSERT_EQUAL(p.n_head_kv, 3);
    CU_ASSERT_EQUAL(p.n_ff, 1536);
    CU_ASSERT_EQUAL(p.n_vocab, 49152);
    CU_ASSERT_EQUAL(p.rope_theta, 100000.0f);
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_synth_preset(&p, "huge", &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'huge'"));
}

static void test_synth_explicit_params(void)
{
    hx_synth_params p;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_preset(&p, "tiny", &err), LM_OK);
    p.n_embd = 48;
    p.n_head = 6;
    p.n_head_kv = 2;
    p.n_layer = 2;
    p.n_ff = 100;
    p.n_vocab = 300;
    p.rope_theta = 500000.0f;
    const char *path = tmp_path("explicit.gguf");
    CU_ASSERT_EQUAL_FATAL(hx_synth_write_params(path, &p, 9, LM_TYPE_F32, &err), LM_OK);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    CU_ASSERT_EQUAL(m->hp.head_dim, 8);
    CU_ASSERT_EQUAL(m->hp.n_vocab, 300);
    CU_ASSERT_EQUAL(m->hp.rope_theta, 500000.0f);
    lm_model_free(m);
    /* Every bad field is refused with its name. */
    struct { uint32_t embd, head, kv, vocab; const char *needle; } bad[] = {
        {50, 6, 2, 300, "not a multiple of n_head"},
        {54, 6, 2, 300, "must be even"},
        {48, 6, 4, 300, "does not divide"},
        {48, 6, 2, 259, "n_vocab 259"},
        {48, 6, 0, 300, "positive"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        hx_synth_params q = p;
        q.n_embd = bad[i].embd;
        q.n_head = bad[i].head;
        q.n_head_kv = bad[i].kv;
        q.n_vocab = bad[i].vocab;
        lm_err_clear(&err);
        CU_ASSERT_EQUAL(hx_synth_write_params(tmp_path("bad.gguf"), &q, 0, LM_TYPE_F32, &err),
                        LM_E_INPUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, bad[i].needle));
    }
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(hx_synth_write_params(tmp_path("bad.gguf"), &p, 0, LM_TYPE_Q8_0, &err),
                    LM_E_INPUT);
}

/* The generated vocabulary: layout as documented, and the SPM tokenizer reaches whole words. */
static void test_synth_vocabulary(void)
{
    lm_err err = {0};
    const char *path = tmp_path("vocab.gguf");
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny", 0, LM_TYPE_F32, &err), LM_OK);
    lm_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, path, &err), LM_OK);
    const lm_gguf_arr *toks = NULL, *types = NULL, *scores = NULL;
    CU_ASSERT_EQUAL(lm_gguf_get_arr(g, "tokenizer.ggml.tokens", LM_GGUF_STR, &toks, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_get_arr(g, "tokenizer.ggml.token_type", LM_GGUF_I32, &types, &err),
                    LM_OK);
    CU_ASSERT_EQUAL(lm_gguf_get_arr(g, "tokenizer.ggml.scores", LM_GGUF_F32, &scores, &err),
                    LM_OK);
    CU_ASSERT_FATAL(toks && types && scores && toks->n == 512 && types->n == 512);
    const lm_gguf_str *s = toks->data;
    const int32_t *ty = types->data;
    const float *sc = scores->data;
    CU_ASSERT_STRING_EQUAL(s[0].ptr, "<unk>");
    CU_ASSERT_EQUAL(ty[0], 2);
    CU_ASSERT_STRING_EQUAL(s[1].ptr, "<s>");
    CU_ASSERT_EQUAL(ty[1], 3);
    CU_ASSERT_STRING_EQUAL(s[2].ptr, "</s>");
    CU_ASSERT_EQUAL(ty[2], 3);
    CU_ASSERT_STRING_EQUAL(s[3].ptr, "<0x00>");
    CU_ASSERT_STRING_EQUAL(s[258].ptr, "<0xFF>");
    CU_ASSERT_EQUAL(ty[258], 6);
    CU_ASSERT_STRING_EQUAL(s[259].ptr, "\xe2\x96\x81");
    CU_ASSERT_EQUAL(ty[259], 1);
    for (uint32_t i = 260; i < 512; ++i) {
        CU_ASSERT_EQUAL(ty[i], 1);
        CU_ASSERT_TRUE(sc[i] < sc[i - 1]); /* strictly decreasing scores */
        for (uint32_t j = 259; j < i; ++j)
            if (strcmp(s[i].ptr, s[j].ptr) == 0) {
                CU_FAIL("duplicate token");
                break;
            }
    }
    lm_gguf_close(g);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    int32_t *ids = NULL;
    size_t n = 0;
    const char *text = "Once upon a time";
    CU_ASSERT_EQUAL_FATAL(lm_tokenize(m->vocab, text, strlen(text), true, &ids, &n, &err), LM_OK);
    CU_ASSERT_EQUAL(n, 5); /* <s> ▁Once ▁upon ▁a ▁time: every word is one piece */
    if (n == 5) {
        char piece[32];
        int len = lm_token_to_piece(m->vocab, ids[4], piece, sizeof piece);
        CU_ASSERT_EQUAL(len, 5);
        CU_ASSERT_EQUAL(memcmp(piece, " time", 5), 0);
    }
    free(ids);
    lm_model_free(m);
}

/* Logits are peaked: the top-1 softmax probability at the last position of random prompts.
 * The bound (mean > 0.3, and > 0.3 for most prompts) is the synth's documented intent; the
 * measured figure is printed. Softmax in double, max subtracted first. */
static void test_synth_logits_peaked(void)
{
    lm_err err = {0};
    const char *path = tmp_path("peak.gguf");
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny", 0, LM_TYPE_F32, &err), LM_OK);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    lm_ctx_params cp = {.backend = "naive", .n_threads = 1, .n_ctx = 64};
    lm_ctx *c = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&c, m, &cp, &err), LM_OK);
    uint32_t V = m->hp.n_vocab;
    float *lg = malloc(V * sizeof *lg); /* [n_vocab] */
    uint64_t st = tu_seed();
    const int trials = 20;
    double sum = 0.0;
    int over = 0;
    for (int t = 0; t < trials; ++t) {
        int32_t toks[8] = {1};
        for (int i = 1; i < 8; ++i)
            toks[i] = 259 + (int32_t)(tu_rand_u64(&st) % (V - 259));
        lm_ctx_reset(c);
        CU_ASSERT_EQUAL_FATAL(lm_prefill(c, toks, 8, 0, lg, &err), LM_OK);
        float mx = lg[lm_argmax(lg, V)];
        double z = 0.0;
        for (uint32_t v = 0; v < V; ++v)
            z += exp((double)(lg[v] - mx));
        sum += 1.0 / z;
        over += 1.0 / z > 0.3;
    }
    fprintf(stderr, "\n  synth tiny: mean top-1 probability %.3f, > 0.3 for %d of %d prompts\n",
            sum / trials, over, trials);
    CU_ASSERT_TRUE(sum / trials > 0.3);
    CU_ASSERT_TRUE(over >= trials / 2);
    free(lg);
    lm_ctx_free(c);
    lm_model_free(m);
}

static int run_cmd(const char *a0, const char *a1, const char *a2, const char *a3,
                   const char *a4)
{
    char *argv[6] = {(char *)"synth", (char *)a0, (char *)a1, (char *)a2, (char *)a3,
                     (char *)a4};
    int argc = 1;
    while (argc < 6 && argv[argc] != NULL)
        ++argc;
    return cmd_synth(argc, argv);
}

static void test_synth_command_line(void)
{
    const char *out = tmp_path("cli.gguf");
    CU_ASSERT_EQUAL(run_cmd("--preset", "tiny", "-o", out, NULL), 0);
    CU_ASSERT_EQUAL(run_cmd("--preset", "nope", "-o", out, NULL), 2);
    CU_ASSERT_EQUAL(run_cmd("--preset", "tiny", NULL, NULL, NULL), 2);    /* no -o */
    CU_ASSERT_EQUAL(run_cmd("--bogus", "-o", out, NULL, NULL), 2);
    CU_ASSERT_EQUAL(run_cmd("--arch", "gpt2", "-o", out, NULL), 2);
    CU_ASSERT_EQUAL(run_cmd("--arch", "llama", "--n-embd", "0", NULL), 2);
    CU_ASSERT_EQUAL(run_cmd("--preset", "tiny", "--seed", "x1", "-o"), 2);
    CU_ASSERT_EQUAL(run_cmd("--preset", "tiny", "--type", "q4", "-o"), 2);
    CU_ASSERT_EQUAL(run_cmd("--preset=tiny", "--arch=llama", "-o", out, NULL), 2);
    CU_ASSERT_EQUAL(run_cmd("--help", NULL, NULL, NULL, NULL), 0);
    char nodir[1024];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.gguf", tu_tmpdir());
    CU_ASSERT_EQUAL(run_cmd("--preset", "tiny", "-o", nodir, NULL), 2);
}

/* A cached synthetic model damaged on disk (one flipped bit) is never used: the next
 * hx_synth_cache_write gives back exactly the fresh bytes. */
static void test_synth_cache_entry_repaired(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/synth-cache-tiny.gguf", tu_tmpdir());
    lm_err err = {0};
    tu_log log = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_cache_write(path, "tiny", 3, tu_log_keep, &log, &err), LM_OK);
    CU_ASSERT_EQUAL(log.n, 0); /* nothing was there: nothing to say */
    char *fresh, *now;
    size_t n_fresh, n_now;
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&fresh, &n_fresh, path, SIZE_MAX, &err), LM_OK);
    fresh[n_fresh / 2] ^= 0x04;
    CU_ASSERT_EQUAL_FATAL(lm_write_file(path, fresh, n_fresh, &err), LM_OK);
    fresh[n_fresh / 2] ^= 0x04;
    CU_ASSERT_EQUAL_FATAL(hx_synth_cache_write(path, "tiny", 3, tu_log_keep, &log, &err), LM_OK);
    CU_ASSERT_EQUAL(log.n, 1); /* one warning line, through the callback */
    CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "cached synthetic model "));
    CU_ASSERT_PTR_NOT_NULL(strstr(log.last, "; rewritten"));
    CU_ASSERT_PTR_NULL(strchr(log.last, '\n'));
    CU_ASSERT_EQUAL_FATAL(hx_synth_cache_write(path, "tiny", 3, tu_log_keep, &log, &err), LM_OK);
    CU_ASSERT_EQUAL(log.n, 1); /* the same bytes again: silent */
    /* a preset of tens of GB as float32 is never a cache entry */
    CU_ASSERT_EQUAL(hx_synth_cache_write(tmp_path("big.gguf"), "gptoss-20b", 0, NULL, NULL,
                                         &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "kvdrift synth --preset gptoss-20b -o FILE.gguf"));
    lm_err_clear(&err);
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&now, &n_now, path, SIZE_MAX, &err), LM_OK);
    CU_ASSERT(n_now == n_fresh && memcmp(now, fresh, n_now) == 0);
    free(fresh);
    free(now);
}


/* The block encoders, decoded by the traits table: zeros stay zeros; MXFP4 picks the nearest of
 * the 16 codes at the block's scale (no code is closer); Q4_K and Q6_K land within their
 * documented bounds (a wrong nibble, scale or layout is off by about the block's range). */
static void test_synth_encoders(void)
{
    enum { N = 256 * 8 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    const lm_tensor_type types[3] = {LM_TYPE_MXFP4, LM_TYPE_Q4_K, LM_TYPE_Q6_K};
    uint64_t st = tu_seed();
    for (int t = 0; t < 3; ++t) {
        const lm_type_geom *tr = lm_type_geom_of(types[t]);
        const lm_to_f32_fn to_f32 = lm_type_to_f32(types[t]);
        CU_ASSERT_TRUE(hx_synth_type_encodable(types[t]));
        memset(x, 0, sizeof x);
        hx_synth_encode(q, x, N, types[t]);
        to_f32(q, y, N / tr->block_elems);
        CU_ASSERT_EQUAL(tu_max_abs_diff(x, y, N), 0.0);
        for (int i = 0; i < N; ++i) /* blocks of very different magnitudes, some one-signed */
            x[i] = tu_rand_f32(&st) * (float)(1 << (i / 256)) * 0.01f
                   + ((i / 256) % 3 == 1 ? 0.02f * (float)(1 << (i / 256)) : 0.0f);
        hx_synth_encode(q, x, N, types[t]);
        to_f32(q, y, N / tr->block_elems);
        for (int b = 0; b < N / 256; ++b) {
            const float *xb = x + 256 * b, *yb = y + 256 * b;
            double worst = 0.0, bound = 0.0;
            for (int i = 0; i < 256; ++i)
                worst = fmax(worst, fabs((double)xb[i] - (double)yb[i]));
            if (types[t] == LM_TYPE_MXFP4) {
                for (int k = 0; k < 8; ++k) { /* 32-blocks: d from the decoded scale byte */
                    const uint8_t e = q[(b * 8 + k) * 17];
                    const double d = ldexp(1.0, (int)e - 128);
                    static const int kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
                    for (int i = 0; i < 32; ++i) {
                        const double v = xb[32 * k + i];
                        double best = INFINITY;
                        for (int c = 0; c < 16; ++c)
                            best = fmin(best, fabs(kv[c] * d - v));
                        CU_ASSERT_TRUE(fabs((double)yb[32 * k + i] - v) <= best);
                    }
                }
                continue;
            }
            /* Q4_K: half a step plus the scale's and the min's rounding (7.5 d + dmin / 2):
             * within 0.7 of the largest step and 1/60 of the largest min. Q6_K: half a step
             * plus 15.5 d: within 0.7 of the largest step. */
            const int sub = types[t] == LM_TYPE_Q4_K ? 32 : 16;
            double smax = 0.0, mmax = 0.0;
            for (int j = 0; j < 256 / sub; ++j) {
                double lo = 0.0, hi = 0.0, amax = 0.0;
                for (int i = 0; i < sub; ++i) {
                    lo = fmin(lo, (double)xb[sub * j + i]);
                    hi = fmax(hi, (double)xb[sub * j + i]);
                    amax = fmax(amax, fabs((double)xb[sub * j + i]));
                }
                smax = fmax(smax, sub == 32 ? (hi - lo) / 15.0 : amax / 31.0);
                mmax = fmax(mmax, -lo);
            }
            bound = 0.7 * smax + mmax / 60.0;
            CU_ASSERT_TRUE(worst <= bound);
            if (!(worst <= bound))
                fprintf(stderr, "\n  %s block %d: error %g > bound %g\n",
                        lm_tensor_type_name(types[t]), b, worst, bound);
        }
    }
    CU_ASSERT_FALSE(hx_synth_type_encodable(LM_TYPE_Q8_0));
}

/* Copies every key and tensor of the file at src into an in-memory writer, saved at dst. */
static void copy_through_memory_writer(const char *src, const char *dst)
{
    lm_err err = {0};
    lm_gguf *g = NULL;
    lm_gguf_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, src, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_gguf_writer_create(&w, &err), LM_OK);
    for (uint64_t i = 0; i < lm_gguf_n_kv(g); ++i) {
        const char *key = lm_gguf_key(g, i);
        int rc = LM_E_INPUT;
        uint32_t u;
        int32_t v;
        float f;
        bool b;
        const char *str;
        const lm_gguf_arr *arr;
        switch (lm_gguf_kv_type(g, i)) {
        case LM_GGUF_U32:
            rc = lm_gguf_get_u32(g, key, 0, &u, &err) || lm_gguf_w_u32(w, key, u, &err);
            break;
        case LM_GGUF_I32:
            rc = lm_gguf_get_i32(g, key, 0, &v, &err) || lm_gguf_w_i32(w, key, v, &err);
            break;
        case LM_GGUF_F32:
            rc = lm_gguf_get_f32(g, key, 0, &f, &err) || lm_gguf_w_f32(w, key, f, &err);
            break;
        case LM_GGUF_BOOL:
            rc = lm_gguf_get_bool(g, key, 0, &b, &err) || lm_gguf_w_bool(w, key, b, &err);
            break;
        case LM_GGUF_STR:
            rc = lm_gguf_get_str(g, key, NULL, &str, &err) || lm_gguf_w_str(w, key, str, &err);
            break;
        case LM_GGUF_ARR:
            rc = lm_gguf_get_arr(g, key, -1, &arr, &err);
            if (rc == LM_OK && arr->type == LM_GGUF_STR) {
                const lm_gguf_str *gs = arr->data;
                const char **ss = malloc((size_t)arr->n * sizeof *ss);
                for (uint64_t j = 0; j < arr->n; ++j)
                    ss[j] = gs[j].ptr;
                rc = lm_gguf_w_arr(w, key, LM_GGUF_STR, ss, arr->n, &err);
                free(ss);
            } else if (rc == LM_OK) {
                rc = lm_gguf_w_arr(w, key, arr->type, arr->data, arr->n, &err);
            }
            break;
        default:
            break;
        }
        CU_ASSERT_EQUAL(rc, LM_OK);
    }
    for (uint64_t i = 0; i < lm_gguf_n_tensors(g); ++i) {
        const lm_gguf_tensor *t = lm_gguf_tensor_at(g, i);
        CU_ASSERT_EQUAL(lm_gguf_w_tensor_raw(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                             t->nbytes, &err), LM_OK);
    }
    CU_ASSERT_EQUAL(lm_gguf_writer_save(w, dst, &err), LM_OK);
    lm_gguf_writer_free(w);
    lm_gguf_close(g);
}

/* A small gemma3-4b (2 heads of 256, n_embd 512, n_ff 512, 2 layers, vocabulary 512) and a
 * small moe-26b-a4b (6 layers: 5 sliding, 1 global; 8 experts of 64, top-2, MXFP4) keep their
 * presets' types, head size and untied output. */
static void shrink(hx_synth_params *p, uint32_t n_layer)
{
    p->n_embd = 512;
    p->n_head = 2;
    p->n_head_kv = 1;
    p->n_ff = 512;
    p->n_vocab = 512;
    p->n_layer = n_layer;
    p->n_swa = 8;
    if (p->n_expert > 0) {
        p->n_expert = 8;
        p->n_expert_used = 2;
        p->n_ff_exp = 64;
    }
}

/* Streamed files are the in-memory writer's bytes (small presets of every kind: F32, F16,
 * MXFP4 experts, the Q4_K_M-like mix); the digest and size reported are the file's and the
 * measured size is the written one; the shrunk large presets load with their types, run, and
 * give finite logits. */
static void test_synth_streamed_equals_memory(void)
{
    lm_err err = {0};
    const struct { const char *preset; lm_tensor_type type; uint32_t layers; } cases[] = {
        {"tiny", LM_TYPE_F32, 0}, {"gptoss-mxfp4", LM_TYPE_F16, 0},
        {"gemma3-4b", LM_TYPE_Q4_K, 2}, {"moe-26b-a4b", LM_TYPE_Q4_K, 6},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        hx_synth_params p;
        CU_ASSERT_EQUAL_FATAL(hx_synth_preset(&p, cases[c].preset, &err), LM_OK);
        if (cases[c].layers)
            shrink(&p, cases[c].layers);
        const char *a = tmp_path("streamed.gguf"), *b = tmp_path("memory.gguf");
        hx_synth_info info, measured;
        CU_ASSERT_EQUAL_FATAL(hx_synth_write_info(&info, a, &p, 5, cases[c].type, &err), LM_OK);
        CU_ASSERT_EQUAL_FATAL(hx_synth_measure(&measured, &p, cases[c].type, &err), LM_OK);
        copy_through_memory_writer(a, b);
        size_t na, nb;
        char *ba = slurp(a, &na), *bb = slurp(b, &nb);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ba);
        CU_ASSERT_PTR_NOT_NULL_FATAL(bb);
        CU_ASSERT(na == nb && memcmp(ba, bb, na) == 0);
        CU_ASSERT_EQUAL(info.bytes, na);
        CU_ASSERT_EQUAL(measured.bytes, na);
        CU_ASSERT_EQUAL(measured.n_params, info.n_params);
        CU_ASSERT_EQUAL(measured.n_tensors, info.n_tensors);
        char hex[65], want[65];
        for (int i = 0; i < 32; ++i)
            snprintf(hex + 2 * i, 3, "%02x", info.sha256[i]);
        CU_ASSERT_EQUAL(hx_sha256_file_hex(want, a, &err), LM_OK);
        CU_ASSERT_STRING_EQUAL(hex, want);
        free(ba);
        free(bb);
        if (cases[c].layers == 0)
            continue;
        lm_model *m = NULL;
        CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, a, &err), LM_OK);
        CU_ASSERT_EQUAL(m->hp.head_dim, 256);
        CU_ASSERT_EQUAL(m->hp.tied_output, !p.output_copy);
        CU_ASSERT_EQUAL(m->tok_embd.type, LM_TYPE_Q6_K);
        CU_ASSERT_EQUAL(m->layers[1].wq.type, LM_TYPE_Q4_K);
        /* more bits on the last eighth of the layers (and every third from L/8 on) */
        CU_ASSERT_EQUAL(m->layers[0].wv.type, LM_TYPE_Q4_K);
        CU_ASSERT_EQUAL(m->layers[p.n_layer - 1].wv.type, LM_TYPE_Q6_K);
        if (p.n_expert > 0) {
            CU_ASSERT_EQUAL(m->layers[0].ffn_up_exps.type, LM_TYPE_MXFP4);
            CU_ASSERT_EQUAL(m->layers[0].ffn_gate_inp.type, LM_TYPE_F32);
            CU_ASSERT_EQUAL(m->layers[4].window, 8);
            CU_ASSERT_EQUAL(m->layers[5].window, 0); /* l % 6 == 5: global */
        }
        lm_ctx_params cp = {.backend = "naive", .n_threads = 1, .n_ctx = 32};
        lm_ctx *ctx = NULL;
        CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&ctx, m, &cp, &err), LM_OK);
        int32_t toks[12] = {1};
        for (int i = 1; i < 12; ++i)
            toks[i] = 259 + 17 * i;
        float *lg = malloc(p.n_vocab * sizeof *lg); /* [n_vocab] */
        CU_ASSERT_EQUAL(lm_prefill(ctx, toks, 12, 5, lg, &err), LM_OK);
        bool finite = true;
        for (uint32_t v = 0; v < p.n_vocab; ++v)
            finite = finite && isfinite(lg[v]);
        CU_ASSERT_TRUE(finite);
        free(lg);
        lm_ctx_free(ctx);
        lm_model_free(m);
    }
}

/* The large presets' sizes, measured without writing them: gpt-oss-20b's published parameter
 * count (20.9B), a 4B Gemma 3, and 26B / 4B for the mixture of experts. */
static void test_synth_sizes(void)
{
    lm_err err = {0};
    const struct { const char *name; double lo, hi, act_lo, act_hi, gib_lo, gib_hi; } want[] = {
        {"gptoss-20b", 20.8e9, 21.0e9, 4.0e9, 4.3e9, 12.5, 13.0},
        {"gemma3-4b", 3.8e9, 4.0e9, 3.8e9, 4.0e9, 2.2, 2.6},
        {"moe-26b-a4b", 26.0e9, 26.8e9, 3.8e9, 4.2e9, 13.5, 14.5},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) {
        hx_synth_params p;
        hx_synth_info info;
        CU_ASSERT_EQUAL_FATAL(hx_synth_preset(&p, want[i].name, &err), LM_OK);
        CU_ASSERT_EQUAL_FATAL(hx_synth_measure(&info, &p, p.weight_type, &err), LM_OK);
        const double gib = (double)info.bytes / 1073741824.0;
        fprintf(stderr, "\n  %s: %.3fB parameters, %.3fB per token, %.2f GiB", want[i].name,
                (double)info.n_params / 1e9, (double)info.n_active / 1e9, gib);
        CU_ASSERT_TRUE((double)info.n_params >= want[i].lo && (double)info.n_params <= want[i].hi);
        CU_ASSERT_TRUE((double)info.n_active >= want[i].act_lo
                       && (double)info.n_active <= want[i].act_hi);
        CU_ASSERT_TRUE(gib >= want[i].gib_lo && gib <= want[i].gib_hi);
    }
    hx_synth_params p;
    CU_ASSERT_EQUAL_FATAL(hx_synth_preset(&p, "gptoss-20b", &err), LM_OK);
    CU_ASSERT_TRUE(p.n_layer == 24 && p.n_embd == 2880 && p.n_head == 64 && p.n_head_kv == 8
                   && p.head_dim == 64 && p.n_expert == 32 && p.n_expert_used == 4
                   && p.n_ff_exp == 2880 && p.experts_mxfp4 && p.n_swa == 128 && p.sinks
                   && p.n_vocab == 201088);
    p.n_embd = 2880 + 32; /* not a multiple of 256: no Q4_K_M-like mix */
    CU_ASSERT_EQUAL(hx_synth_measure(&(hx_synth_info){0}, &p, LM_TYPE_Q4_K, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "multiples of 256"));
}

void test_synth_register(void)
{
    CU_pSuite s = CU_add_suite("synth", NULL, NULL);
    CU_add_test(s, "test_synth_deterministic", test_synth_deterministic);
    CU_add_test(s, "test_synth_presets_load", test_synth_presets_load);
    CU_add_test(s, "test_synth_explicit_params", test_synth_explicit_params);
    CU_add_test(s, "test_synth_vocabulary", test_synth_vocabulary);
    CU_add_test(s, "test_synth_logits_peaked", test_synth_logits_peaked);
    CU_add_test(s, "test_synth_command_line", test_synth_command_line);
    CU_add_test(s, "test_synth_cache_entry_repaired", test_synth_cache_entry_repaired);
    CU_add_test(s, "test_synth_encoders", test_synth_encoders);
    CU_add_test(s, "test_synth_streamed_equals_memory", test_synth_streamed_equals_memory);
    CU_add_test(s, "test_synth_sizes", test_synth_sizes);
}
