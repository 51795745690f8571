"""LlamaIndex's two structured-output paths against an orchid server, run by test_client_libraries.py with
.venv-llamaindex/bin/python: llama-index-llms-openai needs openai<3 and the main .venv has openai>=3, so the
library cannot be imported in the pytest process itself.

    llamaindex_driver.py '{"base_url": ..., "model": ..., "question": ..., "max_tokens": ..., "extra_body": ...}'

prints one JSON object: for each path the parsed object, its class name and the request bodies LlamaIndex sent,
and the hosts anything in this process tried to resolve other than the loopback one (nothing is let through)."""
import json
import socket
import sys

# Before LlamaIndex is imported: it may fetch NLTK data or a tiktoken encoding, and a test must never reach out.
# A failed download is only printed by some of those paths, so the attempts are recorded and reported.
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
blocked = []
_getaddrinfo = socket.getaddrinfo


def loopback_only(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else str(host)
    if name not in LOOPBACK:
        blocked.append(name)
        raise OSError(f"llamaindex_driver: no network in tests (tried to resolve {name})")
    return _getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = loopback_only

import httpx
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.prompts import PromptTemplate
from llama_index.llms.openai_like import OpenAILike
from structured_schemas import Weather


def recording_client(bodies):
    """An httpx client (openai<3's transport) that keeps each JSON body it sends."""
    def record(request):
        if request.content:
            bodies.append(json.loads(request.content))
    return httpx.Client(event_hooks={"request": [record]}, timeout=120)


def make_llm(cfg, bodies, **mode):
    return OpenAILike(model=cfg["model"], api_base=cfg["base_url"], api_key="unused", is_chat_model=True,
                      max_tokens=cfg["max_tokens"], max_retries=0, timeout=120,
                      additional_kwargs={"extra_body": cfg["extra_body"]}, http_client=recording_client(bodies),
                      **mode)


def main():
    cfg = json.loads(sys.argv[1])
    out = {}

    # should_use_structured_outputs: structured_predict sends the model as response_format json_schema.
    bodies = []
    llm = make_llm(cfg, bodies, should_use_structured_outputs=True)
    parsed = llm.as_structured_llm(Weather).chat([ChatMessage(role="user", content=cfg["question"])]).raw
    out["response_format"] = {"type": type(parsed).__name__, "parsed": parsed.model_dump(mode="json"),
                              "bodies": bodies}

    # A function-calling model: the default program is FunctionCallingProgram, one tool with the model's schema,
    # tool_choice required and, with strict=True, "strict": true (what makes orchid constrain the arguments).
    bodies = []
    llm = make_llm(cfg, bodies, is_function_calling_model=True, strict=True)
    parsed = llm.structured_predict(Weather, PromptTemplate(cfg["question"]))
    out["strict_tool"] = {"type": type(parsed).__name__, "parsed": parsed.model_dump(mode="json"), "bodies": bodies}

    out["blocked_hosts"] = blocked
    print(json.dumps(out))


if __name__ == "__main__":
    main()
