"""Reasoning and tool calls through the whole server: a scripted backend (`orchid serve --replay`) replays fixed
Harmony output (analysis, a call to get_weather, then after the tool result analysis and a final answer), and the
official openai SDK must see `reasoning`, a parsed tool call with JSON arguments and the final content, streamed and
not, on Chat Completions and Responses. The second turn's prompt is checked against openai-harmony's rendering of
the same conversation (built here by the serving conventions of specs/harmony.md §6)."""
import datetime
import json
import os

import pytest

from conftest import ROOT
from orchid_server import OrchidServer, openai_client

REASONING_1 = "The user wants the weather in Paris. I should call get_weather."
ARGS = '{"city":"Paris","unit":"celsius"}'
REASONING_2 = "The tool says 20 degrees and sunny."
ANSWER = "It is 20 °C and sunny in Paris 💖."
TOOL_OUTPUT = '{"temperature":20,"sky":"sunny"}'
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                                "parameters": WEATHER}}]
RESP_TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
               "parameters": WEATHER}]
QUESTION = "What is the weather in Paris?"
STOP_TEXT = "one two STOP three four"
# Text where the header should be (openai-harmony's non-strict test case), then analysis and a final answer.
BROKEN = ("I must refuse<|end|><|start|>assistant<|channel|>analysis<|message|>We must refuse<|end|><|start|>"
          "assistant<|channel|>final<|message|>I'm sorry, but I can't help with that.<|return|>")

SCRIPT = {
    "rules": [
        {"match": "weather in Paris?",
         "output": f"<|channel|>analysis<|message|>{REASONING_1}<|end|><|start|>assistant<|channel|>commentary "
                   f"to=functions.get_weather <|constrain|>json<|message|>{ARGS}<|call|>"},
        {"match": "functions.get_weather to=assistant",
         "output": f"<|channel|>analysis<|message|>{REASONING_2}<|end|><|start|>assistant<|channel|>final"
                   f"<|message|>{ANSWER}<|return|>"},
        # tool_choice naming get_weather: the prompt ends with the forced call header.
        {"match": "to=functions.get_weather <|constrain|>json<|message|>", "output": f"{ARGS}<|call|>"},
        {"match": "Stop test", "output": f"<|channel|>final<|message|>{STOP_TEXT}<|return|>"},
        {"match": "Broken output", "output": BROKEN},
    ],
    "step_delay_ms": 0,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay")
    script = dict(SCRIPT, prompt_log=str(d / "prompts.jsonl"))
    (d / "script.json").write_text(json.dumps(script), encoding="utf-8")
    with OrchidServer("synthetic:tiny", "--replay", d / "script.json", "--served-model-name", "gpt-oss-test") as s:
        s.prompt_log = d / "prompts.jsonl"
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server)


def first_turn_chat():
    return [{"role": "user", "content": QUESTION}]


def second_turn_chat(call_id, reasoning_key="reasoning"):
    return first_turn_chat() + [
        {"role": "assistant", "content": None, reasoning_key: REASONING_1,
         "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]},
        {"role": "tool", "tool_call_id": call_id, "content": TOOL_OUTPUT}]


def reasoning_of(message):
    extra = message.model_extra or {}
    return extra.get("reasoning"), extra.get("reasoning_content")


def test_chat_tool_call_then_answer(client):
    r = client.chat.completions.create(model="gpt-oss-test", messages=first_turn_chat(), tools=CHAT_TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert reasoning_of(choice.message) == (REASONING_1, REASONING_1)
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "celsius"}
    assert r.usage.completion_tokens_details.reasoning_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens

    r2 = client.chat.completions.create(model="gpt-oss-test", messages=second_turn_chat(call.id), tools=CHAT_TOOLS)
    assert r2.choices[0].finish_reason == "stop"
    assert r2.choices[0].message.content == ANSWER
    assert reasoning_of(r2.choices[0].message) == (REASONING_2, REASONING_2)
    assert not r2.choices[0].message.tool_calls


def test_chat_streamed(client):
    stream = client.chat.completions.create(model="gpt-oss-test", messages=first_turn_chat(), tools=CHAT_TOOLS,
                                            stream=True, stream_options={"include_usage": True})
    reasoning, reasoning_alias, calls, finish, usage, roles = "", "", {}, None, None, []
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            d = c.delta
            extra = d.model_extra or {}
            reasoning += extra.get("reasoning") or ""
            reasoning_alias += extra.get("reasoning_content") or ""
            if d.role:
                roles.append(d.role)
            for tc in d.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = tc.id or entry["id"]
                if tc.function and tc.function.name:
                    entry["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    entry["arguments"] += tc.function.arguments
            finish = c.finish_reason or finish
    assert roles == ["assistant"]
    assert reasoning == reasoning_alias == REASONING_1
    assert list(calls) == [0] and calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris", "unit": "celsius"}
    assert finish == "tool_calls"
    assert usage.completion_tokens > 0 and usage.completion_tokens_details.reasoning_tokens > 0

    # The SDK's own accumulator agrees.
    with client.chat.completions.stream(model="gpt-oss-test", messages=second_turn_chat("call_x"),
                                        tools=CHAT_TOOLS) as s:
        final = s.get_final_completion()
    assert final.choices[0].message.content == ANSWER and final.choices[0].finish_reason == "stop"


def test_chat_reasoning_content_is_accepted_in_history(client, server):
    r = client.chat.completions.create(model="gpt-oss-test", tools=CHAT_TOOLS,
                                       messages=second_turn_chat("call_1", reasoning_key="reasoning_content"))
    assert r.choices[0].message.content == ANSWER


def test_responses_tool_call_then_answer(client):
    r = client.responses.create(model="gpt-oss-test", input=QUESTION, tools=RESP_TOOLS)
    assert r.status == "completed"
    kinds = [o.type for o in r.output]
    assert kinds == ["reasoning", "function_call"]
    assert r.output[0].content[0].type == "reasoning_text" and r.output[0].content[0].text == REASONING_1
    call = r.output[1]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris", "unit": "celsius"}
    assert call.call_id.startswith("call_")
    assert r.usage.output_tokens_details.reasoning_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens

    follow = [{"role": "user", "content": QUESTION},
              {"type": "reasoning", "id": r.output[0].id, "summary": [],
               "content": [{"type": "reasoning_text", "text": REASONING_1}]},
              {"type": "function_call", "call_id": call.call_id, "name": "get_weather", "arguments": call.arguments},
              {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_OUTPUT}]
    r2 = client.responses.create(model="gpt-oss-test", input=follow, tools=RESP_TOOLS)
    assert [o.type for o in r2.output] == ["reasoning", "message"]
    assert r2.output_text == ANSWER
    assert r2.output[0].content[0].text == REASONING_2


def test_responses_streamed(client):
    events = list(client.responses.create(model="gpt-oss-test", input=QUESTION, tools=RESP_TOOLS, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert reasoning == REASONING_1 and args == ARGS
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert added == ["reasoning", "function_call"] == [i.type for i in done]
    assert done[1].name == "get_weather" and done[1].arguments == ARGS
    (args_done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert args_done.arguments == ARGS
    completed = events[-1].response
    assert completed.usage.output_tokens > 0 and [o.type for o in completed.output] == added

    # The SDK's stream helper (which checks the event order) assembles the follow-up answer.
    follow = [{"role": "user", "content": QUESTION},
              {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": ARGS},
              {"type": "function_call_output", "call_id": "c1", "output": TOOL_OUTPUT}]
    with client.responses.stream(model="gpt-oss-test", input=follow, tools=RESP_TOOLS) as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    assert text == ANSWER == final.output_text


def test_named_tool_choice_forces_the_call(client):
    r = client.chat.completions.create(model="gpt-oss-test", messages=[{"role": "user", "content": "Anything."}],
                                       tools=CHAT_TOOLS,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] == "Paris"
    assert r.choices[0].finish_reason == "tool_calls"


def test_stop_strings_apply_to_the_answer(client):
    r = client.chat.completions.create(model="gpt-oss-test", messages=[{"role": "user", "content": "Stop test"}],
                                       stop=["STOP"])
    before_stop = STOP_TEXT[:STOP_TEXT.index("STOP")]
    assert r.choices[0].message.content == before_stop and r.choices[0].finish_reason == "stop"
    text = ""
    for chunk in client.chat.completions.create(model="gpt-oss-test", stop=["STOP"], stream=True,
                                                messages=[{"role": "user", "content": "Stop test"}]):
        for c in chunk.choices:
            text += c.delta.content or ""
    assert text == before_stop


def test_logprobs_cover_the_answer_tokens(client, server):
    r = client.chat.completions.create(model="gpt-oss-test", messages=second_turn_chat("c9"), tools=CHAT_TOOLS,
                                       logprobs=True, top_logprobs=2)
    lp = r.choices[0].logprobs.content
    tok_bytes = b"".join(bytes(e.bytes) for e in lp)
    assert tok_bytes.decode("utf-8") == ANSWER
    assert all(len(e.top_logprobs) == 2 for e in lp)


def test_malformed_model_output_is_not_an_error(client):
    from openai_harmony import Role
    enc = harmony_encoding()
    parsed = enc.parse_messages_from_completion_tokens(enc.encode(BROKEN, allowed_special="all"), Role.ASSISTANT,
                                                       strict=False)
    reasoning = "".join(m.content[0].text for m in parsed if m.channel == "analysis")
    content = "".join(m.content[0].text for m in parsed if m.channel != "analysis")
    r = client.chat.completions.create(model="gpt-oss-test", messages=[{"role": "user", "content": "Broken output"}])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == content and reasoning_of(r.choices[0].message)[0] == reasoning
    s = client.responses.create(model="gpt-oss-test", input="Broken output")
    assert s.status == "completed" and s.output_text == content


def harmony_encoding():
    for d in (ROOT / "assets" / "tokenizer", ROOT.parent / "shared" / "fixtures" / "gpt-oss-tokenizer"):
        if (d / "o200k_base.tiktoken").exists():
            os.environ.setdefault("TIKTOKEN_ENCODINGS_BASE", str(d))
            break
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def expected_second_turn(date):
    """The second turn as the gpt-oss serving conventions build it, rendered by openai-harmony."""
    from openai_harmony import (Author, Conversation, DeveloperContent, Message, ReasoningEffort, Role,
                                SystemContent, ToolDescription)
    system = SystemContent.new().with_reasoning_effort(ReasoningEffort.MEDIUM).with_conversation_start_date(date)
    developer = DeveloperContent.new().with_function_tools(
        [ToolDescription.new("get_weather", "Current weather in a city", parameters=WEATHER)])
    msgs = [
        Message.from_role_and_content(Role.SYSTEM, system),
        Message.from_role_and_content(Role.DEVELOPER, developer),
        Message.from_role_and_content(Role.USER, QUESTION),
        # The tool loop is still running: its reasoning is kept (cookbook rule).
        Message.from_role_and_content(Role.ASSISTANT, REASONING_1).with_channel("analysis"),
        Message.from_role_and_content(Role.ASSISTANT, ARGS).with_channel("commentary")
        .with_recipient("functions.get_weather").with_content_type("<|constrain|>json"),
        Message.from_author_and_content(Author.new(Role.TOOL, "functions.get_weather"), TOOL_OUTPUT)
        .with_channel("commentary").with_recipient("assistant"),
    ]
    return harmony_encoding().render_conversation_for_completion(Conversation.from_messages(msgs), Role.ASSISTANT)


def logged_prompts(server):
    return [json.loads(line)["prompt"] for line in server.prompt_log.read_text().splitlines()]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_round_trip_renders_like_openai_harmony(client, server, api):
    day0 = datetime.date.today().isoformat()
    before = len(logged_prompts(server))
    if api == "chat":
        first = client.chat.completions.create(model="gpt-oss-test", messages=first_turn_chat(), tools=CHAT_TOOLS)
        msg = first.choices[0].message
        history = first_turn_chat() + [
            {"role": "assistant", "content": msg.content, "reasoning": reasoning_of(msg)[0],
             "tool_calls": [tc.model_dump() for tc in msg.tool_calls]},
            {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": TOOL_OUTPUT}]
        client.chat.completions.create(model="gpt-oss-test", messages=history, tools=CHAT_TOOLS)
    else:
        first = client.responses.create(model="gpt-oss-test", input=QUESTION, tools=RESP_TOOLS)
        items = [{"role": "user", "content": QUESTION}] + [o.model_dump(exclude_none=True) for o in first.output]
        call = first.output[-1]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": TOOL_OUTPUT})
        client.responses.create(model="gpt-oss-test", input=items, tools=RESP_TOOLS)
    day1 = datetime.date.today().isoformat()
    prompts = logged_prompts(server)[before:]
    assert len(prompts) == 2
    assert prompts[1] in (expected_second_turn(day0), expected_second_turn(day1))
