"""kvdrift adapter for llama.cpp through llama-cpp-python (protocol 1, docs/ADAPTERS.md).

  llamacpp --describe
  llamacpp --model GGUF --tokens ID,ID,... --n-gen N --out DIR [--set KEY=VALUE ...]

Runs the prompt ids in one Llama.eval (split into batches of n_batch, each decoded in ubatches
of n_ubatch) with logits_all, so that every prompt position has its logits row; reads K/V of
the prompt from the context's sequence state (llama_state_seq_get_data); then feeds its own
greedy choice N-1 times, one token per eval, keeping each row. Writes DIR/dump.json,
DIR/logits.npy [n_prompt + N - 1][n_vocab] (float32, as llama.cpp returns them) and
DIR/kv/layerNN_{k,v}.npy [n_prompt][n_kv_head][head_dim] in the cache's type (float32 or
float16; K after RoPE). A model whose state holds two caches (sliding-window layers, Gemma 2/3)
gets no kv/ (stderr says so). Nothing on stdout except the --describe document; every failure
is one line on stderr and exit status 2.
"""
import struct

from adapter_protocol import Adapter, greedy, write_dump

KNOBS = [
    # name, values, default, {value: profile}
    ("n_ubatch", ["1", "2", "7", "16", "32", "64", "128", "256", "512"], "512", {}),
    ("n_batch", ["1", "7", "64", "512", "2048"], "2048", {}),
    ("threads", ["1", "2", "4", "8"], "2", {}),
    ("type_k", ["f32", "f16"], "f16", {"f16": "f16kv"}),
    ("type_v", ["f32", "f16"], "f16", {"f16": "f16kv"}),
    # llama.cpp's flash attention casts an F32 K or V cache to F16 before it attends
    # (llama-graph.cpp build_attn_mha): its rounding is f16kv's whatever type_k and type_v say
    ("flash_attn", ["off", "on"], "off", {"on": "f16kv"}),
]
GGML_TYPE = {"f32": 0, "f16": 1}
STATE_MAGIC = 0xAF143CD8
ADAPTER = Adapter("llamacpp", "llama.cpp", KNOBS)


def engine_version():
    import llama_cpp

    return "llama-cpp-python %s" % llama_cpp.__version__


def engine_build():
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()
    return " ".join(info.split())


def read_kv(llm, n):
    """[(K, V)] per layer of the prompt from sequence 0's state (one KV cache only)."""
    import ctypes

    import llama_cpp
    import numpy as np

    ctx = llm._ctx.ctx
    size = llama_cpp.llama_state_seq_get_size(ctx, 0)
    buf = (ctypes.c_uint8 * size)()
    if llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0) != size:
        ADAPTER.fail("llama_state_seq_get_data returned a short state")
    b = bytes(buf)
    p = [0]

    def take(k):
        s = b[p[0]:p[0] + k]
        if len(s) != k:
            raise ValueError("state ends early")
        p[0] += k
        return s

    def u32():
        return struct.unpack("<I", take(4))[0]

    if u32() != STATE_MAGIC or u32() != 0:
        raise ValueError("unexpected state header")
    if u32() != 1:
        raise ValueError("more than one KV stream")
    cells = u32()
    pos = []
    for _ in range(cells):
        pos.append(struct.unpack("<i", take(4))[0])
        ns = u32()
        ids = [u32() for _ in range(ns)]
        if ids != [0]:
            raise ValueError("cells of other sequences")
    if sorted(pos) != list(range(n)):
        raise ValueError("the cache does not hold exactly the prompt's positions")
    v_trans, n_layer = u32(), u32()
    n_head_kv = llama_cpp.llama_model_n_head_kv(llm._model.model)
    if n_layer != llama_cpp.llama_model_n_layer(llm._model.model):
        raise ValueError("the cache holds %d layers of %d (two caches: sliding-window layers)"
                         % (n_layer, llama_cpp.llama_model_n_layer(llm._model.model)))
    arrays = {}
    for t in ("k", "v"):
        for layer in range(n_layer):
            typ = struct.unpack("<i", take(4))[0]
            if typ not in (0, 1):
                raise ValueError("K/V type %d (F32 or F16 only)" % typ)
            dt = np.float32 if typ == 0 else np.float16
            el = 4 if typ == 0 else 2
            if t == "k" or not v_trans:
                row = struct.unpack("<Q", take(8))[0]
                nev = row // el
                rows = np.frombuffer(take(cells * row), dtype=dt).reshape(cells, nev)
            else:
                esz, nev = u32(), u32()
                if esz != el:
                    raise ValueError("V element size")
                rows = np.frombuffer(take(cells * nev * el), dtype=dt).reshape(nev, cells).T
            if nev % n_head_kv:
                raise ValueError("K/V row size")
            x = np.empty((n, nev), dtype=dt)
            x[pos] = rows
            arrays[(layer, t)] = x.reshape(n, n_head_kv, nev // n_head_kv)
    if p[0] != len(b):
        raise ValueError("state not consumed exactly (two KV caches)")
    return [(arrays[(layer, "k")], arrays[(layer, "v")]) for layer in range(n_layer)]


def run(a):
    tokens, n_gen, out, s = ADAPTER.run_inputs(a)
    import numpy as np
    from llama_cpp import Llama

    n_ctx = len(tokens) + n_gen + 1
    # the eval of a batch splits it into ubatches: n_ubatch <= n_batch is llama.cpp's rule
    if int(s["n_ubatch"]) > int(s["n_batch"]):
        ADAPTER.fail("n_ubatch %s exceeds n_batch %s" % (s["n_ubatch"], s["n_batch"]))
    try:
        llm = Llama(model_path=a["model"], n_ctx=n_ctx, n_batch=int(s["n_batch"]),
                    n_ubatch=int(s["n_ubatch"]), n_threads=int(s["threads"]),
                    n_threads_batch=int(s["threads"]), logits_all=True,
                    type_k=GGML_TYPE[s["type_k"]], type_v=GGML_TYPE[s["type_v"]],
                    flash_attn=s["flash_attn"] == "on", seed=0, verbose=False)
    except Exception as e:  # llama-cpp-python raises ValueError for a file it cannot load
        ADAPTER.fail("cannot load %s: %s" % (a["model"], " ".join(str(e).split())))
    if max(tokens) >= llm.n_vocab():
        ADAPTER.fail("a token id is outside the vocabulary (%d ids)" % llm.n_vocab())
    llm.reset()
    llm.eval(tokens)
    n = len(tokens)
    kv, kv_note = None, ""
    try:
        kv = read_kv(llm, n)
    except ValueError as e:
        kv_note = "no kv/ (%s)" % e
        ADAPTER.note(kv_note)
    generated = greedy(None, n_gen, lambda _: int(np.argmax(llm.scores[llm.n_tokens - 1])),
                       llm.eval)
    n_rows = n + max(n_gen - 1, 0)
    logits = np.asarray(llm.scores[:n_rows], dtype=np.float32)
    write_dump(out, tokens, n, generated, logits,
               "llama.cpp (%s; %s)" % (engine_version(), engine_build()),
               ADAPTER.settings_text(s) + ("; " + kv_note if kv_note else ""), kv=kv)


if __name__ == "__main__":
    ADAPTER.main(run, engine_version, engine_build)
