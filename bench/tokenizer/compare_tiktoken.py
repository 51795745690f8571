#!/usr/bin/env python3
"""Encode throughput on the tokenizer corpus, one thread: orchid (bench/tokenizer/tokenizer_bench) vs tiktoken
(o200k_harmony, encode_ordinary), each document encoded on its own, best of --repeats passes for both.
Both figures are per CPU second of the encoding thread (Google Benchmark's default; time.thread_time for
tiktoken), so that a busy shared machine does not skew the ratio.

    .venv/bin/python bench/tokenizer/compare_tiktoken.py [--bench build/cpu/bench/tokenizer/tokenizer_bench]
"""
import argparse
import json
import pathlib
import subprocess
import time
from unittest import mock

import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tiktoken_ext import openai_public

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tiktoken_harmony():
    def local_ranks(_url, expected_hash=None):
        return load_tiktoken_bpe(str(ROOT / "assets/tokenizer/o200k_base.tiktoken"), expected_hash=expected_hash)
    with mock.patch.object(openai_public, "load_tiktoken_bpe", local_ranks):
        return tiktoken.Encoding(**openai_public.o200k_harmony())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(ROOT / "tests/data/tokenizer_corpus.jsonl"))
    ap.add_argument("--bench", default=str(ROOT / "build/cpu/bench/tokenizer/tokenizer_bench"))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    with open(args.corpus, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)

    enc = tiktoken_harmony()
    best = float("inf")
    for _ in range(args.repeats):
        t = time.thread_time()
        for d in docs:
            enc.encode_ordinary(d)
        best = min(best, time.thread_time() - t)
    tik_mbs = nbytes / best / 1e6

    out = subprocess.run([args.bench, "--corpus", args.corpus, "--benchmark_filter=BM_EncodeOrdinary$|BM_EncodeOrdinary/",
                          f"--benchmark_repetitions={args.repeats}", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]
    orchid_mbs = max(b["bytes_per_second"] for b in runs) / 1e6

    print(f"corpus: {len(docs)} documents, {nbytes / 1e6:.2f} MB")
    print(f"tiktoken {tiktoken.__version__} encode_ordinary: {tik_mbs:.1f} MB/s")
    print(f"orchid encode_ordinary:            {orchid_mbs:.1f} MB/s")
    print(f"ratio orchid/tiktoken: {orchid_mbs / tik_mbs:.2f}x")


if __name__ == "__main__":
    main()
