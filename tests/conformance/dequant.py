"""GGUF block types as etch keeps them, against gguf-py (llama.cpp's own Python package, from PyPI).

usage: dequant.py ETCH GGUF KEPT.etch F32.etch

Every matrix of the GGUF is dequantized by gguf-py (gguf.quants.dequantize, numpy) and compared bit
for bit with two etch programs exported from it: F32.etch (`etch export --dtype f32`: etch's reader
dequantized it) and KEPT.etch (`etch export --activations f32`: the blocks repacked into etch's q8/q4 panels with
their scales and, for Q4_1/Q5_1/Q4_K/Q5_K, mins), read back here as the kernels define a weight:
value * scale, or u * scale + min with u the unsigned value. The tensor directory comes from
`etch inspect`; the layouts are kernels.h's (panels of 16 rows, Q4's two rows per byte).
"""
import re
import subprocess
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

PANEL = 16


def directory(etch, path):
    """name -> (dtype, dims, offset) from `etch inspect`."""
    out = subprocess.run([etch, "inspect", path, "--no-verify-data"], check=True, capture_output=True, text=True).stdout
    tensors = {}
    for m in re.finditer(r"^\s+(\S+)\s+(\w+)\s+\[([\d, ]+)\]\s+offset\s+(\d+)", out, re.M):
        tensors[m.group(1)] = (m.group(2), [int(d) for d in m.group(3).split(",")], int(m.group(4)))
    return tensors


def unpanel(a, rows, cols):
    """[padded rows / 16, cols, 16] panels -> [rows, cols]."""
    return a.reshape(-1, cols, PANEL).transpose(0, 2, 1).reshape(-1, cols)[:rows]


def read(blob, tensors, name, dims_override=None):
    dtype, dims, off = tensors[name]
    n = int(np.prod(dims))
    if dtype in ("f32", "f16"):
        return np.frombuffer(blob, np.float32 if dtype == "f32" else np.float16, n, off).astype(np.float32).reshape(dims)
    if dtype == "q8":
        return np.frombuffer(blob, np.int8, n, off).reshape(dims)
    if dtype == "q4":  # a step's byte j: row j in the low nibble, row j + 8 in the high one, value + 8
        b = np.frombuffer(blob, np.uint8, n // 2, off).reshape(-1, dims[1], 8)
        rows = np.concatenate([b & 15, b >> 4], axis=2)  # [panels, cols, 16]
        return rows.astype(np.int16).reshape(dims) - 8
    raise SystemExit(f"{name}: dtype {dtype} is not one this check reads")


def scales(blob, tensors, name, rows, groups):
    """A table of scales or mins as f32 [rows, groups]: f16 or f32, or int8 times the f16 factor
    NAME_d shared by groups / its columns consecutive groups (exact in f32)."""
    s = unpanel(read(blob, tensors, name), rows, groups).astype(np.float32)
    if tensors[name][0] != "q8":
        return s
    n_d = tensors[name + "_d"][1][1]
    d = unpanel(read(blob, tensors, name + "_d"), rows, n_d)
    return s * np.repeat(d, groups // n_d, axis=1)


def kept_weights(blob, tensors, name, rows, cols):
    dtype = tensors[name][0]
    q = unpanel(read(blob, tensors, name), rows, cols).astype(np.float32)
    sdims = tensors[name + ".scale"][1]
    groups = sdims[1]
    group = cols // groups
    scale = np.repeat(scales(blob, tensors, name + ".scale", rows, groups), group, axis=1)
    if name + ".min" not in tensors:
        return q * scale
    mins = np.repeat(scales(blob, tensors, name + ".min", rows, groups), group, axis=1)
    u = q + 8 if dtype == "q4" else q
    return u * scale + mins  # float32: the product is exact, the sum rounds once, as GGML's


def main():
    etch, gguf_path, kept_path, f32_path = sys.argv[1:5]
    reader = GGUFReader(gguf_path)
    kept_dir, f32_dir = directory(etch, kept_path), directory(etch, f32_path)
    kept_blob = np.fromfile(kept_path, np.uint8).tobytes()
    f32_blob = np.fromfile(f32_path, np.uint8).tobytes()
    checked = bad = 0
    for t in reader.tensors:
        if t.tensor_type.name in ("F32", "F16", "BF16") or len(t.shape) != 2:
            continue
        cols, rows = int(t.shape[0]), int(t.shape[1])
        ref = dequantize(t.data, t.tensor_type).reshape(rows, cols).astype(np.float32)
        got_f32 = unpanel(read(f32_blob, f32_dir, t.name), rows, cols)
        got_kept = kept_weights(kept_blob, kept_dir, t.name, rows, cols)
        for what, got in (("f32 export", got_f32), ("kept", got_kept)):
            diff = np.count_nonzero(got.view(np.uint32) != ref.view(np.uint32)) if got.dtype == np.float32 else -1
            if diff:
                bad += 1
                worst = float(np.max(np.abs(got.astype(np.float64) - ref)))
                print(f"{t.name} ({t.tensor_type.name}): {what} differs from gguf-py in {diff} weights (worst {worst:g})")
        checked += 1
    types = sorted({t.tensor_type.name for t in reader.tensors if len(t.shape) == 2})
    print(f"{gguf_path}: {checked} matrices ({', '.join(types)}) equal gguf-py's dequantization bit for bit"
          if not bad else f"{gguf_path}: {bad} comparisons differ")
    sys.exit(1 if bad or not checked else 0)


main()
