#!/usr/bin/env python3
"""Golden files for orchid's Harmony renderer and streaming parser, produced by openai-harmony 0.0.8.

    tools/golden/harmony_cases.py [--out tests/harmony/golden] [--seed 1] [--render 1200] [--parse 1500]

Writes harmony_golden.tar.gz (byte-reproducible) holding, as JSON lines (one case per line):
  render_cases.jsonl  {"name", "op", "conversation" (openai-harmony's JSON), "next_role", "auto_drop",
                       "function_tools", "ids" | "error"}: op is completion, conversation, training or message
  parse_cases.jsonl   {"name", "role", "ids", "strict": {...}, "lenient": {...}} (harmony_parse_oracle.py)
  builtin_tools.json  openai-harmony's browser and python tool namespaces
The named cases rebuild the inputs of openai-harmony's own tests; the rest are random (seeded).
tests/python/test_harmony_golden.py regenerates a subset live and compares it with the committed files.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import random
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

ARCHIVE = "harmony_golden.tar.gz"
DEFAULT_SEED = 1
VOCAB_DIRS = [ROOT / "assets" / "tokenizer", ROOT.parent / "shared" / "fixtures" / "gpt-oss-tokenizer"]


def encoding():
    """openai-harmony's encoding, loaded offline from o200k_base.tiktoken."""
    if "TIKTOKEN_ENCODINGS_BASE" not in os.environ:
        for d in VOCAB_DIRS:
            if (d / "o200k_base.tiktoken").exists():
                os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(d)
                break
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


from harmony_named import named_parse_cases, named_render_cases  # noqa: E402
from harmony_parse_oracle import lenient_result, strict_result  # noqa: E402
import harmony_completions as hc_ids  # noqa: E402
import harmony_random as hr  # noqa: E402


def builtin_tools() -> dict:
    from openai_harmony import ToolNamespaceConfig
    return {"browser": ToolNamespaceConfig.browser().model_dump(exclude_none=True),
            "python": ToolNamespaceConfig.python().model_dump(exclude_none=True)}


def render_record(enc, name: str, messages: list, op: str, next_role: str = "assistant", auto_drop: bool = True,
                  function_tools: bool = False) -> dict:
    from openai_harmony import (Conversation, HarmonyError, Message, RenderConversationConfig, RenderOptions,
                                Role)
    conv = Conversation.from_json(json.dumps({"messages": messages}))
    cfg = RenderConversationConfig(auto_drop_analysis=auto_drop)
    rec = {"name": name, "op": op, "conversation": json.loads(conv.to_json()), "next_role": next_role,
           "auto_drop": auto_drop, "function_tools": function_tools}
    try:
        if op == "completion":
            rec["ids"] = enc.render_conversation_for_completion(conv, Role(next_role), cfg)
        elif op == "conversation":
            rec["ids"] = enc.render_conversation(conv, cfg)
        elif op == "training":
            rec["ids"] = enc.render_conversation_for_training(conv, cfg)
        else:
            rec["ids"] = enc.render(Message.from_dict(messages[0]), RenderOptions(
                conversation_has_function_tools=function_tools))
    except (HarmonyError, RuntimeError) as e:  # openai-harmony raises RuntimeError for bad conversations
        rec["error"] = str(e)
    return rec


def random_render(enc, rng: random.Random, i: int, builtin: dict) -> dict:
    messages = hr.conversation(rng, builtin)
    r = rng.random()
    if r < 0.6:
        op, next_role = "completion", "assistant" if rng.random() < 0.9 else rng.choice(["user", "tool", "system"])
    elif r < 0.8:
        op, next_role = "conversation", "assistant"
    elif r < 0.9:
        op, next_role = "training", "assistant"
    else:
        op, next_role = "message", "assistant"
        messages = messages[:1] or [hr.msg("user", "")]
    return render_record(enc, f"random_render_{i}", messages, op, next_role, auto_drop=rng.random() < 0.85,
                         function_tools=rng.random() < 0.5)


def parse_record(enc, name: str, ids: list, role) -> dict:
    return {"name": name, "role": role, "ids": ids, "strict": strict_result(enc, ids, role),
            "lenient": lenient_result(enc, ids, role)}


def render_cases(enc, seed: int, n: int) -> list:
    builtin = builtin_tools()
    out = [render_record(enc, *c[:2], **c[2]) for c in named_render_cases()]
    rng = random.Random(seed)
    out += [random_render(enc, rng, i, builtin) for i in range(n)]
    return out


def parse_cases(enc, seed: int, n: int, renders: list = ()) -> list:
    out = [parse_record(enc, name, ids, role) for name, ids, role in named_parse_cases(enc)]
    # Whole rendered conversations parse back too (every message, system and tool ones included).
    out += [parse_record(enc, "parse_" + r["name"], r["ids"], None) for r in renders
            if "ids" in r and r["op"] in ("conversation", "training")]
    rng = random.Random(seed + 1)
    for i in range(n):
        kind = i % 8
        ids, role = (hc_ids.garbage if kind == 7 else hc_ids.header_case if kind == 6 else hc_ids.completion)(rng, enc)
        out.append(parse_record(enc, f"random_parse_{i}", ids, role))
    return out


def utf8_cases(seed: int, n: int) -> list:
    """Python's UTF-8 decoder as the oracle for where a byte string goes wrong and its lossy decoding."""
    rng = random.Random(seed + 2)
    out = []
    for _ in range(n):
        b = hc_ids.utf8_bytes(rng)
        rec = {"hex": b.hex(), "lossy": b.decode("utf-8", "replace"), "valid": True, "valid_up_to": len(b),
               "error_len": None}
        try:
            b.decode("utf-8")
        except UnicodeDecodeError as e:
            rec.update(valid=False, valid_up_to=e.start,
                       error_len=None if e.reason == "unexpected end of data" else e.end - e.start)
        out.append(rec)
    return out


def jsonl(records: list) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records).encode()


def write_archive(path: Path, files: dict) -> None:
    """A .tar.gz whose bytes depend on the content only (CMake extracts it for the C++ tests)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(buf.getvalue())


def read_archive(path: Path) -> dict:
    """{file name: parsed content} of an archive written by write_archive."""
    out = {}
    with tarfile.open(path, "r:gz") as tar:
        for m in tar.getmembers():
            data = tar.extractfile(m).read().decode()
            # Only "\n" ends a line: str.splitlines() would also split at U+2028, U+0085, ... inside strings.
            out[m.name] = ([json.loads(line) for line in data.split("\n") if line] if m.name.endswith(".jsonl")
                           else json.loads(data))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--out", default=str(ROOT / "tests" / "harmony" / "golden"))
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--render", type=int, default=1200, help="random conversations")
    ap.add_argument("--parse", type=int, default=1500, help="random completions")
    args = ap.parse_args()
    enc = encoding()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    renders = render_cases(enc, args.seed, args.render)
    parses = parse_cases(enc, args.seed, args.parse, renders)
    write_archive(out / ARCHIVE, {
        "render_cases.jsonl": jsonl(renders), "parse_cases.jsonl": jsonl(parses),
        "utf8_cases.jsonl": jsonl(utf8_cases(args.seed, 2000)),
        "builtin_tools.json": (json.dumps(builtin_tools(), ensure_ascii=False, indent=1) + "\n").encode()})
    errors = sum("error" in r for r in renders)
    strict_errors = sum(r["strict"]["error"] is not None for r in parses)
    repaired = sum(bool(r["lenient"]["recovered"]) for r in parses)
    print(f"render cases: {len(renders)} ({errors} rejected); parse cases: {len(parses)} "
          f"({strict_errors} raise in strict mode, {repaired} need lenient recovery)")


if __name__ == "__main__":
    main()
