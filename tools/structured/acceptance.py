#!/usr/bin/env python3
"""The structured-output acceptance run: `orchid serve synthetic:tiny` (random weights) and 200 requests over the
20 schemas of tests/python/structured_schemas.py, through the openai SDK's `chat.completions.parse` and
`responses.parse` (the pydantic models) and plain `response_format` (the JSON Schemas), half of the plain ones
streamed; then strict tool calls (chat and Responses, streamed and not) and json_object. Every answer must parse
and validate with jsonschema. Prints a summary line per group and exits non-zero on any failure.

  tools/structured/acceptance.py [--orchid build/cpu/src/cli/orchid] [--workers 8] [--max-tokens 200] [--only TEXT]
"""
import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))

from orchid_server import OrchidServer, openai_client  # noqa: E402
from structured_schemas import MODELS, SCHEMAS, validate  # noqa: E402

MSGS = [{"role": "user", "content": "Answer in JSON."}]
TOOL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]},
                                                "days": {"type": "integer", "minimum": 1, "maximum": 7}},
               "required": ["city", "unit", "days"], "additionalProperties": False}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orchid", default=str(ROOT / "build" / "cpu" / "src" / "cli" / "orchid"))
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--only", default="", help="run only the groups whose name contains this")
    args = ap.parse_args()
    os.environ["ORCHID_BIN"] = args.orchid
    results = {}

    with OrchidServer("synthetic:tiny", "--served-model-name", "tiny", "--max-model-len", "4096") as server:
        client = openai_client(server)

        def chat_schema(job):
            name, schema, seed, stream = job
            fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
            if stream:
                chunks = client.chat.completions.create(model="tiny", messages=MSGS, response_format=fmt, seed=seed,
                                                        max_tokens=args.max_tokens, stream=True)
                content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                r = client.chat.completions.create(model="tiny", messages=MSGS, response_format=fmt, seed=seed,
                                                   max_tokens=args.max_tokens)
                content = r.choices[0].message.content
            validate(json.loads(content), schema)

        def parse_model(job):
            name, model, seed, api = job
            if api == "chat":
                r = client.chat.completions.parse(model="tiny", messages=MSGS, response_format=model, seed=seed,
                                                  max_tokens=args.max_tokens)
                assert isinstance(r.choices[0].message.parsed, model)
                validate(json.loads(r.choices[0].message.content), model.model_json_schema())
            else:
                r = client.responses.parse(model="tiny", input="Answer in JSON.", text_format=model,
                                           max_output_tokens=args.max_tokens)
                assert isinstance(r.output_parsed, model)

        def strict_tool(job):
            seed, api, stream = job
            if api == "chat":
                tools = [{"type": "function", "function": {"name": "get_weather", "strict": True,
                                                           "parameters": TOOL_SCHEMA}}]
                if stream:
                    args_text = ""
                    for c in client.chat.completions.create(model="tiny", messages=MSGS, tools=tools, seed=seed,
                                                            tool_choice="required", max_tokens=args.max_tokens,
                                                            stream=True):
                        for ch in c.choices:
                            for tc in ch.delta.tool_calls or []:
                                args_text += tc.function.arguments or ""
                else:
                    r = client.chat.completions.create(model="tiny", messages=MSGS, tools=tools, seed=seed,
                                                       tool_choice="required", max_tokens=args.max_tokens)
                    args_text = r.choices[0].message.tool_calls[0].function.arguments
            else:
                tools = [{"type": "function", "name": "get_weather", "strict": True, "parameters": TOOL_SCHEMA}]
                r = client.responses.create(model="tiny", input="Weather?", tools=tools, tool_choice="required",
                                            max_output_tokens=args.max_tokens)
                args_text = next(o for o in r.output if o.type == "function_call").arguments
            validate(json.loads(args_text), TOOL_SCHEMA)

        def json_object(seed):
            r = client.chat.completions.create(model="tiny", messages=MSGS, response_format={"type": "json_object"},
                                               seed=seed, max_tokens=args.max_tokens)
            assert isinstance(json.loads(r.choices[0].message.content), dict)

        def run(group, fn, jobs):
            if args.only not in group:
                return
            t0 = time.time()
            failures = []

            def guarded(job):
                try:
                    fn(job)
                except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                    failures.append(f"{job!r:.120}: {type(e).__name__}: {e!s:.300}")
            with ThreadPoolExecutor(args.workers) as pool:
                list(pool.map(guarded, jobs))
            results[group] = {"requests": len(jobs), "valid": len(jobs) - len(failures),
                              "seconds": round(time.time() - t0, 1)}
            print(f"{group}: {len(jobs) - len(failures)}/{len(jobs)} valid ({time.time() - t0:.1f} s)", flush=True)
            for f in failures[:10]:
                print("  " + f)

        # 16 JSON Schemas x 10 (half streamed) + 4 pydantic models x 10 (chat .parse and responses .parse) = 200.
        run("response_format json_schema (16 schemas x 10, half streamed)", chat_schema,
            [(n, s, seed, seed % 2 == 1) for n, s in SCHEMAS.items() for seed in range(10)])
        run("chat.completions.parse / responses.parse (4 models x 10)", parse_model,
            [(n, m, seed, "chat" if seed % 2 == 0 else "responses") for n, m in MODELS.items() for seed in range(10)])
        run("strict tool calls (chat, chat streamed, Responses)", strict_tool,
            [(seed, api, stream) for seed in range(10) for api, stream in (("chat", False), ("chat", True),
                                                                          ("responses", False))])
        run("json_object", json_object, list(range(20)))
    print(json.dumps(results))
    return 0 if all(r["valid"] == r["requests"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
