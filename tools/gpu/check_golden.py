#!/usr/bin/env python3
"""Whole-model check of a backend against the golden tiny checkpoint (FP32 transformers logits).

Runs `orchid forward` on the golden sequence and reports, per weight format: the relative L2 error of the
logits against the FP32 reference (which the CPU backend reproduces to 1e-6), the top-1 agreement with it, and
the greedy tokens. The bounds come from the golden itself: BF16 within transformers' own BF16 error on the same
sequence (reference.json, transformers_bf16_rel_l2), FP8 and MXFP4 within twice that; top-1 agreement >= 0.95.
The golden has no routing near-tie on its sequence, so these compare the same experts. Exit status 1 if a
bound is missed. FP8 is reported but not bounded end to end: its activations are quantized to e4m3 before
every expert GEMM (~2% per quantization), so its bound is a per-layer one at 20b shapes (teacher forcing),
not the error after four chained layers. With --kv-cache-dtype fp8 (K and V stored as e4m3) every format is
reported, not bounded: that run measures what the FP8 cache costs against the same bounds.

Usage: tools/gpu/check_golden.py [--orchid build/cuda/src/cli/orchid] [--backend cuda] [--weights bf16,fp8,mxfp4]
                                 [--kv-cache-dtype bf16|fp8]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = os.path.join(ROOT, "tests", "golden", "tiny")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orchid", default=os.path.join(ROOT, "build", "cuda", "src", "cli", "orchid"))
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--weights", default="bf16,fp8,mxfp4")
    ap.add_argument("--min-top1", type=float, default=0.95)
    ap.add_argument("--kv-cache-dtype", default="bf16")
    args = ap.parse_args()
    kv = ["--kv-cache-dtype", args.kv_cache_dtype]
    kv_label = "" if args.kv_cache_dtype in ("bf16", "auto") else f" kv {args.kv_cache_dtype}"
    ref = json.load(open(os.path.join(GOLDEN, "reference.json")))
    want = np.load(os.path.join(GOLDEN, "logits.npy"))
    seq = ref["prompt_ids"] + ref["greedy_ids"][:-1]
    hf_bf16 = ref["transformers_bf16_rel_l2"]
    ok = True
    for w in args.weights.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "l.npy")
            r = subprocess.run([args.orchid, "forward", os.path.join(GOLDEN, "checkpoint"), "--backend", args.backend,
                                "--weights", w, "--ids", ",".join(map(str, seq)), "--logits-out", out,
                                "--log-level", "warn"] + kv, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{w}: orchid forward failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
                ok = False
                continue
            got = np.load(out)
        rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        top1 = float((got.argmax(-1) == want.argmax(-1)).mean())
        g = subprocess.run([args.orchid, "generate", os.path.join(GOLDEN, "checkpoint"), "--backend", args.backend,
                            "--weights", w, "--prompt-ids", ",".join(map(str, ref["prompt_ids"])), "--max-tokens",
                            str(len(ref["greedy_ids"])), "--temperature", "0", "--ignore-eos", "--print-ids",
                            "--log-level", "warn"] + kv, capture_output=True, text=True)
        greedy = json.loads(g.stdout.strip().splitlines()[-1]) if g.returncode == 0 else None
        same = sum(a == b for a, b in zip(greedy or [], ref["greedy_ids"]))
        # Where generation first leaves the reference, and how close transformers' own top two were there
        # (a near-tie within BF16 noise, or a real difference).
        diverged = ""
        for i, (a, b) in enumerate(zip(greedy or [], ref["greedy_ids"])):
            if a != b:
                top2 = np.sort(want[len(ref["prompt_ids"]) - 1 + i])[::-1][:2]
                diverged = f" (first differs at token {i}: reference top-2 gap {top2[0] - top2[1]:.4f})"
                break
        bound = hf_bf16 if w == "bf16" else 2 * hf_bf16
        passed = rel <= bound and top1 >= args.min_top1
        if w == "fp8" or kv_label:
            print(f"{w:6s} {args.backend}{kv_label}: logits rel L2 {rel:.3e} (the BF16-cache bound would be "
                  f"{bound:.2e}), top-1 agreement {top1:.3f}, greedy {same}/{len(ref['greedy_ids'])} equal to "
                  f"transformers'{diverged} (reported, not bounded)")
            continue
        ok &= passed
        print(f"{w:6s} {args.backend}: logits rel L2 {rel:.3e} (bound {bound:.2e}), top-1 agreement "
              f"{top1:.3f} (bound {args.min_top1}), greedy {same}/{len(ref['greedy_ids'])} equal to "
              f"transformers'{diverged} {'PASS' if passed else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
