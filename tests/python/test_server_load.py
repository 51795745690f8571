"""The bounded loopback load test (tools/load/sse_load.py) against `orchid serve synthetic:tiny`: 512 concurrent
streaming chat clients, a quarter of them hanging up after their first chunk. Zero non-200 answers, every other
stream complete, every KV page free at the end (read from /metrics). The time to first token is printed (run with
-s to see it); bench/RESULTS.md records a run."""
import json
import subprocess
import sys

from conftest import ROOT
from orchid_server import OrchidServer


def test_512_streaming_clients_with_hang_ups():
    # A KV pool large enough for 256 running chat prompts, so the test measures serving, not preemption.
    # All 512 clients come from one address, so the per-client connection cap is lifted.
    with OrchidServer("synthetic:tiny", "--kv-pages", "4096", "--max-num-seqs", "256",
                      "--max-connections-per-client", "0") as s:
        res = subprocess.run([sys.executable, str(ROOT / "tools" / "load" / "sse_load.py"), "--url", s.base_url,
                              "--endpoint", "chat", "--clients", "512", "--disconnect", "0.25", "--max-tokens", "16",
                              "--timeout", "400"], capture_output=True, text=True, timeout=480)
        summary = json.loads(res.stdout)
        print("\nload test:", json.dumps(summary))
        assert res.returncode == 0 and summary["ok"], res.stdout + res.stderr
        assert summary["non_200"] == 0 and summary["incomplete"] == 0
        assert summary["completed"] + summary["hung_up"] == 512 and summary["hung_up"] > 64
        assert summary["kv_full_pages_used_after"] == 0 and summary["kv_sliding_pages_used_after"] == 0
        assert s.proc.poll() is None
        log = s.log_text()
    assert "[error]" not in log and "[critical]" not in log, log
