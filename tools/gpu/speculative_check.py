#!/usr/bin/env python3
"""Speculative decoding on the CUDA backend against plain decoding, greedy: prompt lookup (k = 4), the model
as its own draft (k = 3) and an EAGLE-3 head (k = 3: the golden head, a synthetic one, the trained tiny model's
trained head) on the golden tiny checkpoint, synthetic:tiny and the trained tiny model. GPU logits are not batch-invariant (a
chunk of k + 1 queries is not computed as k + 1 one-token steps), so the outputs must be equal up to the first
position where the plain run's top-2 logit margin is within BF16 noise; the check reports where each run first
differs and that margin (from `orchid forward` on the plain run's tokens, decode path).

  tools/gpu/speculative_check.py --orchid build/cuda/src/cli/orchid [--tokens 96] [--noise 0.05]
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MODELS = [str(ROOT / "tests" / "golden" / "tiny" / "checkpoint"), "synthetic:tiny", str(ROOT / "models" / "orchid-tiny")]
HEADS = {MODELS[0]: str(ROOT / "tests" / "golden" / "eagle3_tiny" / "head"), MODELS[1]: "synthetic",
         MODELS[2]: str(ROOT / "models" / "orchid-tiny-eagle3")}
CONFIGS = {
    "ngram k=4": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1},
    "self-draft k=3": {"method": "draft_model", "model": None, "num_speculative_tokens": 3},
    "eagle3 k=3": {"method": "eagle3", "model": "HEAD", "num_speculative_tokens": 3},
}


BACKEND = ["--backend", "cuda", "--weights", "bf16"]


def generate(orchid, model, prompt, tokens, spec=None):
    cmd = [orchid, "generate", model, *BACKEND, "--prompt-ids",
           ",".join(map(str, prompt)), "--max-tokens", str(tokens), "--temperature", "0", "--ignore-eos",
           "--print-ids", "--max-model-len", "1024"]
    if spec:
        cmd += ["--speculative-config", json.dumps(spec)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def top2_margin(orchid, model, ids, position):
    """The plain run's logit margin between its two best tokens at `position` of `ids` (decode path)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "logits.npy"
        subprocess.run([orchid, "forward", model, *BACKEND, "--incremental",
                        "--ids", ",".join(map(str, ids[:position + 1])), "--logits-out", str(out)],
                       check=True, capture_output=True, timeout=600)
        row = np.load(out)[position]
    best = np.sort(row)[-2:]
    return float(best[1] - best[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orchid", required=True)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--noise", type=float, default=0.05, help="a top-2 margin below this is BF16 noise")
    ap.add_argument("--backend", default="cuda", help="cpu: the same check on the CPU backend (exact)")
    a = ap.parse_args()
    if a.backend != "cuda":
        BACKEND[:] = ["--backend", a.backend]
    ok = True
    for model in MODELS:
        vocab = 1000 if "golden" in model else 5000
        phrase = [(17 * i + 3) % vocab for i in range(6)]
        prompt = [(31 * i + 7) % vocab for i in range(5)] + phrase * 3
        plain = generate(a.orchid, model, prompt, a.tokens)
        for name, spec in CONFIGS.items():
            if spec.get("model", 0) is None:
                spec = dict(spec, model=model)
            elif spec.get("model") == "HEAD":
                spec = dict(spec, model=HEADS[model])
            got = generate(a.orchid, model, prompt, a.tokens, spec)
            first = next((i for i, (x, y) in enumerate(zip(plain, got)) if x != y), None)
            if first is None and len(got) == len(plain):
                print(f"{Path(model).name if '/' in model else model}, {name}: equal ({len(got)} tokens)")
                continue
            margin = top2_margin(a.orchid, model, prompt + plain, len(prompt) + first - 1)
            noise = margin < a.noise
            ok = ok and noise
            print(f"{model}, {name}: first differs at output {first} of {len(plain)}, plain top-2 margin there "
                  f"{margin:.4f} ({'within' if noise else 'ABOVE'} the noise bound {a.noise})")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
