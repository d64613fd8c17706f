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
#include "plan/synth_quant.h"

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
    /* The sizes of the models in the reports (written streaming; far larger than the float32
     * arena today's engine loads into fits on a 24 GiB machine). gpt-oss-20b's published
     * shapes: 24 layers, n_embd 2880, 64 query and 8 KV heads of 64, 32 experts of 2880, top-4,
     * in MXFP4, window 128 on even layers, sinks, biases, YaRN, vocabulary 201088; the other
     * matrices BF16 (the release's type). */
    {"gptoss-20b", {"kvdrift-synth-gptoss-20b", 2880, 24, 64, 8, 2880, 201088, 131072,
                    150000.0f, 1e-5f, .n_swa = 128, .sinks = true, .n_expert = 32,
                    .n_expert_used = 4, .n_ff_exp = 2880, .gating_func = 3,
                    .experts_mxfp4 = true, .arch = "gpt-oss", .head_dim = 64,
                    .weight_type = LM_TYPE_BF16}},
    /* Gemma 3 4B's shapes: 34 layers, n_embd 2560, 8 query and 4 KV heads of 256, n_ff 10240,
     * window 1024 on five layers of six, vocabulary 262144 (the synth maximum; Gemma 3 has
     * 262208), the Q4_K_M-like mix (tensor_type). */
    {"gemma3-4b", {"kvdrift-synth-gemma3-4b", 2560, 34, 8, 4, 10240, 262144, 131072,
                   1000000.0f, 1e-6f, .n_swa = 1024, .swa_period = 0, .arch = "gemma3",
                   .head_dim = 256, .weight_type = LM_TYPE_Q4_K}},
    /* A 26B-A4B mixture of experts (llama architecture): 30 layers, window 1024 on 25 (l % 6
     * < 5) and 5 global, 16 query and 8 KV heads of 256, n_embd 2816, 128 experts of 736,
     * top-8, softmax renormalised over the 8, experts in MXFP4, an output projection of its
     * own, vocabulary 262144, other matrices in the Q4_K_M-like mix: 26.4B parameters, 4.0B
     * read per token. */
    {"moe-26b-a4b", {"kvdrift-synth-moe-26b-a4b", 2816, 30, 16, 8, 2816, 262144, 131072,
                     1000000.0f, 1e-6f, .n_swa = 1024, .swa_period = 6, .n_expert = 128,
                     .n_expert_used = 8, .n_ff_exp = 736, .gating_func = 1,
                     .experts_mxfp4 = true, .head_dim = 256, .output_copy = true,
                     .weight_type = LM_TYPE_Q4_K}},
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
                   "qwen3moe, gptoss, gptoss-mxfp4, gptoss-20b, gemma3-4b, moe-26b-a4b)",
                   name);
}

/* A bad parameter: one message naming it (the format must be a string literal). */
#define BAD(...) LM_FAIL(err, LM_E_INPUT, "synth parameters: " __VA_ARGS__)

int hx_synth_check(const hx_synth_params *p, lm_err *err)
{
    if (p->n_embd == 0 || p->n_layer == 0 || p->n_head == 0 || p->n_head_kv == 0 || p->n_ff == 0
        || p->n_ctx == 0)
        return BAD("n_embd, n_layer, n_head, n_head_kv, n_ff and n_ctx must all be positive");
    if (p->head_dim == 0 && p->n_embd % p->n_head != 0)
        return BAD("n_embd %u is not a multiple of n_head %u (and no head_dim given)", p->n_embd,
                   p->n_head);
    const uint32_t hd = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    if (hd % 2 != 0 || hd > 1024)
        return BAD("head_dim %u must be even (RoPE rotates pairs) and at most 1024", hd);
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

/* A weight type synth writes; the Q4_K_M-like mix (tensor_type) needs whole 256-element blocks
 * along every quantized row. */
static int check_mix(const hx_synth_params *p, lm_tensor_type type, lm_err *err)
{
    if (type != LM_TYPE_F32 && type != LM_TYPE_F16 && type != LM_TYPE_BF16
        && type != LM_TYPE_Q4_K)
        return BAD("type %s not supported (f32, f16, bf16 or the Q4_K_M-like mix)",
                   lm_tensor_type_name(type));
    if (type != LM_TYPE_Q4_K)
        return LM_OK;
    const uint64_t nq = (uint64_t)(p->head_dim ? p->head_dim : p->n_embd / p->n_head) * p->n_head;
    if (p->n_embd % 256 != 0 || nq % 256 != 0 || (p->n_expert == 0 && p->n_ff % 256 != 0)
        || (p->n_expert > 0 && !p->experts_mxfp4 && p->n_ff_exp % 256 != 0))
        return BAD("the Q4_K_M-like mix needs n_embd (%u), n_head * head_dim (%llu) and n_ff "
                   "(%u; n_ff_exp %u for experts not in MXFP4) multiples of 256", p->n_embd,
                   (unsigned long long)nq, p->n_ff, p->n_ff_exp);
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

/* One tensor's stream of values: center + uniform values of standard deviation sigma, from
 * name's stream, taken in order in pieces of any length (the same values whatever the pieces). */
typedef struct stream {
    uint64_t state;
    double center, half_width;
} stream;

static stream stream_of(const char *name, uint64_t seed, double center, double sigma)
{
    return (stream){seed ^ fnv1a64(name), center, sqrt(3.0) * sigma};
}

/* out[n]: the stream's next n values. */
static void fill(float *out, uint64_t n, stream *st)
{
    for (uint64_t i = 0; i < n; ++i) {
        double k = (double)(splitmix64(&st->state) >> 40);
        double u = (k - 8388608.0 + 0.5) / 8388608.0; /* (-1, 1), symmetric */
        out[i] = (float)(st->center + u * st->half_width);
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

/* Values generated and encoded at a time: a multiple of every block size synth writes. */
#define CHUNK ((uint64_t)1 << 20)

/* Where the tensors go. The model is walked twice (walk_model): first every tensor is declared
 * (name, type and shape into the writer's tensor infos; its elements counted), then, once the
 * header is written, every tensor's values are generated CHUNK at a time, encoded and streamed
 * in the same order. So at most one chunk of values is ever in memory. */
typedef struct sink {
    lm_gguf_writer *w;
    lm_gguf_stream *s;    /* NULL while declaring */
    uint64_t seed;
    const uint8_t *whole; /* [n_vocab] whole-word tokens (write_vocab) */
    uint64_t n_embd;
    float *vals;          /* [CHUNK] */
    uint8_t *bytes;       /* [CHUNK * 4]: the chunk encoded */
    hx_synth_info *info;  /* counts, added while declaring */
} sink;

/* One tensor: its values are `from`'s stream (NULL: its own name's) around center with standard
 * deviation sigma; embd: token_embd's rows of tokens that are not whole words scaled by 1/4;
 * experts: `used` of the `count` slices along ne[2] are read per token (0: all). */
typedef struct tspec {
    const char *name, *from;
    lm_tensor_type type;
    uint32_t n_dims;
    uint64_t ne[3];
    double center, sigma;
    bool embd;
    uint32_t used, count;
} tspec;

static int put(sink *k, const tspec *t, lm_err *err)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; ++d)
        n *= t->ne[d];
    if (k->s == NULL) {
        k->info->n_tensors++;
        k->info->n_params += n;
        k->info->n_active += t->count ? n / t->count * t->used : n;
        return lm_gguf_w_tensor_decl(k->w, t->name, t->type, t->n_dims, t->ne, err);
    }
    LM_ASSERT(strcmp(lm_gguf_stream_tensor(k->s), t->name) == 0); /* both walks agree */
    stream st = stream_of(t->from ? t->from : t->name, k->seed, t->center, t->sigma);
    const uint64_t be = lm_tensor_type_block_elems(t->type);
    const uint64_t bb = lm_tensor_type_block_bytes(t->type);
    for (uint64_t i0 = 0; i0 < n; i0 += CHUNK) {
        const uint64_t m = n - i0 < CHUNK ? n - i0 : CHUNK; /* whole blocks: ne[0] is */
        fill(k->vals, m, &st);
        for (uint64_t i = 0; t->embd && i < m; ++i)
            if (!k->whole[(i0 + i) / k->n_embd])
                k->vals[i] *= 0.25f;
        hx_synth_encode(k->bytes, k->vals, m, t->type);
        int rc = lm_gguf_stream_write(k->s, k->bytes, (size_t)(m / be * bb), err);
        if (rc)
            return rc;
    }
    return LM_OK;
}

/* A vector (ne1 == 1: always F32, as llama.cpp stores norms and biases) or a matrix of type. */
static int add_weight(sink *k, const char *name, lm_tensor_type type, uint64_t ne0, uint64_t ne1,
                      double center, double sigma, lm_err *err)
{
    const tspec t = {name, NULL, ne1 == 1 ? LM_TYPE_F32 : type, ne1 == 1 ? 1 : 2, {ne0, ne1, 1},
                     center, sigma, false, 0, 0};
    return put(k, &t, err);
}

/* The roles a matrix plays, for its type (tensor_type). */
typedef enum role { R_EMBD, R_MAT, R_MORE, R_ROUTER, R_EXP, R_EXP_DOWN } role;

/* The type of a matrix of layer l. type F32, F16 or BF16: that type everywhere (MXFP4 experts
 * when p asks for them). Q4_K: a Q4_K_M-like mix, as llama.cpp's Q4_K_M assigns types: the
 * token embedding and output projection Q6_K; attn_v and ffn_down (and the experts' down
 * projections) Q6_K on the first and last eighth of the layers and every third layer between
 * (llama.cpp's use_more_bits), else Q4_K; other matrices Q4_K; the router F32 (llama.cpp
 * never quantizes it); MXFP4 experts stay MXFP4. */
static lm_tensor_type tensor_type(const hx_synth_params *p, lm_tensor_type type, role r,
                                  uint32_t l)
{
    if ((r == R_EXP || r == R_EXP_DOWN) && p->experts_mxfp4)
        return LM_TYPE_MXFP4;
    if (type != LM_TYPE_Q4_K)
        return type;
    const uint32_t L = p->n_layer;
    const bool more = l < L / 8 || l >= 7 * L / 8 || (l - L / 8) % 3 == 2;
    switch (r) {
    case R_EMBD: return LM_TYPE_Q6_K;
    case R_ROUTER: return LM_TYPE_F32;
    case R_MORE: case R_EXP_DOWN: return more ? LM_TYPE_Q6_K : LM_TYPE_Q4_K;
    default: return LM_TYPE_Q4_K;
    }
}

/* Head size: p's, or n_embd / n_head when p gives none. */
static uint32_t head_dim(const hx_synth_params *p)
{
    return p->head_dim ? p->head_dim : p->n_embd / p->n_head;
}

static int write_keys(lm_gguf_writer *w, const hx_synth_params *p, uint64_t seed,
                      lm_tensor_type type, uint8_t *whole, lm_err *err)
{
    char seed_str[32];
    snprintf(seed_str, sizeof seed_str, "0x%016llx", (unsigned long long)seed);
    /* llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_K_M 15, MOSTLY_BF16 32 */
    uint32_t file_type = type == LM_TYPE_F32 ? 0 : type == LM_TYPE_F16 ? 1
                         : type == LM_TYPE_Q4_K ? 15 : 32;
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
        || (rc = lm_gguf_w_u32(w, k[6], head_dim(p), err))
        || (rc = lm_gguf_w_u32(w, k[7], head_dim(p), err))
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


/* Per-head Q/K norm gains 1 + 0.1 u (gemma3, qwen3, qwen3moe) and, for gemma3, the post norms
 * of both blocks: gain c_post = a * sqrt(n) (1 + 0.1 u), so that each block adds a vector of
 * per-entry size ~a relative to the embedding, which gemma3 scales by sqrt(n). */
static int add_arch_weights(sink *k, const hx_synth_params *p, uint32_t l, double a, lm_err *err)
{
    const bool gemma = strcmp(p->arch, "gemma3") == 0;
    if (!gemma && strcmp(p->arch, "qwen3") != 0 && strcmp(p->arch, "qwen3moe") != 0)
        return LM_OK;
    const uint64_t hd = head_dim(p);
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
        int rc = add_weight(k, name, LM_TYPE_F32, t[i].ne0, 1, t[i].c, t[i].sigma, err);
        if (rc)
            return rc;
    }
    return LM_OK;
}

/* Sinks and MoE tensors of layer l. Sinks: logits of standard deviation 1 (the scores of a
 * peaked head are a few units, so a sink takes a visible but not dominant share). Router:
 * 2/sqrt(n), router logits of standard deviation ~2 (peaked routing, margins of order 1).
 * Experts as the dense FFN, ggml order ne {n_embd, n_ff_exp, n_expert} for gate and up and
 * {n_ff_exp, n_embd, n_expert} for down; each expert's output carries the same variance as a
 * dense FFN's, and the gates sum to 1. */
static int add_variant_weights(sink *k, const hx_synth_params *p, uint32_t l,
                               lm_tensor_type type, double a, lm_err *err)
{
    const uint64_t n = p->n_embd, X = p->n_expert, FE = p->n_ff_exp;
    const double sn = (double)(float)(1.0 / sqrt((double)n));
    char name[64];
    int rc;
    if (p->sinks) {
        snprintf(name, sizeof name, "blk.%u.attn_sinks.weight", l);
        if ((rc = add_weight(k, name, LM_TYPE_F32, p->n_head, 1, 0.0, 1.0, err)))
            return rc;
    }
    if (X == 0)
        return LM_OK;
    snprintf(name, sizeof name, "blk.%u.ffn_gate_inp.weight", l);
    if ((rc = add_weight(k, name, tensor_type(p, type, R_ROUTER, l), n, X, 0.0, 2.0 * sn, err)))
        return rc;
    /* gpt-oss: gate and up of standard deviation 2.5 (swiglu_oai's limit 7 clamps some), down
     * 8 times smaller (E[swiglu_oai^2] is ~64 times silu(g) u's for those inputs); biases:
     * router and experts' gate and up 0.5, down 0.1 a */
    const bool oai = strcmp(p->arch, "gpt-oss") == 0;
    const double gu = oai ? 2.5 * sn : sn, dn = (oai ? 1.7 / 8.0 : 1.7) * a / sqrt((double)FE);
    const struct { const char *s; uint64_t ne0, ne1; double sigma; role r; } e[] = {
        {"ffn_gate_exps.weight", n, FE, gu, R_EXP},
        {"ffn_up_exps.weight", n, FE, gu, R_EXP},
        {"ffn_down_exps.weight", FE, n, dn, R_EXP_DOWN},
    };
    const struct { const char *s; uint64_t ne0, ne1; double sigma; } eb[] = {
        {"ffn_gate_inp.bias", X, 1, 0.5},
        {"ffn_gate_exps.bias", FE, X, 0.5},
        {"ffn_up_exps.bias", FE, X, 0.5},
        {"ffn_down_exps.bias", n, X, 0.1 * a},
    };
    for (size_t i = 0; oai && i < 4; ++i) {
        snprintf(name, sizeof name, "blk.%u.%s", l, eb[i].s);
        if ((rc = add_weight(k, name, LM_TYPE_F32, eb[i].ne0, eb[i].ne1, 0.0, eb[i].sigma, err)))
            return rc;
    }
    for (size_t i = 0; i < 3; ++i) {
        snprintf(name, sizeof name, "blk.%u.%s", l, e[i].s);
        const tspec t = {name, NULL, tensor_type(p, type, e[i].r, l), 3, {e[i].ne0, e[i].ne1, X},
                         0.0, e[i].sigma, false, p->n_expert_used, p->n_expert};
        if ((rc = put(k, &t, err)))
            return rc;
    }
    return LM_OK;
}

/* Every tensor, in file order, into k (declared or written: sink). Scales: the header comment. */
static int walk_model(sink *k, const hx_synth_params *p, lm_tensor_type type, lm_err *err)
{
    const uint64_t n = p->n_embd, V = p->n_vocab, F = p->n_ff;
    const uint64_t hd = head_dim(p), nq = hd * p->n_head, nkv = hd * p->n_head_kv;
    const double sn = (double)(float)(1.0 / sqrt((double)n));
    const double logit_scale = (double)(float)(LOGIT_PEAK * sqrt(2.0 * log((double)V)));
    double r2 = SELF_RATIO * (double)n / (2.0 * log((double)V)) - 1.0;
    const double a = (double)(float)sqrt((r2 > 0.05 ? r2 : 0.05) / (2.0 * (double)p->n_layer));
    const uint64_t X = p->n_expert;
    const bool gptoss = strcmp(p->arch, "gpt-oss") == 0;
    /* output_norm below is the constant gain C/sqrt(n): a zero-width "uniform" around it.
     * Every token but whole words and sentence punctuation gets a row a quarter as long
     * (exact: a power of two), so its tied logit rarely wins and greedy text is made of
     * words, not word fragments or stray bytes. An output.weight (gpt-oss, which llama.cpp
     * needs it for, or output_copy) holds the embedding's values. */
    const lm_tensor_type te = tensor_type(p, type, R_EMBD, 0);
    const tspec embd = {"token_embd.weight", NULL, te, 2, {n, V, 1}, 0.0, 1.0, true, 0, 0};
    const tspec out = {"output.weight", "token_embd.weight", te, 2, {n, V, 1}, 0.0, 1.0, true,
                       0, 0};
    int rc;
    if ((rc = put(k, &embd, err)) || ((gptoss || p->output_copy) && (rc = put(k, &out, err)))
        || (rc = add_weight(k, "output_norm.weight", type, n, 1, logit_scale * sn, 0.0, err)))
        return rc;
    char name[64];
    for (uint32_t l = 0; l < p->n_layer; ++l) {
        struct { const char *s; uint64_t ne0, ne1; double c, sigma; role r; } t[] = {
            {"attn_norm.weight", n, 1, 1.0, 0.1 / sqrt(3.0), R_MAT},
            {"attn_q.weight", n, nq, 0.0, 1.5 * sn, R_MAT},
            {"attn_k.weight", n, nkv, 0.0, sn, R_MAT},
            {"attn_v.weight", n, nkv, 0.0, sn, R_MORE},
            {"attn_output.weight", nq, n, 0.0, a / sqrt((double)nq), R_MAT},
            /* gpt-oss's FFN norm has llama.cpp's post-attention name */
            {gptoss ? "post_attention_norm.weight" : "ffn_norm.weight", n, 1, 1.0,
             0.1 / sqrt(3.0), R_MAT},
            {"ffn_gate.weight", n, F, 0.0, sn, R_MAT},
            {"ffn_up.weight", n, F, 0.0, sn, R_MAT},
            {"ffn_down.weight", F, n, 0.0, 1.7 * a / sqrt((double)F), R_MORE},
        };
        /* MoE layers have no dense FFN (the last three entries) */
        const size_t n_t = sizeof t / sizeof t[0] - (X > 0 ? 3 : 0);
        /* gpt-oss: biases on Q, K, V (0.1) and O (0.1 a) */
        const struct { const char *s; uint64_t ne0; double sigma; } ab[] = {
            {"attn_q.bias", nq, 0.1}, {"attn_k.bias", nkv, 0.1}, {"attn_v.bias", nkv, 0.1},
            {"attn_output.bias", n, 0.1 * a}};
        for (size_t i = 0; gptoss && i < 4; ++i) {
            snprintf(name, sizeof name, "blk.%u.%s", l, ab[i].s);
            if ((rc = add_weight(k, name, LM_TYPE_F32, ab[i].ne0, 1, 0.0, ab[i].sigma, err)))
                return rc;
        }
        if ((rc = add_variant_weights(k, p, l, type, a, err))
            || (rc = add_arch_weights(k, p, l, a, err)))
            return rc;
        for (size_t i = 0; i < n_t; ++i) {
            snprintf(name, sizeof name, "blk.%u.%s", l, t[i].s);
            if ((rc = add_weight(k, name, tensor_type(p, type, t[i].r, l), t[i].ne0, t[i].ne1,
                                 t[i].c, t[i].sigma, err)))
                return rc;
        }
    }
    return LM_OK;
}

int hx_synth_write_info(hx_synth_info *info, const char *path, const hx_synth_params *p,
                        uint64_t seed, lm_tensor_type type, lm_err *err)
{
    hx_synth_info dummy;
    info = info != NULL ? info : &dummy;
    memset(info, 0, sizeof *info);
    int rc = hx_synth_check(p, err);
    if (rc)
        return rc;
    if ((rc = check_mix(p, type, err)))
        return rc;
    sink k = {.seed = seed, .n_embd = p->n_embd, .info = info};
    uint8_t *whole = malloc(p->n_vocab); /* [n_vocab] */
    k.whole = whole;
    k.vals = malloc((size_t)CHUNK * sizeof *k.vals);
    k.bytes = malloc((size_t)CHUNK * 4);
    if (whole == NULL || k.vals == NULL || k.bytes == NULL) {
        rc = LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if ((rc = lm_gguf_writer_create(&k.w, err))
        || (rc = write_keys(k.w, p, seed, type, whole, err))
        || (rc = walk_model(&k, p, type, err))
        || (rc = lm_gguf_stream_open(&k.s, k.w, path, err)))
        goto done;
    if ((rc = walk_model(&k, p, type, err)) != LM_OK) {
        lm_gguf_stream_abort(k.s);
        goto done;
    }
    rc = lm_gguf_stream_commit(k.s, info->sha256, &info->bytes, err);
done:
    lm_gguf_writer_free(k.w);
    free(whole);
    free(k.vals);
    free(k.bytes);
    return rc;
}

int hx_synth_measure(hx_synth_info *info, const hx_synth_params *p, lm_tensor_type type,
                     lm_err *err)
{
    memset(info, 0, sizeof *info);
    int rc = hx_synth_check(p, err);
    if (rc == LM_OK)
        rc = check_mix(p, type, err);
    if (rc)
        return rc;
    sink k = {.seed = 0, .n_embd = p->n_embd, .info = info};
    uint8_t *whole = malloc(p->n_vocab); /* [n_vocab] */
    if (whole == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "synth: out of memory");
    if ((rc = lm_gguf_writer_create(&k.w, err)) == LM_OK
        && (rc = write_keys(k.w, p, 0, type, whole, err)) == LM_OK
        && (rc = walk_model(&k, p, type, err)) == LM_OK)
        rc = lm_gguf_writer_size(k.w, &info->bytes, err);
    lm_gguf_writer_free(k.w);
    free(whole);
    return rc;
}

int hx_synth_write_params(const char *path, const hx_synth_params *p, uint64_t seed,
                          lm_tensor_type type, lm_err *err)
{
    return hx_synth_write_info(NULL, path, p, seed, type, err);
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

bool hx_synth_preset_large(const char *name, uint64_t *bytes)
{
    hx_synth_params p;
    hx_synth_info size;
    lm_err ignored = {0};
    if (hx_synth_preset(&p, name, &ignored) != LM_OK
        || hx_synth_measure(&size, &p, LM_TYPE_F32, &ignored) != LM_OK)
        return false;
    if (bytes != NULL)
        *bytes = size.bytes;
    return size.bytes > HX_SYNTH_CACHE_MAX;
}

int hx_synth_cache_write(const char *path, const char *preset_name, uint64_t seed, lm_log_fn log,
                         void *log_user, lm_err *err)
{
    uint64_t bytes;
    if (hx_synth_preset_large(preset_name, &bytes))
        return LM_FAIL(err, LM_E_INPUT, "synth:%s: %.1f GiB as float32, too large to be rewritten "
                       "on every use; write it once (kvdrift synth --preset %s -o FILE.gguf) "
                       "and name the file", preset_name, (double)bytes / 1073741824.0,
                       preset_name);
    XXH128_hash_t before, after;
    bool had = file_hash(&before, path);
    int rc = hx_synth_write(path, preset_name, seed, LM_TYPE_F32, err);
    if (rc == LM_OK && had && file_hash(&after, path) && !XXH128_isEqual(before, after))
        lm_log(log, log_user, "cached synthetic model %s differed from the one synth writes "
               "(corrupt, or from another kvdrift); rewritten", path);
    return rc;
}
