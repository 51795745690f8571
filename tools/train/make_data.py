#!/usr/bin/env python3
"""Training and held-out data for orchid's tiny Harmony model: conversations built from templates whose answers
can be checked, rendered to tokens by openai-harmony (the oracle for the format), one JSON object per line.

  tools/train/make_data.py OUT_DIR [--train N] [--test N] [--seed S]

Writes OUT_DIR/train.jsonl and OUT_DIR/test.jsonl. Each line is one completion point:
  task         arithmetic | count_letters | reverse | units | tool_call | tool_answer | multi_turn
  prompt       token ids the model reads (rendered as the server renders a request: analysis of finished turns
               dropped), ending with <|start|>assistant
  completion   token ids it is trained to write: its analysis, then a final answer ending with <|return|> or a
               tool call (commentary, to=functions.NAME, <|constrain|>json) ending with <|call|>
  expect       what a correct completion holds: {"final": TEXT} or {"tool": NAME, "arguments": {...}}
  key          the sample's question (task, user text, and for tools the arguments and result), as JSON
  chat         {"date", "request"}: the same prompt as an OpenAI chat request (reasoning_effort, messages,
               tools) that orchid's server renders into exactly `prompt` on that date; null where a chat
               request cannot say it (a tool call's analysis sent back)
The same seed gives the same bytes. A question of the test split is never asked in the training split (the
test questions are drawn first, distinct, and reserved; training repeats questions under other system and
developer messages).
"""
import argparse
import json
import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "gpt-oss-tokenizer"

WORDS = ("apple banana cherry planet orange window garden silver rocket butter yellow marble castle dragon "
         "forest pencil kitten summer winter spring autumn bridge candle rabbit tomato potato lemon violet "
         "basket button circle dinner engine finger hammer island jacket kettle ladder mirror needle "
         "parrot pepper pocket puzzle ribbon saddle shadow spider temple ticket tunnel velvet wallet wizard "
         "strawberry bookkeeper mississippi balloon coffee committee letter success address bottle "
         "anchor bakery beacon blanket breeze cabin carpet cereal chimney cloud copper cotton crystal desert "
         "dolphin eagle falcon feather festival garlic glacier guitar harbor helmet honey jungle lantern "
         "magnet meadow melody monkey mountain napkin ocean orchard oyster paddle palace pillow pirate "
         "planet pumpkin quarter rainbow river saucer scarf seagull shovel signal sugar sunset thunder "
         "tiger turtle umbrella valley village walnut whistle zebra").split()
# Many names, so that a lookup's argument is copied from the question rather than remembered: with 14
# countries and two phrasings the held-out split reserved 20 of the 28 population questions and the model
# never saw most countries in a call (it answered "Kenya" for France).
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Delhi", "Quito", "Rome", "Seoul", "Nairobi", "Madrid",
          "Hanoi", "Dublin", "Athens", "Lisbon", "Vienna", "Prague", "Sydney", "Toronto", "Santiago", "Berlin",
          "Warsaw", "Bogota", "Manila", "Jakarta", "Bangkok", "Havana", "Dakar", "Accra", "Helsinki",
          "Stockholm", "Budapest", "Montreal", "Chicago", "Denver", "Mumbai", "Karachi", "Lagos", "Kyiv",
          "Riga", "Tunis", "Beirut", "Amman", "Doha", "Muscat", "Tbilisi", "Zurich", "Geneva", "Porto",
          "Seville"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy"]
COUNTRIES = {"France": 68, "Japan": 124, "Peru": 34, "Norway": 6, "Egypt": 114, "Chile": 20, "Kenya": 56,
             "Spain": 48, "Greece": 10, "Portugal": 10, "Austria": 9, "Canada": 41, "Ireland": 5, "Italy": 59,
             "Germany": 84, "Poland": 37, "Colombia": 52, "Brazil": 212, "Mexico": 130, "Argentina": 46,
             "Nigeria": 229, "Ghana": 34, "Senegal": 18, "Morocco": 38, "Tunisia": 12, "Turkey": 85,
             "Iran": 91, "Iraq": 46, "Jordan": 11, "India": 1451, "Pakistan": 251, "Bangladesh": 174,
             "Vietnam": 101, "Thailand": 72, "Indonesia": 283, "Philippines": 116, "Australia": 27,
             "Sweden": 11, "Finland": 6, "Denmark": 6, "Hungary": 10, "Romania": 19, "Ukraine": 38,
             "Belgium": 12, "Switzerland": 9, "Cuba": 11}
EFFORTS = ("low", "medium", "high")
INSTRUCTIONS = ["Answer briefly.", "Be concise and exact.", "Reply with the answer only.", None]

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]},
}
POPULATION_TOOL = {
    "name": "get_population",
    "description": "Population of a country, in millions.",
    "parameters": {"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"]},
}


def harmony():
    if "TIKTOKEN_ENCODINGS_BASE" not in os.environ and FIXTURES.is_dir():
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(FIXTURES)  # never download the vocabulary
    import openai_harmony as h
    return h, h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)


# ---------------------------------------------------------------- tasks: (question, reasoning, answer)
def column_sum(a, b):
    """a + b (0..99 each) worked digit by digit, the way a small model can learn it from one-digit facts."""
    units = a % 10 + b % 10
    carry = units // 10
    tens = a // 10 + b // 10 + carry
    steps = f"Units: {a % 10} + {b % 10} = {units}" + (", carry 1" if carry else "") + ". "
    steps += f"Tens: {a // 10} + {b // 10}" + (" + 1" if carry else "") + f" = {tens}. "
    return steps + f"{a} + {b} = {a + b}."


def column_difference(a, b):
    """a - b (0..99 each) digit by digit, the larger number first."""
    big, small = max(a, b), min(a, b)
    borrow = big % 10 < small % 10
    units = big % 10 + (10 if borrow else 0) - small % 10
    tens = big // 10 - (1 if borrow else 0) - small // 10
    steps = "" if a >= b else f"{b} is larger: {a} - {b} = -({b} - {a}). "
    steps += f"Units: {big % 10 + (10 if borrow else 0)} - {small % 10} = {units}" + (
        ", borrow 1" if borrow else "") + ". "
    steps += f"Tens: {big // 10}" + (" - 1" if borrow else "") + f" - {small // 10} = {tens}. "
    return steps + f"{a} - {b} = {a - b}."


def product(a, b):
    """a * b (0..20 each) as a * tens + a * units of b."""
    if b < 10:
        return f"{a} * {b} = {a * b}."
    return f"{a} * {b} = {a} * 10 + {a} * {b - 10} = {a * 10} + {a * (b - 10)} = {a * b}."


def arithmetic(rng):
    op = rng.choice("+-*")
    a, b = (rng.randint(0, 99), rng.randint(0, 99)) if op != "*" else (rng.randint(0, 20), rng.randint(0, 20))
    value = a + b if op == "+" else a - b if op == "-" else a * b
    why = column_sum(a, b) if op == "+" else column_difference(a, b) if op == "-" else product(a, b)
    q = rng.choice(["What is {a} {op} {b}?", "Compute {a} {op} {b}.", "{a} {op} {b} = ?"]).format(a=a, op=op, b=b)
    return q, why, str(value)


def count_letters(rng):
    word = rng.choice(WORDS)
    letter = rng.choice(sorted(set(word)))
    n = word.count(letter)
    q = rng.choice(["How many times does the letter '{l}' appear in '{w}'?",
                    "Count the letter {l} in the word {w}."]).format(l=letter, w=word)
    spelled = " ".join(word)
    return q, f"Spell it: {spelled}. The letter {letter} appears {n} time{'s' if n != 1 else ''}.", str(n)


def reverse(rng):
    word = rng.choice(WORDS)
    q = rng.choice(["Reverse the word '{w}'.", "Write '{w}' backwards."]).format(w=word)
    return q, f"Letters of {word} from the end: {' '.join(reversed(word))}.", word[::-1]


def units(rng):
    kind = rng.randrange(4)
    n = rng.randint(1, 30)
    if kind == 0:
        return f"How many minutes are in {n} hours?", f"{n} hours x 60 = {n * 60} minutes.", str(n * 60)
    if kind == 1:
        return f"How many meters are in {n} kilometers?", f"{n} km x 1000 = {n * 1000} m.", str(n * 1000)
    if kind == 2:
        return f"How many seconds are in {n} minutes?", f"{n} minutes x 60 = {n * 60} seconds.", str(n * 60)
    return f"How many centimeters are in {n} meters?", f"{n} m x 100 = {n * 100} cm.", str(n * 100)


SIMPLE_TASKS = {"arithmetic": arithmetic, "count_letters": count_letters, "reverse": reverse, "units": units}


# ---------------------------------------------------------------- conversations
class Builder:
    def __init__(self, h, enc, rng):
        self.h, self.enc, self.rng = h, enc, rng

    def header(self, tools):
        """System and developer messages; also starts self.chat, the same conversation as an OpenAI chat
        request (what a client sends the server for it)."""
        h, rng = self.h, self.rng
        effort_name = rng.choice(EFFORTS)
        effort = {"low": h.ReasoningEffort.LOW, "medium": h.ReasoningEffort.MEDIUM,
                  "high": h.ReasoningEffort.HIGH}[effort_name]
        date = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        system = h.SystemContent.new().with_reasoning_effort(effort).with_conversation_start_date(date)
        msgs = [h.Message.from_role_and_content(h.Role.SYSTEM, system)]
        instructions = rng.choice(INSTRUCTIONS)
        self.chat = {"date": date, "request": {"reasoning_effort": effort_name, "messages": []}}
        self.prompt_open = True
        if instructions:
            self.chat["request"]["messages"].append({"role": "developer", "content": instructions})
        if tools:
            self.chat["request"]["tools"] = [{"type": "function", "function": t} for t in tools]
        if tools or instructions:
            dev = h.DeveloperContent.new()
            if instructions:
                dev = dev.with_instructions(instructions)
            if tools:
                dev = dev.with_function_tools([h.ToolDescription.new(t["name"], t["description"],
                                                                     parameters=t["parameters"]) for t in tools])
            msgs.append(h.Message.from_role_and_content(h.Role.DEVELOPER, dev))
        return msgs

    def chat_add(self, message):
        if self.chat is not None and self.prompt_open:
            self.chat["request"]["messages"].append(message)

    def end_prompt(self):
        """What follows is what the model writes: it is not part of the chat request."""
        self.prompt_open = False

    def user(self, text):
        self.chat_add({"role": "user", "content": text})
        return self.h.Message.from_role_and_content(self.h.Role.USER, text)

    def analysis(self, text):
        return self.h.Message.from_role_and_content(self.h.Role.ASSISTANT, text).with_channel("analysis")

    def final(self, text):
        self.chat_add({"role": "assistant", "content": text})
        return self.h.Message.from_role_and_content(self.h.Role.ASSISTANT, text).with_channel("final")

    def call(self, name, args):
        self.chat_add({"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
        return (self.h.Message.from_role_and_content(self.h.Role.ASSISTANT, json.dumps(args))
                .with_channel("commentary").with_recipient(f"functions.{name}")
                .with_content_type("<|constrain|>json"))

    def tool_result(self, name, result):
        self.chat_add({"role": "tool", "tool_call_id": "call_1", "content": json.dumps(result)})
        h = self.h
        return (h.Message.from_author_and_content(h.Author.new(h.Role.TOOL, f"functions.{name}"),
                                                  json.dumps(result))
                .with_recipient("assistant").with_channel("commentary"))

    def render(self, history, targets):
        """prompt tokens as the server renders history; completion = the target messages' tokens."""
        h, enc = self.h, self.enc
        keep = h.RenderConversationConfig(auto_drop_analysis=False)
        full = enc.render_conversation_for_training(h.Conversation.from_messages(history + targets), keep)
        prefix = enc.render_conversation_for_completion(h.Conversation.from_messages(history), h.Role.ASSISTANT,
                                                        keep)
        if full[:len(prefix)] != prefix:
            raise RuntimeError("harmony rendered the history differently inside the whole conversation")
        prompt = enc.render_conversation_for_completion(h.Conversation.from_messages(history), h.Role.ASSISTANT)
        return prompt, full[len(prefix):]


def sample(b, task, rng):
    """One completion point of a task: (key, history, targets, expect)."""
    if task in SIMPLE_TASKS:
        q, why, answer = SIMPLE_TASKS[task](rng)
        tools = [WEATHER_TOOL] if rng.random() < 0.3 else []  # tools offered but not needed
        history = b.header(tools) + [b.user(q)]
        b.end_prompt()
        return (task, q), history, [b.analysis(why), b.final(answer)], {"final": answer}
    if task == "multi_turn":
        first = rng.choice(sorted(SIMPLE_TASKS))
        q1, why1, a1 = SIMPLE_TASKS[first](rng)
        second = rng.choice(sorted(SIMPLE_TASKS))
        q2, why2, a2 = SIMPLE_TASKS[second](rng)
        history = b.header([]) + [b.user(q1), b.analysis(why1), b.final(a1), b.user(q2)]
        b.end_prompt()
        return (task, q1, q2), history, [b.analysis(why2), b.final(a2)], {"final": a2}
    # tool_call / tool_answer: a lookup only a tool can answer
    if rng.random() < 0.5:
        city = rng.choice(CITIES)
        args = {"city": city}
        # Fahrenheit only when the question asks for it: an argument the prompt does not imply is a coin flip
        # no model can learn.
        if rng.random() < 0.3:
            args["unit"] = "fahrenheit"
            q = rng.choice(["What's the weather in {c} in Fahrenheit?",
                            "Tell me the current weather in {c}, in degrees Fahrenheit."]).format(c=city)
        else:
            q = rng.choice(["What's the weather in {c}?", "Is it warm in {c} right now?",
                            "Tell me the current weather in {c}."]).format(c=city)
        tool, why = WEATHER_TOOL, f"The user wants the current weather in {city}; call get_weather."
        temp = rng.randint(-10, 35)
        unit = args.get("unit", "celsius")
        value = temp if unit == "celsius" else round(temp * 9 / 5 + 32)
        result = {"city": city, "temperature": value, "unit": unit, "condition": rng.choice(CONDITIONS)}
        answer = f"It is {value} degrees {unit} and {result['condition']} in {city}."
    else:
        country = rng.choice(sorted(COUNTRIES))
        args = {"country": country}
        q = rng.choice(["What is the population of {c}?", "How many people live in {c}?",
                        "How many inhabitants does {c} have?", "What's the population of {c} today?",
                        "Roughly how many people are there in {c}?"]).format(c=country)
        tool, why = POPULATION_TOOL, f"Population of {country}: use get_population."
        result = {"country": country, "millions": COUNTRIES[country]}
        answer = f"{country} has about {COUNTRIES[country]} million people."
    tools = [WEATHER_TOOL, POPULATION_TOOL] if rng.random() < 0.5 else [tool]
    history = b.header(tools) + [b.user(q)]
    if task == "tool_call":
        b.end_prompt()
        return ((task, q, json.dumps(args)), history, [b.analysis(why), b.call(tool["name"], args)],
                {"tool": tool["name"], "arguments": args})
    # The call's analysis stays in the prompt when the client sends it back (Responses reasoning items) and
    # is missing when it does not (Chat Completions): both, so the model answers either way.
    keep_analysis = rng.random() < 0.5
    history = history + ([b.analysis(why)] if keep_analysis else []) + [b.call(tool["name"], args),
                                                                       b.tool_result(tool["name"], result)]
    if keep_analysis:
        b.chat = None  # not a chat request: chat messages carry no reasoning
    b.end_prompt()
    return ((task, q, json.dumps(args), json.dumps(result), keep_analysis), history,
            [b.analysis("The tool answered; report it."), b.final(answer)], {"final": answer})


TASKS = ["arithmetic", "count_letters", "reverse", "units", "tool_call", "tool_answer", "multi_turn"]
# The training split's task order: the held-out bars' weakest tasks (column arithmetic, copying a lookup's
# argument and result) twice as often; the test split takes TASKS in turn (an equal share each).
TRAIN_TASKS = TASKS + ["arithmetic", "tool_call", "tool_answer"]


def generate(n_train, n_test, seed):
    h, enc = harmony()
    rng = random.Random(seed)
    b = Builder(h, enc, rng)
    splits = {"test": [], "train": []}
    reserved = set()
    for split, n in (("test", n_test), ("train", n_train)):  # test first: its questions are reserved
        tries = 0
        while len(splits[split]) < n:
            tries += 1
            if tries > 100 * n + 1000:
                raise RuntimeError(f"could not draw {n} {split} samples (the test split is too large)")
            order = TASKS if split == "test" else TRAIN_TASKS
            task = order[len(splits[split]) % len(order)]
            key, history, targets, expect = sample(b, task, rng)
            if key in reserved:
                continue
            if split == "test":
                reserved.add(key)
            prompt, completion = b.render(history, targets)
            splits[split].append({"task": task, "key": json.dumps(key), "prompt": prompt, "completion": completion,
                                  "expect": expect, "chat": b.chat})
    return splits


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--train", type=int, default=20000)
    ap.add_argument("--test", type=int, default=350)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    splits = generate(a.train, a.test, a.seed)
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        with open(out / f"{split}.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r, separators=(",", ":")) + "\n")
        print(f"{split}: {len(rows)} samples -> {out / (split + '.jsonl')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
