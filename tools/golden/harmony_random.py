"""Random Harmony inputs for the golden files: texts, JSON schemas and conversations.

Everything is drawn from a `random.Random`, so a seed reproduces the same cases. Conversations are built
in openai-harmony's JSON shape (dicts).
"""

from __future__ import annotations

import random
from typing import Any, Optional

START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL = 200006, 200007, 200008, 200005, 200003, 200002, 200012
STOPS = (RETURN, CALL, END)
# Ids that decode to an incomplete UTF-8 sequence (9552 = b" \xf0\x9f") or to lone continuation bytes.
PARTIAL_UTF8_IDS = (9552, 244, 9552, 31446)
# Unknown to the vocabulary (201088 and 200018 are left out on purpose: their names differ between
# openai-harmony and tiktoken's o200k_harmony, see docs/design.md).
UNKNOWN_IDS = (201089, 250000, 2**31 - 1, 2**32 - 1)
NON_STOP_SPECIALS = (START, MESSAGE, CHANNEL, CONSTRAIN, 199998, 199999, 200000, 200014, 200500, 201087)

WORDS = (
    "the weather in Tokyo is sunny today 2 + 2 = 4 Let's use the tool . , ? ! json code functions analysis "
    "final commentary assistant user to= answer: We need to call lookup_weather Provide answer User asks"
).split()
UNICODE = (
    "💖", "😊👋🏾", "👨‍👩‍👧‍👦", "🇺🇸", "naïve", "nai\u0308ve", "Müller", "Γειά σου", "Привет", "שלום", "مرحبا",
    "नमस्ते", "こんにちは", "안녕하세요", "你好", "\u00a0", "\u3000", "【6†L9-L11】", "…", "“quoted”", "e\u0301",
)
SPECIAL_LITERALS = ("<|end|>", "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|return|>",
                    "<|call|>", "<|endoftext|>")
SPACES = (" ", " ", " ", "  ", "\n", "\n\n", "\r\n", "\t", " \n", "   ")
NAMES = ("get_weather", "lookup", "search_docs", "f", "x_y_z", "run-code", "Ünïcode", "calc2", "a.b")


def text(rng: random.Random, max_words: int = 14, allow_empty: bool = True) -> str:
    if allow_empty and rng.random() < 0.04:
        return ""
    out = []
    for _ in range(rng.randint(1, max_words)):
        r = rng.random()
        if r < 0.65:
            out.append(rng.choice(WORDS))
        elif r < 0.85:
            out.append(rng.choice(UNICODE))
        elif r < 0.9:
            out.append(rng.choice(SPECIAL_LITERALS))
        else:
            out.append(str(rng.randint(0, 10**rng.randint(1, 7))))
        out.append(rng.choice(SPACES))
    s = "".join(out)
    return s if rng.random() < 0.5 else s.strip()


def json_args(rng: random.Random) -> str:
    keys = rng.sample(["location", "unit", "query", "topn", "id", "code", "q"], rng.randint(0, 3))
    parts = []
    for k in keys:
        v = rng.choice(['"San Francisco"', "10", "true", "null", '"' + rng.choice(UNICODE) + '"', "[1, 2]"])
        parts.append(f'"{k}": {v}' if rng.random() < 0.5 else f'"{k}":{v}')
    return "{" + ", ".join(parts) + "}"


# ---------------------------------------------------------------------------------------------------------
# JSON schemas


def default_value(rng: random.Random) -> Any:
    if rng.random() < 0.15:
        return rng.choice([rng.uniform(-1, 1), rng.uniform(-1e6, 1e6)]) * 10.0 ** rng.randint(-30, 30)
    return rng.choice([
        "celsius", "with \"quote\" and \\ backslash", "", 0, -1, 20, 2**40, 2**70, 1.5, 0.1, -0.0, 1e20, 1.5e-7,
        123456.789, 1e16, 1e17, 0.0001, 1e-5, True, False, None, ["x", "y"], {"a": 1, "b": [True, None]},
        "tab\there", "line\nbreak", "ctl\u0001", "ünï", ["a\u0002", "\"q\""], {"k": "v\\"},
    ])


def description(rng: random.Random) -> Any:
    return rng.choice([
        "A string", "The city and state, e.g. San Francisco, CA", "multi\nline\ndescription", "", "ends with newline\n",
        "crlf\r\nline", 'List of city and state, e.g. ["San Francisco, CA", "New York, NY"]', "numbers can happen too",
        "a oneof", "ünïcödé 💖", 5, None,
    ])


# Corners of the TypeScript rendering that random schemas reach too rarely.
TRICKY = (
    {"type": "array", "items": {"oneOf": [{"type": "string", "enum": ["a", "b\"q"], "default": "b\"q"},
                                          {"type": "number", "default": 1.5, "description": "n"}]}},
    {"oneOf": [{"type": "string", "enum": ["x"], "default": "x\u0001\n"}, {"type": "null", "nullable": True}]},
    {"type": "string", "default": ["ctl\u0001\u001f", "q\"", "back\\slash", "\u007f", "tab\t"]},
    {"type": "number", "default": {"k\n": "v\t", "n": [1e300, -1e-300, 5e-324, 0.1, 100.0, 1e15, 1e16]}},
    {"oneOf": [{"oneOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "boolean", "nullable": True}],
     "description": "nested oneOf", "default": None},
    {"type": ["string", "null"], "nullable": True, "default": "null"},
    {"type": "array", "items": {"type": ["string", "number"]}},
    {"type": "object", "properties": {"inner": {"type": "object", "description": "inner obj",
                                                "properties": {"b": {"type": "string"}}, "required": ["b"]}},
     "required": ["inner"]},
    {"type": "string", "enum": ["a", "b"], "default": "a", "nullable": True},
    {"oneOf": [{"type": "string", "description": "same"}, {"type": "number", "description": "same"}],
     "description": "same", "default": "d"},
    {"oneOf": [], "description": "empty oneOf"},
)


def decorate(rng: random.Random, s: dict) -> dict:
    extras = []
    if rng.random() < 0.35:
        extras.append(("description", description(rng)))
    if rng.random() < 0.12:
        extras.append(("title", rng.choice(["STRING", "Title", "", 7])))
    if rng.random() < 0.12:
        extras.append(("examples", rng.choice([["hello", "world"], [], [1, "two"], "notalist", ["ünï"]])))
    if rng.random() < 0.25:
        extras.append(("default", default_value(rng)))
    if rng.random() < 0.12:
        extras.append(("nullable", rng.choice([True, True, False, "yes"])))
    items = list(s.items()) + extras
    if rng.random() < 0.3:
        rng.shuffle(items)
    return dict(items)


def schema(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["string", "string", "number", "integer", "boolean", "array", "enum", "typelist", "other"]
    if depth < 3:
        kinds += ["object", "object", "oneOf"]
    kind = rng.choice(kinds)
    if rng.random() < 0.06:
        return TRICKY[rng.randrange(len(TRICKY))]
    if kind == "string":
        s: Any = {"type": "string"}
    elif kind == "enum":
        s = {"type": "string", "enum": rng.choice([["a", "b", "c"], ["celsius", "fahrenheit"], [], [1, "x"], [2]])}
    elif kind in ("number", "integer", "boolean"):
        s = {"type": kind}
        if rng.random() < 0.1:
            s["enum"] = [1, 2]
    elif kind == "array":
        s = {"type": "array"}
        if rng.random() < 0.8:
            s["items"] = schema(rng, depth + 1)
    elif kind == "typelist":
        s = {"type": rng.choice([["number", "string"], ["integer", "null"], ["string"], [], [1, "string"], [3]])}
    elif kind == "object":
        return object_schema(rng, depth)
    elif kind == "oneOf":
        variants = [schema(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        s = {"oneOf": variants}
    else:
        s = rng.choice([{}, {"anyOf": [{"type": "string"}]}, {"$ref": "#/x"}, {"const": 3}, {"enum": ["a"]},
                        {"type": "null"}, {"type": "foo"}, {"oneOf": "notalist", "type": "string"}, True, None, 3])
        if not isinstance(s, dict):
            return s
    return decorate(rng, s)


def object_schema(rng: random.Random, depth: int, root: bool = False) -> dict:
    props = {}
    for _ in range(rng.randint(0, 5 if depth < 2 else 2)):
        name = rng.choice(["location", "format", "string", "count", "unit", "opts", "with space", "ключ",
                           "dash-name", "x", "nested", "id", "q"]) + rng.choice(["", "", "2", "_b"])
        props[name] = schema(rng, depth + 1)
    s: dict = {"type": "object"}
    if rng.random() < 0.9:
        s["properties"] = props
    req = [k for k in props if rng.random() < 0.4]
    if rng.random() < 0.1:
        req.append("not_a_property")
    if req or rng.random() < 0.2:
        s["required"] = req
    if rng.random() < 0.2:
        s["description"] = description(rng)
    if not root and rng.random() < 0.5:
        s = decorate(rng, s)
    if rng.random() < 0.2:
        s = dict(reversed(list(s.items())))
    return s


def parameters(rng: random.Random) -> Optional[Any]:
    r = rng.random()
    if r < 0.15:
        return None
    if r < 0.2:
        return rng.choice([{}, {"type": "object", "properties": {}}, {"type": "object"}])
    return object_schema(rng, 0, root=True)


# ---------------------------------------------------------------------------------------------------------
# Conversations (openai-harmony's JSON shape)


def tool_namespace(rng: random.Random, name: str, n_tools: int) -> dict:
    ns: dict = {"name": name, "tools": []}
    if rng.random() < 0.5:
        ns["description"] = rng.choice(["Tools for things.", "line one\nline two\n", "", "crlf\r\nend\r",
                                         "trailing\n\n"])
    for i in range(n_tools):
        t = {"name": rng.choice(NAMES) + (str(i) if rng.random() < 0.5 else ""),
             "description": rng.choice(["Gets the location of the user.", "", "two\nlines", "ends\n", text(rng, 6)])}
        p = parameters(rng)
        if p is not None:
            t["parameters"] = p
        ns["tools"].append(t)
    return ns


def tools_map(rng: random.Random, builtin: dict, allow_functions: bool) -> dict:
    out = {}
    if rng.random() < 0.25:
        out["browser"] = builtin["browser"]
    if rng.random() < 0.2:
        out["python"] = builtin["python"]
    if allow_functions and rng.random() < 0.8:
        out["functions"] = tool_namespace(rng, "functions", rng.choice([0, 1, 1, 2, 3, 4]))
    if rng.random() < 0.15:
        key = rng.choice(["zeta", "alpha", "Functions", "ünï", "container"])
        # The key orders namespaces; the name is what gets printed. They usually agree.
        out[key] = tool_namespace(rng, key if rng.random() < 0.8 else "other", rng.randint(0, 2))
    return out


def system_content(rng: random.Random, builtin: dict) -> dict:
    s: dict = {"type": "system_content"}
    r = rng.random()
    if r < 0.7:
        s["model_identity"] = "You are ChatGPT, a large language model trained by OpenAI."
    elif r < 0.9:
        s["model_identity"] = rng.choice(["You are a helpful assistant.", "multi\nline identity", ""])
    if rng.random() < 0.85:
        s["reasoning_effort"] = rng.choice(["Low", "Medium", "High"])
    if rng.random() < 0.8:
        s["knowledge_cutoff"] = rng.choice(["2024-06", "2021-01", ""])
    if rng.random() < 0.6:
        s["conversation_start_date"] = rng.choice(["2025-06-28", "2021-01-01", "2026-02-29"])
    r = rng.random()
    if r < 0.75:
        s["channel_config"] = {"valid_channels": ["analysis", "commentary", "final"], "channel_required": True}
    elif r < 0.9:
        s["channel_config"] = {"valid_channels": rng.choice([["analysis", "final"], [], ["final"]]),
                               "channel_required": rng.random() < 0.5}
    if rng.random() < 0.45:
        s["tools"] = tools_map(rng, builtin, allow_functions=rng.random() < 0.1)
    return s


def developer_content(rng: random.Random, builtin: dict) -> dict:
    d: dict = {"type": "developer_content"}
    if rng.random() < 0.7:
        d["instructions"] = rng.choice(["Always respond in riddles", "Answer the user's questions like a robot.",
                                        text(rng, 10), "", "trailing newline\n"])
    if rng.random() < 0.7:
        d["tools"] = tools_map(rng, builtin, allow_functions=True)
    return d


def msg(role: str, content: Any, name: Optional[str] = None, **fields: Optional[str]) -> dict:
    m: dict = {"role": role, "name": name, "content": content if isinstance(content, list) else
               [{"type": "text", "text": content}]}
    for k in ("channel", "recipient", "content_type"):
        if fields.get(k) is not None:
            m[k] = fields[k]
    return m


CONTENT_TYPES = ("<|constrain|>json", "<|constrain|>json", "json", None, "<|constrain|> json", "<|constrain|>",
                 "code")


def turn(rng: random.Random, function_names: list) -> list:
    """One user turn and the assistant's answer, possibly with tool calls."""
    out = [msg("user", text(rng), name=rng.choice([None] * 9 + ["alice"]))]
    for _ in range(rng.randint(0, 4)):
        r = rng.random()
        if r < 0.35:
            out.append(msg("assistant", text(rng), channel="analysis"))
        elif r < 0.5:
            out.append(msg("assistant", text(rng), channel="commentary"))
        elif r < 0.8:
            fname = rng.choice(function_names or list(NAMES))
            out.append(msg("assistant", json_args(rng), channel="commentary", recipient=f"functions.{fname}",
                           content_type=rng.choice(CONTENT_TYPES)))
            result_fields = rng.choice([{"channel": "commentary", "recipient": "assistant"}, {}])
            out.append(msg("tool", json_args(rng), name=f"functions.{fname}", **result_fields))
        elif r < 0.9:
            action = rng.choice(["search", "open", "find"])
            out.append(msg("assistant", json_args(rng), channel="analysis", recipient=f"browser.{action}",
                           content_type=rng.choice([None, "<|constrain|>json", "json"])))
            out.append(msg("tool", text(rng), name=f"browser.{action}", channel="analysis", recipient="assistant"))
        else:
            out.append(msg("assistant", "print(1 + 1)", channel="analysis", recipient="python",
                           content_type=rng.choice(["code", None])))
            out.append(msg("tool", "2", name="python", channel="analysis", recipient="assistant"))
    if rng.random() < 0.75:
        out.append(msg("assistant", text(rng), channel="final", name=rng.choice([None] * 15 + ["bot"])))
    return out


def oddity(rng: random.Random) -> dict:
    """Rarely seen but valid messages (and two that openai-harmony rejects)."""
    return rng.choice([
        msg("assistant", text(rng), channel="final", recipient="all"),
        msg("assistant", text(rng)),
        msg("assistant", text(rng), channel="analysis", recipient="user"),
        msg("system", text(rng)),
        msg("developer", text(rng)),
        msg("user", [{"type": "text", "text": "part one "}, {"type": "text", "text": "part two"}]),
        msg("user", []),
        msg("tool", text(rng), name="functions.x", channel="commentary", recipient="assistant", content_type="json"),
        msg("assistant", text(rng), channel="weird channel"),
        msg("user", text(rng), name="with space"),
        msg("tool", "no name"),  # rejected: a tool message needs a name
        msg("user", [{"type": "system_content"}]),  # rejected: system content outside a system message
    ])


def conversation(rng: random.Random, builtin: dict) -> list:
    messages = []
    if rng.random() < 0.8:
        messages.append(msg("system", [system_content(rng, builtin)]))
    function_names: list = []
    if rng.random() < 0.6:
        dev = developer_content(rng, builtin)
        fns = dev.get("tools", {}).get("functions", {}).get("tools", [])
        function_names = [t["name"] for t in fns]
        messages.append(msg("developer", [dev]))
    for _ in range(rng.choice([0, 1, 1, 1, 2, 2, 3])):
        messages.extend(turn(rng, function_names))
    for _ in range(rng.choice([0] * 8 + [1, 2])):
        messages.insert(rng.randint(0, len(messages)), oddity(rng))
    return messages
