"""Edges of the OpenAI mapping that real clients hit, with a scripted backend (`orchid serve --replay`):
- a forced tool call cut by max_tokens: nothing of a message header ever reaches `content`; once the call's
  arguments began it is reported with the arguments so far (finish_reason "length"), before that it is dropped;
- the first streamed chunk has `content: null` (a tool-call answer must not start with an empty text);
- `reasoning_effort` "minimal" and "none" (the OpenAI Agents SDK sends them) render as Harmony's low effort."""
import json

import pytest

from orchid_server import OrchidServer, openai_client

MODEL = "gpt-oss-test"
ARGS = '{"city":"Rome","unit":"celsius"}'
ANSWER = "Sunny."
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                                "parameters": WEATHER}}]
RESP_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}]
CALL_HEADER = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"

SCRIPT = {"rules": [
    # tool_choice "required": the prompt ends with "<|channel|>commentary to=functions", the model goes on.
    {"match": "Required call", "output": f".get_weather <|constrain|>json<|message|>{ARGS}<|call|>"},
    {"match": "Call on your own", "output": f"{CALL_HEADER}{ARGS}<|call|>"},
    {"match": "Plain answer", "output": f"<|channel|>final<|message|>{ANSWER}<|return|>"},
], "step_delay_ms": 0}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("output_edges")
    script = dict(SCRIPT, prompt_log=str(d / "prompts.jsonl"))
    (d / "script.json").write_text(json.dumps(script), encoding="utf-8")
    with OrchidServer("synthetic:tiny", "--replay", d / "script.json", "--served-model-name", MODEL) as s:
        s.prompt_log = d / "prompts.jsonl"
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server)


def user(text):
    return [{"role": "user", "content": text}]


def sse_chunks(text):
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def streamed_chat(client, **kw):
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(model=MODEL, stream=True, **kw):
        for c in chunk.choices:
            content += c.delta.content or ""
            for tc in c.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                entry["name"] += (tc.function and tc.function.name) or ""
                entry["arguments"] += (tc.function and tc.function.arguments) or ""
            finish = c.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


def test_call_cut_by_max_tokens_never_leaks_its_header(client):
    full = client.chat.completions.create(model=MODEL, messages=user("Required call"), tools=CHAT_TOOLS,
                                          tool_choice="required")
    assert full.choices[0].finish_reason == "tool_calls"
    n_tokens = full.usage.completion_tokens
    kinds = set()
    for max_tokens in range(1, n_tokens + 1):
        kw = dict(messages=user("Required call"), tools=CHAT_TOOLS, tool_choice="required", max_tokens=max_tokens)
        r = client.chat.completions.create(model=MODEL, **kw)
        choice = r.choices[0]
        calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in choice.message.tool_calls or []]
        # The model said nothing but the call: no text, whatever the cut.
        assert not choice.message.content, (max_tokens, choice.message.content)
        assert streamed_chat(client, **kw) == ("", calls, choice.finish_reason)
        resp = client.responses.create(model=MODEL, input="Required call", tools=RESP_TOOLS, tool_choice="required",
                                       max_output_tokens=max_tokens)
        assert [(o.type, o.name, o.arguments) for o in resp.output] == [
            ("function_call", c["name"], c["arguments"]) for c in calls]
        if max_tokens < n_tokens:
            assert choice.finish_reason == "length" and resp.status == "incomplete"
        else:
            assert choice.finish_reason == "tool_calls" and resp.status == "completed"
        if calls:
            assert calls[0]["name"] == "get_weather" and ARGS.startswith(calls[0]["arguments"])
        kinds.add("call" if calls else "dropped")
    assert kinds == {"call", "dropped"}  # cuts inside the header and inside the arguments were both seen
    assert calls[0]["arguments"] == ARGS


@pytest.mark.parametrize("question,tool_call", [("Call on your own", True), ("Plain answer", False)])
def test_first_chunk_content_is_null(client, server, question, tool_call):
    body = {"model": MODEL, "messages": user(question), "tools": CHAT_TOOLS, "stream": True}
    status, text = server.post("/v1/chat/completions", body)
    assert status == 200
    chunks = sse_chunks(text)
    first = chunks[0]["choices"][0]["delta"]
    assert first["role"] == "assistant" and "content" in first and first["content"] is None
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    content = "".join(d.get("content") or "" for d in deltas)
    assert content == ("" if tool_call else ANSWER)
    assert any("tool_calls" in d for d in deltas) == tool_call
    status, message = server.post("/v1/chat/completions", dict(body, stream=False))
    message = message["choices"][0]["message"]
    if tool_call:
        assert message["content"] is None and message["tool_calls"]
    else:
        assert message["content"] == ANSWER


def logged_prompts(server):
    return [json.loads(line)["prompt"] for line in server.prompt_log.read_text().splitlines()]


def prompt_of(server, call):
    before = len(logged_prompts(server))
    call()
    prompts = logged_prompts(server)[before:]
    assert len(prompts) == 1
    return prompts[0]


def test_minimal_and_none_effort_mean_low(client, server):
    def chat(effort):
        return prompt_of(server, lambda: client.chat.completions.create(
            model=MODEL, messages=user("Plain answer"), reasoning_effort=effort))

    def responses(effort):
        def call():
            r = client.responses.create(model=MODEL, input="Plain answer", reasoning={"effort": effort})
            assert r.reasoning.effort == effort
        return prompt_of(server, call)

    for api in (chat, responses):
        low = api("low")
        assert api("minimal") == low and api("none") == low
        assert api("medium") != low
