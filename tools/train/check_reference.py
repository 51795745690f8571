#!/usr/bin/env python3
"""orchid on the shipped tiny model against transformers' reference (tools/train/make_reference.py's output).

  tools/train/check_reference.py --orchid BIN --model CKPT_DIR --reference REF_DIR [--backend cpu|cuda]
                                 [--weights mxfp4,bf16] [--bound X] [--noise M]

Per weight format: the relative L2 error of `orchid forward`'s logits against transformers' FP32 logits over the
whole vocabulary (the reference's last column stands for every unused token id) and the top-1 agreement; then
greedy `orchid generate` on the reference's held-out prompts against transformers' greedy tokens, compared up to
the first position whose top-1/top-2 margin in the reference is below --noise (where BF16 rounding may pick either
token; reported). Bounds: on the CPU (FP32) 1e-4; on the GPU twice transformers' own BF16 error on the same logits.
Exit status 1 if a bound is missed or greedy tokens differ before a near-tie.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])}... failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return r.stdout


def rel_l2(got, want, columns, unused_count):
    """Relative L2 over full rows: `want` holds the used columns and one column for all unused ids."""
    mask = np.ones(got.shape[1], dtype=bool)
    mask[columns[:-1]] = False
    if int(mask.sum()) != unused_count:
        raise SystemExit(f"vocabulary mismatch: {mask.sum()} unused columns, the reference says {unused_count}")
    num = np.sum((got[:, columns[:-1]] - want[:, :-1]) ** 2) + np.sum((got[:, mask] - want[:, -1:]) ** 2)
    den = np.sum(want[:, :-1] ** 2) + unused_count * np.sum(want[:, -1] ** 2)
    return float(np.sqrt(num / den))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orchid", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--weights", default="mxfp4", help="comma-separated, GPU formats (the CPU computes in FP32)")
    ap.add_argument("--bound", type=float, help="largest logits rel L2 (default: 1e-4 CPU, 2x transformers BF16 GPU)")
    ap.add_argument("--noise", type=float, help="a reference top-2 margin below this is a tie (default: 1e-3 "
                                                 "CPU, 0.05 GPU)")
    ap.add_argument("--min-top1", type=float, default=0.99)
    ap.add_argument("--greedy", type=int, default=0, help="greedy prompts compared (0: all the reference has)")
    a = ap.parse_args()
    ref = json.load(open(os.path.join(a.reference, "reference.json")))
    want = np.load(os.path.join(a.reference, "logits.npy"))
    columns = ref["columns"]
    cpu = a.backend == "cpu"
    bound = a.bound if a.bound is not None else (1e-4 if cpu else 2 * ref["transformers_bf16_rel_l2"])
    noise = a.noise if a.noise is not None else (1e-3 if cpu else 0.05)
    ok = True
    for w in (["mxfp4"] if cpu else a.weights.split(",")):
        got = []
        with tempfile.TemporaryDirectory() as tmp:
            for i, s in enumerate(ref["samples"]):
                path = os.path.join(tmp, f"{i}.npy")
                run([a.orchid, "forward", a.model, "--backend", a.backend, "--weights", w, "--ids",
                     ",".join(map(str, s["ids"])), "--logits-out", path, "--log-level", "warn"])
                got.append(np.load(path)[s["begin"]:])
        got = np.concatenate(got)
        if got.shape[0] != want.shape[0]:
            raise SystemExit(f"{got.shape[0]} positions from orchid, {want.shape[0]} in the reference")
        err = rel_l2(got, want, columns, ref["unused_count"])
        top1 = float(np.mean(np.asarray(columns)[want.argmax(-1)] == got.argmax(-1)))
        compared = equal = ties = 0
        for g in ref["greedy"][:a.greedy or None]:
            out = run([a.orchid, "generate", a.model, "--backend", a.backend, "--weights", w, "--prompt-ids",
                       ",".join(map(str, g["prompt"])), "--max-tokens", str(len(g["ids"])), "--temperature", "0",
                       "--print-ids", "--log-level", "warn"])
            mine = json.loads(out.strip().splitlines()[-1])
            n = next((i for i, m in enumerate(g["margins"]) if m < noise), len(g["ids"]))
            ties += n < len(g["ids"])
            compared += 1
            equal += mine[:n] == g["ids"][:n]
        passed = err <= bound and top1 >= a.min_top1 and equal == compared
        ok &= passed
        name = "fp32" if cpu else w
        print(f"{name:6s} {a.backend}: logits rel L2 {err:.3e} (bound {bound:.1e}), top-1 agreement {top1:.3f}; "
              f"greedy equal to transformers on {equal}/{compared} held-out prompts up to the first near-tie "
              f"(margin < {noise}; {ties} prompts have one) {'PASS' if passed else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
