#!/usr/bin/env python3
"""How far BF16 moves the golden EAGLE-3 drafts: the reference's chain (make_eagle3_golden.py's math, FP32) fed
by the golden target run in BF16 by transformers instead of FP32, on the committed head and prompts.

For each prompt and draft depth it prints the FP32 reference's draft and margin, the draft the BF16 target's
states lead to and its margin, and the largest change of any head logit at that depth (until the chains part).
A draft whose reference margin is below that change may flip on any BF16 backend. With --json the rows are
written out: tests/golden/eagle3_tiny/bf16_drafts.json is this script's output, the drafts the CUDA backend
(BF16) is held to in cuda_eagle3_test.cc.

Usage: .venv/bin/python tools/golden/eagle3_bf16_drafts.py [--golden DIR] [--json DIR/bf16_drafts.json]
"""
import argparse
import json
import os
import sys

import torch
import transformers
from safetensors.torch import load_file
from transformers import GptOssForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_eagle3_golden import TARGET, Head  # noqa: E402


def chain(target, head_t, cfg, aux_ids, prompt, k, draft_ids):
    layers = target.model.layers
    captured = {}
    hooks = [layer.register_forward_pre_hook(
        (lambda i: lambda _m, args, kwargs: captured.__setitem__(
            i, (args[0] if args else kwargs["hidden_states"]).detach().float()))(i), with_kwargs=True)
        for i, layer in enumerate(layers)]
    hooks.append(layers[-1].register_forward_hook(
        lambda _m, _a, out: captured.__setitem__(len(layers), (out[0] if isinstance(out, tuple) else out).detach().float())))
    with torch.no_grad():
        logits = target(torch.tensor([prompt])).logits[0].float()
    for h in hooks:
        h.remove()
    embed = target.model.embed_tokens.weight.detach().float()
    aux = torch.cat([captured[i][0] for i in aux_ids], dim=-1)
    first = int(torch.argmax(logits[-1]))
    head = Head(head_t, cfg)
    with torch.no_grad():
        pre = head.layer(aux @ head_t["fc.weight"].T, torch.tensor(prompt[1:] + [first]), 0, embed)[-1:]
        out = []
        for j in range(k):
            lg = head.logits(pre)[0]
            out.append((int(draft_ids[int(torch.argmax(lg))]), lg))
            if j + 1 < k:
                pre = head.layer(pre, torch.tensor([out[-1][0]]), len(prompt) + j, embed)
    return first, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--golden", default=os.path.join(os.path.dirname(TARGET), "..", "eagle3_tiny"))
    ap.add_argument("--json")
    a = ap.parse_args()
    ref = json.load(open(os.path.join(a.golden, "reference.json")))
    cfg = json.load(open(os.path.join(a.golden, "head", "config.json")))
    raw = load_file(os.path.join(a.golden, "head", "model.safetensors"))
    head_t = {k: v.float() for k, v in raw.items() if v.dtype == torch.bfloat16}
    draft_ids = raw["d2t"] + torch.arange(raw["d2t"].numel())
    q = transformers.Mxfp4Config(dequantize=True)
    fp32 = GptOssForCausalLM.from_pretrained(TARGET, torch_dtype=torch.bfloat16, attn_implementation="eager",
                                             quantization_config=q).float().eval()
    bf16 = GptOssForCausalLM.from_pretrained(TARGET, torch_dtype=torch.bfloat16, attn_implementation="eager",
                                             quantization_config=q).eval()
    report = []
    for i, c in enumerate(ref["cases"]):
        _, want = chain(fp32, head_t, cfg, ref["aux_layers"], c["prompt"], ref["k"], draft_ids)
        first, got = chain(bf16, head_t, cfg, ref["aux_layers"], c["prompt"], ref["k"], draft_ids)
        parted = False
        for j, ((dw, lw), (dg, lg)) in enumerate(zip(want, got)):
            assert dw == c["drafts"][j] or parted, (i, j, dw, c["drafts"][j])
            change = None if parted else float((lg - lw).abs().max())
            top = torch.topk(lg, 2).values
            row = {"prompt": i, "draft": j, "reference": dw, "margin": c["margins"][j], "bf16_target": dg,
                   "bf16_margin": float(top[0] - top[1]), "max_logit_change": change,
                   "target_next_bf16": first}
            report.append(row)
            print(f"prompt {i} draft {j}: reference {dw} (margin {c['margins'][j]:.4f}), BF16 target {dg} "
                  f"(margin {row['bf16_margin']:.4f})"
                  + ("" if change is None else f", largest logit change {change:.4f}")
                  + ("" if dg == dw else "  <- differs"))
            parted = parted or dg != dw
    if a.json:
        json.dump(report, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
