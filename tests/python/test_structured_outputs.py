"""Structured outputs against `orchid serve synthetic:tiny` (random weights) through the official openai SDK:
every answer must parse and validate (jsonschema) whatever the weights, because the server constrains the final
channel and tool-call arguments to the requested grammar and bounds the free analysis channel. A subset of the
full acceptance run (tools/structured/acceptance.py, 200 requests and more) to keep CI short."""
import json
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from structured_schemas import MODELS, SCHEMAS, validate

from orchid_server import OrchidServer, openai_client

MSGS = [{"role": "user", "content": "Answer in JSON."}]
# A small reasoning budget keeps the CPU runs short; one test leaves the default.
FAST = {"reasoning": {"max_tokens": 12}}


@pytest.fixture(scope="module")
def server():
    with OrchidServer("synthetic:tiny", "--served-model-name", "tiny", "--max-model-len", "4096") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server)


def parallel(fn, items, workers=8):
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))


def schema_format(name, schema, strict=True):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}


def test_every_schema_validates(client):
    def one(item):
        (name, schema), seed = item
        r = client.chat.completions.create(model="tiny", messages=MSGS, response_format=schema_format(name, schema),
                                           max_tokens=200, seed=seed, temperature=1.0, extra_body=FAST)
        content = r.choices[0].message.content
        validate(json.loads(content), schema)
        return r.choices[0].finish_reason
    reasons = parallel(one, [(kv, seed) for seed, kv in enumerate(SCHEMAS.items())])
    assert reasons == ["stop"] * len(SCHEMAS)


def test_tight_budget_still_closes(client):
    # The answer has few tokens left after the analysis: termination forcing closes the value in time.
    schema = SCHEMAS["nested_address"]
    def one(seed):
        r = client.chat.completions.create(model="tiny", messages=MSGS, response_format=schema_format("a", schema),
                                           max_tokens=90, seed=seed)
        validate(json.loads(r.choices[0].message.content), schema)
        assert r.usage.completion_tokens <= 90
    parallel(one, range(4))


def test_parse_with_pydantic_models(client):
    def one(item):
        name, model = item
        r = client.chat.completions.parse(model="tiny", messages=MSGS, response_format=model, max_tokens=220,
                                          seed=3, extra_body=FAST)
        parsed = r.choices[0].message.parsed
        assert isinstance(parsed, model)
        validate(json.loads(r.choices[0].message.content), model.model_json_schema())
    parallel(one, list(MODELS.items())[:2])


def test_responses_parse(client):
    def one(item):
        name, model = item
        r = client.responses.parse(model="tiny", input="Answer in JSON.", text_format=model, max_output_tokens=220,
                                   extra_body=FAST)
        assert isinstance(r.output_parsed, model)
    parallel(one, list(MODELS.items())[2:])


def test_streamed_answers_validate(client):
    def one(item):
        name, schema = item
        stream = client.chat.completions.create(model="tiny", messages=MSGS, stream=True, max_tokens=200,
                                                response_format=schema_format(name, schema), extra_body=FAST)
        content = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        validate(json.loads(content), schema)
    parallel(one, list(SCHEMAS.items())[:4])


def test_json_object_is_an_object(client):
    def one(seed):
        r = client.chat.completions.create(model="tiny", messages=MSGS, response_format={"type": "json_object"},
                                           max_tokens=120, seed=seed, extra_body=FAST)
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    parallel(one, range(3))


def test_default_reasoning_budget_ends_analysis(client):
    schema = SCHEMAS["person"]
    r = client.chat.completions.create(model="tiny", messages=MSGS, response_format=schema_format("p", schema),
                                       max_tokens=300, seed=1)
    validate(json.loads(r.choices[0].message.content), schema)
    assert r.usage.completion_tokens_details.reasoning_tokens > 0


TOOL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                "unit": {"enum": ["c", "f"]}, "days": {"type": "integer",
                                                                                       "minimum": 1, "maximum": 7}},
               "required": ["city", "unit", "days"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "strict": True,
                                           "parameters": TOOL_SCHEMA}},
         {"type": "function", "function": {"name": "get_time", "strict": True, "parameters": {
             "type": "object", "properties": {"tz": {"type": "string", "format": "date"}}, "required": ["tz"]}}}]


@pytest.mark.parametrize("tool_choice", ["required", "auto", {"type": "function", "function": {"name": "get_weather"}}])
def test_strict_tool_calls_validate(client, tool_choice):
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    def one(seed):
        r = client.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, tool_choice=tool_choice,
                                           max_tokens=200, seed=seed, extra_body=FAST)
        m = r.choices[0].message
        if tool_choice != "auto":
            assert m.tool_calls and r.choices[0].finish_reason == "tool_calls"
        for call in m.tool_calls or []:
            validate(json.loads(call.function.arguments), schemas[call.function.name])
        return bool(m.tool_calls)
    calls = parallel(one, range(4))
    assert any(calls)


def test_strict_tool_calls_streamed(client):
    stream = client.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, tool_choice="required",
                                            max_tokens=200, seed=5, stream=True)
    args, name = "", None
    for chunk in stream:
        for c in chunk.choices:
            for tc in c.delta.tool_calls or []:
                name = tc.function.name or name
                args += tc.function.arguments or ""
    validate(json.loads(args), {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[name])


def test_responses_strict_tools(client):
    tools = [{"type": "function", "name": "get_weather", "strict": True, "parameters": TOOL_SCHEMA}]
    r = client.responses.create(model="tiny", input="Weather?", tools=tools, tool_choice="required",
                                max_output_tokens=200)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls
    validate(json.loads(calls[0].arguments), TOOL_SCHEMA)


def test_vllm_extra_fields(client):
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=80, extra_body={
        "guided_regex": "[a-c]{2,4}-[0-9]{3}", **FAST})
    import re
    assert re.fullmatch("[a-c]{2,4}-[0-9]{3}", r.choices[0].message.content)
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=80, extra_body={
        "structured_outputs": {"choice": ["yes", "no", "maybe"]}, **FAST})
    assert r.choices[0].message.content in ("yes", "no", "maybe")
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=80, extra_body={
        "guided_grammar": 'root ::= "x" [0-9]+ "y"', **FAST})
    assert re.fullmatch("x[0-9]+y", r.choices[0].message.content)
    r = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=80, extra_body={
        "structured_outputs": {"grammar": 'start: "a" NUM\nNUM: /[0-9]{1,3}/'}, **FAST})
    assert re.fullmatch("a[0-9]{1,3}", r.choices[0].message.content)


def test_completions_whole_output_constrained(client):
    schema = SCHEMAS["person"]
    for extra in ({"guided_json": schema}, {"structured_outputs": {"json": json.dumps(schema)}}):
        r = client.completions.create(model="tiny", prompt="Person:", max_tokens=100, extra_body=extra)
        validate(json.loads(r.choices[0].text), schema)


@pytest.mark.parametrize("body,param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"guided_regex": "([a-z"}, "guided_regex"),
    ({"structured_outputs": {"grammar": "root ::= ("}}, "structured_outputs.grammar"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_choice"),
])
def test_invalid_formats_are_400(client, server, body, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=8, extra_body=body)
    assert e.value.body["param"] == param
    status, _ = server.get("/health")
    assert status == 200
