"""`orchid generate` runs through the engine: chunked prefill, small pages and a small KV pool must not change
the greedy tokens, which come from transformers (tests/golden/tiny, made by tools/golden/make_golden.py)."""
import json

import pytest

from conftest import ROOT

GOLDEN = ROOT / "tests" / "golden" / "tiny"


@pytest.fixture(scope="module")
def golden():
    return json.loads((GOLDEN / "reference.json").read_text())


@pytest.mark.parametrize("flags", [
    ["--max-num-batched-tokens", "8", "--max-num-seqs", "4"],
    ["--block-size", "4", "--kv-pages", "16"],
    ["--block-size", "5", "--no-enable-prefix-caching"],
    ["--async-scheduling", "--max-num-seqs", "2"],
    ["--no-async-scheduling"],
])
def test_engine_settings_keep_the_greedy_tokens(orchid, golden, flags):
    res = orchid("generate", GOLDEN / "checkpoint", "--prompt-ids", ",".join(map(str, golden["prompt_ids"])),
                 "--max-tokens", str(len(golden["greedy_ids"])), "--temperature", "0", "--print-ids", "--ignore-eos",
                 *flags)
    assert json.loads(res.stdout.strip().splitlines()[-1]) == golden["greedy_ids"]


def test_seeded_sampling_is_reproducible(orchid, golden):
    args = ["generate", GOLDEN / "checkpoint", "--prompt-ids", ",".join(map(str, golden["prompt_ids"][:9])),
            "--max-tokens", "12", "--temperature", "1.0", "--top-p", "0.9", "--seed", "7", "--print-ids",
            "--ignore-eos"]
    a = json.loads(orchid(*args).stdout.strip().splitlines()[-1])
    b = json.loads(orchid(*args, "--max-num-batched-tokens", "4", "--max-num-seqs", "2").stdout.strip().splitlines()[-1])
    assert a == b and len(a) == 12


@pytest.mark.parametrize("args,words", [
    (["--max-num-seqs", "8", "--max-num-batched-tokens", "4"], "--max-num-batched-tokens"),
    (["--min-tokens", "20", "--max-tokens", "5"], "--min-tokens"),
    (["--stop-ids", "5000"], "--stop-ids"),
    (["--backend", "cpu", "--prefill-attention", "hopper"], "--prefill-attention hopper is for the CUDA backend"),
    (["--kv-cache-dtype", "fp16"], "--kv-cache-dtype must be auto, bf16, fp8 or fp8_e4m3, got 'fp16'"),
    (["--async-scheduling", "--no-async-scheduling"], "--no-async-scheduling"),
    # A KV cache no host holds: refused before it is allocated (not std::bad_alloc or an out-of-memory kill).
    (["--backend", "cpu", "--kv-pages", "1000000000"], "GiB of host memory and"),
])
def test_bad_engine_flags_are_clear_errors(orchid, args, words):
    res = orchid("generate", GOLDEN / "checkpoint", "--prompt-ids", "1,2,3", *args, check=False)
    assert res.returncode == 2
    assert words in res.stderr
