#!/usr/bin/env python3
"""Layer-by-layer comparison of orchid with transformers on the same weights (teacher forcing).

Random-weight networks this deep are chaotic (transformers' own BF16 logits at 20b shapes are 0.43 relative L2
from its FP32 logits), so each decoder layer is checked alone: it gets the FP32 reference's input hidden states
and its output is compared with the reference's FP32 output of that layer. Reported per layer and weight format:
  orchid rel. L2   ||orchid - fp32|| / ||fp32|| of the layer's output hidden states
  hf bf16 rel. L2  the same for transformers' own layer in BF16 fed the same input (its error on that layer)
  routing          the share of tokens whose k experts match the reference's, among tokens whose k-th and
                   (k+1)-th router logits differ by more than 1e-2 (elsewhere the choice is a coin flip)
Bounds (exit status 1 if missed): BF16 error <= transformers' BF16 error, FP8 and MXFP4 <= twice it, routing
agreement 100% where decided.

Usage (on a GPU machine, 20b shapes): orchid synth /tmp/ck --preset 20b && \
  tools/gpu/layer_check.py --checkpoint /tmp/ck --layers 0,1,22,23 --tokens 1024 --orchid build/cuda/src/cli/orchid
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import GptOssForCausalLM


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def fp32_bytes(checkpoint):
    """The FP32 reference's weight bytes, from the checkpoint's config (a model on the meta device)."""
    config = transformers.AutoConfig.from_pretrained(checkpoint)
    with torch.device("meta"):
        return 4 * sum(p.numel() for p in GptOssForCausalLM(config).parameters())


def fp32_fits(checkpoint, margin=16 << 30):
    """Whether the whole FP32 reference fits in the GPU's free memory with room for its activations (20b:
    ~84 GB of weights, so not on an 80 GB card)."""
    return fp32_bytes(checkpoint) + margin <= torch.cuda.mem_get_info()[0]


@torch.no_grad()
def reference(args, layers, work):
    """FP32 forward with hooks; saves each checked layer's input, output and router decisions, and runs the
    layer again in BF16 on the same input."""
    dev = torch.device(args.device)
    offload = args.offload_layers == "always" or (args.offload_layers == "auto" and dev.type == "cuda" and
                                                  not fp32_fits(args.checkpoint))
    if offload:
        print("(the FP32 reference's decoder layers stay in host memory, each on the GPU for its forward)")
    model = GptOssForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32, attn_implementation="eager",
                                              quantization_config=transformers.Mxfp4Config(dequantize=True),
                                              **({"device_map": str(dev)} if dev.type == "cuda" and not offload
                                                 else {}))
    model = model.float().eval()
    handles = []
    if offload:
        # Everything but the decoder layers on the GPU; each layer comes over for its own forward and goes
        # back to host memory after it, so one FP32 layer is on the GPU at a time.
        decoder_layers = model.model.layers
        model.model.layers = torch.nn.ModuleList()
        model.to(dev)
        model.model.layers = decoder_layers
        def bring(mod, a):  # (hooks return None: a value would replace the layer's input or output)
            mod.to(dev)

        def send_back(mod, a, out):
            mod.to("cpu")

        for layer in decoder_layers:
            handles.append(layer.register_forward_pre_hook(bring))
            handles.append(layer.register_forward_hook(send_back))
    else:
        model = model.to(dev)
    k = model.config.num_experts_per_tok
    captured = {}

    def layer_hook(i):
        def hook(mod, a, kw, out):
            hs = a[0] if a else kw["hidden_states"]
            captured.setdefault(i, {})["in"] = hs.detach()
            captured[i]["kwargs"] = {n: v for n, v in kw.items() if n != "hidden_states"}
            captured[i]["out"] = (out[0] if isinstance(out, tuple) else out).detach()
        return hook

    def router_hook(i):
        def hook(mod, a, out):
            x = a[0].reshape(-1, a[0].shape[-1]).float()
            logits = x @ mod.weight.float().T + mod.bias.float()
            top = torch.sort(logits, dim=-1, descending=True)
            captured.setdefault(i, {})["topk"] = top.indices[:, :k].cpu().numpy()
            captured[i]["gap"] = (top.values[:, k - 1] - top.values[:, k]).cpu().numpy()
        return hook

    for i in layers:
        handles.append(model.model.layers[i].register_forward_hook(layer_hook(i), with_kwargs=True))
        handles.append(model.model.layers[i].mlp.router.register_forward_hook(router_hook(i)))
    gen = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, min(model.config.vocab_size, 200000), (1, args.tokens), generator=gen).to(dev)
    model(ids, use_cache=False)
    for h in handles:
        h.remove()
    result = {}
    for i in layers:
        c = captured[i]
        x_in = c["in"][0].float().cpu().numpy()
        y_ref = c["out"][0].float().cpu().numpy()
        suffix = f".{i}" if len(layers) > 1 else ""
        with open(os.path.join(work, f"in.npy{suffix}"), "wb") as f:
            np.save(f, x_in.astype(np.float32))
        # The FP32 layer is not needed again: converted in place (no copy of ~3.5 GB a 20b layer) and dropped
        # from the model after its BF16 run.
        layer16 = model.model.layers[i].to(device=dev, dtype=torch.bfloat16)
        hf_topk = {}

        def hf_router_hook(mod, a, out):
            x = a[0].reshape(-1, a[0].shape[-1]).float()
            hf_topk["idx"] = torch.topk(x @ mod.weight.float().T + mod.bias.float(), k, dim=-1).indices.cpu().numpy()

        layer16.mlp.router.register_forward_hook(hf_router_hook)
        kw = {n: (tuple(t.to(torch.bfloat16) for t in v) if isinstance(v, tuple) else
                  v.to(torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point() else v)
              for n, v in c["kwargs"].items()}
        out16 = layer16(c["in"].to(torch.bfloat16), **kw)
        out16 = (out16[0] if isinstance(out16, tuple) else out16)[0].float().cpu().numpy()
        del layer16
        model.model.layers[i] = torch.nn.Identity()
        result[i] = {"ref": y_ref, "hf_bf16": rel_l2(out16, y_ref), "topk": c["topk"], "gap": c["gap"],
                     "hf_topk": hf_topk["idx"], "out16": out16}
    del model
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return result


def orchid_memory_args(args):
    """`--orchid-args`, plus a memory budget that fits beside this process: orchid's
    --gpu-memory-utilization is its own share of the GPU and must be free, and this process still holds some
    of it (the CUDA context, the captured inputs). One step of the check's tokens needs few sequences."""
    extra = args.orchid_args.split()
    if args.backend != "cuda" or not torch.cuda.is_available():
        return extra
    free, total = torch.cuda.mem_get_info()
    defaults = {"--gpu-memory-utilization": f"{0.9 * free / total:.3f}", "--max-num-seqs": "16",
                "--max-num-batched-tokens": str(max(2048, args.tokens))}
    return [x for flag, value in defaults.items() if flag not in extra for x in (flag, value)] + extra


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--layers", default="0,1")
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--orchid", required=True)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--weights", default="bf16,fp8,mxfp4")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--orchid-args", default="",
                    help="more flags for `orchid layer`, e.g. '--tp 8 --ep 8 --collectives local'")
    ap.add_argument("--offload-layers", choices=["auto", "always", "never"], default="auto",
                    help="keep the FP32 reference's decoder layers in host memory and bring each onto the GPU "
                         "for its own forward; auto: where the whole FP32 model does not fit (20b: ~84 GB)")
    ap.add_argument("--report-only", action="store_true",
                    help="print the verdicts against the BF16 bounds but exit 0 (e.g. the FP8 KV cache's "
                         "accuracy, which those bounds were not made for)")
    args = ap.parse_args()
    layers = [int(x) for x in args.layers.split(",")]
    ok = True
    with tempfile.TemporaryDirectory() as work:
        ref = reference(args, layers, work)
        print(f"{'layer':>5} {'weights':>7} {'orchid rel L2':>14} {'hf bf16 rel L2':>15} {'bound':>10} "
              f"{'routing (decided)':>18} {'hf bf16 routing':>16}  verdict   "
              f"[other experts on all tokens: orchid / hf; rel L2 on the tokens both route like fp32: orchid / hf]")
        for w in args.weights.split(","):
            cmd = [args.orchid, "layer", args.checkpoint, "--backend", args.backend, "--weights", w, "--input",
                   os.path.join(work, "in.npy"), "--output", os.path.join(work, f"out_{w}.npy"), "--topk-out",
                   os.path.join(work, f"topk_{w}.npy"), "--log-level", "warn"] + orchid_memory_args(args)
            for i in layers:
                cmd += ["--layer", str(i)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"orchid layer ({w}) failed: {r.stderr.strip()[-2000:]}")
                ok = False
                continue
            for i in layers:
                suffix = f".{i}" if len(layers) > 1 else ""
                got = np.load(os.path.join(work, f"out_{w}.npy{suffix}")).reshape(ref[i]["ref"].shape)
                topk = np.load(os.path.join(work, f"topk_{w}.npy{suffix}")).astype(np.int64)
                rr = ref[i]
                err = rel_l2(got, rr["ref"])
                bound = rr["hf_bf16"] * (1 if w == "bf16" else 2)
                decided = rr["gap"] > 1e-2
                same = (np.sort(topk, axis=1) == np.sort(rr["topk"], axis=1)).all(axis=1)
                agree = float(same[decided].mean()) if decided.any() else 1.0
                hf_same = (np.sort(rr["hf_topk"], axis=1) == np.sort(rr["topk"], axis=1)).all(axis=1)
                hf_agree = float(hf_same[decided].mean()) if decided.any() else 1.0
                passed = err <= bound and agree == 1.0
                ok &= passed
                both = same & hf_same
                print(f"{i:5d} {w:>7} {err:14.3e} {rr['hf_bf16']:15.3e} {bound:10.3e} "
                      f"{agree * 100:11.2f}% of {int(decided.sum())} {hf_agree * 100:15.2f}%  "
                      f"{'PASS' if passed else 'FAIL'}      [{int((~same).sum())} / {int((~hf_same).sum())}; "
                      f"{rel_l2(got[both], rr['ref'][both]):.3e} / {rel_l2(rr['out16'][both], rr['ref'][both]):.3e}]")
    if args.report_only:
        print(f"(reported only: {'every layer within' if ok else 'some layers outside'} the BF16 bounds)")
    sys.exit(0 if ok or args.report_only else 1)


if __name__ == "__main__":
    main()
