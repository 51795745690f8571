#!/usr/bin/env python3
"""Writes seed inputs for the tokenizer fuzz targets from the test corpus (fuzz/corpus/<target>/):
short snippets of its documents for fuzz_tokenizer_encode, and their tiktoken ids (three bytes each, in the
layout fuzz_tokenizer_decode reads) for fuzz_tokenizer_decode. Deterministic.

    .venv/bin/python tools/corpus/make_fuzz_seeds.py
"""
import hashlib
import json
import pathlib
import random
from unittest import mock

import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tiktoken_ext import openai_public

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEEDS = 40
MAX_BYTES = 400


def main():
    def local_ranks(_url, expected_hash=None):
        return load_tiktoken_bpe(str(ROOT / "assets/tokenizer/o200k_base.tiktoken"), expected_hash=expected_hash)
    with mock.patch.object(openai_public, "load_tiktoken_bpe", local_ranks):
        enc = tiktoken.Encoding(**openai_public.o200k_harmony())
    with open(ROOT / "tests/data/tokenizer_corpus.jsonl", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    r = random.Random(1)
    enc_dir = ROOT / "fuzz/corpus/fuzz_tokenizer_encode"
    dec_dir = ROOT / "fuzz/corpus/fuzz_tokenizer_decode"
    for d in (enc_dir, dec_dir):
        d.mkdir(parents=True, exist_ok=True)
        for old in d.iterdir():
            old.unlink()
    for _ in range(SEEDS):
        doc = r.choice(docs).encode("utf-8")
        start = r.randrange(max(1, len(doc) - MAX_BYTES))
        snippet = doc[start:start + r.randint(8, MAX_BYTES)]
        (enc_dir / hashlib.sha1(snippet).hexdigest()).write_bytes(snippet)
        ids = enc.encode(snippet.decode("utf-8", errors="replace"), allowed_special="all")
        # The target maps three little-endian bytes v to (v % (vocab + 16)) - 8.
        raw = b"".join((i + 8).to_bytes(3, "little") for i in ids[:160])
        (dec_dir / hashlib.sha1(raw).hexdigest()).write_bytes(raw)
    print(f"wrote {SEEDS} seeds each to {enc_dir} and {dec_dir}")


if __name__ == "__main__":
    main()
