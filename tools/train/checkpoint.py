"""Checkpoint helpers for the tiny model's tools, numpy only (no torch on the machines that expand or test it):
reading and writing safetensors (BF16 kept as raw uint16), and MXFP4 quantization in the OCP MX rule.

MXFP4 as gpt-oss stores it (docs: ../shared/specs/gpt-oss-model.md): a weight [out, in] is cut along `in` into
blocks of 32; each block has one e8m0 scale byte s (the value 2^(s-127)) and 16 bytes of e2m1 codes, element 2j
in the low nibble of byte j. Quantization picks the block's exponent as ceil(log2(amax / 6)), the smallest
that keeps every value / 2^e within e2m1's +-6 (OCP's floor(log2(amax)) - 2 would clip values up to 25%), and
rounds each value / 2^e to the nearest e2m1 value, ties to the even code.
"""
import json
import struct
from pathlib import Path

import numpy as np

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
DTYPES = {"BF16": np.uint16, "F32": np.float32, "F16": np.float16, "U8": np.uint8, "I32": np.int32,
          "I64": np.int64}
NAMES = {np.dtype(np.float32): "F32", np.dtype(np.uint8): "U8", np.dtype(np.int32): "I32",
         np.dtype(np.int64): "I64", np.dtype(np.float16): "F16"}


class Bf16(np.ndarray):
    """A uint16 array that holds bfloat16 bits (written back as BF16)."""


def bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (NaN kept a NaN)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    rounded = np.where(np.isnan(x), (b >> 16) | 0x40, rounded)
    return rounded.astype(np.uint16).view(Bf16)


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def read_safetensors(path):
    data = Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = np.dtype(DTYPES[info["dtype"]])
        arr = np.frombuffer(data, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=8 + n + begin)
        arr = arr.reshape(info["shape"]).copy()
        out[name] = arr.view(Bf16) if info["dtype"] == "BF16" else arr
    return out


def read_checkpoint(directory):
    """Every tensor of a checkpoint directory (one file or shards with an index)."""
    d = Path(directory)
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"{d}: no .safetensors files")
    tensors = {}
    for f in files:
        tensors.update(read_safetensors(f))
    return tensors


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name]
        dtype = "BF16" if isinstance(a, Bf16) else NAMES[a.dtype]
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def mxfp4_quantize(w):
    """float32 [..., out, in] (in % 32 == 0) -> (blocks uint8 [..., out, in/32, 16], scales uint8 [..., out, in/32])."""
    w = np.asarray(w, dtype=np.float32)
    *lead, n_in = w.shape
    if n_in % 32:
        raise ValueError(f"MXFP4: the input dimension {n_in} is not a multiple of 32")
    blocks = w.reshape(*lead, n_in // 32, 32)
    amax = np.abs(blocks).max(axis=-1)
    with np.errstate(divide="ignore"):
        exp = np.where(amax > 0, np.ceil(np.log2(np.where(amax > 0, amax, 6.0) / 6.0)), -127)
    exp = np.clip(exp, -127, 127)
    scaled = blocks / np.exp2(exp)[..., None]
    mag = np.minimum(np.abs(scaled), 6.0)
    # nearest e2m1 magnitude, ties to the even code (the one with mantissa bit 0)
    dist = np.abs(mag[..., None] - E2M1)
    best = dist.min(axis=-1, keepdims=True)
    ties = dist == best
    even = ties & (np.arange(8) % 2 == 0)
    code = np.where(even.any(axis=-1), np.argmax(even, axis=-1), np.argmax(ties, axis=-1)).astype(np.uint8)
    code |= (np.signbit(scaled) & (code != 0)).astype(np.uint8) << 3
    packed = (code[..., 0::2] | (code[..., 1::2] << 4)).astype(np.uint8)
    return packed, (exp + 127).astype(np.uint8)


def mxfp4_dequantize(blocks, scales):
    """(blocks [..., out, in/32, 16], scales [..., out, in/32]) -> float32 [..., out, in], exact."""
    lut = np.concatenate([E2M1, -E2M1])
    vals = np.stack([lut[blocks & 0x0F], lut[blocks >> 4]], axis=-1).reshape(*blocks.shape[:-1], 32)
    vals = vals * np.exp2(scales.astype(np.float32) - 127.0)[..., None]
    return vals.reshape(*blocks.shape[:-2], -1)
