#!/usr/bin/env python3
"""Bounded loopback load test for `orchid serve`: N concurrent streaming clients, a fraction of which hang up
midway. Checks that the server answers every request with 200, that every client that stays gets a complete
stream (a finish_reason, usage within max_tokens, `data: [DONE]`), and that all KV pages are free afterwards
(from /metrics). Reports the time to first token (first streamed chunk that carries a token) as p50/p99.

Plain asyncio sockets (no HTTP library), so the client costs little next to the server on a small machine.
    python tools/load/sse_load.py --url http://127.0.0.1:8000 --clients 512 --disconnect 0.25
Exit status 0 when every check passes; a JSON summary is printed either way."""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import urllib.parse
import urllib.request


class Result:
    def __init__(self):
        self.status = None
        self.ttft = None
        self.chunks = 0
        self.done = False
        self.finish = None
        self.completion_tokens = None
        self.error = None
        self.hung_up = False


async def read_chunked_events(reader):
    """Yields the text of each SSE event from a chunked body."""
    buf = ""
    while True:
        size_line = await reader.readline()
        if not size_line:
            return
        size = int(size_line.strip() or b"0", 16)
        if size == 0:
            await reader.readline()
            return
        data = await reader.readexactly(size + 2)
        buf += data[:-2].decode("utf-8", errors="replace")
        while "\n\n" in buf:
            event, buf = buf.split("\n\n", 1)
            yield event


def request_body(args, i):
    if args.endpoint == "chat":
        return {"model": args.model, "messages": [{"role": "user", "content": f"Request {i}: tell me a story."}],
                "max_tokens": args.max_tokens, "stream": True, "stream_options": {"include_usage": True}}
    return {"model": args.model, "prompt": f"Request {i}: once upon a time", "max_tokens": args.max_tokens,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}


async def one_client(args, i, hang_up_after, host, port, path, results):
    r = Result()
    results.append(r)
    body = json.dumps(request_body(args, i)).encode()
    t0 = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write((f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        r.status = int(head.split(b" ", 2)[1])
        if r.status != 200:
            r.error = (await reader.read(4096)).decode(errors="replace")
            writer.close()
            return
        async for event in read_chunked_events(reader):
            if not event.startswith("data: "):
                continue
            data = event[6:]
            if data == "[DONE]":
                r.done = True
                break
            payload = json.loads(data)
            if "error" in payload:
                r.error = payload["error"]
                break
            if r.ttft is None:  # the server sends the first chunk with the first generated token
                r.ttft = time.monotonic() - t0
            for c in payload.get("choices", []):
                r.finish = c.get("finish_reason") or r.finish
            if payload.get("usage"):
                r.completion_tokens = payload["usage"]["completion_tokens"]
            r.chunks += 1
            if hang_up_after is not None and r.chunks >= hang_up_after:
                r.hung_up = True
                writer.transport.abort()  # a client that vanishes: no orderly shutdown
                return
        writer.close()
    except Exception as e:  # noqa: BLE001 - every failure is reported in the summary
        r.error = f"{type(e).__name__}: {e}"


def metrics(base):
    with urllib.request.urlopen(base + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))
    return values[k]


async def run(args):
    u = urllib.parse.urlparse(args.url)
    host, port = u.hostname, u.port or 80
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("sse_load: loopback addresses only")
    path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
    rng = random.Random(args.seed)
    results = []
    before = metrics(args.url)
    t0 = time.monotonic()
    tasks = []
    for i in range(args.clients):
        # Hang up right after the first chunk: the request is then still generating (chat output on random
        # tokens may carry no visible text until its end, so later chunks are not a reliable "midway").
        hang_up = 1 if rng.random() < args.disconnect else None
        tasks.append(one_client(args, i, hang_up, host, port, path, results))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=args.timeout)
    wall = time.monotonic() - t0

    # Pages are released at the engine step after the last abort; give it a moment.
    deadline = time.monotonic() + 30
    while True:
        after = metrics(args.url)
        if (after.get("orchid_kv_full_pages_used", 0) == 0 and after.get("orchid_num_requests_running", 0) == 0
                and after.get("orchid_num_requests_waiting", 0) == 0) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)

    stayed = [r for r in results if not r.hung_up]
    hung = [r for r in results if r.hung_up]
    server_errors = [r for r in results if r.status is None or r.status >= 500 or r.status != 200]
    incomplete = [r for r in stayed if not (r.done and r.finish and r.completion_tokens is not None
                                             and r.completion_tokens <= args.max_tokens and r.error is None)]
    ttfts = [r.ttft for r in results if r.ttft is not None]
    summary = {
        "clients": args.clients, "endpoint": args.endpoint, "max_tokens": args.max_tokens,
        "hung_up": len(hung), "completed": len(stayed) - len(incomplete), "incomplete": len(incomplete),
        "non_200": len(server_errors), "wall_s": round(wall, 2),
        "ttft_p50_s": percentile(ttfts, 0.50), "ttft_p99_s": percentile(ttfts, 0.99),
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else None,
        "kv_full_pages_used_after": after.get("orchid_kv_full_pages_used"),
        "kv_sliding_pages_used_after": after.get("orchid_kv_sliding_pages_used"),
        "requests_aborted": after.get("orchid_requests_aborted_total", 0) - before.get("orchid_requests_aborted_total", 0),
        "requests_failed": after.get("orchid_requests_failed_total", 0) - before.get("orchid_requests_failed_total", 0),
        "examples": [r.error for r in server_errors + incomplete][:3],
    }
    ok = (not server_errors and not incomplete and summary["kv_full_pages_used_after"] == 0
          and summary["kv_sliding_pages_used_after"] == 0 and summary["requests_failed"] == 0)
    summary["ok"] = ok
    return summary


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default=None, help="model name (default: the first of /v1/models)")
    p.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    p.add_argument("--clients", type=int, default=512)
    p.add_argument("--disconnect", type=float, default=0.25, help="fraction of clients that hang up midway")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--timeout", type=float, default=600, help="hard limit for the whole run, seconds")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.model is None:
        with urllib.request.urlopen(args.url + "/v1/models", timeout=30) as resp:
            args.model = json.loads(resp.read())["data"][0]["id"]
    summary = asyncio.run(run(args))
    print(json.dumps(summary, indent=1))
    sys.exit(0 if summary["ok"] else 1)


if __name__ == "__main__":
    main()
