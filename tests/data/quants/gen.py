#!/usr/bin/env python3
"""Writes the dequantization fixtures: for each type T, T.bin (raw ggml blocks) and T.f32
(the float32 values gguf-py's gguf.quants computes from them, little-endian; MXFP4 included). Q8_K has no
dequantizer in gguf.quants: its values are d * q computed here with numpy float32.

Usage (from this folder): pip install gguf==0.19.0 numpy && python3 gen.py"""
import struct

import numpy as np
import gguf
import gguf.quants

T = gguf.GGMLQuantizationType
# type: offsets of its f16 scale fields inside a block (Q8_K: an f32 d at 0)
SCALES = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0], "Q8_K": [], "MXFP4": [],
}
F16_MAX, F16_NMAX, F16_TINY, F16_NTINY = 0x7BFF, 0xFBFF, 0x0001, 0x8001


def f16(v):
    return struct.pack("<H", v)


def mxfp4_blocks(rng, bb):
    """MXFP4: the E8M0 scale byte at 0, then 16 bytes of e2m1 pairs. Random payloads with
    scales 2^-28..2^26, the denormal scales (bytes 0 and 1), the largest finite scale (254) with
    every code 15 (-12), byte 255 (NaN in the MX spec; ggml decodes it as 2^127, so 12 x that
    overflows to Inf), and the byte patterns of the other types with scales around 1."""
    def mx(payload, e):
        b = bytearray(payload)
        b[0] = e
        return bytes(b)
    out = [mx(rng.integers(0, 256, bb, dtype=np.uint8).tobytes(), int(rng.integers(100, 155)))
           for _ in range(4)]
    out.append(mx(rng.integers(0, 256, bb, dtype=np.uint8).tobytes(), 0))
    out.append(mx(rng.integers(0, 256, bb, dtype=np.uint8).tobytes(), 1))
    out.append(mx(b"\xff" * bb, 254))
    out.append(mx(rng.integers(0, 256, bb, dtype=np.uint8).tobytes(), 255))
    for k in (1, 7, 29, 101):
        out.append(mx(bytes((i * k + k) & 255 for i in range(bb)), 124 + k % 8))
    return b"".join(out)


def blocks_for(name, rng):
    be, bb = gguf.GGML_QUANT_SIZES[T[name]]
    if name == "MXFP4":
        return mxfp4_blocks(rng, bb)
    offs = SCALES[name]
    out = []

    def block(payload, scales):
        b = bytearray(payload)
        if name == "Q8_K":
            b[0:4] = struct.pack("<f", scales[0])
        else:
            for off, s in zip(offs, scales):
                b[off:off + 2] = f16(s)
        return bytes(b)

    def rnd_scale():
        if name == "Q8_K":
            return float(np.float32(rng.uniform(-2, 2)))
        return int(np.float16(rng.uniform(-2, 2)).view(np.uint16))

    n_sc = max(1, len(offs))
    for _ in range(4):  # random payload, random finite scales
        out.append(block(rng.integers(0, 256, bb, dtype=np.uint8).tobytes(),
                         [rnd_scale() for _ in range(n_sc)]))
    out.append(block(rng.integers(0, 256, bb, dtype=np.uint8).tobytes(),
                     [0.0] if name == "Q8_K" else [0] * n_sc))  # zero scales
    out.append(block(b"\xff" * bb,  # extreme scales and mins, every quant at its top code
                     [1e30] if name == "Q8_K" else [F16_MAX, F16_NMAX][:n_sc]))
    out.append(block(b"\x00" * bb,
                     [-1e30] if name == "Q8_K" else [F16_NMAX, F16_MAX][:n_sc]))
    out.append(block(rng.integers(0, 256, bb, dtype=np.uint8).tobytes(),  # subnormal scales
                     [1e-40] if name == "Q8_K" else [F16_TINY, F16_NTINY][:n_sc]))
    for k in (1, 7, 29, 101):  # every byte value in every position class: all codes appear
        out.append(block(bytes((i * k + k) & 255 for i in range(bb)),
                         [rnd_scale() for _ in range(n_sc)]))
    return b"".join(out)


def dequant(name, raw):
    if name == "Q8_K":
        a = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 292)
        d = a[:, 0:4].copy().view(np.float32)
        q = a[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (d * q).astype(np.float32).reshape(-1)
    return gguf.quants.dequantize(np.frombuffer(raw, dtype=np.uint8), T[name]).astype(
        np.float32).reshape(-1)


def main():
    rng = np.random.default_rng(20261123)
    for name in SCALES:
        raw = blocks_for(name, rng)
        vals = dequant(name, raw)
        with open(name + ".bin", "wb") as f:
            f.write(raw)
        with open(name + ".f32", "wb") as f:
            f.write(vals.astype("<f4").tobytes())
        print(name, len(raw), "bytes,", vals.size, "values")
    # F16 and BF16: every 16-bit code but the NaNs, in steps of 7 (9363 codes incl. 0, 1)
    codes = np.array([c for c in range(0, 65536, 7) if (c & 0x7C00) != 0x7C00 or (c & 0x3FF) == 0]
                     + [0x0001, 0x8001, 0x03FF, 0x7C00, 0xFC00], dtype="<u2")
    for name, conv in (("F16", lambda c: c.view(np.float16).astype(np.float32)),
                       ("BF16", lambda c: (c.astype(np.uint32) << 16).view(np.float32))):
        cc = codes if name == "F16" else np.array(
            [c for c in range(0, 65536, 7) if (c & 0x7F80) != 0x7F80 or (c & 0x7F) == 0],
            dtype="<u2")
        with open(name + ".bin", "wb") as f:
            f.write(cc.tobytes())
        with open(name + ".f32", "wb") as f:
            f.write(conv(cc).astype("<f4").tobytes())
        print(name, cc.size, "codes")


if __name__ == "__main__":
    main()
