"""kvdrift adapter for Hugging Face transformers on PyTorch's CPU backend (protocol 1,
docs/ADAPTERS.md).

  transformers --describe
  transformers --model GGUF --tokens ID,ID,... --n-gen N --out DIR [--set KEY=VALUE ...]

Builds transformers' own model class from the GGUF's config and dequantized weights
(gguf_to_hf.py, the mapping the MLX adapter uses too), in the dtype knob's dtype and with the
attention implementation knob's kernel, then runs the prompt in one forward pass with a
DynamicCache and feeds its own greedy choice (argmax of the float32 logits, as generate's
greedy search) N-1 times, one id per pass. Writes DIR/logits.npy [n_prompt + N - 1][n_vocab]
(float32: a bfloat16 row converts exactly), kv/ (the prompt's K and V from the cache, K in
GGUF's rotation order; only when every layer's cache holds every prompt position: none for a
prompt past Gemma 3's window, whose sliding layers keep the window only) and hidden/ (the input
of layer 0 and each decoder layer's output, from forward hooks). Nothing on stdout except the
--describe document; every failure is one line on stderr and exit status 2.
"""
import platform

import numpy as np

from adapter_protocol import Adapter, greedy, write_dump
import dequant_cache
import gguf_to_hf

KNOBS = [
    # name, values, default, {value: profile}
    # bfloat16: weights and activations in bfloat16 (CPU matmuls accumulate in float32)
    ("dtype", ["float32", "bfloat16"], "float32", {"bfloat16": "bf16"}),
    ("attn_implementation", ["eager", "sdpa"], "sdpa", {}),
]
ADAPTER = Adapter("transformers", "transformers (PyTorch CPU)", KNOBS)


def engine_version():
    import torch
    import transformers

    return "transformers %s, torch %s" % (transformers.__version__, torch.__version__)


def engine_build():
    import torch

    return "cpu %s, %s, %s" % (torch.backends.cpu.get_cpu_capability(), platform.machine(),
                               "mkldnn" if torch.backends.mkldnn.is_available() else "no mkldnn")


def build_model(path, dtype, attn):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        arch, cfg, weights = dequant_cache.load(path)
    except gguf_to_hf.Unsupported as e:
        ADAPTER.fail("%s: %s" % (path, e))
    fields = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    config = AutoConfig.for_model(cfg["model_type"], **fields)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
    state = {k: torch.from_numpy(v) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if cfg["tie_word_embeddings"]:
        missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        ADAPTER.fail("%s: weights the model lacks %s, weights the file lacks %s"
                     % (path, unexpected[:4], missing[:4]))
    model.tie_weights()
    model.eval()
    return arch, cfg, model


def record_layers(model, store):
    """Forward hooks: while store["on"], the input of layer 0 and each decoder layer's output
    are appended to store[0], store[1 + layer] as float32 numpy [L][n_embd]."""
    import torch

    def keep(i, x):
        if store["on"]:
            x = x[0] if isinstance(x, tuple) else x
            store.setdefault(i, []).append(x[0].to(torch.float32).numpy().copy())

    layers = model.model.layers
    layers[0].register_forward_pre_hook(lambda m, args, kwargs: keep(0, args[0] if args else
                                        kwargs["hidden_states"]), with_kwargs=True)
    for i, layer in enumerate(layers):
        layer.register_forward_hook(lambda m, args, out, _i=i: keep(_i + 1, out))


def read_kv(cache, n, arch):
    """[(K, V)] per layer, [n][n_kv_head][head_dim] float32, or a reason there is none."""
    import torch

    kv = []
    for layer, c in enumerate(cache.layers):
        k, v = c.keys, c.values  # [1][n_kv_head][held][head_dim]
        if k is None or k.shape[2] != n:
            return None, "layer %d's cache holds %s of %d prompt positions" % (
                layer, "none" if k is None else k.shape[2], n)
        k = k[0].to(torch.float32).numpy().transpose(1, 0, 2)
        v = v[0].to(torch.float32).numpy().transpose(1, 0, 2)
        kv.append((gguf_to_hf.k_to_gguf(np.ascontiguousarray(k), arch), v))
    return kv, ""


def run(a):
    tokens, n_gen, out, s = ADAPTER.run_inputs(a)
    import torch
    from transformers import DynamicCache

    torch.set_grad_enabled(False)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[s["dtype"]]
    arch, cfg, model = build_model(a["model"], dtype, s["attn_implementation"])
    if max(tokens) >= cfg["vocab_size"]:
        ADAPTER.fail("a token id is outside the vocabulary (%d ids)" % cfg["vocab_size"])
    store = {"on": True}
    record_layers(model, store)
    cache = DynamicCache(config=model.config)
    rows = []

    def forward(ids):
        res = model(torch.tensor([ids]), cache=cache, use_cache=True)
        last = res.logits[0].to(torch.float32)  # [len(ids)][n_vocab]
        rows.append(last.numpy().copy())
        return last[-1]

    n = len(tokens)
    last = forward(tokens)
    store["on"] = False
    kv, kv_note = read_kv(cache, n, arch)
    if kv is None:
        ADAPTER.note("no kv/ (%s)" % kv_note)
    generated = greedy(last, n_gen, lambda row: int(torch.argmax(row)), forward)
    hidden = [np.concatenate(store[i]) for i in range(len(model.model.layers) + 1)]
    settings = ADAPTER.settings_text(s) + ("; no kv/ (%s)" % kv_note if kv is None else "")
    write_dump(out, tokens, n, generated, np.concatenate(rows), "transformers (%s; %s)" % (
        engine_version(), engine_build()), settings, kv=kv, hidden=hidden)


if __name__ == "__main__":
    ADAPTER.main(run, engine_version, engine_build)
