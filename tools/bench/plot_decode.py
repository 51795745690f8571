#!/usr/bin/env python3
"""The seed's decode chart from `orchid bench decode --json` output: tokens/s per user against $ per 1M output
tokens, one line per (run, sequence length) across the batch sizes, each point labelled with its batch size.
Several JSON files (e.g. one per --weights or parallel configuration) go on one chart.

  orchid bench decode synthetic:20b --seq-lens 8192,32768 --batch-sizes 1,2,4,...,128 --json > mxfp4.json
  tools/bench/plot_decode.py mxfp4.json [fp8.json ...] --out decode.png
Needs matplotlib."""
import argparse
import json
import pathlib


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="JSON files written by orchid bench decode --json")
    ap.add_argument("--out", default="decode.png")
    ap.add_argument("--title", default=None)
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    models = set()
    for path in args.runs:
        run = json.loads(pathlib.Path(path).read_text())
        if run.get("bench") != "decode":
            raise SystemExit(f"{path}: not the output of orchid bench decode --json")
        models.add(run["model"])
        for L in sorted({r["seq_len"] for r in run["rows"]}):
            rows = sorted((r for r in run["rows"] if r["seq_len"] == L and "step_s" in r), key=lambda r: r["batch"])
            if not rows:
                continue
            xs = [r["usd_per_1m_tokens"] for r in rows]
            ys = [r["tokens_per_s_per_user"] for r in rows]
            label = f"{run['weights']}, {run.get('gpus', 1)} GPU, ctx {L}"
            ax.plot(xs, ys, marker="o", label=label)
            for r, x, y in zip(rows, xs, ys):
                ax.annotate(str(r["batch"]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("$ per 1M output tokens (log scale)")
    ax.set_ylabel("tokens/s per user")
    ax.set_title(args.title or f"decode: {', '.join(sorted(models))} (points: batch size)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=130)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
