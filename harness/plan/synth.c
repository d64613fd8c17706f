/* synth.c — deterministic synthetic llama models: weights from a documented PRNG, a generated
 * SentencePiece vocabulary, written as GGUF v3.
 *
 * PRNG. Every tensor has its own stream, so that its values do not depend on the order or the
 * presence of other tensors: state0 = seed XOR FNV-1a-64(tensor name), then splitmix64
 * (Steele, Lea, Flood 2014; the constants of Vigna's reference code) gives one 64-bit word per
 * element. Its top 24 bits become u = (k - 2^23 + 0.5) / 2^23, uniform and symmetric in (-1, 1),
 * and the element is (float)(u * sqrt(3) * sigma): uniform with standard deviation sigma.
 * Per element only +, *, / and sqrt (correctly rounded in IEEE arithmetic) are used — no libm
 * transcendental whose last bit may differ between C libraries — so the same (seed, params,
 * type) gives the same bytes on every machine.
 *
 * Scales (n = n_embd, nq = n_head * head_dim, V = n_vocab, L = n_layer), chosen so that logits
 * are peaked, not uniform, and greedy text does not just repeat the last token:
 *   token_embd  sigma 1                  (rows of squared norm ~n; output is tied to it);
 *               then every row except whole words ("▁once") and . , ! ? multiplied by 1/4
 *   attn_norm, ffn_norm   1 + 0.1 u      (near-identity gains)
 *   wq  1.5/sqrt(n), wk, wv, w_gate, w_up  1/sqrt(n)   (unit-variance projections of the
 *                                        normalised input; q a little larger for sharper
 *                                        attention)
 *   wo  a/sqrt(nq), w_down  1.7 a/sqrt(n_ff)   (each block adds a random vector of per-entry
 *                                        variance ~a^2 to the residual; 1.7 ~ 1/sqrt(E[silu(g)^2
 *                                        u^2]) for unit normal g, u)
 *   output_norm  C/sqrt(n)               (constant: a logit then has standard deviation ~C)
 * with C = c sqrt(2 ln V), c = 2.25 (the expected maximum of V unit normals is ~sqrt(2 ln V),
 * so the top logit leads the next ones by a few units at every vocabulary size), and
 * a^2 = (K n / (2 ln V) - 1) / (2 L), K = 64: the context-dependent part of the residual then
 * outweighs the token's own embedding, whose tied logit would otherwise win every time (with
 * K = 1 greedy generation repeats the prompt's last token forever). Measured with seed 0 over
 * random 8-token prompts, top-1 softmax probability at the last prompt position: `tiny` 0.81
 * on average (> 0.3 for 20 of 20 prompts; naive backend), `smollm2-135m` 0.83 (6 of 6; blas),
 * with 15-18 distinct tokens among 32 greedy ones; test_synth re-measures it. The scale
 * constants (the only place log() enters) are rounded to float32, so a last-bit difference
 * between C libraries' log() cannot change the file in practice.
 *
 * Vocabulary (SentencePiece, llama style): <unk> = 0 (type 2), <s> = 1 and </s> = 2 (control,
 * type 3), <0x00>..<0xFF> (byte, type 6), then normal pieces (type 1) with scores 0, -1, -2, ...
 * in this order until the vocabulary is full: "▁"; the letters, punctuation and digits; for
 * each word of a list of common English words, every prefix of "▁word" from two characters up
 * (so that SentencePiece's pairwise merges can reach the whole word); then letter strings of
 * length 1..4 with and without a leading "▁". Duplicates are skipped. */
#include "plan/synth.h"

#include "fs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's word-boundary mark */
#define LOGIT_PEAK 2.25  /* c above */
#define SELF_RATIO 64.0  /* K above */

typedef struct preset {
    const char *name;
    hx_synth_params p;
} preset;

static const preset presets[] = {
    /* The `make demo` model: runs in milliseconds. */
    {"tiny", {"kvdrift-synth-tiny", 64, 4, 8, 4, 192, 512, 2048, 10000.0f, 1e-5f, .n_swa = 0}},
    /* SmolLM2-135M's shape (head_dim 64, GQA 3:1, tied embeddings): for benchmarks. */
    {"smollm2-135m", {"kvdrift-synth-smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192,
                      100000.0f, 1e-5f, .n_swa = 0}},
    /* Gemma-3-like: window 8 on 5 of every 6 layers (layer 5 global), so that short prompts
     * already exceed the window. */
    {"swa-5to1", {"kvdrift-synth-swa-5to1", 64, 6, 8, 4, 192, 512, 2048, 10000.0f, 1e-5f,
                  .n_swa = 8, .swa_period = 6}},
    /* gpt-oss-like attention: alternating window-8 / full layers and learned sinks. */
    {"sinks-alt", {"kvdrift-synth-sinks-alt", 64, 4, 8, 4, 192, 512, 2048, 10000.0f, 1e-5f,
                   .n_swa = 8, .swa_period = 2, .sinks = true}},
    /* Mixtral-like MoE: 8 experts, top-2, softmax over all then renormalised. */
    {"moe", {"kvdrift-synth-moe", 64, 4, 8, 4, 192, 512, 2048, 10000.0f, 1e-5f,
             .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 96, .gating_func = 1}},
    /* gpt-oss-like: 32 experts, top-4, softmax over the selected; alternating windows, sinks. */
    {"moe-32x4", {"kvdrift-synth-moe-32x4", 64, 4, 8, 4, 192, 512, 2048, 10000.0f, 1e-5f,
                  .n_swa = 8, .swa_period = 2, .sinks = true, .n_expert = 32,
                  .n_expert_used = 4, .n_ff_exp = 48, .gating_func = 3}},
    /* A draft for "tiny" (speculative decoding): the same vocabulary, one narrow layer. */
    {"tiny-draft", {"kvdrift-synth-tiny-draft", 32, 1, 4, 2, 96, 512, 2048, 10000.0f, 1e-5f,
                    .n_swa = 0}},
    /* "tiny" with a "<mask>" control token (the last id): for the iterative block sampler. */
    {"tiny-mask", {"kvdrift-synth-tiny-mask", 64, 4, 8, 4, 192, 512, 2048, 10000.0f, 1e-5f,
                   .mask_token = true}},
    /* Gemma 3's architecture, small: window 16 on layers 0-4, layer 5 global (the row's
     * pattern l % 6 < 5; no pattern key, as in real files), one KV head, head_dim 16, theta
     * 1e6 global / 10000 sliding, so a 40-token prompt exceeds the window. */
    {"gemma3", {"kvdrift-synth-gemma3", 64, 6, 4, 1, 192, 512, 2048, 1000000.0f, 1e-6f,
                .n_swa = 16, .swa_period = 0, .arch = "gemma3"}},
    /* Qwen 3's architecture, small: per-head Q/K norms, NeoX RoPE, GQA 2:1. */
    {"qwen3", {"kvdrift-synth-qwen3", 64, 4, 8, 4, 192, 512, 2048, 1000000.0f, 1e-6f,
               .n_swa = 0, .arch = "qwen3"}},
    /* Qwen 3 MoE's architecture, small: qwen3's attention, 16 experts of n_ff 48, top-4,
     * softmax routing renormalised over the 4 (the architecture's fixed routing: the file
     * carries only expert_count, expert_used_count and expert_feed_forward_length, as
     * llama.cpp's converter writes them). */
    {"qwen3moe", {"kvdrift-synth-qwen3moe", 64, 4, 8, 4, 192, 512, 2048, 1000000.0f, 1e-6f,
                  .n_expert = 16, .n_expert_used = 4, .n_ff_exp = 48, .gating_func = 1,
                  .arch = "qwen3moe"}},
    /* gpt-oss's architecture, small: 4 heads of 16, GQA 2:1, biases on Q, K, V, O, learned
     * sinks, window 8 on even layers (the row's pattern), theta 150000 with YaRN (factor 32,
     * original context 4096: pairs 2..5 of 8 interpolated), 16 experts of 48 with biases,
     * top-4, softmax over the 4, swiglu_oai experts whose gate and up projections have
     * standard deviation 2.5, so that the limit 7 clamps some of them. */
    {"gptoss", {"kvdrift-synth-gptoss", 64, 4, 4, 2, 192, 512, 2048, 150000.0f, 1e-5f,
                .n_swa = 8, .sinks = true, .n_expert = 16, .n_expert_used = 4, .n_ff_exp = 48,
                .gating_func = 3, .arch = "gpt-oss"}},
    /* gptoss with its experts in MXFP4, as the released gpt-oss files store them (n_ff_exp 64:
     * rows of whole 32-element blocks). */
    {"gptoss-mxfp4", {"kvdrift-synth-gptoss-mxfp4", 64, 4, 4, 2, 192, 512, 2048, 150000.0f,
                      1e-5f, .n_swa = 8, .sinks = true, .n_expert = 16, .n_expert_used = 4,
                      .n_ff_exp = 64, .gating_func = 3, .experts_mxfp4 = true,
                      .arch = "gpt-oss"}},
};

const char *hx_synth_preset_name(size_t i)
{
    return i < sizeof presets / sizeof presets[0] ? presets[i].name : NULL;
}

int hx_synth_preset(hx_synth_params *out, const char *name, lm_err *err)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; ++i)
        if (strcmp(presets[i].name, name) == 0) {
            *out = presets[i].p;
            return LM_OK;
        }
    return LM_FAIL(err, LM_E_INPUT, "unknown synth preset '%s' (presets: tiny, smollm2-135m, "
                   "swa-5to1, sinks-alt, moe, moe-32x4, tiny-draft, tiny-mask, gemma3, qwen3, "
                   "qwen3moe, gptoss, gptoss-mxfp4)",
                   name);
}

/* A bad parameter: one message naming it (the format must be a string literal). */
#define BAD(...) LM_FAIL(err, LM_E_INPUT, "synth parameters: " __VA_ARGS__)

int hx_synth_check(const hx_synth_params *p, lm_err *err)
{
    if (p->n_embd == 0 || p->n_layer == 0 || p->n_head == 0 || p->n_head_kv == 0 || p->n_ff == 0
        || p->n_ctx == 0)
        return BAD("n_embd, n_layer, n_head, n_head_kv, n_ff and n_ctx must all be positive");
    if (p->n_embd % p->n_head != 0)
        return BAD("n_embd %u is not a multiple of n_head %u", p->n_embd, p->n_head);
    if ((p->n_embd / p->n_head) % 2 != 0)
        return BAD("head_dim n_embd/n_head = %u must be even (RoPE rotates pairs)",
                   p->n_embd / p->n_head);
    if (p->n_head % p->n_head_kv != 0)
        return BAD("n_head_kv %u does not divide n_head %u", p->n_head_kv, p->n_head);
    if (p->n_vocab < HX_SYNTH_MIN_VOCAB || p->n_vocab > HX_SYNTH_MAX_VOCAB)
        return BAD("n_vocab %u is outside %u..%u", p->n_vocab, HX_SYNTH_MIN_VOCAB,
                   HX_SYNTH_MAX_VOCAB);
    if (p->n_embd > 65536 || p->n_ff > 262144 || p->n_layer > 1024)
        return BAD("n_embd (<= 65536), n_ff (<= 262144) or n_layer (<= 1024) too large");
    if (!(p->rope_theta > 0.0f) || p->rope_theta > 1e30f)
        return BAD("rope theta %g must be positive and finite", (double)p->rope_theta);
    if (!(p->rms_eps > 0.0f) || !(p->rms_eps < 1.0f))
        return BAD("rms eps %g must be in (0, 1)", (double)p->rms_eps);
    const bool q3moe = strcmp(p->arch, "qwen3moe") == 0, gptoss = strcmp(p->arch, "gpt-oss") == 0;
    if (p->arch[0] != '\0' && strcmp(p->arch, "gemma3") != 0 && strcmp(p->arch, "qwen3") != 0
        && !q3moe && !gptoss)
        return BAD("architecture '%.16s' is not one synth writes (llama, gemma3, qwen3, "
                   "qwen3moe, gpt-oss)", p->arch);
    if ((q3moe || gptoss) && (p->n_expert == 0 || p->gating_func != (q3moe ? 1u : 3u)))
        return BAD("architecture '%.16s' needs experts routed by gating_func %u", p->arch,
                   q3moe ? 1u : 3u);
    if (p->n_expert > 0 && (p->n_expert > 256 || p->n_expert_used == 0 || p->n_expert_used > 32
                            || p->n_expert_used > p->n_expert || p->n_ff_exp == 0
                            || p->n_ff_exp > 262144))
        return BAD("experts: need 1 <= used (%u) <= count (%u) <= 256, used <= 32, "
                   "0 < n_ff_exp (%u) <= 262144", p->n_expert_used, p->n_expert, p->n_ff_exp);
    if (p->experts_mxfp4 && (p->n_expert == 0 || p->n_embd % 32 != 0 || p->n_ff_exp % 32 != 0))
        return BAD("MXFP4 experts need experts, n_embd (%u) and n_ff_exp (%u) multiples of 32",
                   p->n_embd, p->n_ff_exp);
    if (p->n_expert > 0 && p->gating_func != 1 && p->gating_func != 3)
        return BAD("gating_func %u must be 1 or 3", p->gating_func);
    return LM_OK;
}

#undef BAD

/* ---------------------------------------------------------------- PRNG */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (; *s; ++s)
        h = (h ^ (uint8_t)*s) * UINT64_C(0x100000001b3);
    return h;
}

/* out[n] = center + uniform values of standard deviation sigma, from name's stream. */
static void fill(float *out, uint64_t n, const char *name, uint64_t seed, double center,
                 double sigma)
{
    uint64_t st = seed ^ fnv1a64(name);
    double half_width = sqrt(3.0) * sigma;
    for (uint64_t i = 0; i < n; ++i) {
        double k = (double)(splitmix64(&st) >> 40);
        double u = (k - 8388608.0 + 0.5) / 8388608.0; /* (-1, 1), symmetric */
        out[i] = (float)(center + u * half_width);
    }
}

/* ---------------------------------------------------------------- vocabulary */

typedef struct vocab {
    char **tok;      /* [cap] */
    float *score;    /* [cap] */
    int32_t *type;   /* [cap] */
    uint32_t n, cap;
    uint32_t *slots; /* open-addressing set of token indices + 1 (0 = empty) */
    uint32_t n_slots;
    uint32_t n_normal;
} vocab;

static uint32_t *slot_of(vocab *v, const char *s)
{
    uint32_t mask = v->n_slots - 1, i = (uint32_t)fnv1a64(s) & mask;
    while (v->slots[i] != 0 && strcmp(v->tok[v->slots[i] - 1], s) != 0)
        i = (i + 1) & mask;
    return &v->slots[i];
}

/* Adds s unless present or full. Returns -1 on out of memory. */
static int vadd(vocab *v, const char *s, int32_t type)
{
    if (v->n == v->cap)
        return 0;
    uint32_t *slot = slot_of(v, s);
    if (*slot != 0)
        return 0;
    if ((v->tok[v->n] = strdup(s)) == NULL)
        return -1;
    v->type[v->n] = type;
    v->score[v->n] = type == 1 ? -(float)v->n_normal++ : 0.0f;
    *slot = ++v->n;
    return 0;
}

static const char *const words[] = {
    "Once", "upon", "a", "time", "there", "was", "little", "girl", "named", "Lily", "She",
    "loved", "to", "play", "outside", "in", "the", "park", "One", "day", "she", "saw", "big",
    "and", "boy", "Tom", "He", "he", "his", "her", "mom", "said", "The", "They", "were", "happy",
    "with", "friend", "dog", "cat", "ball", "tree", "sun", "went", "home", "of", "it", "is",
    "very", "had", "on", "so", "but", "you", "can", "not", "they", "up", "for", "that", "at",
    "be", "all", "wanted", "toy", "red", "blue", "bird", "fun", "help", "an", "sad", "good",
    "ran", "look", "together", "after", "too", "could", "what", "do", "did", "like", "asked",
    "friends", "from", "smiled", "new", "again", "get", "then", "are", "me", "my", "We", "I",
    "It", "was", "found", "small", "water", "box", "made", "have", "name", "flower", "car",
    "book", "cake", "sky", "tall", "hug", "thank", "sorry", "cried", "jump", "run", "sing",
};

static int build_vocab(vocab *v)
{
    char buf[64];
    vadd(v, "<unk>", 2);
    vadd(v, "<s>", 3);
    vadd(v, "</s>", 3);
    for (int b = 0; b < 256; ++b) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        if (vadd(v, buf, 6))
            return -1;
    }
    if (vadd(v, SPACE, 1))
        return -1;
    static const char singles[] = "abcdefghijklmnopqrstuvwxyz.,!?'\"-:;"
                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for (const char *c = singles; *c; ++c) {
        buf[0] = *c;
        buf[1] = '\0';
        if (vadd(v, buf, 1))
            return -1;
    }
    for (size_t w = 0; w < sizeof words / sizeof words[0]; ++w)
        for (size_t j = 1; j <= strlen(words[w]); ++j) {
            snprintf(buf, sizeof buf, SPACE "%.*s", (int)j, words[w]);
            if (vadd(v, buf, 1))
                return -1;
        }
    /* Letter strings of length 1..4 (26 + 676 + 17576 + 456976, twice: ample for the max). */
    for (int len = 1; len <= 4 && v->n < v->cap; ++len) {
        uint32_t count = 1;
        for (int i = 0; i < len; ++i)
            count *= 26;
        for (uint32_t k = 0; k < count && v->n < v->cap; ++k) {
            char s[8];
            uint32_t x = k;
            for (int i = len - 1; i >= 0; --i, x /= 26)
                s[i] = (char)('a' + x % 26);
            s[len] = '\0';
            snprintf(buf, sizeof buf, SPACE "%s", s);
            if (vadd(v, buf, 1) || vadd(v, s, 1))
                return -1;
        }
    }
    return v->n == v->cap ? 0 : -1;
}

static void vocab_free(vocab *v)
{
    if (v->tok != NULL)
        for (uint32_t i = 0; i < v->n; ++i)
            free(v->tok[i]);
    free(v->tok);
    free(v->score);
    free(v->type);
    free(v->slots);
}

/* Writes the vocabulary; whole[i] = 1 when token i is a whole word ("▁word" of the list) or
 * sentence punctuation. whole: [n_vocab] */
static int write_vocab(lm_gguf_writer *w, uint32_t n_vocab, bool mask, uint8_t *whole,
                       lm_err *err)
{
    vocab v = {0};
    v.cap = mask ? n_vocab - 1 : n_vocab;
    v.n_slots = 1;
    while (v.n_slots < 2 * n_vocab)
        v.n_slots *= 2;
    v.tok = calloc(n_vocab, sizeof *v.tok);
    v.score = calloc(n_vocab, sizeof *v.score);
    v.type = calloc(n_vocab, sizeof *v.type);
    v.slots = calloc(v.n_slots, sizeof *v.slots);
    int rc;
    if (v.tok == NULL || v.score == NULL || v.type == NULL || v.slots == NULL
        || build_vocab(&v) != 0 || (mask && (v.cap = n_vocab, vadd(&v, "<mask>", 3) != 0))) {
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory building the synth vocabulary");
        goto done;
    }
    memset(whole, 0, n_vocab);
    char buf[64];
    for (size_t i = 0; i < sizeof words / sizeof words[0] + 4; ++i) {
        if (i < sizeof words / sizeof words[0])
            snprintf(buf, sizeof buf, SPACE "%s", words[i]);
        else
            snprintf(buf, sizeof buf, "%c", ".,!?"[i - sizeof words / sizeof words[0]]);
        uint32_t slot = *slot_of(&v, buf);
        if (slot != 0)
            whole[slot - 1] = 1;
    }
    if ((rc = lm_gguf_w_str(w, "tokenizer.ggml.model", "llama", err))
        || (rc = lm_gguf_w_arr(w, "tokenizer.ggml.tokens", LM_GGUF_STR, v.tok, v.n, err))
        || (rc = lm_gguf_w_arr(w, "tokenizer.ggml.scores", LM_GGUF_F32, v.score, v.n, err))
        || (rc = lm_gguf_w_arr(w, "tokenizer.ggml.token_type", LM_GGUF_I32, v.type, v.n, err))
        || (rc = lm_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1, err))
        || (rc = lm_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2, err))
        || (rc = lm_gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0, err))
        || (rc = lm_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", true, err)))
        goto done;
done:
    vocab_free(&v);
    return rc;
}

/* ---------------------------------------------------------------- model */

static int add_weight(lm_gguf_writer *w, float *scratch, const char *name, lm_tensor_type type,
                      uint64_t ne0, uint64_t ne1, uint64_t seed, double center, double sigma,
                      lm_err *err)
{
    uint64_t ne[2] = {ne0, ne1};
    fill(scratch, ne0 * ne1, name, seed, center, sigma);
    return lm_gguf_w_tensor_f32(w, name, ne1 == 1 ? LM_TYPE_F32 : type, ne1 == 1 ? 1 : 2, ne,
                                scratch, err);
}

static int write_keys(lm_gguf_writer *w, const hx_synth_params *p, uint64_t seed,
                      lm_tensor_type type, uint8_t *whole, lm_err *err)
{
    char seed_str[32];
    snprintf(seed_str, sizeof seed_str, "0x%016llx", (unsigned long long)seed);
    uint32_t file_type = type == LM_TYPE_F32 ? 0 : type == LM_TYPE_F16 ? 1 : 32;
    const char *arch = p->arch[0] ? p->arch : "llama";
    char k[17][80];
    static const char *const sfx[17] = {
        "context_length", "embedding_length", "block_count", "feed_forward_length",
        "attention.head_count", "attention.head_count_kv", "attention.key_length",
        "rope.dimension_count", "rope.freq_base", "attention.layer_norm_rms_epsilon",
        "attention.sliding_window", "attention.sliding_window_pattern", "expert_count",
        "expert_used_count", "expert_feed_forward_length", "expert_gating_func",
        "expert_weights_norm"};
    for (int i = 0; i < 17; ++i)
        snprintf(k[i], sizeof k[i], "%s.%s", arch, sfx[i]);
    int rc;
    if ((rc = lm_gguf_w_str(w, "general.architecture", arch, err))
        || (rc = lm_gguf_w_str(w, "general.name", p->name, err))
        || (rc = lm_gguf_w_u32(w, "general.file_type", file_type, err))
        || (rc = lm_gguf_w_str(w, "kvdrift.synth.seed", seed_str, err))
        || (rc = lm_gguf_w_u32(w, "kvdrift.synth.version", 1, err))
        || (rc = lm_gguf_w_u32(w, k[0], p->n_ctx, err))
        || (rc = lm_gguf_w_u32(w, k[1], p->n_embd, err))
        || (rc = lm_gguf_w_u32(w, k[2], p->n_layer, err))
        || (rc = lm_gguf_w_u32(w, k[3], p->n_ff, err))
        || (rc = lm_gguf_w_u32(w, k[4], p->n_head, err))
        || (rc = lm_gguf_w_u32(w, k[5], p->n_head_kv, err))
        || (rc = lm_gguf_w_u32(w, k[6], p->n_embd / p->n_head, err))
        || (rc = lm_gguf_w_u32(w, k[7], p->n_embd / p->n_head, err))
        || (rc = lm_gguf_w_f32(w, k[8], p->rope_theta, err))
        || (rc = lm_gguf_w_f32(w, k[9], p->rms_eps, err)))
        return rc;
    if (p->n_swa > 0
        && ((rc = lm_gguf_w_u32(w, k[10], p->n_swa, err))
            || (p->arch[0] == '\0' /* other rows carry their own pattern */
                && (rc = lm_gguf_w_u32(w, k[11], p->swa_period, err)))))
        return rc;
    const bool gptoss = strcmp(p->arch, "gpt-oss") == 0;
    /* qwen3moe and gpt-oss: the row's routing, no keys (as llama.cpp's converter writes) */
    const bool routing_keys = strcmp(p->arch, "qwen3moe") != 0 && !gptoss;
    if (p->n_expert > 0
        && ((rc = lm_gguf_w_u32(w, k[12], p->n_expert, err))
            || (rc = lm_gguf_w_u32(w, k[13], p->n_expert_used, err))
            || (rc = lm_gguf_w_u32(w, k[14], p->n_ff_exp, err))
            || (routing_keys && (rc = lm_gguf_w_u32(w, k[15], p->gating_func, err)))
            || (routing_keys && (rc = lm_gguf_w_bool(w, k[16], p->gating_func == 1, err)))))
        return rc;
    /* gpt-oss: YaRN as its converter writes it from the Hugging Face config */
    char yk[5][80];
    static const char *const ysfx[5] = {"rope.scaling.type", "rope.scaling.factor",
                                        "rope.scaling.original_context_length",
                                        "rope.scaling.yarn_beta_fast",
                                        "rope.scaling.yarn_beta_slow"};
    for (int i = 0; i < 5; ++i)
        snprintf(yk[i], sizeof yk[i], "%s.%s", arch, ysfx[i]);
    if (gptoss
        && ((rc = lm_gguf_w_str(w, yk[0], "yarn", err))
            || (rc = lm_gguf_w_f32(w, yk[1], 32.0f, err))
            || (rc = lm_gguf_w_u32(w, yk[2], 4096, err))
            || (rc = lm_gguf_w_f32(w, yk[3], 32.0f, err))
            || (rc = lm_gguf_w_f32(w, yk[4], 1.0f, err))))
        return rc;
    return write_vocab(w, p->n_vocab, p->mask_token, whole, err);
}

/* Per-head Q/K norm gains 1 + 0.1 u (gemma3, qwen3, qwen3moe) and, for gemma3, the post norms of both
 * blocks: gain c_post = a * sqrt(n) (1 + 0.1 u), so that each block adds a vector of per-entry
 * size ~a relative to the embedding, which gemma3 scales by sqrt(n). */
static int add_arch_weights(lm_gguf_writer *w, float *scratch, const hx_synth_params *p,
                            uint32_t l, lm_tensor_type type, uint64_t seed, double a,
                            lm_err *err)
{
    const bool gemma = strcmp(p->arch, "gemma3") == 0;
    if (!gemma && strcmp(p->arch, "qwen3") != 0 && strcmp(p->arch, "qwen3moe") != 0)
        return LM_OK;
    const uint64_t hd = p->n_embd / p->n_head;
    const double c_post = (double)(float)(a * sqrt((double)p->n_embd));
    const struct { const char *s; uint64_t ne0; double c, sigma; } t[] = {
        {"attn_q_norm.weight", hd, 1.0, 0.1 / sqrt(3.0)},
        {"attn_k_norm.weight", hd, 1.0, 0.1 / sqrt(3.0)},
        {"post_attention_norm.weight", p->n_embd, c_post, 0.1 * c_post / sqrt(3.0)},
        {"post_ffw_norm.weight", p->n_embd, c_post, 0.1 * c_post / sqrt(3.0)},
    };
    char name[64];
    for (size_t i = 0; i < (gemma ? 4u : 2u); ++i) {
        snprintf(name, sizeof name, "blk.%u.%s", l, t[i].s);
        int rc = add_weight(w, scratch, name, type, t[i].ne0, 1, seed, t[i].c, t[i].sigma, err);
        if (rc)
            return rc;
    }
    return LM_OK;
}

/* MXFP4 blocks of x[n] (n a multiple of 32) into out[n / 32 * 17]: per block of 32, the scale
 * byte e = floor(log2(amax)) - 2 + 127 (0 when amax = 0; clamped to 0..254) and d = 2^(e - 128),
 * each value's e2m1 code the first i of ggml's kvalues_mxfp4 (doubled e2m1 values) with the
 * smallest |kvalues[i] d - x| (ggml's quantize_row_mxfp4_ref, with floor(log2) taken from
 * frexp's exponent: exact). Nibbles as ggml's: element j low, j + 16 high. */
static void to_mxfp4(uint8_t *out, const float *x, uint64_t n)
{
    static const int8_t kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (uint64_t b = 0; b < n / 32; ++b, x += 32, out += 17) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        int ex = 0;
        if (amax > 0.0f)
            (void)frexpf(amax, &ex); /* amax = m 2^ex, m in [0.5, 1): floor(log2) = ex - 1 */
        int e = amax > 0.0f ? ex - 1 - 2 + 127 : 0;
        e = e < 0 ? 0 : e > 254 ? 254 : e;
        const float d = ldexpf(1.0f, e - 128);
        out[0] = (uint8_t)e;
        for (int j = 0; j < 16; ++j) {
            uint8_t q[2];
            for (int h = 0; h < 2; ++h) {
                const float v = x[j + 16 * h];
                int best = 0;
                float best_err = fabsf((float)kv[0] * d - v);
                for (int i = 1; i < 16; ++i) {
                    const float er = fabsf((float)kv[i] * d - v);
                    if (er < best_err) {
                        best = i;
                        best_err = er;
                    }
                }
                q[h] = (uint8_t)best;
            }
            out[1 + j] = (uint8_t)(q[0] | q[1] << 4);
        }
    }
}

/* Sinks and MoE tensors of layer l. Sinks: logits of standard deviation 1 (the scores of a
 * peaked head are a few units, so a sink takes a visible but not dominant share). Router:
 * 2/sqrt(n), router logits of standard deviation ~2 (peaked routing, margins of order 1).
 * Experts as the dense FFN, ggml order ne {n_embd, n_ff_exp, n_expert} for gate and up and
 * {n_ff_exp, n_embd, n_expert} for down; each expert's output carries the same variance as a
 * dense FFN's, and the gates sum to 1. */
static int add_variant_weights(lm_gguf_writer *w, float *scratch, const hx_synth_params *p,
                               uint32_t l, lm_tensor_type type, uint64_t seed, double a,
                               lm_err *err)
{
    const uint64_t n = p->n_embd, X = p->n_expert, FE = p->n_ff_exp;
    const double sn = (double)(float)(1.0 / sqrt((double)n));
    char name[64];
    int rc;
    if (p->sinks) {
        snprintf(name, sizeof name, "blk.%u.attn_sinks.weight", l);
        if ((rc = add_weight(w, scratch, name, type, p->n_head, 1, seed, 0.0, 1.0, err)))
            return rc;
    }
    if (X == 0)
        return LM_OK;
    snprintf(name, sizeof name, "blk.%u.ffn_gate_inp.weight", l);
    if ((rc = add_weight(w, scratch, name, type, n, X, seed, 0.0, 2.0 * sn, err)))
        return rc;
    /* gpt-oss: gate and up of standard deviation 2.5 (swiglu_oai's limit 7 clamps some), down
     * 8 times smaller (E[swiglu_oai^2] is ~64 times silu(g) u's for those inputs); biases:
     * router and experts' gate and up 0.5, down 0.1 a */
    const bool oai = strcmp(p->arch, "gpt-oss") == 0;
    const double gu = oai ? 2.5 * sn : sn, dn = (oai ? 1.7 / 8.0 : 1.7) * a / sqrt((double)FE);
    const struct { const char *s; uint64_t ne0, ne1; double sigma; } e[] = {
        {"ffn_gate_exps.weight", n, FE, gu},
        {"ffn_up_exps.weight", n, FE, gu},
        {"ffn_down_exps.weight", FE, n, dn},
    };
    const struct { const char *s; uint64_t ne0, ne1; double sigma; } eb[] = {
        {"ffn_gate_inp.bias", X, 1, 0.5},
        {"ffn_gate_exps.bias", FE, X, 0.5},
        {"ffn_up_exps.bias", FE, X, 0.5},
        {"ffn_down_exps.bias", n, X, 0.1 * a},
    };
    for (size_t i = 0; oai && i < 4; ++i) {
        snprintf(name, sizeof name, "blk.%u.%s", l, eb[i].s);
        if ((rc = add_weight(w, scratch, name, LM_TYPE_F32, eb[i].ne0, eb[i].ne1, seed, 0.0,
                             eb[i].sigma, err)))
            return rc;
    }
    for (size_t i = 0; i < 3; ++i) {
        uint64_t ne[3] = {e[i].ne0, e[i].ne1, X};
        snprintf(name, sizeof name, "blk.%u.%s", l, e[i].s);
        fill(scratch, ne[0] * ne[1] * ne[2], name, seed, 0.0, e[i].sigma);
        if (p->experts_mxfp4) {
            const uint64_t nb = ne[0] * ne[1] * ne[2] / 32 * 17;
            uint8_t *q = malloc((size_t)nb);
            if (q == NULL)
                return LM_FAIL(err, LM_E_NOMEM, "synth: out of memory");
            to_mxfp4(q, scratch, ne[0] * ne[1] * ne[2]);
            rc = lm_gguf_w_tensor_raw(w, name, LM_TYPE_MXFP4, 3, ne, q, nb, err);
            free(q);
        } else {
            rc = lm_gguf_w_tensor_f32(w, name, type, 3, ne, scratch, err);
        }
        if (rc)
            return rc;
    }
    return LM_OK;
}

int hx_synth_write_params(const char *path, const hx_synth_params *p, uint64_t seed,
                          lm_tensor_type type, lm_err *err)
{
    int rc = hx_synth_check(p, err);
    if (rc)
        return rc;
    if (type != LM_TYPE_F32 && type != LM_TYPE_F16 && type != LM_TYPE_BF16)
        return LM_FAIL(err, LM_E_INPUT, "synth parameters: type %s not supported (f32, f16 "
                       "or bf16)", lm_tensor_type_name(type));
    const uint64_t n = p->n_embd, V = p->n_vocab, F = p->n_ff;
    const uint64_t hd = n / p->n_head, nq = hd * p->n_head, nkv = hd * p->n_head_kv;
    const double sn = (double)(float)(1.0 / sqrt((double)n));
    const double logit_scale = (double)(float)(LOGIT_PEAK * sqrt(2.0 * log((double)V)));
    double r2 = SELF_RATIO * (double)n / (2.0 * log((double)V)) - 1.0;
    const double a = (double)(float)sqrt((r2 > 0.05 ? r2 : 0.05) / (2.0 * (double)p->n_layer));
    uint64_t biggest = V * n > F * n ? V * n : F * n;
    const uint64_t X = p->n_expert, FE = p->n_ff_exp;
    biggest = X * FE * n > biggest ? X * FE * n : biggest;
    lm_gguf_writer *w = NULL;
    float *scratch = malloc((size_t)biggest * sizeof *scratch); /* [biggest] */
    uint8_t *whole = malloc(V);                                /* [n_vocab] */
    if (scratch == NULL || whole == NULL) {
        free(scratch);
        free(whole);
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    }
    if ((rc = lm_gguf_writer_create(&w, err)) || (rc = write_keys(w, p, seed, type, whole, err)))
        goto done;
    /* output_norm below is the constant gain C/sqrt(n): a zero-width "uniform" around it.
     * Every token but whole words and sentence punctuation gets a row a quarter as long
     * (exact: a power of two), so its tied logit rarely wins and greedy text is made of
     * words, not word fragments or stray bytes. */
    fill(scratch, n * V, "token_embd.weight", seed, 0.0, 1.0);
    for (uint64_t r = 0; r < V; ++r)
        if (!whole[r])
            for (uint64_t i = 0; i < n; ++i)
                scratch[r * n + i] *= 0.25f;
    uint64_t ne_embd[2] = {n, V};
    const bool gptoss = strcmp(p->arch, "gpt-oss") == 0;
    if ((rc = lm_gguf_w_tensor_f32(w, "token_embd.weight", type, 2, ne_embd, scratch, err))
        || (gptoss /* llama.cpp's gpt-oss needs output.weight: the embedding's values */
            && (rc = lm_gguf_w_tensor_f32(w, "output.weight", type, 2, ne_embd, scratch, err)))
        || (rc = add_weight(w, scratch, "output_norm.weight", type, n, 1, seed, logit_scale * sn,
                            0.0, err)))
        goto done;
    char name[64];
    for (uint32_t l = 0; l < p->n_layer; ++l) {
        struct { const char *s; uint64_t ne0, ne1; double c, sigma; } t[] = {
            {"attn_norm.weight", n, 1, 1.0, 0.1 / sqrt(3.0)},
            {"attn_q.weight", n, nq, 0.0, 1.5 * sn},
            {"attn_k.weight", n, nkv, 0.0, sn},
            {"attn_v.weight", n, nkv, 0.0, sn},
            {"attn_output.weight", nq, n, 0.0, a / sqrt((double)nq)},
            /* gpt-oss's FFN norm has llama.cpp's post-attention name */
            {gptoss ? "post_attention_norm.weight" : "ffn_norm.weight", n, 1, 1.0, 0.1 / sqrt(3.0)},
            {"ffn_gate.weight", n, F, 0.0, sn},
            {"ffn_up.weight", n, F, 0.0, sn},
            {"ffn_down.weight", F, n, 0.0, 1.7 * a / sqrt((double)F)},
        };
        /* MoE layers have no dense FFN (the last three entries) */
        const size_t n_t = sizeof t / sizeof t[0] - (X > 0 ? 3 : 0);
        /* gpt-oss: biases on Q, K, V (0.1) and O (0.1 a) */
        const struct { const char *s; uint64_t ne0; double sigma; } ab[] = {
            {"attn_q.bias", nq, 0.1}, {"attn_k.bias", nkv, 0.1}, {"attn_v.bias", nkv, 0.1},
            {"attn_output.bias", n, 0.1 * a}};
        for (size_t i = 0; gptoss && i < 4; ++i) {
            snprintf(name, sizeof name, "blk.%u.%s", l, ab[i].s);
            if ((rc = add_weight(w, scratch, name, LM_TYPE_F32, ab[i].ne0, 1, seed, 0.0,
                                 ab[i].sigma, err)))
                goto done;
        }
        if ((rc = add_variant_weights(w, scratch, p, l, type, seed, a, err))
            || (rc = add_arch_weights(w, scratch, p, l, type, seed, a, err)))
            goto done;
        for (size_t i = 0; i < n_t; ++i) {
            snprintf(name, sizeof name, "blk.%u.%s", l, t[i].s);
            if ((rc = add_weight(w, scratch, name, type, t[i].ne0, t[i].ne1, seed, t[i].c,
                                 t[i].sigma, err)))
                goto done;
        }
    }
    rc = lm_gguf_writer_save(w, path, err);
done:
    lm_gguf_writer_free(w);
    free(scratch);
    free(whole);
    return rc;
}

int hx_synth_write(const char *path, const char *preset_name, uint64_t seed, lm_tensor_type type,
                   lm_err *err)
{
    hx_synth_params p;
    int rc = hx_synth_preset(&p, preset_name, err);
    return rc ? rc : hx_synth_write_params(path, &p, seed, type, err);
}

/* XXH3-128 of a regular file's bytes; false when it cannot be read. */
static bool file_hash(XXH128_hash_t *out, const char *path)
{
    char *bytes;
    size_t n;
    lm_err ignored = {0};
    if (lm_read_file(&bytes, &n, path, SIZE_MAX, &ignored) != LM_OK)
        return false;
    *out = XXH3_128bits(bytes, n);
    free(bytes);
    return true;
}

int hx_synth_cache_write(const char *path, const char *preset_name, uint64_t seed, lm_log_fn log,
                         void *log_user, lm_err *err)
{
    XXH128_hash_t before, after;
    bool had = file_hash(&before, path);
    int rc = hx_synth_write(path, preset_name, seed, LM_TYPE_F32, err);
    if (rc == LM_OK && had && file_hash(&after, path) && !XXH128_isEqual(before, after))
        lm_log(log, log_user, "cached synthetic model %s differed from the one synth writes "
               "(corrupt, or from another kvdrift); rewritten", path);
    return rc;
}
