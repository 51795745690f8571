"""Runs `orchid serve` as a subprocess for the server tests: port 0 (the server picks one and logs it), its log
collected on a thread, a readiness wait on /health, and a graceful stop with SIGTERM."""
import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

from conftest import ROOT, orchid_bin

TIKTOKEN_DIR = ROOT.parent / "shared" / "fixtures" / "gpt-oss-tokenizer"


class OrchidServer:
    def __init__(self, *args, wait_ready=True, timeout=120, preexec_fn=None):
        cmd = [orchid_bin(), "serve", *map(str, args), "--port", "0", "--log-level", "info"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     errors="replace", preexec_fn=preexec_fn)
        self.log = []
        self._listening = threading.Event()
        self.port = None
        threading.Thread(target=self._read_log, daemon=True).start()
        if not self._listening.wait(timeout):
            self.kill()
            raise RuntimeError("orchid serve did not start listening:\n" + self.log_text())
        if wait_ready:
            self.wait_ready(timeout)

    def _read_log(self):
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on http://[^:\s]+:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._listening.set()
        self._listening.set()

    def log_text(self):
        return "".join(self.log)

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}"

    def url(self, path):
        return self.base_url + path

    def get(self, path, headers=None, timeout=30):
        """(status, body text) of a GET."""
        req = urllib.request.Request(self.url(path), headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path, body, headers=None, timeout=60):
        """(status, parsed JSON or text) of a POST; `body` is bytes, str or a JSON-able value."""
        if not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        req = urllib.request.Request(self.url(path), data=body, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except json.JSONDecodeError:
            return status, text

    def metrics(self):
        status, text = self.get("/metrics")
        assert status == 200, text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def wait_ready(self, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"orchid serve exited with {self.proc.returncode}:\n" + self.log_text())
            try:
                if self.get("/health", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("orchid serve did not become ready:\n" + self.log_text())

    def wait_idle(self, timeout=30):
        """Waits until no request runs or waits, no KV page is held and no K/V export lease is held (a
        decode instance releases them from a thread of its own); returns the last metrics."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            if (m["orchid_kv_full_pages_used"] == 0 and m["orchid_num_requests_running"] == 0
                    and m["orchid_num_requests_waiting"] == 0 and m.get("orchid_kv_share_leases", 0) == 0):
                return m
            if time.monotonic() > deadline:
                return m
            time.sleep(0.05)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def openai_client(server, **kw):
    import openai
    return openai.OpenAI(base_url=server.url("/v1"), api_key=kw.pop("api_key", "unused"), max_retries=0,
                         timeout=kw.pop("timeout", 120), **kw)
