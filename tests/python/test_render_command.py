"""`orchid render` against openai-harmony: OpenAI Chat Completions and Responses requests are mapped to a
Harmony conversation here, with openai-harmony's own types and the rules of docs/design.md ("Harmony: OpenAI
requests"), rendered by openai-harmony, and compared with orchid's printed text and ids."""

import functools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import orchid_bin

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "golden"))

import harmony_cases as hc  # noqa: E402
import harmony_random as hr  # noqa: E402
from openai_harmony import (Author, Conversation, DeveloperContent, Message, ReasoningEffort, Role,  # noqa: E402
                            SystemContent, TextContent, ToolDescription)

DATE = "2025-06-28"
EFFORTS = {"low": ReasoningEffort.LOW, "medium": ReasoningEffort.MEDIUM, "high": ReasoningEffort.HIGH,
           # The OpenAI API's lesser efforts; Harmony has none below low (docs/design.md).
           "minimal": ReasoningEffort.LOW, "none": ReasoningEffort.LOW}


def text_of(content, sep="\n"):
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return sep.join(p["text"] for p in content)


def harmony_conversation(messages, instructions, functions, effort, browser=False, python=False):
    sys_content = SystemContent.new().with_conversation_start_date(DATE).with_reasoning_effort(EFFORTS[effort])
    if browser:
        sys_content = sys_content.with_browser_tool()
    if python:
        sys_content = sys_content.with_python_tool()
    out = [Message.from_role_and_content(Role.SYSTEM, sys_content)]
    if instructions or functions:
        dev = DeveloperContent.new()
        if instructions:
            dev = dev.with_instructions("\n\n".join(instructions))
        if functions:
            dev = dev.with_function_tools(functions)
        out.append(Message.from_role_and_content(Role.DEVELOPER, dev))
    return Conversation.from_messages(out + messages)


def call(name, args):
    return (Message.from_role_and_content(Role.ASSISTANT, args).with_channel("commentary")
            .with_recipient(f"functions.{name}").with_content_type("<|constrain|>json"))


def result(name, output):
    return (Message.from_author_and_content(Author.new(Role.TOOL, f"functions.{name}"), output)
            .with_channel("commentary").with_recipient("assistant"))


def tool(name, description, parameters):
    return ToolDescription.new(name, description or "", parameters=parameters)


def expected_from_chat(req):
    effort = req.get("reasoning_effort") or (req.get("reasoning") or {}).get("effort") or "medium"
    functions = [tool(t["function"]["name"], t["function"].get("description"), t["function"].get("parameters"))
                 for t in req.get("tools", [])]
    msgs = req["messages"]
    last_user = max([i for i, m in enumerate(msgs) if m["role"] == "user"], default=-1)
    instructions, out, names = [], [], {}
    for i, m in enumerate(msgs):
        if m["role"] in ("system", "developer"):
            instructions.append(text_of(m.get("content")))
        elif m["role"] == "user":
            out.append(Message.from_role_and_content(Role.USER, text_of(m.get("content"))))
        elif m["role"] == "assistant":
            reasoning = m.get("reasoning") or m.get("reasoning_content") or m.get("thinking")
            if reasoning and i > last_user:
                out.append(Message.from_role_and_content(Role.ASSISTANT, reasoning).with_channel("analysis"))
            calls = m.get("tool_calls") or []
            content = text_of(m.get("content"))
            if calls and content:
                out.append(Message.from_role_and_content(Role.ASSISTANT, content).with_channel("commentary"))
            elif not calls and m.get("content") is not None:
                out.append(Message.from_role_and_content(Role.ASSISTANT, content).with_channel("final"))
            for c in calls:
                names[c["id"]] = c["function"]["name"]
                out.append(call(c["function"]["name"], c["function"]["arguments"]))
        elif m["role"] == "tool":
            out.append(result(names[m["tool_call_id"]], text_of(m.get("content"))))
    return harmony_conversation(out, instructions, functions, effort)


def expected_from_responses(req):
    effort = (req.get("reasoning") or {}).get("effort") or "medium"
    tools = req.get("tools", [])
    functions = [tool(t["name"], t.get("description"), t.get("parameters")) for t in tools if t["type"] == "function"]
    browser = any(t["type"] in ("web_search", "web_search_preview", "browser_search") for t in tools)
    python = any(t["type"] == "code_interpreter" for t in tools)
    instructions = [req["instructions"]] if "instructions" in req else []
    items = req["input"]
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    last_asst = max([i for i, it in enumerate(items) if it.get("type", "message") == "message"
                     and it["role"] == "assistant"], default=-1)
    ends_with_output = bool(items) and items[-1].get("type") == "function_call_output"
    out, names = [], {}
    for i, it in enumerate(items):
        kind = it.get("type", "message")
        if kind == "message" and it["role"] in ("system", "developer"):
            instructions.append(text_of(it["content"]))
        elif kind == "message":
            parts = [it["content"]] if isinstance(it["content"], str) else [p["text"] for p in it["content"]]
            for p in parts:
                m = Message.from_role_and_content(Role(it["role"]), p)
                out.append(m.with_channel("final") if it["role"] == "assistant" else m)
        elif kind == "reasoning" and i > last_asst and ends_with_output:
            text = text_of(it.get("content"), sep="")
            if text:
                out.append(Message.from_role_and_content(Role.ASSISTANT, text).with_channel("analysis"))
        elif kind == "function_call":
            names[it["call_id"]] = it["name"]
            out.append(call(it["name"], it["arguments"]))
        elif kind == "function_call_output":
            out.append(result(names[it["call_id"]], it["output"]))
    return harmony_conversation(out, instructions, functions, effort, browser, python)


def random_chat(rng):
    tools = [{"type": "function", "function": {"name": n, "description": hr.text(rng, 5),
                                               "parameters": hr.object_schema(rng, 0, root=True)}}
             for n in rng.sample(hr.NAMES, rng.randint(0, 3))]
    msgs = [{"role": r, "content": hr.text(rng, 8)} for r in rng.sample(["system", "developer"], rng.randint(0, 2))]
    for turn in range(rng.randint(1, 3)):
        msgs.append({"role": "user", "content": rng.choice([hr.text(rng, 8), [{"type": "text", "text": hr.text(rng)},
                                                                              {"type": "text", "text": "second"}]])})
        for k in range(rng.randint(0, 2)):
            cid = f"call_{turn}_{k}"
            fname = rng.choice([t["function"]["name"] for t in tools] or ["f"])
            msgs.append({"role": "assistant", "reasoning": rng.choice([None, hr.text(rng, 6)]),
                         "content": rng.choice([None, "", hr.text(rng, 4)]),
                         "tool_calls": [{"id": cid, "type": "function",
                                         "function": {"name": fname, "arguments": hr.json_args(rng)}}]})
            msgs.append({"role": "tool", "tool_call_id": cid, "content": hr.json_args(rng)})
        if rng.random() < 0.7 or turn == 0:
            msgs.append({"role": "assistant", "content": hr.text(rng, 8), "reasoning": rng.choice([None, "thought"])})
    if rng.random() < 0.3:
        msgs = msgs[:-1]
    req = {"messages": msgs, "tools": tools}
    if rng.random() < 0.7:
        req["reasoning_effort"] = rng.choice(list(EFFORTS))
    return req


def random_responses(rng):
    tools = [{"type": "function", "name": n, "description": hr.text(rng, 5),
              "parameters": hr.object_schema(rng, 0, root=True)} for n in rng.sample(hr.NAMES, rng.randint(0, 2))]
    tools += [{"type": t} for t in ("web_search", "code_interpreter") if rng.random() < 0.3]
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": hr.text(rng, 6)}]}]
    if rng.random() < 0.5:
        items.append({"role": "assistant", "content": hr.text(rng, 5)})
        items.append({"role": "user", "content": hr.text(rng, 5)})
    for k in range(rng.randint(0, 3)):
        items.append({"type": "reasoning", "content": [{"type": "reasoning_text", "text": hr.text(rng, 5)}]})
        items.append({"type": "function_call", "name": "f", "arguments": hr.json_args(rng), "call_id": f"c{k}"})
        items.append({"type": "function_call_output", "call_id": f"c{k}", "output": hr.json_args(rng)})
    req = {"input": items if rng.random() < 0.9 else hr.text(rng, 5), "tools": tools}
    if rng.random() < 0.5:
        req["instructions"] = hr.text(rng, 6)
    if rng.random() < 0.7:
        req["reasoning"] = {"effort": rng.choice(list(EFFORTS))}
    return req


@functools.lru_cache(maxsize=1)
def cases():
    rng = random.Random(7)
    out = [("chat", random_chat(rng)) for _ in range(60)] + [("responses", random_responses(rng)) for _ in range(60)]
    return out


@pytest.fixture(scope="module")
def encoding():
    return hc.encoding()


@pytest.mark.parametrize("index", range(120))
def test_render_matches_openai_harmony(orchid, encoding, tmp_path, index):
    shape, req = cases()[index]
    conv = expected_from_chat(req) if shape == "chat" else expected_from_responses(req)
    want_ids = encoding.render_conversation_for_completion(conv, Role.ASSISTANT)
    path = tmp_path / "request.json"
    path.write_text(json.dumps(req, ensure_ascii=False), encoding="utf-8")
    orchid("version")  # fails with a clear message when the binary is missing
    # Bytes, not text mode: universal newlines would turn the prompt's "\r\n" into "\n".
    out = subprocess.run([orchid_bin(), "render", str(path), "--date", DATE], capture_output=True, check=True).stdout
    text, _, ids_line = out.decode("utf-8").rstrip("\n").rpartition("\n")
    assert json.loads(ids_line) == want_ids
    assert text == encoding.decode_utf8(want_ids)


def test_render_names_the_bad_field(orchid, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}))
    run = orchid("render", path, check=False)
    assert run.returncode == 2
    assert "request.messages[0].content[0].type" in run.stderr


def response_formats_text(fmt):
    """The "# Response Formats" section the Harmony guide prescribes, from the request's format object."""
    desc = f"// {fmt['description']}\n" if fmt.get("description") else ""
    schema = json.dumps(fmt["schema"], ensure_ascii=False, separators=(",", ":"))
    return f"# Response Formats\n\n## {fmt.get('name', 'response')}\n\n{desc}{schema}"


def with_response_formats(conv, section):
    """The conversation with `section` appended to the developer message's text (a developer message of its own
    when there is none), as a second content item the way openai-harmony renders a message's items."""
    msgs = list(conv.messages)
    for i, m in enumerate(msgs):
        if m.author.role == Role.DEVELOPER:
            msgs[i] = Message(author=m.author, content=[*m.content, TextContent(text="\n\n" + section)])
            break
    else:
        msgs.insert(1, Message.from_role_and_content(Role.DEVELOPER, section))
    return Conversation.from_messages(msgs)


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
          "required": ["city", "temp"], "additionalProperties": False}


@pytest.mark.parametrize("index", range(12))
def test_render_response_formats_match_openai_harmony(orchid, encoding, tmp_path, index):
    rng = random.Random(100 + index)
    shape = "chat" if index % 2 == 0 else "responses"
    req = random_chat(rng) if shape == "chat" else random_responses(rng)
    fmt = {"name": rng.choice(["weather", "answer_v2"]), "schema": SCHEMA, "strict": True}
    if index % 3 == 0:
        fmt["description"] = "The weather in a city"
    if shape == "chat":
        req["response_format"] = {"type": "json_schema", "json_schema": fmt}
        conv = expected_from_chat(req)
    else:
        req["text"] = {"format": {"type": "json_schema", **fmt}}
        conv = expected_from_responses(req)
    want_ids = encoding.render_conversation_for_completion(with_response_formats(conv, response_formats_text(fmt)),
                                                           Role.ASSISTANT)
    path = tmp_path / "request.json"
    path.write_text(json.dumps(req, ensure_ascii=False), encoding="utf-8")
    out = subprocess.run([orchid_bin(), "render", str(path), "--date", DATE], capture_output=True, check=True).stdout
    text, _, ids_line = out.decode("utf-8").rstrip("\n").rpartition("\n")
    assert "# Response Formats" in text
    assert json.loads(ids_line) == want_ids
