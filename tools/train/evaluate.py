#!/usr/bin/env python3
"""Scores a model on tools/train/make_data.py's held-out split the way the tiny model's acceptance asks:
greedy decoding with orchid, each completion parsed by openai-harmony (the oracle).

  tools/train/evaluate.py --data DIR/test.jsonl --orchid BIN --model MODEL [--backend cpu] [--limit N]
                          [--jobs J] [--json OUT]
  tools/train/evaluate.py --data DIR/test.jsonl --reference     (scores the data's own completions: 100%)

Reported: the share of well-formed completions (openai-harmony parses them, and they end with <|return|> after
a final message or with <|call|> after a tool call); for the prompts that need a tool, the share calling the
right tool with JSON arguments that validate against its schema (tool_calls_valid), and of those whose
arguments also equal the expected ones (tool_calls); per task, the
share of final answers equal to the expected text; and the exact-completion rate.
"""
import argparse
import collections
import concurrent.futures
import json
import subprocess
import sys
from pathlib import Path

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_data  # noqa: E402

RETURN, CALL = 200002, 200012
TOOL_SCHEMAS = {t["name"]: t["parameters"] for t in (make_data.WEATHER_TOOL, make_data.POPULATION_TOOL)}


def generate(args, row):
    limit = max(64, 2 * len(row["completion"]))
    cmd = [args.orchid, "generate", args.model, "--prompt-ids", ",".join(map(str, row["prompt"])),
           "--temperature", "0", "--max-tokens", str(limit), "--print-ids", "--stop-ids", f"{RETURN},{CALL}",
           "--backend", args.backend]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()
    return json.loads(out[-1])


def score(h, enc, row, ids):
    """One completion -> {"well_formed", "tool_ok", "final_ok", "exact"} (None where it does not apply)."""
    r = {"task": row["task"], "exact": ids == row["completion"], "well_formed": False, "tool_ok": None,
         "tool_valid": None, "final_ok": None}
    expect = row["expect"]
    try:
        msgs = enc.parse_messages_from_completion_tokens(ids, h.Role.ASSISTANT)
    except Exception:  # noqa: BLE001 -- any parse failure is a malformed completion
        msgs = []
    last = msgs[-1] if msgs else None
    text = last.content[0].text if last is not None and last.content else None
    if last is not None and ids:
        if ids[-1] == RETURN and last.channel == "final":
            r["well_formed"] = True
        elif ids[-1] == CALL and last.channel == "commentary" and (last.recipient or "").startswith("functions."):
            r["well_formed"] = True
    if "tool" in expect:
        valid = ok = False
        if r["well_formed"] and ids[-1] == CALL and last.recipient == f"functions.{expect['tool']}":
            try:
                arguments = json.loads(text)
                jsonschema.validate(arguments, TOOL_SCHEMAS[expect["tool"]])
                valid, ok = True, arguments == expect["arguments"]
            except (ValueError, jsonschema.ValidationError):
                pass
        r["tool_valid"], r["tool_ok"] = valid, ok
    else:
        r["final_ok"] = bool(r["well_formed"] and last.channel == "final" and text == expect["final"])
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--orchid")
    ap.add_argument("--model")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--reference", action="store_true", help="score the data's own completions")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--tasks", help="comma-separated tasks to score (default: all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not a.reference and not (a.orchid and a.model):
        ap.error("give --orchid and --model, or --reference")
    rows = [json.loads(line) for line in Path(a.data).read_text().splitlines()]
    if a.tasks:
        rows = [r for r in rows if r["task"] in a.tasks.split(",")]
    if a.limit:
        rows = rows[:a.limit]
    h, enc = make_data.harmony()
    if a.reference:
        outputs = [r["completion"] for r in rows]
    else:
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            outputs = list(pool.map(lambda r: generate(a, r), rows))
    scores = [score(h, enc, r, ids) for r, ids in zip(rows, outputs)]

    def share(values):
        values = [v for v in values if v is not None]
        return (sum(values) / len(values), len(values)) if values else (None, 0)
    report = {"samples": len(scores), "well_formed": share(s["well_formed"] for s in scores),
              "tool_calls_valid": share(s["tool_valid"] for s in scores),
              "tool_calls": share(s["tool_ok"] for s in scores), "exact": share(s["exact"] for s in scores),
              "final_by_task": {}}
    by_task = collections.defaultdict(list)
    for s in scores:
        by_task[s["task"]].append(s["final_ok"])
    for task, values in sorted(by_task.items()):
        if any(v is not None for v in values):
            report["final_by_task"][task] = share(values)
    for key in ("well_formed", "tool_calls_valid", "tool_calls", "exact"):
        value, n = report[key]
        print(f"{key:16s} {'-' if value is None else f'{100 * value:.1f}%'} of {n}")
    for task, (value, n) in report["final_by_task"].items():
        print(f"final {task:14s} {100 * value:.1f}% of {n}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
