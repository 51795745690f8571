"""The HTTP layer under hostile or unusual clients, over real sockets against `orchid serve synthetic:tiny`:
bodies that are declared but never sent cost no memory (the server runs under an address-space limit), big
prompts are prepared off the I/O threads (/health stays fast meanwhile), a client that half-closes still gets
its answer, the per-client connection cap, percent-decoded model ids, and an allocation failure that ends one
request but not the process."""
import http.client
import json
import resource
import socket
import threading
import time
import urllib.parse

import pytest

from orchid_server import OrchidServer, openai_client

KEY = "hardening-key-42"
GIB = 1 << 30


def limit_address_space(nbytes):
    """A preexec_fn: the child runs under `ulimit -v` of nbytes."""
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
    return apply


def proc_status(pid):
    """VmRSS and VmSize of a process, in bytes (from /proc)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmSize"):
                out[name] = int(value.split()[0]) * 1024
    return out


def read_response(sock, timeout=10):
    """(status, headers dict, body bytes) of one HTTP response with a Content-Length, read from a raw socket."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response head: {data[:200]!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body[:length]


def declare_body(port, length, headers="", sent=64 * 1024):
    """A connection that announces a body of `length` bytes and sends only the first `sent` of them."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}"
               f"Content-Length: {length}\r\n\r\n").encode() + b"[" * sent)
    return s


@pytest.mark.parametrize("with_key", [True, False], ids=["api-key: 401", "no key: 413"])
def test_100_declared_2gb_bodies_under_a_2gb_address_space(with_key):
    # All from one address: the per-client cap (which would turn the 65th away with 429) is lifted.
    args = ["synthetic:tiny", "--kv-pages", "64", "--max-connections-per-client", "0"] + (
        ["--api-key", KEY] if with_key else [])
    with OrchidServer(*args, preexec_fn=limit_address_space(2 * GIB)) as s:
        before = proc_status(s.proc.pid)
        socks = [declare_body(s.port, 2 * 10**9) for _ in range(100)]
        peak = before
        statuses = []
        for sock in socks:
            status, _, body = read_response(sock)
            statuses.append(status)
            assert "error" in json.loads(body)
            now = proc_status(s.proc.pid)
            peak = {k: max(peak[k], now[k]) for k in peak}
        for sock in socks:
            sock.close()
        assert statuses == [401 if with_key else 413] * 100
        # Nothing of the announced 200 GB is held: the growth is the connections' own buffers.
        assert peak["VmRSS"] - before["VmRSS"] < 64 << 20, (before, peak)
        assert peak["VmSize"] - before["VmSize"] < 256 << 20, (before, peak)
        assert s.proc.poll() is None and s.get("/health")[0] == 200


def test_bodies_under_the_limit_cost_only_what_arrived():
    # 100 connections each announce 15 MiB (under the default 16 MiB limit) and send 64 KiB of it: reserving
    # the announced size would take 1.5 GB and fail under the 2 GiB address-space limit.
    with OrchidServer("synthetic:tiny", "--kv-pages", "64", "--max-connections-per-client", "0",
                      preexec_fn=limit_address_space(2 * GIB)) as s:
        before = proc_status(s.proc.pid)
        socks = [declare_body(s.port, 15 << 20) for _ in range(100)]
        time.sleep(1.0)  # let the server take what was sent
        during = proc_status(s.proc.pid)
        assert s.get("/health")[0] == 200
        for sock in socks:
            sock.close()
        assert during["VmRSS"] - before["VmRSS"] < 128 << 20, (before, during)
        assert during["VmSize"] - before["VmSize"] < 512 << 20, (before, during)
        assert s.proc.poll() is None and s.get("/health")[0] == 200


def test_health_stays_fast_while_two_15mb_prompts_are_prepared():
    prompt = json.dumps({"messages": [{"role": "user", "content": "many words " * (15 * 10**6 // 11)}],
                         "max_tokens": 1})
    assert len(prompt) > 15 * 10**6
    with OrchidServer("synthetic:tiny") as s:
        results = []

        def post():
            results.append(s.post("/v1/chat/completions", prompt, timeout=120))

        posters = [threading.Thread(target=post) for _ in range(2)]
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        probes = []
        for t in posters:
            t.start()
        while any(t.is_alive() for t in posters):
            t0 = time.perf_counter()
            conn.request("GET", "/health")
            r = conn.getresponse()
            r.read()
            probes.append(time.perf_counter() - t0)
            assert r.status == 200
            time.sleep(0.005)
        for t in posters:
            t.join()
        conn.close()
        # Both prompts were read, parsed, rendered and tokenized: too long for the context, they get 400.
        assert [r[0] for r in results] == [400, 400], results
        assert all("context" in r[1]["error"]["message"] or "tokens" in r[1]["error"]["message"] for r in results)
        print(f"\n/health during two 15 MB prompts: {len(probes)} probes, p50 {sorted(probes)[len(probes) // 2] * 1e3:.1f}"
              f" ms, max {max(probes) * 1e3:.1f} ms")
        assert len(probes) >= 20, probes
        # Every probe but one under 50 ms; on two cores busy with the two preparations and the test's other
        # worker the scheduler can hold one probe back longer (75 ms seen), still well under a preparation.
        assert sorted(probes)[-2] < 0.050, sorted(probes)[-5:]
        assert max(probes) < 0.250, sorted(probes)[-5:]


def test_half_closed_client_gets_its_response():
    with OrchidServer("synthetic:tiny") as s:
        for stream in (False, True):
            body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                               "ignore_eos": True, "stream": stream})
            conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            conn.sock.shutdown(socket.SHUT_WR)  # the request is complete; the reading side stays open
            # http.client skips the interim 100s with which the server checks that a reader is still there.
            r = conn.getresponse()
            payload = r.read()
            assert r.status == 200, payload
            assert conn.sock is None or conn.sock.recv(1) == b""  # closed after the answer: nothing can follow
            conn.close()
            if stream:
                assert b"data: [DONE]" in payload and b'"finish_reason":"length"' in payload
            else:
                assert json.loads(payload)["usage"]["completion_tokens"] == 4
        assert s.metrics()["orchid_http_responses_cancelled_total"] == 0


def test_connections_per_client_are_capped():
    with OrchidServer("synthetic:tiny", "--max-connections-per-client", "4") as s:
        # Four connections held open. The readiness probe's connection (closed by the client) holds a slot
        # until the server has seen its close, so a loaded machine may answer one of them 429: then all four
        # are closed and opened again.
        deadline = time.monotonic() + 5
        while True:
            held = [http.client.HTTPConnection("127.0.0.1", s.port, timeout=10) for _ in range(4)]
            statuses = []
            for c in held:
                c.request("GET", "/health")
                r = c.getresponse()
                r.read()
                statuses.append(r.status)
            if statuses == [200] * 4:
                break
            assert set(statuses) <= {200, 429} and time.monotonic() < deadline, statuses
            for c in held:
                c.close()
            time.sleep(0.02)
        over = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        over.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, body = read_response(over)
        assert status == 429 and headers.get("connection") == "close"
        assert "limit is 4" in json.loads(body)["error"]["message"]
        assert over.recv(100) == b""  # and closed
        over.close()
        held.pop().close()
        deadline = time.monotonic() + 5
        while s.get("/health")[0] != 200:  # the slot is free once the server has seen the close
            assert time.monotonic() < deadline
            time.sleep(0.02)
        for c in held:
            c.close()
        # Each close (the /health probes' too) frees its slot once the server has seen it: until then a new
        # connection may still be over the limit.
        while (status := s.get("/metrics"))[0] != 200:
            assert time.monotonic() < deadline + 5, status
            time.sleep(0.02)
        assert s.metrics()["orchid_http_connections_rejected_total"] >= 1


def test_model_ids_with_a_slash_are_found_escaped_or_not():
    with OrchidServer("synthetic:tiny", "--served-model-name", "openai/gpt-oss-20b") as s:
        client = openai_client(s)
        assert client.models.retrieve("openai/gpt-oss-20b").id == "openai/gpt-oss-20b"
        escaped = "/v1/models/" + urllib.parse.quote("openai/gpt-oss-20b", safe="")
        for path in (escaped, escaped.lower(), "/v1/models/openai/gpt-oss-20b"):
            status, text = s.get(path)
            assert status == 200 and json.loads(text)["id"] == "openai/gpt-oss-20b", (path, text)
        status, text = s.get("/v1/models/openai%2")
        assert status == 400 and "percent" in json.loads(text)["error"]["message"]


def test_out_of_memory_in_one_request_does_not_end_the_process():
    with OrchidServer("synthetic:tiny", "--kv-pages", "64", "--max-request-bytes", str(GIB)) as s:
        # Leave the server 160 MiB of address space beyond what it has: a 300 MB prompt cannot be held.
        room = proc_status(s.proc.pid)["VmSize"] + (160 << 20)
        resource.prlimit(s.proc.pid, resource.RLIMIT_AS, (room, room))
        body = b'{"prompt": "' + b"x" * (300 << 20) + b'", "max_tokens": 1}'
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode())

        def send_body():
            try:
                sock.sendall(body)
            except OSError:  # the server answered and closed before taking it all
                pass

        sender = threading.Thread(target=send_body)
        sender.start()
        status, headers, payload = read_response(sock, timeout=60)
        sender.join()
        sock.close()
        assert status == 503 and headers.get("retry-after") == "1", payload[:300]
        assert "memory" in json.loads(payload)["error"]["message"]
        # The process lives and serves, a generation included.
        assert s.proc.poll() is None and s.get("/health")[0] == 200
        status, out = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 2, "ignore_eos": True})
        assert status == 200 and out["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("flag", ['["https://a.example", "https://b.example"]', "https://a.example,https://b.example"],
                         ids=["vLLM's JSON list", "comma-separated"])
def test_allowed_origins_are_echoed_and_others_refused(flag):
    with OrchidServer("synthetic:tiny", "--allowed-origins", flag) as s:
        for origin, allowed in (("https://b.example", True), ("https://evil.example", False)):
            conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
            conn.request("OPTIONS", "/v1/chat/completions", headers={
                "Origin": origin, "Access-Control-Request-Method": "POST"})
            r = conn.getresponse()
            r.read()
            assert r.status == 204
            assert r.getheader("Access-Control-Allow-Origin") == (origin if allowed else None)
            conn.request("GET", "/v1/models", headers={"Origin": origin})
            r = conn.getresponse()
            r.read()
            assert r.status == 200 and r.getheader("Access-Control-Allow-Origin") == (origin if allowed else None)
            assert r.getheader("Vary") == ("Origin" if allowed else None)
            conn.close()
