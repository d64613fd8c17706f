"""Independent float64 forward of a gemma3 GGUF (weights dequantized by gguf-py), teacher-forced.
usage: gemma_f64.py MODEL out.npy n_prompt ids..."""
import sys, numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
path, out, npr = sys.argv[1], sys.argv[2], int(sys.argv[3])
ids = [int(x) for x in sys.argv[4:]]
r = GGUFReader(path)
kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith('tokenizer')}
T = {t.name: t for t in r.tensors}
def W(name):
    t = T[name]
    a = dequantize(t.data, t.tensor_type).astype(np.float64)
    return a.reshape([int(x) for x in reversed(t.shape)]) if a.ndim == 1 and len(t.shape) > 1 else a
E = kv['gemma3.embedding_length']; L = kv['gemma3.block_count']; H = kv['gemma3.attention.head_count']
HKV = kv['gemma3.attention.head_count_kv']; D = kv['gemma3.attention.key_length']
eps = np.float64(np.float32(kv['gemma3.attention.layer_norm_rms_epsilon']))
base = kv['gemma3.rope.freq_base']; swa = kv['gemma3.attention.sliding_window']
def rms(x, w): return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
emb = W('token_embd.weight')
n = len(ids)
x = emb[ids] * np.float64(np.float32(np.sqrt(np.float32(E))))
pos = np.arange(n)
def rope(v, theta):  # v [n][h][D], neox
    half = D // 2
    inv = theta ** (-2.0 * np.arange(half) / D)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = v[..., :half], v[..., half:]
    return np.concatenate([a * c - b * s, a * s + b * c], -1)
def gelu(z): return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
for l in range(L):
    p = f'blk.{l}.'
    sliding = l % 6 < 5
    h = rms(x, W(p + 'attn_norm.weight'))
    q = (h @ W(p + 'attn_q.weight').T).reshape(n, H, D)
    k = (h @ W(p + 'attn_k.weight').T).reshape(n, HKV, D)
    v = (h @ W(p + 'attn_v.weight').T).reshape(n, HKV, D)
    q = rms(q, W(p + 'attn_q_norm.weight')); k = rms(k, W(p + 'attn_k_norm.weight'))
    th = 10000.0 if sliding else base
    q = rope(q, th); k = rope(k, th)
    att = np.zeros((n, H, D))
    for hh in range(H):
        kh = hh // (H // HKV)
        sc = q[:, hh, :] @ k[:, kh, :].T / np.sqrt(D)
        mask = pos[None, :] > pos[:, None]
        if sliding: mask |= (pos[:, None] - pos[None, :]) >= swa
        sc[mask] = -np.inf
        sc = np.exp(sc - sc.max(-1, keepdims=True)); sc /= sc.sum(-1, keepdims=True)
        att[:, hh, :] = sc @ v[:, kh, :]
    o = att.reshape(n, H * D) @ W(p + 'attn_output.weight').T
    x = x + rms(o, W(p + 'post_attention_norm.weight'))
    h = rms(x, W(p + 'ffn_norm.weight'))
    g = gelu(h @ W(p + 'ffn_gate.weight').T) * (h @ W(p + 'ffn_up.weight').T)
    x = x + rms(g @ W(p + 'ffn_down.weight').T, W(p + 'post_ffw_norm.weight'))
x = rms(x, W('output_norm.weight'))
logits = x[npr - 1:] @ emb.T
np.save(out, logits)
for i, row in enumerate(logits):
    o = np.argsort(row)[::-1][:3]
    print(i, o, row[o])
