"""Chat Completions and Responses through the official openai SDK against `orchid serve synthetic:tiny`. The
tokens are random, so these tests check the protocol: lengths respected, usage adding up, streamed and unstreamed
answers agreeing for a seed, the event sequence of the Responses stream."""
import pytest

from orchid_server import OrchidServer, openai_client

MSGS = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something."}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look something up",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def server():
    with OrchidServer("synthetic:tiny", "--served-model-name", "tiny", "--max-model-len", "2048") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server)


def test_chat_length_and_usage(client):
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=8, extra_body={"ignore_eos": True})
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    (c,) = r.choices
    assert c.finish_reason == "length" and c.message.role == "assistant"
    u = r.usage
    assert u.completion_tokens == 8 and u.total_tokens == u.prompt_tokens + 8
    assert 0 <= u.completion_tokens_details.reasoning_tokens <= 8


def collect_stream(stream):
    text, reasoning, finish, usage, chunks = "", "", {}, None, 0
    for chunk in stream:
        chunks += 1
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning") or ""
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    return text, reasoning, finish, usage, chunks


def test_chat_stream_matches_the_unstreamed_answer(client):
    kw = dict(model="tiny", messages=MSGS, max_tokens=12, seed=11, temperature=1.0, extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**kw)
    text, reasoning, finish, usage, _ = collect_stream(
        client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    m = whole.choices[0].message
    assert text == (m.content or "")
    assert reasoning == ((m.model_extra or {}).get("reasoning") or "")
    assert finish == {0: "length"}
    assert usage.completion_tokens == whole.usage.completion_tokens == 12
    assert usage.prompt_tokens == whole.usage.prompt_tokens


def test_chat_n_choices(client):
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=4, n=3,
                                       extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens == 12
    _, _, finish, usage, _ = collect_stream(client.chat.completions.create(
        model="tiny", messages=MSGS, max_tokens=4, n=2, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True}))
    assert finish == {0: "length", 1: "length"} and usage.completion_tokens == 8


@pytest.mark.parametrize("tool_choice", ["auto", "none", "required",
                                         {"type": "function", "function": {"name": "lookup"}}])
def test_chat_tool_choices_are_served(client, tool_choice):
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=6, tools=TOOLS,
                                       tool_choice=tool_choice, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 6
    if isinstance(tool_choice, dict):
        # The forced call header is part of the prompt; the output continues inside the call.
        (call,) = r.choices[0].message.tool_calls
        assert call.function.name == "lookup"


def test_responses_incomplete_at_max_output_tokens(client):
    r = client.responses.create(model="tiny", input="Say something.", instructions="Be terse.", max_output_tokens=9)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 9 and r.usage.total_tokens == r.usage.input_tokens + 9
    assert r.instructions == "Be terse."


def test_responses_stream_event_sequence(client):
    events = list(client.responses.create(model="tiny", input="Say something.", max_output_tokens=9, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.incomplete"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # Every item that was added is done, in order, and each text delta belongs to an open item.
    open_items, done = set(), []
    for e in events:
        if e.type == "response.output_item.added":
            open_items.add(e.output_index)
        elif e.type == "response.output_item.done":
            open_items.remove(e.output_index)
            done.append(e.output_index)
        elif e.type.endswith(".delta"):
            assert e.output_index in open_items
    assert not open_items and done == sorted(done)
    final = events[-1].response
    assert final.usage.output_tokens == 9 and len(final.output) == len(done)


def test_usage_counts_match_the_engine(server, client):
    before = server.wait_idle()  # the last step of an earlier request may not be counted yet
    client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=5, extra_body={"ignore_eos": True})
    client.responses.create(model="tiny", input="hello", max_output_tokens=7)
    after = server.wait_idle()
    assert after["orchid_generation_tokens_total"] - before["orchid_generation_tokens_total"] == 12
    assert after["orchid_kv_full_pages_used"] == 0
