#!/usr/bin/env python3
"""Stores the tiny model's checkpoint small enough for the repository, and rebuilds it byte for byte.

  tools/train/pack.py pack CKPT_DIR PACKED.safetensors      (CKPT_DIR: export_mxfp4.py's official layout)
  tools/train/pack.py unpack PACKED.safetensors DST_DIR [--tokenizer DIR]

The vocabulary (201,088 tokens) makes the embedding and the lm_head most of the bytes, but train.py keeps the
rows of every token the data never uses identical: the packed file keeps, for those two tensors, the used rows,
their token ids and the one shared row. Everything else is stored as it is, and config.json /
generation_config.json ride in the file's metadata. unpack writes the official layout again and checks the
rebuilt model.safetensors against the SHA-256 recorded at packing; the tokenizer files are copied from --tokenizer.
"""
import argparse
import hashlib
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT.parent / "shared" / "fixtures" / "gpt-oss-tokenizer"
VOCAB_TENSORS = ("model.embed_tokens.weight", "lm_head.weight")
META_FILES = ("config.json", "generation_config.json")


def pack(ckpt, packed):
    ckpt = Path(ckpt)
    files = sorted(ckpt.glob("*.safetensors"))
    if len(files) != 1:
        raise SystemExit(f"{ckpt}: pack expects one model.safetensors (export_mxfp4.py writes one)")
    raw = files[0].read_bytes()
    tensors = checkpoint.read_safetensors(files[0])
    out = {}
    for name, a in tensors.items():
        if name not in VOCAB_TENSORS:
            out[name] = a
            continue
        rows = np.ascontiguousarray(np.asarray(a).view(np.uint16))
        # The shared row is the most common one; every row equal to it is left out. (Rows compared as opaque
        # byte strings: np.unique over axis 0 is ~100x slower on this many equal rows.)
        as_bytes = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel()
        uniq, counts = np.unique(as_bytes, return_counts=True)
        fill = np.frombuffer(uniq[np.argmax(counts)].tobytes(), dtype=np.uint16)
        used = np.nonzero(np.any(rows != fill, axis=1))[0].astype(np.int32)
        out[name + ".used_ids"] = used
        out[name + ".used_rows"] = rows[used].view(checkpoint.Bf16)
        out[name + ".fill"] = fill.view(checkpoint.Bf16)
    meta = {"sha256": hashlib.sha256(raw).hexdigest(), "source": files[0].name}
    for f in META_FILES:
        if (ckpt / f).exists():
            meta[f] = (ckpt / f).read_text()
    write_with_metadata(packed, out, meta)
    return Path(packed).stat().st_size


def write_with_metadata(path, tensors, meta):
    checkpoint.write_safetensors(path, tensors)
    data = Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header["__metadata__"] = {"format": "pt", "orchid_pack": json.dumps(meta)}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + data[8 + n:])


def unpack(packed, dst, tokenizer=TOKENIZER):
    data = Path(packed).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    meta = json.loads(json.loads(data[8:8 + n])["__metadata__"]["orchid_pack"])
    tensors = checkpoint.read_safetensors(packed)
    out = {}
    for name, a in tensors.items():
        base = name.rsplit(".", 1)[0]
        if base in VOCAB_TENSORS:
            if name.endswith(".used_ids"):
                fill = tensors[base + ".fill"].view(np.uint16)
                vocab = json.loads(meta["config.json"])["vocab_size"]
                rows = np.tile(fill, (vocab, 1))
                rows[a] = tensors[base + ".used_rows"].view(np.uint16)
                out[base] = rows.view(checkpoint.Bf16)
            continue
        out[name] = a
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    model = dst / meta["source"]
    checkpoint.write_safetensors(model, out)
    got = hashlib.sha256(model.read_bytes()).hexdigest()
    if got != meta["sha256"]:
        model.unlink()
        raise SystemExit(f"unpack: the rebuilt checkpoint's SHA-256 {got} is not the packed one {meta['sha256']}")
    for f in META_FILES:
        if f in meta:
            (dst / f).write_text(meta[f])
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (Path(tokenizer) / f).exists():
            shutil.copyfile(Path(tokenizer) / f, dst / f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("ckpt")
    p.add_argument("packed")
    u = sub.add_parser("unpack")
    u.add_argument("packed")
    u.add_argument("dst")
    u.add_argument("--tokenizer", default=str(TOKENIZER))
    a = ap.parse_args()
    if a.cmd == "pack":
        print(f"{a.packed}: {pack(a.ckpt, a.packed) / 1e6:.1f} MB")
    else:
        unpack(a.packed, a.dst, a.tokenizer)
        print(f"{a.dst}: rebuilt, SHA-256 checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
