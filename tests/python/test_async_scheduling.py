"""Asynchronous scheduling through the server (CPU backend, loopback): `--async-scheduling` gives, for chat,
completions and responses, streamed or not, greedy, seeded and penalized, exactly what the same server gives
without it, one request at a time and many at once (arrivals, stop strings and max_tokens while steps are
planned ahead of launched ones), steps are launched ahead, and no KV page is left held. And with the replay
backend, whose launched steps become ready like a device's: reasoning, tool calls and text parse the same; and
structured outputs, whose masks follow each draw, answer the same."""
import concurrent.futures
import json

from orchid_server import OrchidServer, openai_client
from structured_schemas import SCHEMAS, validate
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


SCRIPT = {"rules": [{"match": "", "output": "<|channel|>analysis<|message|>Think about it a little while."
                                          "<|end|><|start|>assistant<|channel|>commentary to=functions.lookup "
                                          "<|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>"}],
          "step_delay_ms": 3}


def test_replayed_harmony_output_parses_the_same(tmp_path):
    (tmp_path / "script.json").write_text(json.dumps(SCRIPT), encoding="utf-8")
    args = ("synthetic:tiny", "--replay", tmp_path / "script.json", "--served-model-name", "tiny")
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    work = [("chat", dict(messages=[{"role": "user", "content": f"weather {i}"}], tools=tools,
                          stream=i % 2 == 0, max_tokens=200)) for i in range(16)]
    def chat(client, kw):
        """Text fields, tool calls (name, arguments) and the finish reason, streamed or not."""
        if not kw["stream"]:
            c = client.chat.completions.create(model="tiny", **kw).choices[0]
            calls = [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []]
            return c.message.model_dump(include={"content", "reasoning_content"}), calls, c.finish_reason
        text, calls, finish = {}, {}, None
        for chunk in client.chat.completions.create(model="tiny", **kw):
            for c in chunk.choices:
                d = c.delta.model_dump(exclude_none=True)
                for key in ("content", "reasoning_content"):
                    if isinstance(d.get(key), str):
                        text[key] = text.get(key, "") + d[key]
                for t in c.delta.tool_calls or []:
                    name, args = calls.get(t.index, ("", ""))
                    calls[t.index] = (name + (t.function.name or ""), args + (t.function.arguments or ""))
                finish = c.finish_reason or finish
        return text, [calls[i] for i in sorted(calls)], finish

    with OrchidServer(*args) as plain, OrchidServer(*args, "--async-scheduling") as piped:
        want_client, got_client = openai_client(plain), openai_client(piped)
        with concurrent.futures.ThreadPoolExecutor(len(work)) as pool:
            got = list(pool.map(lambda r: chat(got_client, r[1]), work))
        want = [chat(want_client, r[1]) for r in work]
        assert got == want
        assert all(w[1] == [("lookup", '{"city": "Paris"}')] and w[2] == "tool_calls" for w in want), want[:2]
        assert piped.wait_idle()["orchid_pipelined_steps_total"] > 0


def test_structured_outputs_equal_the_synchronous_server():
    """JSON-schema answers, eight at once beside plain requests: the pipelined server's masks follow each
    draw (computed once the launched step is read), so every answer equals the synchronous server's."""
    args = ("synthetic:tiny", "--served-model-name", "tiny", "--max-model-len", "4096")
    msgs = [{"role": "user", "content": "Answer in JSON."}]
    items = list(SCHEMAS.items())[:8]

    def one(client, i):
        name, schema = items[i]
        r = client.chat.completions.create(
            model="tiny", messages=msgs, max_tokens=160, seed=i, temperature=1.0,
            response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
            extra_body={"reasoning": {"max_tokens": 12}})
        return r.choices[0].message.content, r.choices[0].finish_reason

    with OrchidServer(*args) as plain, OrchidServer(*args, "--async-scheduling") as piped:
        want_client, got_client = openai_client(plain), openai_client(piped)
        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            side = [pool.submit(run, got_client, "completion",
                                dict(prompt=PHRASE + str(k), max_tokens=40, temperature=0)) for k in range(4)]
            got = list(pool.map(lambda i: one(got_client, i), range(len(items))))
            for f in side:
                f.result()
        want = [one(want_client, i) for i in range(len(items))]
        assert got == want
        for (content, _), (_, schema) in zip(got, items):
            validate(json.loads(content), schema)
        assert piped.wait_idle()["orchid_pipelined_steps_total"] > 0
