"""`orchid bench serve --url`: the load generator against `orchid serve synthetic:tiny` (CPU backend). Checks the
counts it reports against what was asked (requests, input and output tokens, exact output lengths), the arrival
modes (all at once, bounded concurrency, Poisson rate), prompts from a JSONL file, and that failures are
reported as errors with a non-zero exit instead of being counted as throughput."""
import json

import pytest

from orchid_server import OrchidServer


@pytest.fixture(scope="module")
def server():
    with OrchidServer("synthetic:tiny", "--max-model-len", "256", "--served-model-name", "tiny") as s:
        yield s


def bench(orchid, *args, check=True):
    res = orchid("bench", "serve", *args, "--json", check=check)
    return res, (json.loads(res.stdout) if res.stdout.strip() else None)


def test_counts_and_exact_lengths(orchid, server):
    _, r = bench(orchid, "--url", server.base_url, "--num-prompts", 12, "--input-len", 16, "--output-len", 6,
                 "--max-concurrency", 4)
    assert r["model"] == "tiny"  # from /v1/models
    assert (r["completed"], r["errors"], r["length_mismatches"]) == (12, 0, 0)
    assert r["input_tokens"] == 12 * 16 and r["output_tokens"] == 12 * 6
    assert r["output_tokens_per_s"] > 0 and r["total_tokens_per_s"] > r["output_tokens_per_s"]
    assert 0 < r["ttft"]["p50_ms"] <= r["e2e"]["p50_ms"]
    assert r["tpot"]["mean_ms"] > 0 and r["itl"]["p99_ms"] >= r["itl"]["p50_ms"] >= 0


def test_poisson_rate_and_dataset(orchid, server, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("\n".join([json.dumps({"prompt": "Hello there", "max_tokens": 3}),
                               json.dumps({"prompt": [1, 2, 3, 4, 5]}),
                               "",
                               json.dumps({"prompt": "A third one", "max_tokens": 5})]) + "\n")
    _, r = bench(orchid, "--url", server.base_url + "/v1", "--dataset", data, "--num-prompts", 6,
                 "--output-len", 4, "--request-rate", 50, "--seed", 3)
    assert (r["completed"], r["errors"], r["length_mismatches"]) == (6, 0, 0)
    assert r["output_tokens"] == 2 * (3 + 4 + 5)  # the file's prompts, cycled; --output-len where none is given


def test_failures_are_errors(orchid, server):
    # 250 prompt tokens + 64 output tokens exceed --max-model-len 256: every request is refused.
    res, r = bench(orchid, "--url", server.base_url, "--num-prompts", 3, "--input-len", 250, "--output-len", 64,
                   check=False)
    assert res.returncode != 0
    assert r["completed"] == 0 and r["errors"] == 3 and r["output_tokens_per_s"] == 0
    assert r["first_errors"] and "HTTP 400" in r["first_errors"][0]


def test_api_key(orchid):
    with OrchidServer("synthetic:tiny", "--max-model-len", "128", "--api-key", "sekret") as s:
        res, _ = bench(orchid, "--url", s.base_url, "--num-prompts", 1, "--input-len", 4, "--output-len", 2,
                       check=False)
        assert res.returncode != 0 and "401" in res.stderr  # /v1/models refused: named in the error
        _, r = bench(orchid, "--url", s.base_url, "--api-key", "sekret", "--num-prompts", 2, "--input-len", 4,
                     "--output-len", 2)
        assert r["completed"] == 2 and r["errors"] == 0


def test_bad_urls(orchid):
    res, _ = bench(orchid, "--url", "https://example.com", check=False)
    assert res.returncode == 2 and "https is not supported" in res.stderr
    res, _ = bench(orchid, "--url", "127.0.0.1:8000", check=False)
    assert res.returncode == 2 and "expected http://HOST" in res.stderr
    res, _ = bench(orchid, "--url", "http://127.0.0.1:9", "--num-prompts", 1, check=False)  # nothing listens
    assert res.returncode == 2 and "cannot reach" in res.stderr


def test_extra_body_is_merged_into_every_request(orchid, server):
    # The extra body overrides the bench's own fields: max_tokens 2 instead of --output-len 5.
    _, r = bench(orchid, "--url", server.base_url, "--num-prompts", 3, "--input-len", 4, "--output-len", 5,
                 "--no-ignore-eos", "--extra-body", '{"max_tokens": 2, "ignore_eos": true}')
    assert (r["completed"], r["errors"]) == (3, 0)
    assert r["output_tokens"] == 3 * 2
    for bad in ("{not json", "[1, 2]"):
        res, _ = bench(orchid, "--url", server.base_url, "--num-prompts", 1, "--extra-body", bad, check=False)
        assert res.returncode not in (0, 70) and "--extra-body" in res.stderr
