"""The structured-output path of each popular client library against `orchid serve synthetic:tiny` (random
weights): the server constrains the answer, so whatever the weights, each library must hand back its parsed object
and that object must validate against the schema the library sent. The openai SDK's own `.parse` helpers are in
test_structured_outputs.py. LlamaIndex's OpenAI-like package needs openai<3, which the current releases of the
other libraries do not install with, so it runs in .venv-llamaindex (scripts/setup.sh makes it) through
llamaindex_driver.py, which reports what it parsed and the bodies it sent. Nothing here reaches the network:
tracing, telemetry and cost-map downloads are off, and the driver refuses to resolve any host but the loopback."""
import asyncio
import json
import os
import subprocess

import pydantic
import pytest
from structured_schemas import Weather, validate

from conftest import ROOT
from orchid_server import OrchidServer, openai_client

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LANGCHAIN_TRACING_V2", "false")

SERVED = "tiny"
QUESTION = "What is the weather in Rome? Answer in JSON."
# A small reasoning budget keeps the CPU runs short. Greedy, so every run writes the same JSON: sampled from the
# random weights, one answer in ~40 had a number like 499768e1286209...4011, valid JSON that Python reads as inf and
# pydantic dumps as null. Set through extra_body, it overrides the temperature a library sends of its own.
FAST = {"reasoning": {"max_tokens": 12}, "temperature": 0}
MAX_TOKENS = 100
LLAMAINDEX_PYTHON = ROOT / ".venv-llamaindex" / "bin" / "python"
LLAMAINDEX_DRIVER = ROOT / "tests" / "python" / "llamaindex_driver.py"


class Notes(pydantic.BaseModel):
    """For the JSON-object modes: the server guarantees an object, not the fields, so every field is optional
    and what the random weights write validates as long as it is a JSON object."""
    model_config = pydantic.ConfigDict(extra="allow")
    title: str | None = None


@pytest.fixture(scope="module")
def server():
    with OrchidServer("synthetic:tiny", "--served-model-name", SERVED, "--max-model-len", "4096") as s:
        yield s


@pytest.fixture
def sent(monkeypatch):
    """Every JSON request body sent through httpx or httpx2 (the openai SDK's transport), so a test can check
    which structured-output field a library chose."""
    import httpx
    import httpx2
    bodies = []
    for cls in (httpx.Client, httpx.AsyncClient, httpx2.Client, httpx2.AsyncClient):
        original = cls.send

        def send(self, request, *a, _original=original, **kw):
            if request.content:
                bodies.append(json.loads(request.content))
            return _original(self, request, *a, **kw)
        monkeypatch.setattr(cls, "send", send)
    return bodies


def async_openai(server):
    import openai
    return openai.AsyncOpenAI(base_url=server.url("/v1"), api_key="unused", max_retries=0, timeout=120)


def check_weather(parsed):
    assert isinstance(parsed, Weather)
    validate(json.loads(parsed.model_dump_json()), Weather.model_json_schema())


def assert_json_schema_sent(bodies):
    assert all(b.get("temperature") == 0 for b in bodies), [b.get("temperature") for b in bodies]
    formats = [b.get("response_format") or b.get("text", {}).get("format") for b in bodies]
    assert any(f and f.get("type") == "json_schema" for f in formats), formats


def test_openai_agents_chat_completions_and_responses(server, sent):
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                        set_tracing_disabled)
    set_tracing_disabled(True)
    settings = ModelSettings(max_tokens=MAX_TOKENS, extra_body=FAST)

    async def both():
        # One event loop for both runs: the async client's connections belong to the loop that opened them.
        client = async_openai(server)
        for model in (OpenAIChatCompletionsModel(model=SERVED, openai_client=client),
                      OpenAIResponsesModel(model=SERVED, openai_client=client)):
            agent = Agent(name="weather", instructions="Report the weather.", model=model, model_settings=settings,
                          output_type=Weather)
            check_weather((await Runner.run(agent, QUESTION)).final_output)
    asyncio.run(both())
    assert "response_format" in sent[0] and "text" in sent[-1]
    assert_json_schema_sent(sent)


def test_litellm_completion(server, sent):
    import litellm
    r = litellm.completion(model=f"openai/{SERVED}", api_base=server.url("/v1"), api_key="unused",
                           messages=[{"role": "user", "content": QUESTION}], response_format=Weather,
                           max_tokens=MAX_TOKENS, extra_body=FAST)
    check_weather(Weather.model_validate_json(r.choices[0].message.content))
    assert_json_schema_sent(sent)


def test_langchain_with_structured_output(server, sent):
    from langchain_openai import ChatOpenAI
    llm = ChatOpenAI(model=SERVED, base_url=server.url("/v1"), api_key="unused", max_tokens=MAX_TOKENS,
                     max_retries=0, extra_body=FAST)
    check_weather(llm.with_structured_output(Weather).invoke(QUESTION))
    assert_json_schema_sent(sent)


def test_instructor_json_modes(server, sent):
    import instructor
    messages = [{"role": "user", "content": QUESTION}]
    schema_client = instructor.from_openai(openai_client(server), mode=instructor.Mode.JSON_SCHEMA)
    check_weather(schema_client.chat.completions.create(model=SERVED, response_model=Weather, messages=messages,
                                                        max_tokens=MAX_TOKENS, max_retries=0, extra_body=FAST))
    assert_json_schema_sent(sent)
    object_client = instructor.from_openai(openai_client(server), mode=instructor.Mode.JSON)
    notes = object_client.chat.completions.create(model=SERVED, response_model=Notes, messages=messages,
                                                  max_tokens=MAX_TOKENS, max_retries=0, extra_body=FAST)
    assert isinstance(notes, Notes)
    assert sent[-1]["response_format"] == {"type": "json_object"}


def test_pydantic_ai_native_and_prompted_output(server, sent):
    from pydantic_ai import Agent, NativeOutput, PromptedOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    model = OpenAIChatModel(SERVED, provider=OpenAIProvider(openai_client=async_openai(server)))
    settings = {"max_tokens": MAX_TOKENS, "extra_body": FAST}
    native = Agent(model, output_type=NativeOutput(Weather), model_settings=settings, retries=0)
    check_weather(native.run_sync(QUESTION).output)
    assert_json_schema_sent(sent)
    prompted = Agent(model, output_type=PromptedOutput(Notes), model_settings=settings, retries=0)
    assert isinstance(prompted.run_sync(QUESTION).output, Notes)
    assert sent[-1]["response_format"] == {"type": "json_object"}


def test_llamaindex_structured_llm_and_function_calling_program(server):
    if not LLAMAINDEX_PYTHON.exists():
        pytest.fail(f"{LLAMAINDEX_PYTHON} not found: LlamaIndex (openai<3) has a venv of its own; run scripts/setup.sh")
    cfg = {"base_url": server.url("/v1"), "model": SERVED, "question": QUESTION, "max_tokens": MAX_TOKENS,
           "extra_body": FAST}
    res = subprocess.run([str(LLAMAINDEX_PYTHON), str(LLAMAINDEX_DRIVER), json.dumps(cfg)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.splitlines()[-1])
    assert out["blocked_hosts"] == [], res.stderr

    # should_use_structured_outputs: response_format json_schema, no tools.
    path = out["response_format"]
    (body,) = path["bodies"]
    assert_json_schema_sent([body])
    assert "tools" not in body
    assert path["type"] == "Weather"
    check_weather(Weather.model_validate(path["parsed"]))
    validate(path["parsed"], body["response_format"]["json_schema"]["schema"])

    # A function-calling model: FunctionCallingProgram's one strict tool, required, and no response_format.
    path = out["strict_tool"]
    (body,) = path["bodies"]
    assert "response_format" not in body and body["tool_choice"] == "required"
    (tool,) = body["tools"]
    assert tool["function"]["name"] == "Weather" and tool["function"]["strict"] is True
    assert path["type"] == "Weather"
    check_weather(Weather.model_validate(path["parsed"]))
    validate(path["parsed"], tool["function"]["parameters"])
