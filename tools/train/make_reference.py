#!/usr/bin/env python3
"""transformers' reference outputs for the shipped tiny model, for tools/train/check_reference.py and the tests.

  tools/train/make_reference.py CKPT_DIR DATA_DIR OUT_DIR [--samples 2] [--positions 32] [--greedy 24]

CKPT_DIR is the official MXFP4 layout (export_mxfp4.py's output, or pack.py unpack's); transformers loads it with
its own MXFP4 loader, dequantized (exact: an e2m1 value times a power of two is a BF16 number), in FP32 with
eager attention (the sinks) and TF32 off. Written to OUT_DIR:
  logits.npy      float32 [samples x positions, used + 1]: the last `positions` positions of held-out samples
                  (prompt + completion[:-1]), over the token ids the data uses and one id it never uses (every
                  unused row of the lm_head is the same row, so that column stands for all of them)
  reference.json  the samples' ids, the positions, the column ids, how many unused ids the last column
                  stands for, transformers' own BF16 error on the same logits, and greedy continuations of
                  `greedy` held-out prompts with the top-1/top-2 margin at every generated position
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import GptOssForCausalLM

VOCAB = 201088
STOP = [200002, 200012]  # <|return|>, <|call|>


def load(ckpt, dtype):
    model = GptOssForCausalLM.from_pretrained(ckpt, dtype=dtype, attn_implementation="eager",
                                              quantization_config=transformers.Mxfp4Config(dequantize=True))
    return model.to(dtype).to("cuda").eval()


@torch.no_grad()
def logits_of(model, ids):
    return model(torch.tensor([ids], device="cuda"), use_cache=False).logits[0].float().cpu().numpy()


@torch.no_grad()
def greedy(model, prompt, n):
    """Greedy continuation (recomputing the whole sequence each step, as the logits above do) and the
    top-1/top-2 margin at every generated position."""
    ids, margins = list(prompt), []
    for _ in range(n):
        last = logits_of(model, ids)[-1]
        top = np.sort(last)[-2:]
        margins.append(float(top[1] - top[0]))
        ids.append(int(last.argmax()))
        if ids[-1] in STOP:
            break
    return ids[len(prompt):], margins


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--positions", type=int, default=32)
    ap.add_argument("--greedy", type=int, default=24, help="held-out prompts decoded greedily")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = [json.loads(line) for line in (Path(a.data) / "test.jsonl").read_text().splitlines()]
    train = [json.loads(line) for line in (Path(a.data) / "train.jsonl").read_text().splitlines()]
    used = sorted({t for r in train + rows for t in r["prompt"] + r["completion"]} | {199999})
    used_set = set(used)
    unused = next(t for t in range(VOCAB) if t not in used_set)
    columns = used + [unused]

    fp32, bf16 = load(a.ckpt, torch.float32), load(a.ckpt, torch.bfloat16)
    head = fp32.get_output_embeddings().weight.detach()
    same = torch.ones(VOCAB, dtype=torch.bool, device=head.device)
    same[used] = False
    if not torch.equal(head[same], head[unused].expand(int(same.sum()), -1)):
        sys.exit("the lm_head rows of unused tokens differ: the last column cannot stand for all of them")

    samples, want, err_num, err_den = [], [], 0.0, 0.0
    for r in rows[:a.samples]:
        seq = r["prompt"] + r["completion"][:-1]
        begin = max(0, len(seq) - a.positions)
        ref, low = logits_of(fp32, seq)[begin:], logits_of(bf16, seq)[begin:]
        err_num += float(np.sum((low - ref) ** 2))
        err_den += float(np.sum(ref ** 2))
        samples.append({"ids": seq, "begin": begin})
        want.append(ref[:, columns])
    greedy_runs = []
    for r in rows[:a.greedy]:
        ids, margins = greedy(fp32, r["prompt"], len(r["completion"]) + 8)
        greedy_runs.append({"prompt": r["prompt"], "ids": ids, "margins": margins})

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "logits.npy", np.concatenate(want).astype(np.float32))
    (out / "reference.json").write_text(json.dumps({
        "samples": samples, "columns": columns, "unused_count": int(same.sum()),
        "transformers_bf16_rel_l2": (err_num / err_den) ** 0.5, "greedy": greedy_runs,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}) + "\n")
    print(f"wrote {out}: {len(samples)} samples x {a.positions} positions, {len(columns)} columns, "
          f"transformers BF16 rel L2 {(err_num / err_den) ** 0.5:.3e}, {len(greedy_runs)} greedy runs")


if __name__ == "__main__":
    main()
