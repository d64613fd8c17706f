/* arch.c — the architecture table: one row per supported general.architecture with its
 * metadata key prefix, tensor names, norm placement, activation and RoPE. Adding an
 * architecture is one row here (plus its mathematics where it differs: forward.c, the
 * reference, the float64 test fixture). */
#include "kvd_model.h"
#include "kvd_util.h"

#include <pthread.h>
#include <string.h>

/* llama.cpp's tensor names, shared by the llama family; FFN_NORM: the FFN's pre-norm. */
#define LLAMA_TENSORS_WITH(FFN_NORM)                                                           \
    {                                                                                          \
        .tok_embd = "token_embd.weight", .output_norm = "output_norm.weight",                  \
        .output = "output.weight", .attn_norm = "attn_norm.weight",                            \
        .attn_q = "attn_q.weight", .attn_k = "attn_k.weight", .attn_v = "attn_v.weight",       \
        .attn_output = "attn_output.weight", .attn_q_bias = "attn_q.bias",                     \
        .attn_k_bias = "attn_k.bias", .attn_v_bias = "attn_v.bias",                            \
        .attn_output_bias = "attn_output.bias", .ffn_norm = FFN_NORM,                          \
        .ffn_gate = "ffn_gate.weight", .ffn_up = "ffn_up.weight", .ffn_down = "ffn_down.weight", \
        .attn_sinks = "attn_sinks.weight", .ffn_gate_inp = "ffn_gate_inp.weight",              \
        .ffn_gate_exps = "ffn_gate_exps.weight", .ffn_up_exps = "ffn_up_exps.weight",          \
        .ffn_down_exps = "ffn_down_exps.weight", .attn_q_norm = "attn_q_norm.weight",         \
        .attn_k_norm = "attn_k_norm.weight", .attn_post_norm = "post_attention_norm.weight",    \
        .ffn_post_norm = "post_ffw_norm.weight", .rope_freqs = "rope_freqs.weight",             \
        .ffn_gate_inp_b = "ffn_gate_inp.bias", .ffn_gate_exps_b = "ffn_gate_exps.bias",        \
        .ffn_up_exps_b = "ffn_up_exps.bias", .ffn_down_exps_b = "ffn_down_exps.bias",          \
    }
#define LLAMA_TENSORS LLAMA_TENSORS_WITH("ffn_norm.weight")

/* The fields the Qwen rows share: llama's tensors and norms, NeoX RoPE at theta 1e6, eps 1e-6. */
#define QWEN_ROW(NAME)                                                                         \
    .name = NAME, .key_prefix = NAME, .rope_type = LM_ROPE_NEOX, .rope_theta = 1000000.0f,     \
    .rms_eps = 1e-6f, .norm_place = LM_NORM_PRE, .act = LM_ACT_SWIGLU, .tensors = LLAMA_TENSORS

static const lm_arch arches[] = {
    {
        .name = "llama",
        .key_prefix = "llama",
        .rope_type = LM_ROPE_NORM, /* GGUF llama stores Q/K rows for adjacent-pair rotation */
        .rope_theta = 10000.0f,
        .rms_eps = 1e-5f,
        .norm_place = LM_NORM_PRE,
        .act = LM_ACT_SWIGLU,
        .tensors = LLAMA_TENSORS,
    },
    {
        /* Gemma 3: scaled embeddings, per-head Q/K norms, sandwich norms, GeGLU, NeoX RoPE
         * with theta 10000 on sliding layers (layer l slides iff l % 6 < 5). */
        .name = "gemma3",
        .key_prefix = "gemma3",
        .rope_type = LM_ROPE_NEOX,
        .rope_theta = 1000000.0f,
        .rms_eps = 1e-6f,
        .norm_place = LM_NORM_SANDWICH,
        .act = LM_ACT_GEGLU_TANH,
        .qk_norm = true,
        .embd_scale_sqrt = true,
        .rope_theta_swa = 10000.0f,
        .swa_period = 6,
        .tensors = LLAMA_TENSORS,
    },
    {
        /* Qwen 2: llama with Q/K/V biases (optional tensors of the llama plan), NeoX RoPE. */
        QWEN_ROW("qwen2"),
    },
    {
        /* Qwen 3: per-head Q/K RMSNorm before RoPE, no biases, NeoX RoPE. */
        QWEN_ROW("qwen3"),
        .qk_norm = true,
    },
    {
        /* Qwen 3 MoE: Qwen 3's attention; every FFN a mixture of experts without a shared
         * expert, softmax routing over all experts, top-k renormalised (llama.cpp's qwen3moe
         * graph passes norm_w = true whatever the file says). */
        QWEN_ROW("qwen3moe"),
        .qk_norm = true,
        .moe = LM_ARCH_MOE_SOFTMAX_RENORM,
    },
    {
        /* gpt-oss: biases on Q, K, V, O, the router and the experts; learned sinks; every
         * other layer slides (l % 2 == 0: the row's pattern, window from the file); NeoX RoPE
         * with YaRN; every FFN a mixture of experts routed by the top-k logits with a softmax
         * over the k, experts in swiglu_oai. Its FFN norm is the tensor llama.cpp names
         * post_attention_norm (a pre-norm of the FFN, not a sandwich). */
        .name = "gpt-oss",
        .key_prefix = "gpt-oss",
        .rope_type = LM_ROPE_NEOX,
        .rope_theta = 10000.0f,
        .rms_eps = 1e-5f,
        .norm_place = LM_NORM_PRE,
        .act = LM_ACT_SWIGLU_OAI,
        .swa_period = 2,
        .moe = LM_ARCH_MOE_SOFTMAX_TOPK,
        .rope_yarn = true,
        .rot_full = true,
        /* llama.cpp's openai-moe loader: Q/K/V biases optional, these required */
        .required = LM_ARCH_REQ_OUTPUT | LM_ARCH_REQ_O_BIAS | LM_ARCH_REQ_SINKS
                  | LM_ARCH_REQ_MOE_BIAS,
        .tensors = LLAMA_TENSORS_WITH("post_attention_norm.weight"),
    },
};
#define N_ARCHES (sizeof arches / sizeof arches[0])

size_t lm_arch_count(void)
{
    return N_ARCHES;
}

const lm_arch *lm_arch_at(size_t i)
{
    return i < N_ARCHES ? &arches[i] : NULL;
}

const lm_arch *lm_arch_find(const char *name)
{
    for (size_t i = 0; name != NULL && i < N_ARCHES; ++i)
        if (strcmp(arches[i].name, name) == 0)
            return &arches[i];
    return NULL;
}

static char expected[320];
static pthread_once_t expected_once = PTHREAD_ONCE_INIT;

static void build_expected(void)
{
    for (size_t i = 0; i < N_ARCHES; ++i)
        lm_words_append(expected, sizeof expected, i, N_ARCHES, arches[i].name, " or ");
}

const char *lm_arch_expected(void)
{
    pthread_once(&expected_once, build_expected);
    return expected;
}
