"""Random model-like completions for the parser golden cases: token id lists, mostly well formed, some damaged
(missing <|start|> or <|message|>, odd headers, undecodable bytes, unknown ids), truncated, or random."""

from __future__ import annotations

import random

from harmony_random import (CALL, CHANNEL, CONSTRAIN, END, MESSAGE, NAMES, NON_STOP_SPECIALS, PARTIAL_UTF8_IDS,
                            RETURN, START, STOPS, UNKNOWN_IDS, json_args, text)


MALFORMATIONS = ("no_message_token", "no_start", "stray_text", "double_stop", "empty_channel", "unknown_role",
                 "empty_header", "leftover", "bad_utf8_header", "unknown_id_header", "start_in_header",
                 "double_channel", "text_before_header", "channel_space_value")


def content_ids(rng: random.Random, enc, s: str) -> list:
    ids = enc.encode(s, disallowed_special=())
    for _ in range(rng.choice([0] * 6 + [1, 1, 2, 3])):
        pool = rng.choice([PARTIAL_UTF8_IDS, PARTIAL_UTF8_IDS, UNKNOWN_IDS, NON_STOP_SPECIALS])
        ids.insert(rng.randint(0, len(ids)), rng.choice(pool))
    return ids


def model_message(rng: random.Random, enc, with_role: bool) -> tuple:
    """Header ids (without <|start|>), content ids and stop id of one model-like message."""
    kind = rng.choice(["analysis", "analysis", "final", "final", "preamble", "call", "call", "browser", "python",
                       "tool_result"])
    role_word = "assistant"
    channel, recipient, ctype = {"analysis": "analysis", "final": "final", "preamble": "commentary"}.get(
        kind, "commentary"), None, None
    body = text(rng, 20)
    stop = {"final": RETURN}.get(kind, END)
    if kind == "call":
        recipient, body, stop = f"functions.{rng.choice(NAMES)}", json_args(rng), CALL
        ctype = rng.choice(["constrain", "constrain_adjacent", "json", None])
    elif kind == "browser":
        channel = rng.choice(["analysis", "commentary"])
        recipient, body, stop = f"browser.{rng.choice(['search', 'open', 'find'])}", json_args(rng), CALL
    elif kind == "python":
        channel, recipient, body, stop = "analysis", "python", "import math\nprint(math.pi)", CALL
        ctype = rng.choice(["code", None])
    elif kind == "tool_result":
        role_word, recipient = rng.choice(["browser.search", "functions.lookup", "python"]), "assistant"
        body = json_args(rng)
    if rng.random() < 0.15 and stop == RETURN:
        stop = END
    header = []
    if with_role:
        header += enc.encode(role_word if kind != "tool_result" or rng.random() < 0.9 else role_word + " ")
    to_part = enc.encode(f" to={recipient}") if recipient else []
    channel_part = [CHANNEL] + enc.encode(channel)
    ct_part = []
    if ctype == "constrain":
        ct_part = enc.encode(" ") + [CONSTRAIN] + enc.encode("json")
    elif ctype == "constrain_adjacent":
        ct_part = [CONSTRAIN] + enc.encode("json")
    elif ctype:
        ct_part = enc.encode(f" {ctype}")
    if rng.random() < 0.5 or kind == "tool_result":
        header += to_part + channel_part + ct_part
    else:
        header += channel_part + to_part + ct_part
    return header, content_ids(rng, enc, body), stop


def malform(rng: random.Random, enc, parts: list, how: str) -> None:
    """Damages one message of `parts` ([start, header, content, stop] lists) in place."""
    i = rng.randrange(len(parts))
    p = parts[i]
    if how == "no_message_token":
        p["message"] = []
    elif how == "no_start" and p["start"]:
        p["start"] = []
    elif how == "stray_text":
        p["stop"] = p["stop"] + enc.encode(text(rng, 5, allow_empty=False), disallowed_special=())
    elif how == "double_stop":
        p["stop"] = p["stop"] + [rng.choice(STOPS)]
    elif how == "empty_channel" and CHANNEL in p["header"]:
        j = p["header"].index(CHANNEL)
        p["header"] = p["header"][: j + 1]
    elif how == "unknown_role":
        p["start"] = [START]
        p["header"] = enc.encode(rng.choice(["foo", "functions.x", "Assistant", "to=bar", "tool"])) + \
            (p["header"][1:] if rng.random() < 0.5 else [])
    elif how == "empty_header":
        p["start"], p["header"] = [START], []
    elif how == "leftover":
        p["header"] = p["header"] + enc.encode(rng.choice([" extra words here", " a b c", " to=x json more"]))
    elif how == "bad_utf8_header":
        p["header"].insert(rng.randint(0, len(p["header"])), rng.choice(PARTIAL_UTF8_IDS))
    elif how == "unknown_id_header":
        p["header"].insert(rng.randint(0, len(p["header"])), rng.choice(UNKNOWN_IDS))
    elif how == "start_in_header":
        p["header"].insert(rng.randint(0, len(p["header"])), START)
    elif how == "double_channel":
        p["header"] = p["header"] + [CHANNEL] + enc.encode(rng.choice(["final", "analysis"]))
    elif how == "text_before_header" and i == 0:
        p["start"] = enc.encode(rng.choice(["I must refuse", "... Let's use the tool.", "<|channel|>analysis Hi",
                                            ""]), disallowed_special=()) + [rng.choice(STOPS)] + [START] + \
            enc.encode("assistant")
    elif how == "channel_space_value" and CHANNEL in p["header"]:
        j = p["header"].index(CHANNEL)
        p["header"].insert(j + 1, 220)  # " ": the channel value ends before it starts


def completion(rng: random.Random, enc) -> tuple:
    """(ids, role) of a model-like completion: mostly well formed, sometimes damaged or truncated."""
    r = rng.random()
    role = "assistant" if r < 0.8 else (None if r < 0.95 else rng.choice(["user", "tool", "assistant"]))
    parts = []
    for k in range(rng.choice([1, 1, 2, 2, 3, 4, 5])):
        first_given = k == 0 and role is not None and not (r >= 0.95 and rng.random() < 0.5)
        header, content, stop = model_message(rng, enc, with_role=not first_given)
        parts.append({"start": [] if first_given else [START], "header": header, "message": [MESSAGE],
                      "content": content, "stop": [stop]})
    if rng.random() < 0.35:
        for _ in range(rng.randint(1, 3)):
            malform(rng, enc, parts, rng.choice(MALFORMATIONS))
    if rng.random() < 0.3:
        parts[-1]["stop"] = []
    ids = [t for p in parts for key in ("start", "header", "message", "content", "stop") for t in p[key]]
    if rng.random() < 0.25 and ids:
        ids = ids[: rng.randint(0, len(ids))]
    return ids, role


def garbage(rng: random.Random, enc) -> tuple:
    """A random id sequence over an alphabet biased towards structure tokens."""
    alphabet = [START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL] * 3 + list(PARTIAL_UTF8_IDS) + \
        list(UNKNOWN_IDS) + list(NON_STOP_SPECIALS) + enc.encode(" assistant analysis final to=functions.f json "
                                                                 "hello world browser.search user tool 💖")
    ids = [rng.choice(alphabet) for _ in range(rng.randint(0, 40))]
    return ids, rng.choice(["assistant", "assistant", None, "user"])


# ---------------------------------------------------------------------------------------------------------
# UTF-8 byte strings (for the parser's validation and lossy decoding)

UTF8_PIECES = (b"a", b" ", "\u00e9".encode(), "\u20ac".encode(), "\U0001F496".encode(), b"\xf0\x9f", b"\xf0\x9f\x92",
               b"\xe2\x82", b"\xc3", b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\xa0\x80",
               b"\xed\xa0\x80", b"\xed\x9f\xbf", b"\xf4\x90\x80\x80", b"\xf4\x8f\xbf\xbf", b"\xf5", b"\xff", b"\xfe",
               b"\xf0\x90\x80", b"\xf8\x88\x80\x80\x80", b"\x00", b"\x7f")


def utf8_bytes(rng: random.Random) -> bytes:
    return b"".join(rng.choice(UTF8_PIECES) for _ in range(rng.randint(0, 8)))


# Headers made of random pieces: role words, tool names, recipients, channels, content types, and the
# whitespace characters on which Rust's trim (Unicode) and split (ASCII only) disagree with Python's.
HEADER_WORDS = ("assistant", "user", "tool", "system", "to=functions.f", "to=assistant", "to=", "browser.search",
                "functions.get_weather", "json", "code", "<|constrain|>json", "<|constrain|>", "final", "analysis",
                "commentary", "x", "Assistant", "all", "to=all", "<", "<|start|>")
HEADER_SPACES = (" ", " ", "", "  ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2003",
                 "\u3000", "\u200b")


def header_case(rng: random.Random, enc) -> tuple:
    pieces = []
    for _ in range(rng.randint(0, 5)):
        r = rng.random()
        if r < 0.2:
            pieces.append([CHANNEL])
            if rng.random() < 0.85:
                pieces.append(enc.encode(rng.choice(["analysis", "final", "commentary", "final<x", "fin\u3000al",
                                                     "a\x1cb"]), disallowed_special=()))
        elif r < 0.3:
            pieces.append([CONSTRAIN])
        else:
            pieces.append(enc.encode(rng.choice(HEADER_SPACES) + rng.choice(HEADER_WORDS) + rng.choice(HEADER_SPACES),
                                     disallowed_special=()))
    header = [t for p in pieces for t in p]
    role = rng.choice(["assistant", None, None])
    ids = ([] if role else [START]) + header + [MESSAGE] + enc.encode(text(rng, 4), disallowed_special=()) + [rng.choice(STOPS)]
    return ids, role
