"""Asynchronous scheduling through the server (CPU backend, loopback): `--async-scheduling` gives, for chat,
completions and responses, streamed or not, greedy, seeded and penalized, exactly what the same server gives
without it, one request at a time and many at once (arrivals, stop strings and max_tokens while steps are
planned ahead of launched ones), steps are launched ahead, and no KV page is left held."""
import concurrent.futures

from orchid_server import OrchidServer, openai_client
from test_speculative import PHRASE, requests, run

MODEL = ("synthetic:tiny", "--max-model-len", "1024", "--served-model-name", "tiny")


def many():
    """Requests that end in different ways: max_tokens, a stop string, EOS (sampled, seeded)."""
    out = []
    for i in range(24):
        kw = dict(prompt=PHRASE * (1 + i % 4) + f" {i}", max_tokens=4 + (i * 7) % 29, temperature=0.9, seed=100 + i)
        if i % 3 == 0:
            kw["stop"] = [" the", "a"]
        if i % 4 != 1:
            kw["extra_body"] = {"ignore_eos": True}
        out.append(("completion", kw))
    return out


def test_outputs_equal_the_synchronous_server():
    with OrchidServer(*MODEL) as plain, OrchidServer(*MODEL, "--async-scheduling") as piped:
        want_client, got_client = openai_client(plain), openai_client(piped)
        for kind, kw in requests():
            assert run(got_client, kind, kw) == run(want_client, kind, kw), (kind, kw)
        work = many()
        with concurrent.futures.ThreadPoolExecutor(len(work)) as pool:
            got = list(pool.map(lambda r: run(got_client, *r), work))
        assert got == [run(want_client, *r) for r in work]
        m = piped.wait_idle()
        assert m["orchid_pipelined_steps_total"] > 0
        assert m["orchid_kv_full_pages_used"] == 0 and m["orchid_kv_sliding_pages_used"] == 0
        assert plain.wait_idle().get("orchid_pipelined_steps_total", 0) == 0
