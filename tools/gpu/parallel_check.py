#!/usr/bin/env python3
"""Tensor and expert parallelism of the CUDA backend on one GPU: every rank on the same device (--collectives
local), each configuration compared with one rank (TP1) of the same binary, and with the references.

Ranks are TP x DP and experts split over them (EP divides the ranks; one engine runs DP1), so the
configurations are TPn with EP1 (every rank holds every expert) or EPm, m dividing n.
  golden tiny (4 layers, 8 heads / 2 KV heads, 8 experts): TP2 EP1, TP2 EP2. The whole model's
      logits on the golden sequence: relative L2 to TP1's <= --max-rel (2e-2, the BF16 tolerance) and to the
      FP32 reference (transformers, reference.json) within check_golden.py's bound; greedy tokens equal to
      TP1's and to the reference's.
  one NCCL rank (--collectives nccl): the same test, bitwise equal to TP1 without NCCL.
  synthetic gpt-oss-20b: TP2/4/8 with EP1, EP2/4/8 (TP = EP) and TP8 EP4 on layers 0 (sliding, fp32 attention), 1 (full) and 23 (the
      last), teacher-forced (`orchid layer`: each layer alone on the same input): the output hidden states'
      relative L2 to TP1's <= --max-layer-rel (1e-2, below the margin between TP1's error and the layer
      check's bound on these layers in bench/RESULTS.md), and the share of tokens choosing TP1's experts
      (reported).

Exit status 1 if any bound is missed.
Usage: tools/gpu/parallel_check.py [--orchid build/cuda/src/cli/orchid] [--weights mxfp4] [--skip-20b]
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


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({r.returncode}): {r.stderr.strip()[-1500:]}")
    return r.stdout


BACKEND = "cuda"


def parallel_flags(tp, ep, collectives):
    flags = ["--tp", str(tp), "--ep", str(ep)]
    return flags + (["--collectives", collectives] if BACKEND == "cuda" else [])  # CPU ranks are threads


def golden(args, tmp):
    ref = json.load(open(os.path.join(GOLDEN, "reference.json")))
    want = np.load(os.path.join(GOLDEN, "logits.npy"))
    ck = os.path.join(GOLDEN, "checkpoint")
    seq = ref["prompt_ids"] + ref["greedy_ids"][:-1]
    bound_ref = (1 if args.weights == "bf16" else 2) * ref["transformers_bf16_rel_l2"]
    ok = True

    def forward_and_generate(flags, tag):
        out = os.path.join(tmp, f"golden_{tag}.npy")
        common = ["--backend", BACKEND, "--weights", args.weights, "--log-level", "warn"] + flags
        run([args.orchid, "forward", ck, "--ids", ",".join(map(str, seq)), "--logits-out", out] + common)
        g = run([args.orchid, "generate", ck, "--prompt-ids", ",".join(map(str, ref["prompt_ids"])),
                 "--max-tokens", str(len(ref["greedy_ids"])), "--temperature", "0", "--ignore-eos",
                 "--print-ids"] + common)
        return np.load(out), json.loads(g.strip().splitlines()[-1])

    base, base_ids = forward_and_generate(parallel_flags(1, 1, "auto"), "tp1")
    print(f"golden tiny {args.weights}: TP1 logits rel L2 to FP32 {rel_l2(base, want):.3e} (bound {bound_ref:.2e}), "
          f"greedy {sum(a == b for a, b in zip(base_ids, ref['greedy_ids']))}/{len(ref['greedy_ids'])}")
    for name, tp, ep in [("TP2 EP1", 2, 1), ("TP2 EP2", 2, 2)]:
        try:
            got, ids = forward_and_generate(parallel_flags(tp, ep, "local"), name.replace(" ", "_"))
        except RuntimeError as e:
            print(f"  {name}: FAIL {e}")
            ok = False
            continue
        r_tp1, r_ref = rel_l2(got, base), rel_l2(got, want)
        same_tp1 = ids == base_ids
        same_ref = sum(a == b for a, b in zip(ids, ref["greedy_ids"]))
        passed = r_tp1 <= args.max_rel and r_ref <= bound_ref and same_tp1 and same_ref == len(ref["greedy_ids"])
        ok &= passed
        print(f"  {name:8s} (ranks on one GPU): rel L2 to TP1 {r_tp1:.3e} (bound {args.max_rel:.0e}), to FP32 "
              f"{r_ref:.3e}; greedy {'equal to' if same_tp1 else 'DIFFERENT from'} TP1's, {same_ref}/"
              f"{len(ref['greedy_ids'])} of the reference's  {'PASS' if passed else 'FAIL'}")
    if BACKEND != "cuda":
        return ok
    try:
        got, ids = forward_and_generate(parallel_flags(1, 1, "nccl"), "nccl1")
    except RuntimeError as e:
        print(f"  NCCL, 1 rank: FAIL {e}")
        return False
    passed = bool(np.array_equal(got, base)) and ids == base_ids
    ok &= passed
    print(f"  NCCL, 1 rank: logits {'bitwise equal to' if np.array_equal(got, base) else 'DIFFERENT from'} TP1's "
          f"(rel L2 {rel_l2(got, base):.1e}), greedy {'equal' if ids == base_ids else 'DIFFERENT'}  "
          f"{'PASS' if passed else 'FAIL'}")
    return ok


def layers_20b(args, tmp):
    rng = np.random.default_rng(0)
    n, hidden = args.tokens, args.hidden
    x = rng.standard_normal((n, hidden)).astype(np.float32)
    inp = os.path.join(tmp, "in.npy")
    np.save(inp, x)
    layers = [int(v) for v in args.layers.split(",")]
    ok = True

    for l in layers:  # `orchid layer` with several layers reads INPUT.<layer>
        np.save(f"{inp}.{l}.npy", x)
        os.replace(f"{inp}.{l}.npy", f"{inp}.{l}")

    def layer_run(flags, tag):  # one process, every layer: the weights are made once
        out, top = os.path.join(tmp, f"out_{tag}.npy"), os.path.join(tmp, f"top_{tag}.npy")
        cmd = [args.orchid, "layer", args.layer_model, "--input", inp, "--output", out, "--topk-out", top,
               "--backend", BACKEND, "--weights", args.weights, "--log-level", "warn",
               # eight ranks holding every expert share one GPU's memory: a small step workspace
               "--max-num-batched-tokens", str(max(n, 1024)), "--max-num-seqs", "16",
               "--gpu-memory-utilization", "0.97"] + flags
        for l in layers:
            cmd += ["--layer", str(l)]
        run(cmd)
        return ({l: np.load(f"{out}.{l}") for l in layers}, {l: np.load(f"{top}.{l}") for l in layers})

    base, base_top = layer_run(parallel_flags(1, 1, "auto"), "tp1")
    print(f"{args.layer_model} {args.weights}, {n} tokens, layers {layers} (teacher-forced, each layer on the same input):")
    for name, tp, ep in [("TP2 EP1", 2, 1), ("TP4 EP1", 4, 1), ("TP8 EP1", 8, 1), ("TP2 EP2", 2, 2),
                         ("TP4 EP4", 4, 4), ("TP8 EP8", 8, 8), ("TP8 EP4", 8, 4)]:
        try:
            got, top = layer_run(parallel_flags(tp, ep, "local"), name)
        except RuntimeError as e:
            print(f"  {name}: FAIL {e}")
            ok = False
            continue
        parts = []
        passed = True
        for l in layers:
            alike = (np.sort(top[l], axis=1) == np.sort(base_top[l], axis=1)).all(axis=1)
            r_all = rel_l2(got[l], base[l])
            r = rel_l2(got[l][alike], base[l][alike])
            passed &= r <= args.max_layer_rel and alike.mean() >= args.min_routing
            parts.append(f"layer {l}: rel L2 {r:.2e} on the {alike.mean():.1%} of tokens routed like TP1 "
                         f"({r_all:.2e} on all)")
        ok &= passed
        print(f"  {name} (ranks on one GPU): " + "; ".join(parts) + f"  {'PASS' if passed else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orchid", default=os.path.join(ROOT, "build", "cuda", "src", "cli", "orchid"))
    ap.add_argument("--weights", default="mxfp4")
    ap.add_argument("--max-rel", type=float, default=2e-2)
    ap.add_argument("--max-layer-rel", type=float, default=1e-2)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--skip-20b", action="store_true")
    ap.add_argument("--skip-golden", action="store_true")
    ap.add_argument("--min-routing", type=float, default=0.99,
                    help="share of tokens choosing TP1's experts (the rest: near-ties that any rounding flips)")
    ap.add_argument("--layer-model", default="synthetic:20b")
    ap.add_argument("--hidden", type=int, default=2880)
    ap.add_argument("--layers", default="0,1,23")
    ap.add_argument("--backend", default="cuda", help="cpu: the same comparisons on the CPU backend's ranks")
    args = ap.parse_args()
    global BACKEND
    BACKEND = args.backend
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for part in ([] if args.skip_golden else [golden]) + ([] if args.skip_20b else [layers_20b]):
            try:
                ok &= part(args, tmp)
            except RuntimeError as e:  # the TP1 baseline itself failed
                print(f"FAIL: {e}")
                ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
