#!/usr/bin/env python3
"""Per-kernel breakdown of one decode step (or one prefill) on the CUDA backend, against the floors of its parts.

Runs `orchid bench decode MODEL --seq-lens L --batch-sizes B` under the CUPTI kernel tracer
(bench/cuda/trace: CUDA_INJECTION64_PATH), takes the last graph-replayed step (all kernels of one graph
launch share a correlation id), and prints a table: each part of the step (kernels grouped by what they do;
cuBLASLt GEMMs named by the kernel that precedes them), its launches, device time, share of the step, and the
floor of the parts that move real bytes (weights, KV) at the HBM ceiling. The step's span (first kernel start
to last kernel end) minus the kernels' busy time is the idle time between kernels inside the graph.
Under programmatic dependent launch a kernel starts while the one before it still runs and waits inside
itself, so its device time includes that wait; "us past the ones before" counts only the time it ends after
every earlier kernel had (its end minus the later of its start and their last end): what it adds to the
step's critical path, summing over all kernels to the busy time.

  kernel_breakdown.py --orchid build/cuda/src/cli/orchid --tracer build/cuda/bench/cuda/trace/liborchid_kernel_trace.so \
      --model synthetic:20b --batch-sizes 1,256 --seq-len 1024 [--weights mxfp4] [--json OUT.json]

With --prefill-lens N,... it breaks down instead the last batch-1 prefill of N tokens of `orchid bench prefill`
(its forward passes: one a chunk of --max-num-batched-tokens, each from its embedding kernel on), against
compute floors as `orchid bench prefill` counts them (src/model/cost_model.cc): every linear layer at the FP8
ceiling (BF16 with --weights bf16), attention at the BF16 ceiling; the router (N = experts) and the last token's
lm_head by the bytes they must read.
Standard library only.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

HBM = 4.17e12  # bytes/s, measured device-to-device copy (hopper.md)
FP8_FLOPS, BF16_FLOPS = 1332e12, 742e12  # dense tensor-core ceilings measured on the H200 (hopper.md)

# gpt-oss-20b / 120b shapes (the spec): hidden, q dim, kv dim, vocab, intermediate, layers, experts.
SHAPES = {"20b": dict(H=2880, Q=4096, KV=512, V=201088, I=2880, L=24, E=32, k=4),
          "120b": dict(H=2880, Q=4096, KV=512, V=201088, I=2880, L=36, E=128, k=4)}

# (substring of the demangled kernel name, part) in order: the first match names the part.
PARTS = [
    ("mxfp4_moe_gemm_kernel", "experts: MXFP4 streaming GEMM"),
    ("mxfp4_tiled_kernel", "experts: MXFP4 tiled GEMM"),
    ("w4a8_activation_kernel", "experts: gather + e4m3 quant (W4A8)"),
    ("w4a8_kernel", "experts: MXFP4 W4A8 GEMM"),
    ("tiled_prepare_kernel", "experts: tile plan + tiled-order input"),
    ("tiled_plan_kernel", "experts: tile plan"),
    ("tiled_activation_kernel", "experts: tiled-order input"),
    ("activation_mx_kernel", "experts: MX-order input"),
    ("mxfp4_to_fp8", "experts: MXFP4 -> FP8 conversion"),
    ("grouped_setup_kernel", "experts: grouped GEMM set-up"),
    ("Fp8", "experts: FP8 grouped GEMM"),
    ("KernelPtrArray", "experts: grouped GEMM"),
    ("gather_quant_fp8", "experts: gather + FP8 quant"),
    ("swiglu", "experts: SwiGLU"),
    ("combine_norm", "experts: weighted combine + next input norm"),
    ("combine", "experts: weighted combine"),
    ("route", "routing"),
    ("topk", "routing"),
    ("permute", "routing"),
    ("precise", "attention: layer 0 fp32"),
    ("decode_kernel", "attention: decode"),
    ("decode_merge", "attention: split merge"),
    ("merge", "attention: split merge"),
    ("prefill", "attention: prefill tiles"),
    ("qkv_rope_gemm", "GEMM: QKV projection + RoPE + KV write"),  # 1-8 tokens: one fused launch
    ("rope", "RoPE + KV write"),
    ("rmsnorm", "RMSNorm (+ residual)"),
    ("embedding", "embedding"),
    ("gather_rows", "final-norm gather"),
    ("greedy", "arg-max"),
    ("sample", "sampler"),
]
GEMM_MARKERS = ("gemm", "nvjet", "xmma", "cutlass", "Kernel2", "splitKreduce")


def part_of(name):
    for key, part in PARTS:
        if key in name:
            return part
    if any(m in name for m in GEMM_MARKERS):
        return "GEMM"  # cuBLASLt launches are told apart later, by what runs before them (name_gemms)
    return "other: " + name.split("(")[0][:60]


def name_gemms(rows):
    """Gives each cuBLASLt GEMM a role from the part before it: lm_head once the final-norm gather ran (the
    final norm may come between them), O after attention, QKV after the combine that did the next input norm,
    and after a norm the router when the layer's O projection came last (the post-attention norm), else QKV
    (an input norm)."""
    out, prev, last_gemm, gathered = [], None, None, False
    for r in rows:
        p = r["part"]
        gathered = gathered or p.startswith("final-norm")
        if p == "GEMM":
            if gathered:
                p = "GEMM: lm_head"
            elif prev is not None and prev.startswith("attention"):
                p = "GEMM: O projection"
            elif prev is not None and prev.startswith("final-norm") or prev == "lm_head":
                p = "GEMM: lm_head"
            elif prev is not None and prev.endswith("next input norm"):
                p = "GEMM: QKV projection"
            elif prev is not None and prev.startswith("RMSNorm"):
                p = "GEMM: router" if last_gemm == "GEMM: O projection" else "GEMM: QKV projection"
            elif prev is not None and prev.startswith("GEMM"):
                p = prev  # split-K or two-pass GEMMs stay with their role
            else:
                p = "GEMM: other"
            last_gemm = p
        if p.startswith("GEMM: lm_head"):
            p = "GEMM: lm_head"
        r["part"] = p
        prev = "final-norm" if p.startswith("final-norm") else p
        out.append(r)
    return out


def floors(shape, B, ctx, weights):
    """Bytes each part must move at least (HBM), for the parts whose bytes are not negligible."""
    s = shape
    e_bytes = 3 * s["H"] * s["I"] * (17 / 32 if weights == "mxfp4" else 1 + 4 / 128 / 128 if weights == "fp8" else 2)
    active = s["E"] * (1 - (1 - s["k"] / s["E"]) ** B)
    kv = 2 * s["KV"] * 2  # K and V, bf16, per token and layer
    full, sliding = s["L"] // 2, s["L"] // 2
    attn_kv = B * kv * (full * ctx + (sliding - 1) * min(ctx, 128) + 2 * min(ctx, 128))  # layer 0 is fp32
    return {
        "experts": s["L"] * active * e_bytes,
        "attention": attn_kv,
        "GEMM: QKV projection": s["L"] * 2 * s["H"] * (s["Q"] + 2 * s["KV"]),
        "GEMM: O projection": s["L"] * 2 * s["Q"] * s["H"],
        "GEMM: router": s["L"] * 2 * s["E"] * s["H"],
        "GEMM: lm_head": 2 * s["V"] * s["H"] + 4 * B * s["V"],
    }


def prefill_floors(shape, T, weights):
    """FLOPs each part of a batch-1 prefill of T tokens must do at least, as seconds at its ceiling."""
    s = shape
    linear = BF16_FLOPS if weights == "bf16" else FP8_FLOPS
    heads, d = s["Q"] // 64, 64
    full_pairs = T * (T + 1) / 2  # causal (query, key) pairs of a full-attention layer
    window_pairs = sum(min(t + 1, 128) for t in range(T))  # sliding window of 128
    attn = 4 * d * heads * (s["L"] // 2) * (full_pairs + window_pairs)  # QK^T and P V, 2 FLOPs a MAC each
    return {
        "experts": 6 * T * s["k"] * s["H"] * s["I"] * s["L"] / linear,
        "attention": attn / BF16_FLOPS,
        "GEMM: QKV projection": 2 * T * s["H"] * (s["Q"] + 2 * s["KV"]) * s["L"] / linear,
        "GEMM: O projection": 2 * T * s["Q"] * s["H"] * s["L"] / linear,
        # The router's N is the expert count: reading its input (two BF16 halves of the fp32-accuracy norm
        # output, as orchid routes by default) bounds it, not its FLOPs.
        "GEMM: router": max(2 * T * s["H"] * s["E"] / linear, 2 * 2 * T * s["H"] / HBM) * s["L"],
        "GEMM: lm_head": 2 * s["V"] * s["H"] / HBM,  # the last token's row only: its weight bytes
    }


def last_prefill(rows, forwards):
    """The kernels of the last `forwards` forward passes of a trace (each starts with its embedding kernel),
    in start order."""
    rows = sorted(rows, key=lambda r: int(r["start_ns"]))
    starts = [i for i, r in enumerate(rows) if part_of(r["name"]) == "embedding"]
    if len(starts) < forwards:
        sys.exit(f"kernel_breakdown: {len(starts)} forward passes in the trace, {forwards} wanted")
    out = rows[starts[-forwards]:]
    for r in out:
        r["part"] = part_of(r["name"])
    return name_gemms(out)


def traced(args, bench_args):
    """Runs `orchid bench BENCH_ARGS --json` under the kernel tracer; returns (trace rows, the bench's JSON)."""
    fd, path = tempfile.mkstemp(suffix=".csv")
    os.close(fd)
    env = dict(os.environ, CUDA_INJECTION64_PATH=os.path.abspath(args.tracer), ORCHID_TRACE_OUT=path)
    cmd = [args.orchid, "bench"] + bench_args + ["--json"] + args.extra
    res = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        sys.exit(f"kernel_breakdown: {' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
    bench = json.loads(res.stdout)
    with open(path) as f:
        rows = list(csv.DictReader(f))
    os.unlink(path)
    return rows, bench


def trace_prefill(args, T):
    rows, bench = traced(args, ["prefill", args.model, "--weights", args.weights, "--input-lens", str(T),
                                "--repeats", "1"])
    chunk = 16384
    if "--max-num-batched-tokens" in args.extra:
        chunk = int(args.extra[args.extra.index("--max-num-batched-tokens") + 1])
    return last_prefill(rows, -(-T // chunk)), bench


def trace_step(args, B):
    rows, bench = traced(args, ["decode", args.model, "--weights", args.weights, "--seq-lens", str(args.seq_len),
                                "--batch-sizes", str(B), "--steps", "3"])
    graph_rows = [r for r in rows if r["graph"] != "0"]
    if not graph_rows:
        sys.exit("kernel_breakdown: no graph-launched kernels in the trace (decode graphs off?)")
    last = max(graph_rows, key=lambda r: int(r["start_ns"]))["correlation"]
    step = sorted((r for r in graph_rows if r["correlation"] == last), key=lambda r: int(r["start_ns"]))
    for r in step:
        r["part"] = part_of(r["name"])
    return name_gemms(step), bench


def summarize(step, shape, B, ctx, weights, prefill=False):
    step = sorted(step, key=lambda r: int(r["start_ns"]))
    start = min(int(r["start_ns"]) for r in step)
    end = max(int(r["end_ns"]) for r in step)
    parts = {}
    busy, last_end = 0, start  # busy: the union of the kernels' intervals, the sum of their past times
    for r in step:
        s, e = int(r["start_ns"]), int(r["end_ns"])
        past = max(0, e - max(s, last_end))
        p = parts.setdefault(r["part"], {"launches": 0, "ns": 0, "past_ns": 0})
        p["launches"] += 1
        p["ns"] += e - s
        p["past_ns"] += past
        busy += past
        last_end = max(last_end, e)
    if prefill:
        fl = {k: v * 1e6 for k, v in prefill_floors(shape, ctx, weights).items()}
    else:
        fl = {k: v / HBM * 1e6 for k, v in floors(shape, B, ctx, weights).items()}
    attention_part = "attention: prefill tiles" if prefill else "attention: decode"
    table = []
    for name, p in sorted(parts.items(), key=lambda kv: -kv[1]["ns"]):
        key = "experts" if name.startswith("experts: MXFP4") or name.startswith("experts: FP8") or \
            name == "experts: grouped GEMM" else "attention" if name == attention_part else \
            "GEMM: QKV projection" if name.startswith("GEMM: QKV projection") else name
        floor_us = fl.get(key)
        table.append({"part": name, "launches": p["launches"], "us": p["ns"] / 1e3, "past_us": p["past_ns"] / 1e3,
                      "share": p["ns"] / (end - start), "floor_us": floor_us})
    return {"batch": B, "seq_len": ctx, "span_us": (end - start) / 1e3, "busy_us": busy / 1e3,
            "idle_us": (end - start - busy) / 1e3, "kernels": len(step), "parts": table}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orchid", default="build/cuda/src/cli/orchid")
    ap.add_argument("--tracer", default="build/cuda/bench/cuda/trace/liborchid_kernel_trace.so")
    ap.add_argument("--model", default="synthetic:20b")
    ap.add_argument("--weights", default="mxfp4")
    ap.add_argument("--batch-sizes", default="1,256")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--prefill-lens", help="break down batch-1 prefills of these lengths instead (N,...)")
    ap.add_argument("--json", help="also write the breakdown as JSON here")
    ap.add_argument("extra", nargs="*", help="more flags for orchid bench decode / prefill (after --)")
    args = ap.parse_args()
    shape = SHAPES["120b" if "120b" in args.model else "20b"]
    results = []
    for T in [int(t) for t in args.prefill_lens.split(",")] if args.prefill_lens else []:
        step, bench = trace_prefill(args, T)
        s = summarize(step, shape, 1, T, args.weights, prefill=True)
        row = next((r for r in bench["rows"] if r.get("input_tokens") == T), {})
        s["bench_latency_ms"] = 1e3 * row.get("latency_s", 0)
        s["bench_floor_ms"] = 1e3 * row.get("floor_s", 0)
        results.append(s)
        print(f"\n### {args.model} {args.weights}, prefill of {T} tokens: {s['bench_latency_ms']:.1f} ms (host clock; "
              f"floor {s['bench_floor_ms']:.1f} ms), kernels' span {s['span_us'] / 1e3:.1f} ms, busy "
              f"{s['busy_us'] / 1e3:.1f} ms, idle between kernels {s['idle_us'] / 1e3:.1f} ms, {s['kernels']} kernels")
        print_parts(s)
    if args.prefill_lens:
        write_json(args, results)
        return
    for B in [int(b) for b in args.batch_sizes.split(",")]:
        step, bench = trace_step(args, B)
        s = summarize(step, shape, B, args.seq_len, args.weights)
        row = next((r for r in bench["rows"] if r.get("batch") == B), {})
        s["bench_step_ms"] = 1e3 * row.get("step_s", 0)
        s["bench_floor_ms"] = 1e3 * row.get("floor_s", 0)
        results.append(s)
        print(f"\n### {args.model} {args.weights}, batch {B}, context {args.seq_len}: step {s['bench_step_ms']:.3f} ms "
              f"(host clock; floor {s['bench_floor_ms']:.3f} ms), graph span {s['span_us']:.1f} us, kernels busy "
              f"{s['busy_us']:.1f} us, idle between kernels {s['idle_us']:.1f} us, {s['kernels']} kernels")
        print_parts(s)
    write_json(args, results)


def print_parts(s):
    print("| part | launches | us | us past the ones before | share of span | floor us | x floor |")
    print("|---|---|---|---|---|---|---|")
    for p in s["parts"]:
        fl = p["floor_us"]
        fl_text = "-" if fl is None else "%.1f" % fl
        ratio = "-" if not fl else "%.2f" % (p["us"] / fl)
        print("| %s | %d | %.1f | %.1f | %.1f%% | %s | %s |" % (p["part"], p["launches"], p["us"], p["past_us"],
                                                             100 * p["share"], fl_text, ratio))


def write_json(args, results):
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
