"""A GGUF file as a Hugging Face model: its config (the keys transformers' config classes and
mlx-lm's ModelArgs both read) and its weights under HF names, dequantized to float32 with
gguf-py (gguf.quants.dequantize: every block type it knows), for the MLX and transformers
adapters. Families: llama (stories260K, SmolLM2), qwen2, gemma3 (text).

What convert_hf_to_gguf.py changed is undone here:
- llama's attn_q/attn_k rows are permuted so that RoPE rotates adjacent pairs (2i, 2i+1);
  HF's llama rotates halves (i, i + head_dim/2): the rows are permuted back (unpermute_rows),
  and K read from an HF cache is put back in GGUF order (k_to_gguf) before it is dumped.
- Gemma's RMSNorm weights are stored as 1 + w (HF computes x * (1 + w)): 1 is subtracted
  (exact where the stored value is at least 0.5: Sterbenz).
Gemma 3 values the GGUF does not carry are the ones llama.cpp assumes for it (and kvdrift's
engine, engine/arch.c): RoPE theta 10000 on sliding layers, every 6th layer global, attention
scale 1/sqrt(head_dim).
"""
import numpy as np

# GGUF block tensor suffix -> HF suffix within model.layers.N
LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
# ffn_norm is the pre-FFN norm: llama's post_attention_layernorm, Gemma's pre_feedforward one
FFN_NORM = {"llama": "post_attention_layernorm.weight", "qwen2": "post_attention_layernorm.weight",
            "gemma3": "pre_feedforward_layernorm.weight"}
GEMMA_SANDWICH = {"post_attention_norm.weight": "post_attention_layernorm.weight",
                  "post_ffw_norm.weight": "post_feedforward_layernorm.weight"}
MODEL_TYPE = {"llama": "llama", "qwen2": "qwen2", "gemma3": "gemma3_text"}
# the defaults llama.cpp applies where the file has no key
RMS_EPS = {"llama": 1e-5, "qwen2": 1e-6, "gemma3": 1e-6}
ROPE_THETA = {"llama": 10000.0, "qwen2": 1000000.0, "gemma3": 1000000.0}
GEMMA3_SWA_PERIOD = 6
GEMMA3_ROPE_THETA_SWA = 10000.0


class Unsupported(ValueError):
    pass


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def unpermute_rows(w, n_head):
    """Inverse of convert_hf_to_gguf's permute: w [n_head * head_dim][...] with each head's
    rows in pair order back to half order."""
    d = w.shape[0] // n_head
    return w.reshape(n_head, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def k_to_gguf(k, arch):
    """K rows [..][head_dim] of an HF llama cache (halves rotated) in GGUF's pair order, as
    kvdrift compares them; other families rotate halves in GGUF too (unchanged)."""
    if arch != "llama":
        return k
    d = k.shape[-1]
    return np.stack([k[..., :d // 2], k[..., d // 2:]], -1).reshape(k.shape)


def read_config(reader):
    arch = _field(reader, "general.architecture")
    if arch not in MODEL_TYPE:
        raise Unsupported("architecture %r (llama, qwen2, gemma3)" % arch)

    def key(k, default=None):
        return _field(reader, "%s.%s" % (arch, k), default)

    n_embd, n_head = int(key("embedding_length")), int(key("attention.head_count"))
    n_head_kv = int(key("attention.head_count_kv", n_head))
    head_dim = int(key("attention.key_length", n_embd // n_head))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    tensors = {t.name: t for t in reader.tensors}
    vocab = int(tensors["token_embd.weight"].shape[1])
    if tokens is not None and len(tokens) != vocab:
        raise Unsupported("%d tokens for an embedding of %d rows" % (len(tokens), vocab))
    if key("rope.scaling.type") not in (None, "none"):
        raise Unsupported("RoPE scaling %r" % key("rope.scaling.type"))
    cfg = {
        "model_type": MODEL_TYPE[arch],
        "architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                           "gemma3": "Gemma3ForCausalLM"}[arch]],
        "vocab_size": vocab,
        "hidden_size": n_embd,
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_head_kv,
        "head_dim": head_dim,
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon", RMS_EPS[arch])),
        "rope_theta": float(key("rope.freq_base", ROPE_THETA[arch])),
        "max_position_embeddings": int(key("context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in tensors,
    }
    rope_dim = key("rope.dimension_count")
    if rope_dim is not None and int(rope_dim) != head_dim:
        raise Unsupported("partial RoPE (%s of %d dimensions)" % (rope_dim, head_dim))
    if arch == "llama":
        cfg.update(attention_bias=False, mlp_bias=False, hidden_act="silu")
    elif arch == "qwen2":
        cfg.update(hidden_act="silu", use_sliding_window=False)
    else:
        window = int(key("attention.sliding_window"))
        if key("attention.sliding_window_pattern") is not None:
            raise Unsupported("gemma3 with its own sliding_window_pattern key")
        cfg.update(hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=head_dim,
                   sliding_window=window, sliding_window_pattern=GEMMA3_SWA_PERIOD,
                   rope_local_base_freq=GEMMA3_ROPE_THETA_SWA,
                   layer_types=["full_attention" if (i + 1) % GEMMA3_SWA_PERIOD == 0
                                else "sliding_attention"
                                for i in range(cfg["num_hidden_layers"])],
                   final_logit_softcapping=None, attn_logit_softcapping=None)
    return arch, cfg


def load(path):
    """(arch, config dict, {HF name: float32 ndarray}) of the GGUF at path."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # gguf-py raises ValueError, OSError, struct errors on a bad file
        raise Unsupported("not a GGUF file gguf-py reads: %s" % " ".join(str(e).split()))
    arch, cfg = read_config(reader)
    weights = {}
    for t in reader.tensors:
        hf = hf_name(arch, t.name)
        if hf is None:
            raise Unsupported("tensor %s has no HF counterpart" % t.name)
        try:
            w = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError as e:
            raise Unsupported("%s: %s" % (t.name, e))
        w = np.array(w, dtype=np.float32).reshape([int(n) for n in reversed(t.shape)])
        if arch == "llama" and t.name.endswith("attn_q.weight"):
            w = unpermute_rows(w, cfg["num_attention_heads"])
        elif arch == "llama" and t.name.endswith("attn_k.weight"):
            w = unpermute_rows(w, cfg["num_key_value_heads"])
        if arch == "gemma3" and t.name.endswith("norm.weight"):
            w = w - np.float32(1)
        weights[hf] = w
    return arch, cfg, weights


def hf_name(arch, name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    parts = name.split(".", 2)
    if len(parts) != 3 or parts[0] != "blk" or not parts[1].isdigit():
        return None
    suffix = parts[2]
    if suffix == "ffn_norm.weight":
        hf = FFN_NORM[arch]
    elif arch == "gemma3" and suffix in GEMMA_SANDWICH:
        hf = GEMMA_SANDWICH[suffix]
    else:
        hf = LAYER_NAMES.get(suffix)
    return None if hf is None else "model.layers.%s.%s" % (parts[1], hf)
