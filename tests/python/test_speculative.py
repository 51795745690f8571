"""Speculative decoding through the server: `orchid serve --speculative-config` with prompt lookup and with a
draft model gives, for chat, completions and responses, streamed or not, greedy or seeded, exactly what the
same server gives without it; /metrics counts the drafts and their acceptance; a bad config stops the server
at start with a message that names the problem."""
import json
import subprocess

import pytest

from conftest import orchid_bin
from orchid_server import OrchidServer, openai_client

MODEL = ("synthetic:tiny", "--max-model-len", "1024", "--served-model-name", "tiny")
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
# The model itself as draft: every draft is accepted (coupled draws), so the counters can be checked exactly.
SELF_DRAFT = {"method": "draft_model", "model": "synthetic:tiny", "num_speculative_tokens": 3}
# An EAGLE-3 head (random weights) next to the target: it proposes, verification keeps the target's tokens.
EAGLE3 = {"method": "eagle3", "model": "synthetic@1", "num_speculative_tokens": 3}
# A repeated phrase in every prompt, something for prompt lookup to find.
PHRASE = "the quick brown fox jumps over the lazy dog; "


@pytest.fixture(scope="module")
def servers():
    with OrchidServer(*MODEL) as plain, \
            OrchidServer(*MODEL, "--speculative-config", json.dumps(NGRAM)) as ngram, \
            OrchidServer(*MODEL, "--speculative-config", json.dumps(SELF_DRAFT)) as draft, \
            OrchidServer(*MODEL, "--backend", "cpu", "--speculative-config", json.dumps(EAGLE3)) as eagle3:
        yield {"plain": plain, "ngram": ngram, "draft": draft, "eagle3": eagle3}


def requests():
    """(kind, create kwargs) covering each API, streaming and the sampling modes."""
    out = []
    for i, sampling in enumerate([{"temperature": 0}, {"temperature": 0.8, "seed": 5},
                                  {"temperature": 0.7, "seed": 7, "frequency_penalty": 0.5}]):
        stream = i % 2 == 1
        out.append(("chat", dict(messages=[{"role": "user", "content": PHRASE * 3 + f"again {i}"}],
                                 max_tokens=24, stream=stream, extra_body={"ignore_eos": True}, **sampling)))
        out.append(("completion", dict(prompt=PHRASE * 4, max_tokens=24, stream=not stream,
                                       extra_body={"ignore_eos": True}, **sampling)))
    out.append(("responses", dict(input=PHRASE * 2, max_output_tokens=24, temperature=0, stream=True)))
    return out


def accumulate(acc, fields):
    """Adds a delta's string fields to `acc` (chunk boundaries may differ when a step yields several tokens)."""
    for key, value in fields.items():
        if isinstance(value, str):
            acc[key] = acc.get(key, "") + value


def run(client, kind, kw):
    """What the request produced, independent of how it was chunked, and its completion token count."""
    kw = dict(kw, model="tiny")
    if kind == "chat":
        if kw.get("stream"):
            acc, n = {}, None
            for chunk in client.chat.completions.create(stream_options={"include_usage": True}, **kw):
                for c in chunk.choices:
                    accumulate(acc, c.delta.model_dump(exclude_none=True))
                if chunk.usage:
                    n = chunk.usage.completion_tokens
            return acc, n
        r = client.chat.completions.create(**kw)
        acc = {}
        accumulate(acc, r.choices[0].message.model_dump(exclude_none=True))
        return acc, r.usage.completion_tokens
    if kind == "completion":
        if kw.get("stream"):
            text, n = "", None
            for chunk in client.completions.create(stream_options={"include_usage": True}, **kw):
                text += "".join(c.text for c in chunk.choices)
                if chunk.usage:
                    n = chunk.usage.completion_tokens
            return text, n
        r = client.completions.create(**kw)
        return r.choices[0].text, r.usage.completion_tokens
    deltas, final = {}, None
    for event in client.responses.create(**kw):
        if event.type.endswith(".delta"):
            accumulate(deltas, {event.type: event.delta})
        if event.type in ("response.completed", "response.incomplete"):
            final = event.response
    items = [item.model_dump(exclude={"id"}) for item in final.output]
    return (deltas, json.dumps(items, sort_keys=True)), final.usage.output_tokens if final.usage else len(items)


def test_outputs_equal_those_without_speculation(servers):
    clients = {name: openai_client(s) for name, s in servers.items()}
    for kind, kw in requests():
        want = run(clients["plain"], kind, kw)
        assert want[1] and want[1] > 0
        for name in ("ngram", "draft", "eagle3"):
            assert run(clients[name], kind, kw) == want, (name, kind, kw)


def test_metrics_count_drafts_and_acceptance(servers):
    clients = {name: openai_client(s) for name, s in servers.items()}
    for name in ("ngram", "draft", "eagle3"):
        run(clients[name], "completion", dict(prompt=PHRASE * 4, max_tokens=24, temperature=0,
                                              extra_body={"ignore_eos": True}))
    plain = servers["plain"].wait_idle()
    assert plain["orchid_spec_decode_draft_tokens_total"] == 0
    ngram = servers["ngram"].wait_idle()
    assert ngram["orchid_spec_decode_draft_tokens_total"] > 0
    assert 0 <= ngram["orchid_spec_decode_accepted_tokens_total"] <= ngram["orchid_spec_decode_draft_tokens_total"]
    draft = servers["draft"].wait_idle()
    assert draft["orchid_spec_decode_drafts_total"] > 0
    # The target as its own draft: all accepted, 3 per drafted step but where max_tokens cut a run short.
    assert draft["orchid_spec_decode_accepted_tokens_total"] == draft["orchid_spec_decode_draft_tokens_total"]
    assert draft["orchid_spec_decode_draft_tokens_total"] <= 3 * draft["orchid_spec_decode_drafts_total"]
    eagle3 = servers["eagle3"].wait_idle()
    assert eagle3["orchid_spec_decode_draft_tokens_total"] > 0
    assert 0 <= eagle3["orchid_spec_decode_accepted_tokens_total"] <= eagle3["orchid_spec_decode_draft_tokens_total"]
    for m in (ngram, draft, eagle3):
        assert m["orchid_kv_full_pages_used"] == 0
    # Fewer steps than tokens generated after the first: several tokens per step.
    assert draft["orchid_engine_steps_total"] < draft["orchid_generation_tokens_total"]


@pytest.mark.parametrize("config, message", [
    ('{"method": "eagle", "num_speculative_tokens": 2}', "unknown method 'eagle'"),
    ('{"method": "ngram"}', "num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 40}', "must be 1..16"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3, "prompt_lookup_max": 2}',
     "prompt_lookup_min 3"),
    ('{"method": "draft_model", "num_speculative_tokens": 2}', "needs \"model\""),
    ('{"method": "eagle3", "num_speculative_tokens": 2}', "needs \"model\""),
    ('{"method": "eagle3", "model": "/nonexistent", "num_speculative_tokens": 2}', "not a directory"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "typo": 1}', "unknown key 'typo'"),
    ("[1, 2]", "expected a JSON object"),
])
def test_bad_config_is_refused_at_start(config, message):
    res = subprocess.run([orchid_bin(), "serve", "synthetic:tiny", "--port", "0", "--speculative-config", config],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert message in res.stderr, res.stderr


def test_bench_serve_reports_acceptance(orchid, servers):
    def bench(name):
        res = orchid("bench", "serve", "--url", servers[name].base_url, "--num-prompts", 4, "--input-len", 16,
                     "--output-len", 12, "--json")
        return json.loads(res.stdout)
    r = bench("draft")
    assert (r["completed"], r["errors"], r["length_mismatches"]) == (4, 0, 0)
    spec = r["spec_decode"]
    assert spec["acceptance_rate"] == 1.0 and spec["accepted_tokens"] == spec["draft_tokens"] > 0
    assert 1.0 < spec["mean_accepted_length"] <= 4.0
    assert "spec_decode" not in bench("plain")
