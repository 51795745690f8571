"""Malformed and hostile requests: each gets a 4xx with an OpenAI error object, and the server keeps serving
(checked after every request). The server runs with an API key, a small body limit and a small context so
that 401, 413 and the context checks are reachable."""
import json
import socket
import urllib.error
import urllib.request

import pytest

from orchid_server import OrchidServer

KEY = "test-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
LIMIT = 64 * 1024
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                        "required": ["city"]}}}
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server():
    with OrchidServer("synthetic:tiny", "--api-key", KEY, "--max-request-bytes", LIMIT, "--max-model-len", "256",
                      "--served-model-name", "tiny") as s:
        yield s


def chat(**kw):
    return {"model": "tiny", "messages": USER, "max_tokens": 2, **kw}


def resp(**kw):
    return {"model": "tiny", "input": "hi", "max_output_tokens": 2, **kw}


def comp(**kw):
    return {"model": "tiny", "prompt": "hi", "max_tokens": 2, **kw}


C, R, P = "/v1/chat/completions", "/v1/responses", "/v1/completions"

# (name, path, body (a JSON value, or raw str/bytes), expected status)
CASES = [
    # Bodies that are not the JSON they should be.
    ("empty body", C, b"", 400),
    ("truncated JSON", C, b'{"model": "tiny", "messages": [', 400),
    ("trailing garbage", C, b'{"model": "tiny"} xyz', 400),
    ("array body", C, b"[1, 2]", 400),
    ("string body", C, b'"hello"', 400),
    ("NaN literal", P, b'{"prompt": "x", "temperature": NaN}', 400),
    ("bad UTF-8 in a string", C, b'{"messages": [{"role": "user", "content": "\xff\xfe\xc0"}]}', 400),
    ("lone surrogate escape", C, b'{"messages": [{"role": "user", "content": "\\ud800"}]}', 400),
    ("deep nesting", C, b"[" * 20000, 400),
    ("number overflow", P, b'{"prompt": "x", "max_tokens": 1e999}', 400),
    # Wrong types and out-of-range values.
    ("max_tokens as string", C, chat(max_tokens="10"), 400),
    ("max_tokens negative", C, chat(max_tokens=-1), 400),
    ("max_tokens huge float", C, chat(max_tokens=1e30), 400),
    ("max_tokens 2^64", C, b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 18446744073709551616}', 400),
    ("temperature as string", C, chat(temperature="hot"), 400),
    ("temperature too high", C, chat(temperature=50), 400),
    ("top_p zero", C, chat(top_p=0), 400),
    ("top_p above one", P, comp(top_p=1.5), 400),
    ("n zero", C, chat(n=0), 400),
    ("n huge", P, comp(n=100000), 400),
    ("seed as string", C, chat(seed="abc"), 400),
    ("stream as string", C, chat(stream="yes"), 400),
    ("stream_options without stream", C, chat(stream_options={"include_usage": True}), 400),
    ("stop as number", C, chat(stop=5), 400),
    ("too many stop strings", P, comp(stop=[str(i) for i in range(100)]), 400),
    ("empty stop string", C, chat(stop=[""]), 400),
    ("frequency_penalty out of range", C, chat(frequency_penalty=10), 400),
    ("top_logprobs without logprobs", C, chat(top_logprobs=3), 400),
    ("top_logprobs too many", C, chat(logprobs=True, top_logprobs=50), 400),
    ("completions logprobs too many", P, comp(logprobs=100), 400),
    ("echo with logprobs", P, comp(echo=True, logprobs=1), 400),
    ("best_of unlike n", P, comp(best_of=3), 400),
    ("suffix", P, comp(suffix="tail"), 400),
    ("logit_bias", C, chat(logit_bias={"1": 5}), 400),
    # Unknown fields and unknown models.
    ("unknown top-level field", C, chat(frobnicate=True), 400),
    ("unknown completions field", P, comp(temprature=0.5), 400),
    ("unknown responses field", R, resp(bogus_field=1), 400),
    ("unknown model", C, chat(model="gpt-5"), 404),
    ("unknown model (responses)", R, resp(model="nope"), 404),
    # Prompts that do not fit the 256-token context.
    ("prompt ids out of vocabulary", P, comp(prompt=[999999999]), 400),
    ("prompt ids negative", P, comp(prompt=[-1, 2]), 400),
    ("empty prompt", P, comp(prompt=""), 400),
    ("prompt of the wrong type", P, comp(prompt=12), 400),
    ("prompt longer than the context", P, comp(prompt=[1] * 300), 400),
    ("prompt plus max_tokens over the context", P, comp(prompt=[1] * 200, max_tokens=100), 400),
    ("long chat over the context", C, chat(messages=[{"role": "user", "content": "word " * 400}]), 400),
    # Chat messages.
    ("messages missing", C, {"model": "tiny"}, 400),
    ("messages not an array", C, chat(messages="hi"), 400),
    ("messages empty", C, chat(messages=[]), 400),
    ("message without role", C, chat(messages=[{"content": "hi"}]), 400),
    ("unknown role", C, chat(messages=[{"role": "wizard", "content": "hi"}]), 400),
    ("content as number", C, chat(messages=[{"role": "user", "content": 42}]), 400),
    ("image content part", C, chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "http://x/y.png"}}]}]), 400),
    ("tool result for an unknown call", C, chat(messages=USER + [{"role": "tool", "tool_call_id": "nope",
                                                                   "content": "x"}]), 400),
    ("tool_calls not an array", C, chat(messages=USER + [{"role": "assistant", "tool_calls": {"id": "x"}}]), 400),
    ("reasoning_effort unknown", C, chat(reasoning_effort="extreme"), 400),
    # Tools and tool choice.
    ("tools not an array", C, chat(tools={"type": "function"}), 400),
    ("tool of unknown type", C, chat(tools=[{"type": "banana"}]), 400),
    ("tool without function", C, chat(tools=[{"type": "function"}]), 400),
    ("function without name", C, chat(tools=[{"type": "function", "function": {"description": "x"}}]), 400),
    ("function name with spaces", C, chat(tools=[{"type": "function", "function": {"name": "get weather"}}]), 400),
    ("function name too long", C, chat(tools=[{"type": "function", "function": {"name": "f" * 100}}]), 400),
    ("duplicate function names", C, chat(tools=[TOOL, TOOL]), 400),
    ("parameters not an object", C, chat(tools=[{"type": "function", "function": {"name": "f",
                                                                                   "parameters": "x"}}]), 400),
    ("schema type not a string", C, chat(tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": 5}}}]), 400),
    ("schema properties not objects", C, chat(tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": 3}}}}]), 400),
    ("schema required not strings", C, chat(tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "required": [1]}}}]), 400),
    ("tool_choice unknown mode", C, chat(tools=[TOOL], tool_choice="sometimes"), 400),
    ("tool_choice unknown function", C, chat(tools=[TOOL], tool_choice={"type": "function",
                                                                         "function": {"name": "other"}}), 400),
    ("tool_choice required without tools", C, chat(tool_choice="required"), 400),
    # Responses API.
    ("input missing", R, {"model": "tiny"}, 400),
    ("input as number", R, resp(input=5), 400),
    ("input item of unknown type", R, resp(input=[{"type": "hologram"}]), 400),
    ("function_call_output for an unknown call", R, resp(input=[{"type": "function_call_output",
                                                                  "call_id": "nope", "output": "x"}]), 400),
    ("reasoning effort unknown", R, resp(reasoning={"effort": "max"}), 400),
    ("max_output_tokens zero", R, resp(max_output_tokens=0), 400),
    ("responses tool of unknown type", R, resp(tools=[{"type": "file_search"}]), 400),
    ("responses function without name", R, resp(tools=[{"type": "function", "parameters": {}}]), 400),
    ("previous_response_id", R, resp(previous_response_id="resp_123"), 400),
    ("instructions as number", R, resp(instructions=7), 400),
    # Routes and methods.
    ("unknown route", "/v1/engines", comp(), 404),
    ("GET-only route posted", "/v1/models", comp(), 405),
]


def post_raw(server, path, body, headers=AUTH):
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    return server.post(path, body, headers=headers)


def check_error(status, body, expected):
    assert status == expected, body
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    assert isinstance(body["error"].get("message"), str) and body["error"]["message"]
    assert isinstance(body["error"].get("type"), str)


def still_serving(server):
    assert server.proc.poll() is None, server.log_text()
    assert server.get("/health")[0] == 200


@pytest.mark.parametrize("name,path,body,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_request_gets_an_error_object(server, name, path, body, expected):
    status, payload = post_raw(server, path, body)
    check_error(status, payload, expected)
    still_serving(server)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"},
                                     {"Authorization": f"Bearer {KEY}x"}, {"Authorization": f"Bearer {KEY[:-1]}"}])
def test_wrong_key_is_401(server, headers):
    status, payload = post_raw(server, P, comp(), headers=headers)
    check_error(status, payload, 401)
    assert server.get("/v1/models", headers=headers)[0] == 401
    still_serving(server)


def test_oversized_body_is_413(server):
    status, payload = post_raw(server, C, chat(messages=[{"role": "user", "content": "x" * (LIMIT + 10)}]))
    check_error(status, payload, 413)
    still_serving(server)


def raw_exchange(server, data):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                head, _, rest = out.partition(b"\r\n\r\n")
                length = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")]
                if length and len(rest) >= length[0]:
                    break
        return out


RAW_AUTH = f"Authorization: Bearer {KEY}\r\n".encode()


@pytest.mark.parametrize("data,expected", [
    (b"GARBAGE\r\n\r\n", 400),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + RAW_AUTH + b"Content-Length: 99999999999\r\n\r\n", 413),
    # The key is checked before the body: a client without one never learns the limit, nor is its body read.
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n", 401),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n", 431),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + RAW_AUTH + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    # Framings the server cannot decode are refused, not ignored.
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + RAW_AUTH +
     b"Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 501),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + RAW_AUTH +
     b"Transfer-Encoding: chunked, identity\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 501),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + RAW_AUTH +
     b"Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}", 415),
    (b"GET /v1/models/tiny%zz HTTP/1.1\r\nHost: x\r\n" + RAW_AUTH + b"\r\n", 400),
    (b"GET /v1/models/ti%00ny HTTP/1.1\r\nHost: x\r\n" + RAW_AUTH + b"\r\n", 400),
], ids=["garbage request line", "claimed huge body", "huge body without a key", "bad content-length",
        "huge header", "bad chunk size", "gzip, chunked", "chunked, identity", "content-encoding gzip",
        "bad percent escape", "percent-encoded NUL"])
def test_broken_http_is_answered(server, data, expected):
    out = raw_exchange(server, data)
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == str(expected).encode(), out[:200]
    assert "error" in json.loads(body)
    still_serving(server)


def test_still_generating_after_the_battery(server):
    status, payload = post_raw(server, P, comp(max_tokens=3, ignore_eos=True))
    assert status == 200 and payload["usage"]["completion_tokens"] == 3
    m = server.wait_idle()
    assert m["orchid_kv_full_pages_used"] == 0
    assert "critical" not in server.log_text() and "internal error" not in server.log_text()


def test_percent_encoded_model_id_is_found(server):
    status, text = server.get("/v1/models/t%69ny", headers=AUTH)
    assert status == 200 and json.loads(text)["id"] == "tiny", text


def test_cors_preflight_is_answered_before_the_key(server):
    # A browser's preflight carries no Authorization; the real request that follows does.
    out = raw_exchange(server, b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nOrigin: http://page.example\r\n"
                               b"Access-Control-Request-Method: POST\r\n"
                               b"Access-Control-Request-Headers: authorization, content-type\r\n\r\n")
    head = out.partition(b"\r\n\r\n")[0].decode().lower()
    assert head.startswith("http/1.1 204"), head
    assert "access-control-allow-origin: *" in head and head.count("access-control-allow-origin") == 1
    assert "access-control-allow-methods: get, post, options" in head
    assert "access-control-allow-headers: authorization, content-type" in head
    assert "access-control-max-age:" in head
    # Answers carry the origin header too, errors included, so that the page can read them.
    for headers, expected in ((AUTH, 200), ({}, 401)):
        req = urllib.request.Request(server.url("/v1/models"), headers={"Origin": "http://page.example", **headers})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, allow = r.status, r.headers.get("Access-Control-Allow-Origin")
        except urllib.error.HTTPError as e:
            status, allow = e.code, e.headers.get("Access-Control-Allow-Origin")
        assert (status, allow) == (expected, "*")
    still_serving(server)
