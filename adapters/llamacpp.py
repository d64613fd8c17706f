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
gets no kv/ (stderr says so).

Hidden states (knob hidden=on, the default): llama.cpp's eval callback (llama_context_params
.cb_eval, set through llama_context_default_params, which Llama() calls) sees every named node
of the graph after it is computed; the adapter asks for "embd" (the token embeddings) or, where
the model scales them (Gemma), "inp_scaled", and "l_out-N" (the residual stream after layer N),
and copies their rows of the prompt's ubatches, in order, into DIR/hidden/embed.npy and
DIR/hidden/layerNN.npy [n_prompt][n_embd] float32. Asking for a node splits the graph there;
no operation changes, and the logits and K/V are the same bits with hidden=off.

Defect injection (knob perturb_layer=L, default off; perturb_pos=P, default 0): in the same
callback, before layer L's output is read by layer L+1, the row of position P gets 2^-10 times
its largest magnitude added to every value (llama.cpp reads the node's memory afterwards, so
the rest of the pass, the K/V cache and the logits carry it). The dump's layer L hidden state
holds the perturbed row. `kvdrift judge` names it: the first hidden state outside the envelope
is layer L at position P (and the first K/V row outside is layer L+1's at P).

Nothing on stdout except the --describe document; every failure is one line on stderr and exit
status 2.
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
    ("hidden", ["on", "off"], "on", {}),
    # a test's defect, not a setting: see the module's text
    ("perturb_layer", ["off"] + [str(i) for i in range(31)], "off", {}),
    ("perturb_pos", [str(i) for i in range(32)], "0", {}),
]
PERTURB_SCALE = 2.0 ** -10
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


class Hidden:
    """The eval callback: records the embedding and every layer's output at the prompt's
    positions (ubatches arrive in position order) and injects the perturb_layer defect."""

    def __init__(self, n_layer, n_prompt, perturb_layer, perturb_pos, record):
        import ctypes

        import llama_cpp

        self.n_layer, self.n_prompt = n_layer, n_prompt
        self.perturb_layer, self.perturb_pos = perturb_layer, perturb_pos
        self.record = record
        self.active = False   # only while the prompt is evaluated
        self.rows = {}        # name -> list of [n_tok][n_embd] arrays, one per ubatch
        self.done = {}        # name -> positions seen
        self.error = None
        lib = llama_cpp.llama_cpp._lib if hasattr(llama_cpp.llama_cpp, "_lib") else None
        self.ggml = lib if lib is not None else ctypes.CDLL(None)
        for fn in ("ggml_backend_tensor_get", "ggml_backend_tensor_set"):
            f = getattr(self.ggml, fn)
            f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
            f.restype = None
        self.fn = llama_cpp.ggml_backend_sched_eval_callback(self._cb)

    def wanted(self, name):
        if name in ("embd", "inp_scaled"):
            return self.record
        if not name.startswith("l_out-"):
            return False
        layer = int(name[6:])
        return self.record or layer == self.perturb_layer

    def _cb(self, t, ask, user):
        try:
            return self.cb(t, ask)
        except Exception as e:  # an exception must not cross the C callback
            self.error = "eval callback: %s" % " ".join(str(e).split())
            return False

    def cb(self, t, ask):
        import ctypes

        import numpy as np

        tt = ctypes.cast(t, ctypes.POINTER(GgmlTensor)).contents
        name = tt.name.decode("utf-8", "replace")
        if ask:
            return self.active and self.wanted(name)
        if not (self.active and self.wanted(name)):
            return True
        if tt.type != 0:
            raise ValueError("%s is ggml type %d, not F32" % (name, tt.type))
        ne0, ne1 = tt.ne[0], tt.ne[1]
        if tt.ne[2] != 1 or tt.ne[3] != 1 or tt.nb[1] != 4 * ne0:
            raise ValueError("%s is not [n_tokens][n_embd] contiguous" % name)
        x = np.empty((ne1, ne0), dtype=np.float32)
        self.ggml.ggml_backend_tensor_get(t, x.ctypes.data, 0, x.nbytes)
        pos0 = self.done.get(name, 0)
        if name == "l_out-%d" % self.perturb_layer and pos0 <= self.perturb_pos < pos0 + ne1:
            r = x[self.perturb_pos - pos0]
            r += np.float32(PERTURB_SCALE * float(np.max(np.abs(r))))
            self.ggml.ggml_backend_tensor_set(t, x.ctypes.data, 0, x.nbytes)
        self.done[name] = pos0 + ne1
        if self.record:
            self.rows.setdefault(name, []).append(x)
        return True

    def states(self):
        """[embedding, layer 0's output, ...], each [n_prompt][n_embd] float32, as write_dump
        takes them."""
        import numpy as np

        if self.error:
            ADAPTER.fail(self.error)
        emb = "inp_scaled" if "inp_scaled" in self.rows else "embd"
        names = [emb] + ["l_out-%d" % l for l in range(self.n_layer)]
        out = []
        for name in names:
            if name not in self.rows:
                ADAPTER.fail("no %s node seen: hidden states not written" % name)
            x = np.concatenate(self.rows[name], axis=0)
            if x.shape[0] != self.n_prompt:
                ADAPTER.fail("%s holds %d rows for %d prompt positions" % (name, x.shape[0],
                                                                           self.n_prompt))
            out.append(x)
        return out


def ggml_tensor_type():
    """ggml.h's struct ggml_tensor (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10,
    GGML_MAX_NAME 64), as the vendored llama.cpp of llama-cpp-python 0.3.36 declares it."""
    import ctypes

    class T(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                    ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4),
                    ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                    ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10),
                    ("view_src", ctypes.c_void_p), ("view_offs", ctypes.c_size_t),
                    ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
                    ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]
    return T


GgmlTensor = None


def install_callback(h):
    """Llama() builds its context from llama_context_default_params(): the callback goes in
    there (the bindings offer no other way to set cb_eval)."""
    import llama_cpp

    default = llama_cpp.llama_cpp.llama_context_default_params

    def with_cb():
        p = default()
        p.cb_eval = h.fn
        p.cb_eval_user_data = None
        return p

    llama_cpp.llama_cpp.llama_context_default_params = with_cb


def run(a):
    tokens, n_gen, out, s = ADAPTER.run_inputs(a)
    import numpy as np
    from llama_cpp import Llama

    global GgmlTensor
    GgmlTensor = ggml_tensor_type()
    n_ctx = len(tokens) + n_gen + 1
    # the eval of a batch splits it into ubatches: n_ubatch <= n_batch is llama.cpp's rule
    if int(s["n_ubatch"]) > int(s["n_batch"]):
        ADAPTER.fail("n_ubatch %s exceeds n_batch %s" % (s["n_ubatch"], s["n_batch"]))
    perturb = -1 if s["perturb_layer"] == "off" else int(s["perturb_layer"])
    if perturb >= 0 and int(s["perturb_pos"]) >= len(tokens):
        ADAPTER.fail("perturb_pos %s is past the prompt's %d positions" % (s["perturb_pos"], len(tokens)))
    h = None
    if s["hidden"] == "on" or perturb >= 0:
        h = Hidden(0, len(tokens), perturb, int(s["perturb_pos"]), s["hidden"] == "on")
        install_callback(h)
    try:
        llm = Llama(model_path=a["model"], n_ctx=n_ctx, n_batch=int(s["n_batch"]),
                    n_ubatch=int(s["n_ubatch"]), n_threads=int(s["threads"]),
                    n_threads_batch=int(s["threads"]), logits_all=True,
                    type_k=GGML_TYPE[s["type_k"]], type_v=GGML_TYPE[s["type_v"]],
                    flash_attn=s["flash_attn"] == "on", seed=0, verbose=False)
    except Exception as e:  # llama-cpp-python raises ValueError for a file it cannot load
        ADAPTER.fail("cannot load %s: %s" % (a["model"], " ".join(str(e).split())))
    if max(tokens) >= llm.n_vocab() or min(tokens) < 0:
        ADAPTER.fail("a token id is outside the vocabulary (%d ids)" % llm.n_vocab())
    import llama_cpp

    n_layer = llama_cpp.llama_model_n_layer(llm._model.model)
    if perturb >= n_layer:
        ADAPTER.fail("perturb_layer %d: the model has %d layers" % (perturb, n_layer))
    llm.reset()
    if h is not None:
        h.n_layer = n_layer
        h.active = True
    llm.eval(tokens)
    if h is not None:
        h.active = False
        if h.error:
            ADAPTER.fail(h.error)
    hidden = h.states() if h is not None and h.record else None
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
               ADAPTER.settings_text(s) + ("; " + kv_note if kv_note else ""), kv=kv,
               hidden=hidden)


if __name__ == "__main__":
    ADAPTER.main(run, engine_version, engine_build)
