"""gguf_to_hf.load with its result kept on disk: dequantizing a GGUF with gguf-py takes tens of
seconds on two cores (Gemma 3 270M: about 16 s of CPU), and a sweep loads the same file once
per configuration. The float32 weights and the config go into one uncompressed .npz under
$KVDRIFT_CACHE (else $XDG_CACHE_HOME/kvdrift, else ~/.cache/kvdrift)/adapters/dequantized/,
named by the file's real path, size and modification time and by gguf_to_hf.py's own text (a
changed mapping never reads an old entry). Written to a temporary name and renamed, so that a
reader sees a whole entry or none. Entries are never removed (about 4 bytes per weight)."""
import hashlib
import json
import os

import numpy as np

import gguf_to_hf


def cache_dir():
    base = os.environ.get("KVDRIFT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "kvdrift")
    return os.path.join(base, "adapters", "dequantized")


def entry_name(path):
    st = os.stat(path)
    h = hashlib.sha256()
    with open(gguf_to_hf.__file__, "rb") as f:
        h.update(f.read())
    h.update(("%s\0%d\0%d" % (os.path.realpath(path), st.st_size, st.st_mtime_ns)).encode())
    return h.hexdigest()[:32] + ".npz"


def load(path):
    """gguf_to_hf.load(path), from the cache when an entry for this file exists."""
    try:
        entry = os.path.join(cache_dir(), entry_name(path))
    except OSError as e:
        raise gguf_to_hf.Unsupported(" ".join(str(e).split()))
    if os.path.exists(entry):
        with np.load(entry) as z:
            meta = json.loads(str(z["__meta__"]))
            return meta["arch"], meta["config"], {k: z[k] for k in z.files if k != "__meta__"}
    arch, cfg, weights = gguf_to_hf.load(path)
    os.makedirs(cache_dir(), exist_ok=True)
    tmp = "%s.%d.tmp.npz" % (entry[:-4], os.getpid())
    np.savez(tmp, __meta__=np.array(json.dumps({"arch": arch, "config": cfg})), **weights)
    os.replace(tmp, entry)
    return arch, cfg, weights
