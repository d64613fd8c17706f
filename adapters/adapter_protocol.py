"""What every shipped adapter shares of protocol 1 (docs/ADAPTERS.md): its knob table, the
--describe document, the command line, and the dump it writes (docs/DUMP-FORMAT.md).

A knob table is a list of (name, values, default, {value: profile}). Every failure is one line
on stderr, "NAME adapter: ...", and exit status 2; nothing goes to stdout but --describe's
document.
"""
import json
import os
import sys

ARGS = ("--model", "--tokens", "--n-gen", "--out", "--set")


class Adapter:
    def __init__(self, name, engine, knobs, profile="f32"):
        self.name, self.engine, self.knobs, self.profile = name, engine, knobs, profile

    def fail(self, msg):
        sys.stderr.write("%s adapter: %s\n" % (self.name, msg))
        sys.exit(2)

    def note(self, msg):
        sys.stderr.write("%s adapter: %s\n" % (self.name, msg))

    def main(self, run, engine_version, engine_build=None):
        """--describe (exit 3 when the engine cannot be imported: not installed here), else
        run(parsed arguments)."""
        a = self.parse_args(sys.argv[1:])
        if not a.get("describe"):
            run(a)
            return
        try:
            version, build = engine_version(), engine_build() if engine_build else None
        except (ImportError, OSError) as e:
            sys.stderr.write("%s adapter: not installed (%s)\n" % (self.name, " ".join(str(e).split())))
            sys.exit(3)
        self.describe(version, build)

    def describe(self, engine_version, engine_build=None):
        knobs = []
        for name, values, default, profiles in self.knobs:
            k = {"name": name, "values": values, "default": default}
            if profiles:
                k["profiles"] = profiles
            knobs.append(k)
        doc = {"protocol": 1, "adapter": self.name, "engine": self.engine,
               "engine_version": engine_version, "profile": self.profile, "knobs": knobs}
        if engine_build:
            doc["engine_build"] = engine_build
        sys.stdout.write(json.dumps(doc) + "\n")

    def parse_args(self, argv):
        """{"describe": True} or {"model", "tokens", "n-gen", "out", "set": {knob: value}}."""
        a = {"set": {}}
        known = {n: vals for n, vals, _, _ in self.knobs}
        i = 0
        while i < len(argv):
            k = argv[i]
            if k == "--describe":
                if len(argv) != 1:
                    self.fail("--describe takes no other argument")
                return {"describe": True}
            if k not in ARGS or i + 1 >= len(argv):
                self.fail("unexpected argument %r (expected --describe, or --model GGUF --tokens "
                          "IDS --n-gen N --out DIR [--set KEY=VALUE ...])" % k)
            v = argv[i + 1]
            if k == "--set":
                key, eq, val = v.partition("=")
                if not eq or key not in known or val not in known[key]:
                    self.fail("--set %r: not KEY=VALUE of a declared knob and value" % v)
                if key in a["set"]:
                    self.fail("--set %s given twice" % key)
                a["set"][key] = val
            else:
                a[k[2:]] = v
            i += 2
        return a

    def run_inputs(self, a):
        """(tokens, n_gen, out, settings) of a run's arguments, every knob at its value."""
        for k in ("model", "tokens", "n-gen", "out"):
            if k not in a:
                self.fail("--%s is required" % k)
        try:
            tokens = [int(t) for t in a["tokens"].split(",")]
            n_gen = int(a["n-gen"])
        except ValueError:
            self.fail("--tokens must be ids separated by commas and --n-gen an integer")
        if not tokens or n_gen < 0 or min(tokens) < 0:
            self.fail("--tokens is empty or negative, or --n-gen negative")
        if not os.path.isdir(a["out"]):
            self.fail("--out %s: not a folder" % a["out"])
        s = {n: d for n, _, d, _ in self.knobs}
        s.update(a["set"])
        return tokens, n_gen, a["out"], s

    def settings_text(self, s):
        return " ".join("%s=%s" % (k, s[k]) for k, _, _, _ in self.knobs)


def greedy(last, n_gen, choose, step):
    """The engine's greedy continuation: n_gen ids, each choose(last) of the logits row before
    it, fed back one at a time through step([id]) (which returns the next row), all but the
    last."""
    generated = []
    for j in range(n_gen):
        t = choose(last)
        generated.append(t)
        if j + 1 < n_gen:
            last = step([t])
    return generated


def save_npy(path, x):
    import numpy as np

    np.save(path, np.ascontiguousarray(x))


def write_dump(out, tokens, n_prompt, generated, logits, engine, settings, kv=None, hidden=None):
    """The dump folder: logits.npy [len(fed)][n_vocab] float32, kv/layerNN_{k,v}.npy when kv
    (a list of (K, V) per layer, each [n_prompt][n_kv_head][head_dim]), hidden/embed.npy and
    hidden/layerNN.npy when hidden (a list: the input of layer 0, then the residual stream after
    each layer, each [n_prompt][n_embd] float32), then dump.json last (renamed into place), so
    that a dump without its manifest is never taken for a whole one."""
    import numpy as np

    fed = tokens + generated[:-1] if generated else list(tokens)
    if logits.shape[0] != len(fed):
        raise ValueError("%d logits rows for %d ids" % (logits.shape[0], len(fed)))
    save_npy(os.path.join(out, "logits.npy"), logits.astype(np.float32, copy=False))
    if kv is not None:
        os.makedirs(os.path.join(out, "kv"), exist_ok=True)
        for layer, (k, v) in enumerate(kv):
            save_npy(os.path.join(out, "kv", "layer%02d_k.npy" % layer), k)
            save_npy(os.path.join(out, "kv", "layer%02d_v.npy" % layer), v)
    if hidden is not None:
        os.makedirs(os.path.join(out, "hidden"), exist_ok=True)
        for i, h in enumerate(hidden):
            name = "embed.npy" if i == 0 else "layer%02d.npy" % (i - 1)
            save_npy(os.path.join(out, "hidden", name), h.astype(np.float32, copy=False))
    manifest = {"tokens": fed, "n_prompt": n_prompt, "logits_positions": list(range(len(fed))),
                "tokens_generated": generated, "engine": engine, "settings": settings}
    tmp = os.path.join(out, "dump.json.tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f)
    os.replace(tmp, os.path.join(out, "dump.json"))
