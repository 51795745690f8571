"""tools/train/make_data.py, the tiny model's training data: reproducible bytes, held-out questions kept out of
training, and every completion what openai-harmony (the oracle) parses back into the expected messages; and
tools/train/evaluate.py, which scores a model's greedy completions on the held-out split."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "train" / "make_data.py"
sys.path.insert(0, str(SCRIPT.parent))
import make_data  # noqa: E402

RETURN, CALL = 200002, 200012  # <|return|>, <|call|>


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("train_data")
    subprocess.run([sys.executable, str(SCRIPT), str(out), "--train", "280", "--test", "70", "--seed", "7"],
                   check=True, capture_output=True)
    return out


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_same_seed_same_bytes_other_seed_other_data(data, tmp_path):
    again, other = tmp_path / "again", tmp_path / "other"
    for out, seed in ((again, "7"), (other, "8")):
        subprocess.run([sys.executable, str(SCRIPT), str(out), "--train", "280", "--test", "70", "--seed", seed],
                       check=True, capture_output=True)
    for split in ("train", "test"):
        assert (again / f"{split}.jsonl").read_bytes() == (data / f"{split}.jsonl").read_bytes()
        assert (other / f"{split}.jsonl").read_bytes() != (data / f"{split}.jsonl").read_bytes()


def test_every_task_in_both_splits_and_held_out_questions_never_trained(data):
    train, test = rows(data / "train.jsonl"), rows(data / "test.jsonl")
    assert len(train) == 280 and len(test) == 70
    for split in (train, test):
        assert {r["task"] for r in split} == set(make_data.TASKS)
    assert not {r["key"] for r in test} & {r["key"] for r in train}
    assert len({r["key"] for r in test}) == len(test)


def test_completions_parse_back_with_openai_harmony(data):
    h, enc = make_data.harmony()
    start_assistant = enc.encode("<|start|>assistant", allowed_special="all")
    for r in rows(data / "train.jsonl") + rows(data / "test.jsonl"):
        assert r["prompt"][-len(start_assistant):] == start_assistant
        msgs = enc.parse_messages_from_completion_tokens(r["completion"], h.Role.ASSISTANT)
        assert msgs[0].channel == "analysis" and msgs[0].content[0].text
        last = msgs[-1]
        if "tool" in r["expect"]:
            assert r["completion"][-1] == CALL
            assert last.channel == "commentary" and last.recipient == f"functions.{r['expect']['tool']}"
            assert last.content_type == "<|constrain|>json"
            assert json.loads(last.content[0].text) == r["expect"]["arguments"]
        else:
            assert r["completion"][-1] == RETURN
            assert last.channel == "final" and last.content[0].text == r["expect"]["final"]
        # The whole conversation, prompt then completion, parses as Harmony too.
        enc.parse_messages_from_completion_tokens(r["prompt"] + r["completion"], None)


def test_checkable_answers_are_right(data):
    for r in rows(data / "train.jsonl") + rows(data / "test.jsonl"):
        question = json.loads(r["key"])[1]
        if r["task"] == "arithmetic":
            a, op, b = re.search(r"(\d+) ([-+*]) (\d+)", question).groups()
            want = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
            assert r["expect"]["final"] == str(want)
        elif r["task"] == "reverse":
            word = re.search(r"'(\w+)'", question).group(1)
            assert r["expect"]["final"] == word[::-1]
        elif r["task"] == "count_letters":
            letter, word = re.search(r"letter '?(\w)'? (?:appear in|in the word) '?(\w+)'?", question).groups()
            assert r["expect"]["final"] == str(word.count(letter))


def test_evaluator_scores_the_reference_fully_and_catches_each_kind_of_error(data):
    import evaluate
    h, enc = make_data.harmony()
    for r in rows(data / "test.jsonl"):
        s = evaluate.score(h, enc, r, r["completion"])
        assert s["well_formed"] and s["exact"]
        assert (s["tool_ok"] if "tool" in r["expect"] else s["final_ok"])
        # Cut before the end token: malformed, and so neither a right tool call nor a right answer.
        cut = evaluate.score(h, enc, r, r["completion"][:-1])
        assert not cut["well_formed"] and not cut["exact"]
        assert cut["tool_ok"] is False or cut["final_ok"] is False
    tool_row = next(r for r in rows(data / "test.jsonl") if r["task"] == "tool_call")
    wrong_args = dict(tool_row["expect"]["arguments"], city="Atlantis", country="Atlantis")
    msgs = enc.parse_messages_from_completion_tokens(tool_row["completion"], h.Role.ASSISTANT)
    bad = (h.Message.from_role_and_content(h.Role.ASSISTANT, json.dumps(wrong_args)).with_channel("commentary")
           .with_recipient(msgs[-1].recipient).with_content_type("<|constrain|>json"))
    ids = enc.render(msgs[0])[2:] + enc.render(bad)
    ids[-1] = evaluate.CALL
    s = evaluate.score(h, enc, tool_row, ids)
    assert s["well_formed"] and s["tool_valid"] and s["tool_ok"] is False  # schema-valid, not the expected


def test_evaluator_runs_orchid(data, tmp_path, orchid):
    from conftest import orchid_bin  # the orchid fixture has checked that it exists
    out = tmp_path / "report.json"
    subprocess.run([sys.executable, str(SCRIPT.parent / "evaluate.py"), "--data", str(data / "test.jsonl"),
                    "--orchid", orchid_bin(), "--model", "synthetic:tiny", "--limit", "2", "--json", str(out)],
                   check=True, capture_output=True)
    report = json.loads(out.read_text())
    assert report["samples"] == 2 and report["well_formed"][1] == 2  # random weights: any score, but scored


def test_prompts_are_what_orchid_renders_for_the_same_chat_request(data, orchid):
    """The model is trained on exactly the prompts the server will give it: each sample's OpenAI chat request
    (developer instructions, tools, earlier turns, a tool call and its result) rendered by `orchid render` on the
    sample's date is the sample's prompt, token for token."""
    checked = 0
    for r in rows(data / "test.jsonl"):
        if r["chat"] is None:  # a tool call's analysis sent back: no chat request says that
            continue
        request = dict(r["chat"]["request"], model="tiny")
        res = orchid("render", "-", "--model", "synthetic:tiny", "--date", r["chat"]["date"],
                     input=json.dumps(request))
        assert json.loads(res.stdout.strip().splitlines()[-1]) == r["prompt"], r["key"]
        checked += 1
    assert checked >= 50


def test_every_held_out_lookup_argument_is_also_trained(tmp_path):
    """A held-out call must be answerable by copying: its country or city is an argument of some training call
    (with two phrasings of 14 countries, the test split once reserved most population questions, and the model
    answered calls for countries it had never seen in one with a country it had)."""
    subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--train", "2000", "--test", "350"],
                   check=True, capture_output=True)
    def arguments(split):
        return {json.dumps(r["expect"]["arguments"]["country" if "country" in r["expect"]["arguments"] else "city"])
                for r in rows(tmp_path / f"{split}.jsonl") if r["task"] == "tool_call"}
    held_out, trained = arguments("test"), arguments("train")
    assert held_out and held_out <= trained, held_out - trained
