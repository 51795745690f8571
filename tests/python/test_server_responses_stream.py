"""The Responses stream as the openai SDK's `responses.stream()` helper reads it. A scripted backend
(`orchid serve --replay`) makes the model say exact Harmony: a plain answer, reasoning then an answer, and
reasoning, a preamble and a tool call. At every event the SDK's running snapshot (the text and arguments it
accumulates, and the reasoning accumulated the same way) is a prefix of the final response, and equal to it when
the item is done; items are announced empty and in progress; sequence numbers, output indices and item ids agree.
The response object repeats the request's settings (metadata, parallel_tool_calls, user, ...)."""
import json

import openai
import pytest

from orchid_server import OrchidServer, openai_client

MODEL = "gpt-oss-test"
ANSWER = "Rome is sunny today, 24 °C ☀️."
REASONING = "The user asks about Rome. Weather data would help; I should call get_weather."
PREAMBLE = "Let me check the weather service."
ARGS = '{"city":"Rome","unit":"celsius"}'
WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city"]}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
          "parameters": WEATHER}]

SCRIPT = {"rules": [
    {"match": "Plain answer", "output": f"<|channel|>final<|message|>{ANSWER}<|return|>"},
    {"match": "Think first", "output": f"<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant"
                                       f"<|channel|>final<|message|>{ANSWER}<|return|>"},
    {"match": "Weather in Rome?",
     "output": f"<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant<|channel|>commentary"
               f"<|message|>{PREAMBLE}<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
               f"<|constrain|>json<|message|>{ARGS}<|call|>"},
], "step_delay_ms": 0}

# What each scripted input must produce, as (type, text) per output item.
EXPECTED = {
    "Plain answer": [("message", ANSWER)],
    "Think first": [("reasoning", REASONING), ("message", ANSWER)],
    "Weather in Rome?": [("reasoning", REASONING), ("message", PREAMBLE), ("function_call", ARGS)],
}
DELTAS = {"response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("responses_stream")
    (d / "script.json").write_text(json.dumps(SCRIPT), encoding="utf-8")
    with OrchidServer("synthetic:tiny", "--replay", d / "script.json", "--served-model-name", MODEL) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server)


def shown(item):
    """What a client shows of an output item: its text, its reasoning, or a call's arguments."""
    if item.type == "function_call":
        return item.arguments
    return "".join(part.text for part in item.content or [])


def read_stream(events, final_of, sdk=True):
    """Checks the event sequence as it comes (`sdk`: the stream helper's events, which carry its snapshots);
    returns (snapshots [(index, text)], final response)."""
    items, text, snapshots, last_seq = {}, {}, [], -1
    for ev in events:
        assert ev.sequence_number > last_seq
        last_seq = ev.sequence_number
        if ev.type == "response.output_item.added":
            assert ev.output_index == len(items), "items are added in order"
            assert ev.item.status == "in_progress" and shown(ev.item) == ""
            assert not getattr(ev.item, "summary", None)
            items[ev.output_index], text[ev.output_index] = ev.item, ""
        elif ev.type == "response.content_part.added":
            assert ev.item_id == items[ev.output_index].id and ev.content_index == 0 and ev.part.text == ""
        elif ev.type in DELTAS:
            assert ev.item_id == items[ev.output_index].id
            text[ev.output_index] += ev.delta
            if ev.type != "response.function_call_arguments.delta":
                assert ev.content_index == 0
            # The SDK's own accumulation (it has none for reasoning): the added item plus the deltas.
            if sdk and ev.type != "response.reasoning_text.delta":
                assert ev.snapshot == text[ev.output_index]
            snapshots.append((ev.output_index, text[ev.output_index]))
        elif ev.type in ("response.output_text.done", "response.reasoning_text.done"):
            assert ev.item_id == items[ev.output_index].id and ev.text == text[ev.output_index]
        elif ev.type == "response.function_call_arguments.done":
            assert ev.arguments == text[ev.output_index] and ev.name == items[ev.output_index].name
        elif ev.type == "response.output_item.done":
            done = ev.item
            assert done.id == items[ev.output_index].id and done.type == items[ev.output_index].type
            assert shown(done) == text[ev.output_index]
            snapshots.append((ev.output_index, shown(done)))
    final = final_of()
    assert len(final.output) == len(items)
    for index, snap in snapshots:
        assert shown(final.output[index]).startswith(snap)
    for index, item in items.items():
        assert shown(final.output[index]) == text[index] and final.output[index].id == item.id
    return snapshots, final


@pytest.mark.parametrize("question", list(EXPECTED))
def test_sdk_stream_snapshots_are_prefixes_of_the_final_response(client, question):
    with client.responses.stream(model=MODEL, input=question, tools=TOOLS) as s:
        _, final = read_stream(s, s.get_final_response)
    assert final.status == "completed"
    assert [(o.type, shown(o)) for o in final.output] == EXPECTED[question]
    assert all(o.status == "completed" for o in final.output)
    # Streamed and not streamed agree.
    plain = client.responses.create(model=MODEL, input=question, tools=TOOLS)
    assert [(o.type, shown(o)) for o in plain.output] == EXPECTED[question]
    calls = [o for o in final.output if o.type == "function_call"]
    for call in calls:
        assert call.name == "get_weather" and call.call_id.startswith("call_") and json.loads(call.arguments)


def test_item_cut_by_max_output_tokens_is_incomplete(client):
    full = client.responses.create(model=MODEL, input="Think first")
    cut_at = full.usage.output_tokens - 4
    events = list(client.responses.create(model=MODEL, input="Think first", max_output_tokens=cut_at, stream=True))
    assert events[-1].type == "response.incomplete"
    _, final = read_stream(events, lambda: events[-1].response, sdk=False)
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    assert [o.status for o in final.output] == ["completed", "incomplete"]
    # A character cut in its bytes ends the text as U+FFFD (openai-harmony's rule).
    assert shown(final.output[0]) == REASONING and ANSWER.startswith(shown(final.output[1]).rstrip("\ufffd"))
    assert len(shown(final.output[1]).rstrip("\ufffd")) < len(ANSWER)


def test_response_repeats_the_request_settings(client):
    settings = dict(metadata={"team": "weather", "ticket": "42"}, parallel_tool_calls=False, user="user-7",
                    temperature=0.5, top_p=0.9, max_output_tokens=200, tool_choice="none", tools=TOOLS,
                    instructions="Answer briefly.", truncation="auto", prompt_cache_key="rome",
                    safety_identifier="hash-1", max_tool_calls=3)
    # store=true (the API's default) is accepted; nothing is stored, and the response says so.
    r = client.responses.create(model=MODEL, input="Plain answer", store=True, **settings)
    with client.responses.stream(model=MODEL, input="Plain answer", store=True, **settings) as s:
        created = next(iter(s))
        final = s.get_final_response()
    assert created.type == "response.created"
    for response in (r, created.response, final):
        assert response.store is False
        for key, value in settings.items():
            got = getattr(response, key)
            if key == "tools":
                got = [t.model_dump(exclude_none=True) for t in got]
            assert got == value, key
    defaults = client.responses.create(model=MODEL, input="Plain answer")
    assert defaults.metadata == {} and defaults.parallel_tool_calls is True and defaults.store is False
    assert defaults.user is None and defaults.truncation == "disabled"


@pytest.mark.parametrize("metadata", [["a"], {"k": 1}, {"k" * 65: "v"}, {"k": "v" * 513},
                                      {f"k{i}": "v" for i in range(17)}])
def test_bad_metadata_is_a_400(client, metadata):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="Plain answer", metadata=metadata)
    assert e.value.body["param"] == "metadata"
