#!/usr/bin/env python3
"""Turns a gpt-oss checkpoint as transformers' save_pretrained writes it (BF16 or FP32 tensors, experts as
[E, in, out]) into the official gpt-oss layout that orchid and transformers load as MXFP4: the experts'
gate_up_proj / down_proj as _blocks [E, out, in/32, 16] and _scales [E, out, in/32] (checkpoint.py's rule),
every other tensor BF16, config.json with the mxfp4 quantization_config, generation_config.json and the
tokenizer files.

  tools/train/export_mxfp4.py SRC_DIR DST_DIR [--tokenizer DIR]
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT.parent / "shared" / "fixtures" / "gpt-oss-tokenizer"
EXPERTS = ("gate_up_proj", "down_proj")
NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]


def as_f32(a):
    return checkpoint.bf16_to_f32(a) if isinstance(a, checkpoint.Bf16) else np.asarray(a, dtype=np.float32)


def export(src, dst, tokenizer=TOKENIZER):
    src, dst = Path(src), Path(dst)
    tensors = checkpoint.read_checkpoint(src)
    out = {}
    for name, a in tensors.items():
        base = name.rsplit(".", 1)[-1]
        if ".mlp.experts." in name and base in EXPERTS:
            w = as_f32(a)  # [E, in, out]
            blocks, scales = checkpoint.mxfp4_quantize(np.ascontiguousarray(np.swapaxes(w, 1, 2)))
            out[name + "_blocks"] = blocks
            out[name + "_scales"] = scales
        else:
            out[name] = checkpoint.bf16_bits(as_f32(a))
    dst.mkdir(parents=True, exist_ok=True)
    checkpoint.write_safetensors(dst / "model.safetensors", out)
    config = json.loads((src / "config.json").read_text())
    config.pop("dtype", None)
    config.pop("torch_dtype", None)
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": NOT_CONVERTED}
    (dst / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    gen = src / "generation_config.json"
    if gen.exists():
        shutil.copyfile(gen, dst / "generation_config.json")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (Path(tokenizer) / f).exists():
            shutil.copyfile(Path(tokenizer) / f, dst / f)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--tokenizer", default=str(TOKENIZER))
    a = ap.parse_args()
    out = export(a.src, a.dst, a.tokenizer)
    n = sum(v.nbytes for v in out.values())
    print(f"{a.dst}: {len(out)} tensors, {n / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
