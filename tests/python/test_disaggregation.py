"""Prefill/decode disaggregation between processes (CPU backend, loopback): a decode instance
(`--role decode --prefill-url ...`) takes each prompt's K/V from a prefill instance (`--role prefill`) and gives,
for chat, completions and responses, streamed or not, greedy or seeded, exactly what one `--role both` server
gives; with its prefill instance gone it computes prompts itself and still answers every request the same; and
no KV page is left held on either side. The K/V go in place through shared memory by default (the prefill
instance's export buffer, leases released by the decode instance) and as bytes over HTTP with
--kv-transfer host, a full buffer or an expired lease; every way gives the same outputs."""
import concurrent.futures
import json
import os
import signal
import subprocess
import time
import urllib.request

import pytest

from conftest import orchid_bin
from orchid_server import OrchidServer, openai_client
from test_speculative import PHRASE, requests, run

MODEL = ("synthetic:tiny", "--max-model-len", "1024", "--served-model-name", "tiny")


@pytest.fixture(scope="module")
def plain():
    with OrchidServer(*MODEL) as s:
        yield s


@pytest.fixture(scope="module")
def pair():
    with OrchidServer(*MODEL, "--role", "prefill") as prefill, \
            OrchidServer(*MODEL, "--role", "decode", "--prefill-url", prefill.base_url) as decode:
        yield prefill, decode


def test_outputs_equal_one_server(plain, pair):
    prefill, decode = pair
    want_client, got_client = openai_client(plain), openai_client(decode)
    for kind, kw in requests():
        want = run(want_client, kind, kw)
        assert run(got_client, kind, kw) == want, (kind, kw)
    d, p = decode.wait_idle(), prefill.wait_idle()
    # In place through the prefill instance's shared-memory buffer, every lease released.
    assert d["orchid_remote_prefill_shared_total"] == d["orchid_remote_prefill_requests_total"] > 0
    assert d["orchid_kv_shared_imports_total"] > 0
    assert p["orchid_kv_shared_exports_total"] == d["orchid_remote_prefill_shared_total"]
    assert p["orchid_kv_share_leases"] == 0
    # Queueing at each stage: every prompt waited in the prefill instance's queue and in the decode one's.
    assert p["orchid_request_queue_time_seconds_count"] >= d["orchid_remote_prefill_shared_total"]
    assert d["orchid_request_queue_time_seconds_count"] >= len(requests())
    assert d["orchid_remote_prefill_requests_total"] >= len(requests())
    assert d["orchid_remote_prefill_failures_total"] == 0
    assert d["orchid_kv_imported_tokens_total"] > 0
    assert 0 < d["orchid_remote_prefill_bytes_total"]
    # TTFT's remote share, split: the prefill instance's own time and the transfer.
    answered = d["orchid_remote_prefill_requests_total"] - d["orchid_remote_prefill_failures_total"]
    assert d["orchid_remote_prefill_compute_seconds_count"] == answered
    assert d["orchid_remote_prefill_transfer_seconds_count"] == answered
    assert 0 < d["orchid_remote_prefill_compute_seconds_sum"] < d["orchid_remote_prefill_seconds_total"]
    assert p["orchid_kv_export_bytes_total"] >= d["orchid_kv_import_bytes_total"] > 0
    for m in (d, p):
        assert m["orchid_kv_full_pages_used"] == 0 and m["orchid_kv_sliding_pages_used"] == 0


def test_prefill_endpoint_only_on_prefill_instances_and_checks_its_input(plain, pair):
    prefill, _ = pair
    assert plain.post("/v1/internal/prefill", {"prompt": [1, 2, 3]})[0] == 404
    assert plain.post("/v1/internal/release", {"lease": 1})[0] == 404
    for bad in ({"prompt": []}, {"prompt": "text"}, {"prompt": [1, -2]}, {"prompt": [1], "extra": 1},
                {"prompt": [10 ** 9]}, {"prompt": [1, 2], "transport": 5}, {"prompt": [1, 2], "ranks": 0},
                {"prompt": [1, 2], "ranks": "two"}):
        status, body = prefill.post("/v1/internal/prefill", bad)
        assert status == 400, (bad, status, body)
    for bad in ({}, {"lease": -1}, {"lease": "x"}, {"lease": 1, "extra": 2}):
        status, body = prefill.post("/v1/internal/release", bad)
        assert status == 400, (bad, status, body)
    status, body = prefill.post("/v1/internal/release", {"lease": 12345})  # no such lease: nothing happens
    assert status == 200 and body == {"released": False}, body
    # A transport the backend does not share over: the bytes (the body holds the pages), as without one;
    # the backend's own (shm): a share (the body holds where they are, and is small).
    sizes = {}
    for transport in ("carrier-pigeon", "shm"):
        req = urllib.request.Request(prefill.url("/v1/internal/prefill"), method="POST",
                                     data=json.dumps({"prompt": list(range(1, 40)), "transport": transport}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200
            sizes[transport] = len(r.read())
    assert sizes["shm"] < 1024 < sizes["carrier-pigeon"], sizes
    assert prefill.metrics()["orchid_kv_share_leases"] == 1  # nobody releases the one shared here



@pytest.mark.parametrize("prefill_args, decode_args, shared", [
    ([], ["--kv-transfer", "host"], False),                  # bytes over HTTP, as asked
    (["--kv-share-buffer", "0.00001"], [], False),           # ~10 KB: no room, the bytes instead
    (["--kv-share-timeout", "0.5"], [], True),               # leases end before admission's margin
])
def test_other_transports_give_the_same_outputs(plain, prefill_args, decode_args, shared):
    with OrchidServer(*MODEL, "--role", "prefill", *prefill_args) as prefill, \
            OrchidServer(*MODEL, "--role", "decode", "--prefill-url", prefill.base_url, *decode_args) as decode:
        want_client, got_client = openai_client(plain), openai_client(decode)
        for kind, kw in requests()[:4]:
            assert run(got_client, kind, kw) == run(want_client, kind, kw), (kind, kw)
        d, p = decode.wait_idle(), prefill.wait_idle()
        assert d["orchid_remote_prefill_failures_total"] == 0
        assert (d["orchid_remote_prefill_shared_total"] > 0) == shared
        if "--kv-share-timeout" in prefill_args:  # handed over in place, but too late to copy: computed here
            assert d["orchid_kv_shared_imports_total"] == 0
        elif not shared:
            assert d["orchid_kv_imported_tokens_total"] > 0 and p["orchid_kv_shared_exports_total"] == 0
        assert p["orchid_kv_share_leases"] == 0 and d["orchid_kv_full_pages_used"] == 0


def test_decode_without_its_prefill_instance_computes_prompts_itself(plain):
    # No health checks: one could mark the stopped instance down before the requests come, and then no
    # request would find out by failing (the health-check path has a test of its own below).
    with OrchidServer(*MODEL, "--role", "prefill") as prefill, \
            OrchidServer(*MODEL, "--role", "decode", "--prefill-url", prefill.base_url,
                         "--prefill-health-interval", "0") as decode:
        client, want_client = openai_client(decode), openai_client(plain)
        kw = dict(prompt=PHRASE * 3, max_tokens=16, temperature=0.8, seed=11, extra_body={"ignore_eos": True})
        first = run(client, "completion", kw)
        assert first == run(want_client, "completion", kw)
        prefill.stop()
        # Requests at once while the prefill instance is gone: every one answered, as one server answers it.
        kws = [dict(kw, seed=20 + i) for i in range(8)]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda k: run(client, "completion", k), kws))
        assert got == [run(want_client, "completion", k) for k in kws]
        m = decode.wait_idle()
        assert m["orchid_remote_prefill_failures_total"] >= 1
        assert m["orchid_kv_full_pages_used"] == 0


def test_a_hung_prefill_instance_is_skipped_by_health_checks(plain):
    """A prefill instance that stops answering (SIGSTOP: its port still accepts connections) fails its health
    check; prompts go to the other instance without waiting out --prefill-timeout, and the stopped one gets
    prompts again once it answers."""
    with OrchidServer(*MODEL, "--role", "prefill") as hung, OrchidServer(*MODEL, "--role", "prefill") as ok, \
            OrchidServer(*MODEL, "--role", "decode", "--prefill-url", hung.base_url, "--prefill-url", ok.base_url,
                         "--prefill-timeout", "120", "--prefill-health-interval", "0.3") as decode:
        def healthy():
            return decode.metrics()["orchid_prefill_instances_healthy"]

        assert decode.metrics()["orchid_prefill_instances"] == 2
        os.kill(hung.proc.pid, signal.SIGSTOP)
        try:
            deadline = time.time() + 30
            while healthy() != 1 and time.time() < deadline:
                time.sleep(0.1)
            assert healthy() == 1
            client, want_client = openai_client(decode), openai_client(plain)
            kws = [dict(prompt=PHRASE * 3 + f" {i}", max_tokens=8, temperature=0) for i in range(6)]
            t0 = time.time()
            with concurrent.futures.ThreadPoolExecutor(6) as pool:
                got = list(pool.map(lambda k: run(client, "completion", k), kws))
            assert time.time() - t0 < 60
            assert got == [run(want_client, "completion", k) for k in kws]
            m = decode.wait_idle()
            assert m["orchid_remote_prefill_failures_total"] == 0
            assert m["orchid_remote_prefill_requests_total"] == len(kws)  # all to the one that answers
        finally:
            os.kill(hung.proc.pid, signal.SIGCONT)
        deadline = time.time() + 30
        while healthy() != 2 and time.time() < deadline:
            time.sleep(0.1)
        assert healthy() == 2


def test_a_hung_prefill_instance_costs_the_timeout():
    """Without health checks a hung prefill instance (it accepts the connection, never answers) costs a prompt
    --prefill-timeout, then the prompt is computed here; the instance is skipped for a while after that."""
    with OrchidServer(*MODEL) as plain, OrchidServer(*MODEL, "--role", "prefill") as hung, \
            OrchidServer(*MODEL, "--role", "decode", "--prefill-url", hung.base_url, "--prefill-timeout", "2",
                         "--prefill-health-interval", "0") as decode:
        os.kill(hung.proc.pid, signal.SIGSTOP)
        try:
            kw = dict(prompt=PHRASE * 3, max_tokens=8, temperature=0)
            t0 = time.time()
            got = run(openai_client(decode), "completion", kw)
            waited = time.time() - t0
            assert 2 <= waited < 30, waited
            assert got == run(openai_client(plain), "completion", kw)
            t0 = time.time()
            assert run(openai_client(decode), "completion", kw) == got  # skipped: no second wait
            assert time.time() - t0 < 2
            m = decode.wait_idle()
            assert m["orchid_remote_prefill_failures_total"] == 1
            assert m["orchid_prefill_instances_healthy"] == 1  # no checks: not marked
        finally:
            os.kill(hung.proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("transfer", ["auto", "host"])
def test_prefill_and_decode_of_other_tensor_parallel_splits(transfer):
    """A TP1 prefill instance feeding a TP2 decode instance (the seed picks each side's split apart): the K/V
    are regrouped by KV head, and greedy outputs equal a TP2 instance's own."""
    greedy = [(kind, kw) for kind, kw in requests() if kw.get("temperature") == 0]
    with OrchidServer(*MODEL, "--tp", "2") as single, \
            OrchidServer(*MODEL, "--role", "prefill") as prefill, \
            OrchidServer(*MODEL, "--role", "decode", "--tp", "2", "--prefill-url", prefill.base_url,
                         "--kv-transfer", transfer) as decode:
        want_client, got_client = openai_client(single), openai_client(decode)
        for kind, kw in greedy:
            assert run(got_client, kind, kw) == run(want_client, kind, kw), (kind, kw)
        d = decode.wait_idle()
        assert d["orchid_remote_prefill_failures_total"] == 0 and d["orchid_kv_imported_tokens_total"] > 0
        assert (d["orchid_kv_shared_imports_total"] > 0) == (transfer == "auto")
        assert prefill.wait_idle()["orchid_kv_share_leases"] == 0


@pytest.mark.parametrize("args, message", [
    (["--role", "decode"], "needs at least one prefill instance"),
    (["--role", "decode", "--prefill-url", "https://x:1"], "https is not supported"),
    (["--role", "both", "--prefill-url", "http://127.0.0.1:9"], "--prefill-url is for --role decode"),
    (["--role", "sideways"], "--role"),
    (["--role", "decode", "--prefill-url", "http://127.0.0.1:9", "--kv-transfer", "telepathy"], "--kv-transfer"),
    (["--role", "prefill", "--kv-share-buffer", "-1"], "--kv-share-buffer"),
])
def test_bad_role_flags_are_refused_at_start(args, message):
    res = subprocess.run([orchid_bin(), "serve", "synthetic:tiny", "--port", "0", *args], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode != 0
    assert message in res.stderr, res.stderr


def test_200_streams_with_disconnects_and_a_prefill_instance_killed(plain):
    """200 concurrent streams through a decode instance with two prefill instances, a quarter of the clients
    leaving after their first chunk and one prefill instance killed mid-run: every remaining stream ends with
    exactly its length (the killed instance's prompts computed elsewhere), and no page is held afterwards."""
    import threading
    import openai
    with OrchidServer(*MODEL, "--role", "prefill") as p1, OrchidServer(*MODEL, "--role", "prefill") as p2, \
            OrchidServer(*MODEL, "--role", "decode", "--prefill-url", p1.base_url, "--prefill-url", p2.base_url,
                         "--max-num-seqs", "256") as decode:
        client = openai.OpenAI(base_url=decode.url("/v1"), api_key="unused", max_retries=0, timeout=300)
        started = threading.Barrier(2, timeout=300)
        done = {"count": 0}
        lock = threading.Lock()

        def one(i):
            stream = client.completions.create(model="tiny", prompt=f"{PHRASE} number {i}", max_tokens=8,
                                               stream=True, seed=i, stream_options={"include_usage": True},
                                               extra_body={"ignore_eos": True})
            usage = None
            for chunk in stream:
                usage = chunk.usage or usage
                if i % 4 == 0:  # leaves after the first chunk
                    stream.close()
                    return "left"
            assert usage is not None and usage.completion_tokens == 8, usage
            with lock:
                done["count"] += 1
                if done["count"] == 20:
                    started.wait()
            return "done"

        def killer():
            started.wait()
            p1.kill()

        k = threading.Thread(target=killer)
        k.start()
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            outcomes = list(pool.map(one, range(200)))
        k.join()
        assert outcomes.count("left") == 50 and outcomes.count("done") == 150
        m = decode.wait_idle()
        assert m["orchid_kv_full_pages_used"] == 0 and m["orchid_kv_sliding_pages_used"] == 0
        assert m["orchid_remote_prefill_requests_total"] > 0
        assert m["orchid_remote_prefill_failures_total"] >= 1  # the killed instance's, computed here instead
        assert p2.wait_idle()["orchid_kv_full_pages_used"] == 0
        assert p2.wait_idle()["orchid_kv_share_leases"] == 0
    # The killed instance could not remove its shared-memory export object; the next instance that makes
    # its own removes those of processes that are gone.
    stale = [f for f in os.listdir("/dev/shm") if f.startswith(f"orchid-kv-{p1.proc.pid}-")]
    with OrchidServer(*MODEL, "--role", "prefill") as p3:
        req = urllib.request.Request(p3.url("/v1/internal/prefill"), method="POST",
                                     data=json.dumps({"prompt": [1, 2, 3, 4], "transport": "shm"}).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=60).read()
        assert not [f for f in stale if os.path.exists(os.path.join("/dev/shm", f))], stale
