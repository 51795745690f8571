"""Serving phases and client behaviour over real sockets: 503 (with an error object) while the model loads,
a client that hangs up mid-stream releases its request and KV pages, and SIGTERM drains: requests in progress
finish, new ones are refused, the process exits 0. A scripted backend with a per-step delay makes the timing
controllable."""
import json
import signal
import socket
import time

from orchid_server import OrchidServer

LONG = " ".join(["word"] * 300)


def write_script(tmp_path, **extra):
    script = {"rules": [{"match": "", "output": f"<|channel|>analysis<|message|>thinking<|end|><|start|>assistant"
                                                f"<|channel|>final<|message|>{LONG}<|return|>"}], **extra}
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return path


def open_stream(server, path="/v1/chat/completions", max_tokens=400):
    body = json.dumps({"messages": [{"role": "user", "content": "go"}], "max_tokens": max_tokens, "stream": True})
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    return s


def read_until(sock, marker, timeout=30):
    sock.settimeout(timeout)
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_503_while_loading(tmp_path):
    script = write_script(tmp_path, load_delay_ms=3000)
    with OrchidServer("synthetic:tiny", "--replay", script, wait_ready=False) as s:
        status, body = s.get("/health")
        assert status == 503 and "error" in json.loads(body)
        status, payload = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
        assert status == 503 and payload["error"]["message"]
        assert s.metrics()["orchid_ready"] == 0
        s.wait_ready()
        status, payload = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                          "max_tokens": 3})
        assert status == 200 and payload["usage"]["completion_tokens"] == 3


def test_hang_up_frees_the_request(tmp_path):
    with OrchidServer("synthetic:tiny", "--replay", write_script(tmp_path, step_delay_ms=20)) as s:
        for path in ("/v1/chat/completions", "/v1/responses"):
            sock = open_stream(s, path) if path.endswith("completions") else None
            if sock is None:
                body = json.dumps({"input": "go", "max_output_tokens": 400, "stream": True})
                sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
                sock.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
            read_until(sock, b"delta")
            # The gauge is published once a step: the first delta can reach the client before the step that
            # admitted the request has published its pages (seen with two test workers on two cores).
            deadline = time.time() + 5
            while s.metrics()["orchid_kv_full_pages_used"] == 0 and time.time() < deadline:
                time.sleep(0.02)
            assert s.metrics()["orchid_kv_full_pages_used"] > 0
            sock.close()
            m = s.wait_idle(timeout=5)
            assert m["orchid_kv_full_pages_used"] == 0 and m["orchid_num_requests_running"] == 0
        assert s.metrics()["orchid_requests_aborted_total"] == 2


def test_sigterm_drains(tmp_path):
    s = OrchidServer("synthetic:tiny", "--replay", write_script(tmp_path, step_delay_ms=10))
    try:
        sock = open_stream(s, max_tokens=100)
        read_until(sock, b"delta")
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        # Draining: new connections are refused (or, if one slipped in, answered 503 or closed).
        try:
            with socket.create_connection(("127.0.0.1", s.port), timeout=2) as c:
                c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                reply = c.recv(100)
                assert reply == b"" or b" 503 " in reply, reply
        except ConnectionRefusedError:
            pass
        rest = read_until(sock, b"[DONE]")
        assert b"[DONE]" in rest and b'"finish_reason":"length"' in rest
        sock.close()
        assert s.proc.wait(30) == 0
        assert "draining" in s.log_text()
    finally:
        s.kill()
