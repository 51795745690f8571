"""Expected streaming-parser results, token by token, from openai-harmony's StreamableParser.

strict_result(): openai-harmony with strict=True, up to the token where it raises.
lenient_result(): openai-harmony with strict=False; where it still raises, the repair that orchid's lenient
mode documents (docs/design.md, "Harmony: lenient parsing") is applied and openai-harmony continues on the
rest of the ids:
  - a token other than <|start|> between messages: a stop token is skipped; any other token opens a new
    message of the turn's role (a fresh parser with that role continues from the token);
  - a header that cannot be parsed at <|message|>: the header is read leniently (reference_header below) and
    its leftover words become the first text of the content; openai-harmony parses the content;
  - a stop token or the end of output inside a header when openai-harmony's own non-strict rule fails to
    decode it: the same rule, with the header read leniently.
reference_header() re-implements openai-harmony's header parse; every header openai-harmony accepts or
rejects in these cases is checked against it, so the reference cannot drift from the oracle.
"""

from __future__ import annotations

import re
from typing import Optional

from openai_harmony import HarmonyError, Role, StreamableParser

START, END, MESSAGE, RETURN, CALL = 200006, 200007, 200008, 200002, 200012
STOPS = (RETURN, CALL, END)
ROLES = ("user", "assistant", "system", "developer", "tool")
# Rust's char::is_whitespace (Unicode White_Space); Python's str.isspace also accepts U+001C..U+001F.
WHITE_SPACE = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {chr(c) for c in
                                                                                        range(0x2000, 0x200B)}
FFFD_BYTES = "\ufffd".encode()


def rust_trim(s: str) -> str:
    b, e = 0, len(s)
    while b < e and s[b] in WHITE_SPACE:
        b += 1
    while e > b and s[e - 1] in WHITE_SPACE:
        e -= 1
    return s[b:e]


class HeaderError(Exception):
    pass


def reference_header(text: str, role: Optional[str], parse_rt: bool, lenient: bool, fallback: str):
    """Returns (fields, leftover) where fields = (role, name, channel, recipient, content_type)."""
    channel = None
    idx = text.find("<|channel|>")
    if idx >= 0:
        after = text[idx + len("<|channel|>"):]
        end = 0
        while end < len(after) and after[end] not in WHITE_SPACE and after[end] != "<":
            end += 1
        if end == 0 and not lenient:
            raise HeaderError("channel marker present but no channel value")
        channel = after[:end] or None
        text = text[:idx] + after[end:]
    text = rust_trim(text)
    if "<|constrain|>" in text:
        text = rust_trim(text.replace("<|constrain|>", " <|constrain|>"))
    parts = [p for p in re.split("[ \t\n\x0c\r]+", text) if p]
    role_word = None
    if role is not None:
        r = role
    elif not parts:
        if not lenient:
            raise HeaderError("no role")
        r = fallback
    else:
        role_word = parts[0]
        if parts[0] in ROLES:
            r = parts[0]
        elif len(parts) > 1 or parts[0].startswith("to="):
            parts.pop(0)
            r = "tool"
        else:
            if not lenient:
                raise HeaderError("unknown role")
            parts.pop(0)
            r = "tool"
    if parts and parts[0] == r:
        parts.pop(0)
    recipient = ctype = None
    if parse_rt and parts:
        n = len(parts)
        last = parts.pop()
        if last.startswith("to="):
            recipient = last[3:]
        elif n == 1:
            recipient = last
        else:
            ctype = last
            raw = parts.pop()
            recipient = raw[3:] if raw.startswith("to=") else raw
    leftover = " ".join(parts) if parts else None
    return (r, role_word if r == "tool" else None, channel, recipient, ctype), leftover


def header_bytes(enc, ids) -> tuple:
    """(bytes with U+FFFD for unknown ids, whether any id was unknown)."""
    out, unknown = b"", False
    for t in ids:
        try:
            out += bytes(enc._inner.decode_bytes([t]))
        except Exception:  # an id outside the vocabulary
            out += FFFD_BYTES
            unknown = True
    return out, unknown


def strict_header(enc, ids, role):
    raw, unknown = header_bytes(enc, ids)
    if unknown:
        raise HeaderError("undecodable header")
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HeaderError("undecodable header")
    return reference_header(decoded, role, True, False, "assistant")


def lenient_header(enc, ids, role, parse_rt, fallback):
    raw, _ = header_bytes(enc, ids)
    return reference_header(raw.decode("utf-8", "replace"), role, parse_rt, True, fallback)


def message_row(m) -> list:
    d = m.to_dict()
    text = "".join(c["text"] for c in d["content"])
    return [d["role"], d.get("name"), d.get("channel"), d.get("recipient"), d.get("content_type"), text]


def role_of(name: Optional[str]):
    return None if name is None else Role(name)


class Run:
    """One openai-harmony parser plus, after a header repair, the fields that override its first message."""

    def __init__(self, enc, role: Optional[str], strict: bool):
        self.enc, self.strict = enc, strict
        self.parser = StreamableParser(enc, role_of(role), strict=strict)
        self.patch = None  # (fields, text prefix) for this parser's first message

    def rows(self) -> list:
        rows = [message_row(m) for m in self.parser.messages]
        if self.patch and rows:
            fields, prefix = self.patch
            rows[0] = list(fields) + [prefix + rows[0][5]]
        return rows

    def snapshot(self, delta_override=False, delta=None) -> list:
        p = self.parser
        sd = p.state_data
        d = delta if delta_override else p.last_content_delta
        if sd["state"] == "Content":
            h = sd["header"]
            row = ["C", d, h["author"]["role"], h["author"].get("name"), h["channel"], h["recipient"],
                   h["content_type"]]
            if self.patch and not p.messages:
                row[2:7] = list(self.patch[0])
            return row
        role = p.current_role
        return [sd["state"][0], d, None if role is None else role.value, None, None, None, None]

    def content(self) -> str:
        c = self.parser.current_content
        if self.patch and not self.parser.messages and self.parser.state_data["state"] == "Content":
            c = self.patch[1] + c
        return c


def packed(steps: list) -> dict:
    """Per-token steps as the list of deltas plus runs of identical state fields [first index, fields...]."""
    spans = []
    for i, st in enumerate(steps):
        if not spans or spans[-1][1:] != st[:1] + st[2:]:
            spans.append([i] + st[:1] + st[2:])
    return {"deltas": [st[1] for st in steps], "spans": spans}


def check_header(enc, before: dict, role_before, token: int, run: Run) -> None:
    """After an accepted <|message|>, the reference must agree with openai-harmony's header."""
    if before["state"] != "Header" or token != MESSAGE:
        return
    fields, leftover = strict_header(enc, before["header_tokens"], role_before)
    h = run.parser.state_data["header"]
    got = (h["author"]["role"], h["author"].get("name"), h["channel"], h["recipient"], h["content_type"])
    assert leftover is None and fields == got, (before, fields, got)


def strict_result(enc, ids: list, role: Optional[str]) -> dict:
    run = Run(enc, role, strict=True)
    steps, error = [], None
    for k, t in enumerate(ids):
        before, role_before = run.parser.state_data, run.parser.current_role
        try:
            run.parser.process(t)
        except HarmonyError as e:
            error = {"at": k, "message": str(e)}
            if before["state"] == "Header" and t == MESSAGE:  # the reference must reject it too
                try:
                    _, leftover = strict_header(enc, before["header_tokens"], role_before and role_before.value)
                    assert leftover is not None, (before, str(e))
                except HeaderError:
                    pass
            break
        check_header(enc, before, role_before and role_before.value, t, run)
        steps.append(run.snapshot())
    out = {**packed(steps), "error": error}
    if error is None:
        out["content"] = run.content()
        try:
            run.parser.process_eos()
            out["eos_step"] = run.snapshot()
        except HarmonyError as e:
            out["error"] = {"at": len(ids), "message": str(e)}
    out["messages"] = run.rows()
    return out


def lenient_result(enc, ids: list, role: Optional[str]) -> dict:
    fallback = role or "assistant"
    run = Run(enc, role, strict=False)
    done: list = []
    steps, recovered = [], []

    def header_as_text(header_ids, next_role) -> None:
        # openai-harmony's non-strict rule for a header ended without <|message|>, header read leniently.
        if next_role is not None and header_ids:
            fields, leftover = lenient_header(enc, header_ids, next_role, False, fallback)
            done.append(list(fields[:3]) + [None, None, leftover or ""])

    for k, t in enumerate(ids):
        before = run.parser.state_data
        role_before = run.parser.current_role.value if run.parser.current_role else None
        if before["state"] == "Header" and t in STOPS:
            recovered.append(k)
            n_before = len(run.parser.messages)
        override = {}
        try:
            run.parser.process(t)
            check_header(enc, before, role_before, t, run)
            if before["state"] == "Header" and t in STOPS and len(run.parser.messages) > n_before:
                fields, leftover = lenient_header(enc, before["header_tokens"], role_before, False, fallback)
                assert message_row(run.parser.messages[-1]) == list(fields[:3]) + [None, None, leftover or ""]
        except HarmonyError:
            state = before["state"]
            if state == "ExpectStart":
                recovered.append(k)
                if t not in STOPS:
                    done.extend(run.rows())
                    run = Run(enc, fallback, strict=False)
                    run.parser.process(t)
            elif state == "Header" and t == MESSAGE:
                recovered.append(k)
                fields, leftover = lenient_header(enc, before["header_tokens"], role_before, True, fallback)
                done.extend(run.rows())
                run = Run(enc, "assistant", strict=False)
                run.parser.process(MESSAGE)
                run.patch = (fields, leftover or "")
                override = {"delta_override": True, "delta": leftover}
            elif state == "Header" and t in STOPS:
                done.extend(run.rows())
                header_as_text(before["header_tokens"], role_before)
                run = Run(enc, None, strict=False)
            else:
                raise
        steps.append(run.snapshot(**override))
    out = {**packed(steps), "content": run.content()}
    before = run.parser.state_data
    role_before = run.parser.current_role.value if run.parser.current_role else None
    try:
        run.parser.process_eos()
    except HarmonyError:
        recovered.append(len(ids))
        done.extend(run.rows())
        header_as_text(before["header_tokens"], role_before)
        run = Run(enc, None, strict=False)
    out["eos_step"] = run.snapshot()
    out["messages"] = done + run.rows()
    out["recovered"] = recovered
    return out
