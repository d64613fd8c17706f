"""kvdrift adapter for MLX through mlx-lm on the CPU (protocol 1, docs/ADAPTERS.md).

  mlx --describe
  mlx --model GGUF --tokens ID,ID,... --n-gen N --out DIR [--set KEY=VALUE ...]

Builds mlx-lm's own model class from the GGUF (gguf_to_hf.py: config and dequantized weights,
cast to the dtype knob), then prefills as mlx_lm.generate_step does: every prompt id but the
last in chunks of prefill_step_size through the model and its cache (make_prompt_cache, or a
plain KVCache per layer), then the last id alone; every chunk's logits rows are kept. Then N-1
greedy steps of one id each, the id chosen as generate_step's greedy sampler chooses it (argmax
of logits - logsumexp in the model's dtype). Writes DIR/logits.npy [n_prompt + N - 1][n_vocab]
(float32: a bfloat16 row converts exactly), kv/ (the prompt's K and V from the caches, K in
GGUF's rotation order; only when every layer's cache still holds every prompt position in
order) and hidden/ (the input of layer 0 and each layer's output over the prompt, recorded by
wrapping the layers' __call__). Nothing on stdout except the --describe document; every
failure is one line on stderr and exit status 2.
"""
import platform

import numpy as np

from adapter_protocol import Adapter, greedy, write_dump
import dequant_cache
import gguf_to_hf

KNOBS = [
    # name, values, default, {value: profile}
    ("prefill_step_size", ["1", "7", "64", "512", "2048"], "2048", {}),
    # bfloat16: weights, activations and the cache in bfloat16, products accumulated in float32
    ("dtype", ["float32", "bfloat16"], "float32", {"bfloat16": "bf16"}),
    # rotating: mlx-lm's make_prompt_cache (the model's make_cache: a RotatingKVCache of the
    # window on Gemma 3's sliding layers); plain: a KVCache on every layer
    ("cache", ["rotating", "plain"], "rotating", {}),
    # make_prompt_cache's max_kv_size: a RotatingKVCache of that size (keep 4) on every layer of
    # a model without make_cache; mlx-lm ignores it where the model makes its own cache
    ("max_kv_size", ["none", "128", "256", "512", "1024"], "none", {}),
]
ADAPTER = Adapter("mlx", "MLX (mlx-lm)", KNOBS)


def engine_version():
    import mlx.core as mx
    import mlx_lm

    return "mlx %s, mlx-lm %s" % (mx.__version__, mlx_lm.__version__)


def engine_build():
    import mlx.core as mx

    return "%s, %s" % ("cpu" if mx.default_device() == mx.cpu else "gpu", platform.machine())


def build_model(path, dtype):
    import mlx.core as mx
    from mlx_lm.utils import _get_classes

    try:
        arch, cfg, weights = dequant_cache.load(path)
    except gguf_to_hf.Unsupported as e:
        ADAPTER.fail("%s: %s" % (path, e))
    model_class, args_class = _get_classes(config=cfg)
    model = model_class(args_class.from_dict(cfg))
    weights = {k: mx.array(v).astype(dtype) for k, v in weights.items()}
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)
    model.load_weights(list(weights.items()), strict=True)
    model.eval()
    mx.eval(model.parameters())
    return arch, cfg, model


def record_layers(model, store):
    """Wraps each layer's __call__ (a subclass per layer, so that attributes the model reads
    stay as they are): while store["on"], the input of layer 0 and each layer's output are
    appended to store[0], store[1 + layer] as float32 numpy [L][n_embd]."""
    import mlx.core as mx

    def keep(i, x):
        if store["on"]:
            store.setdefault(i, []).append(np.array(x[0].astype(mx.float32)))

    for i, layer in enumerate(model.layers):
        base = type(layer)

        def call(self, x, *args, _i=i, _base=base, **kwargs):
            if _i == 0:
                keep(0, x)
            out = _base.__call__(self, x, *args, **kwargs)
            keep(_i + 1, out)
            return out

        layer.__class__ = type("Recorded" + base.__name__, (base,), {"__call__": call})


def read_kv(caches, n, arch):
    """[(K, V)] per layer, [n][n_kv_head][head_dim] float32, or a reason there is none."""
    import mlx.core as mx

    kv = []
    for layer, c in enumerate(caches):
        if c.keys is None or c.offset != n:
            return None, "layer %d's cache is empty or past the prompt" % layer
        if hasattr(c, "_temporal_order"):
            if n > c.max_size:
                return None, ("layer %d's rotating cache holds %d of %d prompt positions"
                              % (layer, c.max_size, n))
            k, v = c._temporal_order(c.keys), c._temporal_order(c.values)
        else:
            k, v = c.keys, c.values
        k, v = k[0, :, :n, :], v[0, :, :n, :]  # [n_kv_head][n][head_dim]
        if k.shape[1] != n:
            return None, "layer %d's cache holds %d positions, not %d" % (layer, k.shape[1], n)
        k = np.array(k.astype(mx.float32)).transpose(1, 0, 2)
        v = np.array(v.astype(mx.float32)).transpose(1, 0, 2)
        kv.append((gguf_to_hf.k_to_gguf(k, arch), v))
    return kv, ""


def make_cache(model, s):
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    max_kv = None if s["max_kv_size"] == "none" else int(s["max_kv_size"])
    if s["cache"] == "plain":
        if max_kv is not None:
            ADAPTER.fail("max_kv_size sizes mlx-lm's own cache (cache=rotating), not cache=plain")
        return [KVCache() for _ in model.layers], ""
    note = ""
    if max_kv is not None and hasattr(model, "make_cache"):
        note = "max_kv_size ignored: the model makes its own cache, as in mlx-lm"
    return make_prompt_cache(model, max_kv_size=max_kv), note


def run(a):
    tokens, n_gen, out, s = ADAPTER.run_inputs(a)
    import mlx.core as mx

    dtype = {"float32": mx.float32, "bfloat16": mx.bfloat16}[s["dtype"]]
    arch, cfg, model = build_model(a["model"], dtype)
    if max(tokens) >= cfg["vocab_size"]:
        ADAPTER.fail("a token id is outside the vocabulary (%d ids)" % cfg["vocab_size"])
    caches, note = make_cache(model, s)
    store = {"on": True}
    record_layers(model, store)
    step = int(s["prefill_step_size"])
    n = len(tokens)
    rows = []

    def forward(ids):
        logits = model(mx.array(ids)[None], cache=caches)  # [1][len(ids)][n_vocab]
        mx.eval(logits, [c.state for c in caches])
        rows.append(np.array(logits[0].astype(mx.float32)))
        return logits[0, -1]

    done = 0
    while n - done > 1:  # generate_step's prefill: chunks up to the last id, which goes alone
        m = min(step, n - done - 1)
        forward(tokens[done:done + m])
        done += m
    last = forward(tokens[done:])
    store["on"] = False
    kv, kv_note = read_kv(caches, n, arch)
    if kv is None:
        ADAPTER.note("no kv/ (%s)" % kv_note)
    # generate_step's greedy choice: argmax of logits - logsumexp in the model's dtype
    generated = greedy(last, n_gen, lambda row: int(mx.argmax(row - mx.logsumexp(
        row, keepdims=True)).item()), forward)
    hidden = [np.concatenate(store[i]) for i in range(len(model.layers) + 1)]
    notes = "; ".join(x for x in (note, "no kv/ (%s)" % kv_note if kv is None else "") if x)
    write_dump(out, tokens, n, generated, np.concatenate(rows), "MLX (%s; %s)" % (
        engine_version(), engine_build()), ADAPTER.settings_text(s) + ("; " + notes if notes else ""),
        kv=kv, hidden=hidden)


if __name__ == "__main__":
    ADAPTER.main(run, engine_version, engine_build)
