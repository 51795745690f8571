"""Parallel ranks on the CPU backend from the command line: `--tp/--ep` give the transformers greedy tokens of
the golden tiny checkpoint (through the engine, sampled and seeded too), `orchid serve --tp 2` answers the API
and the load generator, the plan is logged at startup, and what does not divide the model is a clear error.
Data-parallel attention replicas sharing the experts (`--dp N --ep E` with E not dividing --tp): generate,
forward, bench and serve give one rank's tokens and logits, the replicas stepping in lockstep."""
import json

import pytest

from conftest import ROOT
from orchid_server import OrchidServer

GOLDEN = ROOT / "tests" / "golden" / "tiny"


@pytest.fixture(scope="module")
def golden():
    return json.loads((GOLDEN / "reference.json").read_text())


def generate(orchid, golden, *flags):
    res = orchid("generate", GOLDEN / "checkpoint", "--prompt-ids", ",".join(map(str, golden["prompt_ids"])),
                 "--max-tokens", str(len(golden["greedy_ids"])), "--print-ids", "--ignore-eos", *flags)
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("flags", [["--tp", "2"], ["--tp", "2", "--ep", "1"], ["--tp", "2", "--ep", "2"]])
def test_sharded_greedy_equals_transformers(orchid, golden, flags):
    assert generate(orchid, golden, "--temperature", "0", *flags) == golden["greedy_ids"]


def test_sharded_sampling_equals_one_rank(orchid, golden):
    sampled = ["--temperature", "0.9", "--top-p", "0.9", "--seed", "11"]
    assert generate(orchid, golden, *sampled, "--tp", "2") == generate(orchid, golden, *sampled)


def test_serve_with_two_ranks(orchid):
    with OrchidServer("synthetic:tiny", "--tp", "2", "--max-model-len", "256", "--served-model-name", "tiny") as s:
        assert "EP2 DP1 TP2 over 2 ranks" in s.log_text()
        status, body = s.post("/v1/completions", {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 5,
                                                  "ignore_eos": True})
        assert status == 200 and body["usage"]["completion_tokens"] == 5
        res = orchid("bench", "serve", "--url", s.base_url, "--num-prompts", 4, "--input-len", 8, "--output-len", 4,
                     "--json")
        r = json.loads(res.stdout)
        assert (r["completed"], r["errors"], r["length_mismatches"]) == (4, 0, 0)


@pytest.mark.parametrize("flags,words", [
    (["--tp", "4"], "--tp 4 must divide the 2 KV heads"),
    (["--tp", "2", "--ep", "3"], "--ep 3 must divide the 8 experts"),
    (["--dp", "2", "--ep", "4"], "--ep 4 must divide the 2 ranks of --tp 1 x --dp 2"),
    (["--dp", "4", "--tp", "2", "--ep", "16"], "--ep 16 must divide the 8 experts"),
    (["--dp", "2", "--ep", "2", "--nnodes", "2", "--dist-init-addr", "127.0.0.1:1"],
     "--dp 2 with --nnodes 2: attention replicas run as threads of one process"),
    (["--backend", "cpu", "--collectives", "local"], "--collectives local is for the CUDA backend"),
])
def test_bad_parallel_flags_are_clear_errors(orchid, flags, words):
    res = orchid("generate", "synthetic:tiny", "--prompt-ids", "1,2,3", "--max-tokens", "2", *flags, check=False)
    assert res.returncode == 2
    assert words in res.stderr


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_form_one_group_over_tcp(orchid, tmp_path):
    """Rank 1 in its own process (`--node-rank 1`) serves rank 0's steps through --dist-init-addr; rank 0's
    logits equal one rank's."""
    import subprocess

    import numpy as np
    from conftest import orchid_bin
    ids = ",".join(str(i * 37 % 5000) for i in range(1, 30))
    orchid("forward", "synthetic:tiny", "--ids", ids, "--logits-out", tmp_path / "one.npy")
    group = ["--tp", "2", "--dist-init-addr", f"127.0.0.1:{free_port()}", "--nnodes", "2"]
    worker = subprocess.Popen([orchid_bin(), "forward", "synthetic:tiny", "--ids", ids, "--logits-out",
                               str(tmp_path / "unused.npy"), *group, "--node-rank", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        orchid("forward", "synthetic:tiny", "--ids", ids, "--logits-out", tmp_path / "two.npy", *group,
               "--node-rank", "0")
        _, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        assert "this process: rank 1" in err and "rank 0 closed the group" in err
    finally:
        worker.kill()
    assert not (tmp_path / "unused.npy").exists()  # a worker does not run the command
    one, two = np.load(tmp_path / "one.npy"), np.load(tmp_path / "two.npy")
    assert np.linalg.norm(one - two) / np.linalg.norm(one) < 1e-5


@pytest.mark.parametrize("flags,words", [
    (["--nnodes", "2"], "--nnodes 2 needs --dist-init-addr"),
    (["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "127.0.0.1:1"], "--node-rank 2 is outside"),
    (["--node-rank", "1"], "--node-rank 1 needs --nnodes"),
    (["--nnodes", "2", "--dist-init-addr", "nohost"], "expected HOST:PORT"),
])
def test_bad_group_flags_are_clear_errors(orchid, flags, words):
    res = orchid("generate", "synthetic:tiny", "--prompt-ids", "1,2", "--max-tokens", "2", *flags, check=False)
    assert res.returncode == 2
    assert words in res.stderr


def test_serve_data_parallel_engines(orchid):
    """`orchid serve --dp 2`: two engines behind one endpoint; every request answered, metrics summed."""
    with OrchidServer("synthetic:tiny", "--dp", "2", "--max-model-len", "256", "--served-model-name", "tiny") as s:
        assert "x 2 engines (--dp)" in s.log_text()
        res = orchid("bench", "serve", "--url", s.base_url, "--num-prompts", 8, "--input-len", 8, "--output-len", 4,
                     "--max-concurrency", 8, "--json")
        r = json.loads(res.stdout)
        assert (r["completed"], r["errors"], r["length_mismatches"]) == (8, 0, 0)
        m = s.wait_idle()
        assert m["orchid_kv_full_pages_used"] == 0
        assert m["orchid_requests_submitted_total"] == 8 and m["orchid_requests_finished_total"] == 8


@pytest.mark.parametrize("flags", [["--dp", "2", "--ep", "2"], ["--dp", "4", "--ep", "4"],
                                   ["--dp", "2", "--tp", "2", "--ep", "4"], ["--dp", "2"]])
def test_data_parallel_greedy_equals_transformers(orchid, golden, flags):
    """generate --dp N: the request on replica 0, the others beside it (in lockstep when they share the
    experts); the last case, --dp 2 alone, is two independent replicas each holding every expert."""
    assert generate(orchid, golden, "--temperature", "0", *flags) == golden["greedy_ids"]


def test_data_parallel_forward_and_bench(orchid, tmp_path):
    import subprocess

    import numpy as np
    from conftest import orchid_bin
    ids = ",".join(str(i * 37 % 5000) for i in range(1, 30))
    orchid("forward", "synthetic:tiny", "--ids", ids, "--logits-out", tmp_path / "one.npy")
    # The plan is logged at startup (info: not through the fixture, which keeps the log to warnings).
    res = subprocess.run([orchid_bin(), "forward", "synthetic:tiny", "--ids", ids, "--logits-out",
                          str(tmp_path / "dp.npy"), "--chunk", "11", "--dp", "2", "--tp", "2", "--ep", "4"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "2 attention replicas sharing the experts" in res.stderr
    assert "shared by ranks [0, 4)" in res.stderr
    one, dp = np.load(tmp_path / "one.npy"), np.load(tmp_path / "dp.npy")
    assert np.linalg.norm(one - dp) / np.linalg.norm(one) < 1e-5
    res = orchid("bench", "decode", "synthetic:tiny", "--seq-lens", "16", "--batch-sizes", "2", "--steps", "1",
                 "--dp", "2", "--ep", "2", "--json")
    out = json.loads(res.stdout)
    assert out["dp"] == 2 and len(out["rows"]) == 1 and out["rows"][0]["tokens_per_s"] > 0


def test_serve_data_parallel_sharing_the_experts(orchid):
    """`orchid serve --dp 2 --ep 2`: two engines in lockstep over one EP group spanning both replicas;
    requests over both, every one answered, the same tokens as one rank's server for a greedy request."""
    prompt = {"model": "tiny", "prompt": [5, 6, 7, 8], "max_tokens": 6, "temperature": 0, "ignore_eos": True}
    with OrchidServer("synthetic:tiny", "--max-model-len", "256", "--served-model-name", "tiny") as s:
        status, want = s.post("/v1/completions", prompt)
        assert status == 200
    with OrchidServer("synthetic:tiny", "--dp", "2", "--ep", "2", "--max-model-len", "256",
                      "--served-model-name", "tiny") as s:
        log = s.log_text()
        assert "EP2 DP2 TP1 over 2 ranks" in log and "sharing the experts" in log
        assert "x 2 engines (--dp) in lockstep" in log
        res = orchid("bench", "serve", "--url", s.base_url, "--num-prompts", 8, "--input-len", 8, "--output-len", 4,
                     "--max-concurrency", 8, "--json")
        r = json.loads(res.stdout)
        assert (r["completed"], r["errors"], r["length_mismatches"]) == (8, 0, 0)
        status, got = s.post("/v1/completions", prompt)
        assert status == 200 and got["choices"][0]["text"] == want["choices"][0]["text"]
        m = s.wait_idle()
        assert m["orchid_kv_full_pages_used"] == 0
        assert m["orchid_requests_submitted_total"] == 9 and m["orchid_requests_finished_total"] == 9
