"""`orchid generate` with a text prompt: encoded with the model's tokenizer (tiktoken's o200k_harmony is the
oracle), the generated text printed through the incremental detokenizer, and stop strings matched on it."""
import json

import pytest

MODEL = "synthetic:tiny"
TEXT = "The quick brown fox jumps over the lazy dog. Ünïcödé, 你好, and an emoji: \U0001F496"
HARMONY = "<|start|>user<|message|>hello world<|end|><|start|>assistant"
GREEDY = ["--max-tokens", "24", "--temperature", "0", "--ignore-eos"]


def ids_of(res):
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_text_prompt_gives_the_ids_of_its_tiktoken_encoding(orchid, tik, tmp_path):
    by_text = ids_of(orchid("generate", MODEL, "--prompt", TEXT, *GREEDY, "--print-ids"))
    by_ids = ids_of(orchid("generate", MODEL, "--prompt-ids", ",".join(map(str, tik.encode_ordinary(TEXT))), *GREEDY,
                           "--print-ids"))
    assert by_text == by_ids and len(by_text) == 24
    prompt = tmp_path / "prompt.txt"
    prompt.write_bytes(TEXT.encode("utf-8"))
    assert ids_of(orchid("generate", MODEL, "--prompt-file", prompt, *GREEDY, "--print-ids")) == by_ids


def test_allow_special_encodes_literals_as_special_ids(orchid, tik):
    special = ids_of(orchid("generate", MODEL, "--prompt", HARMONY, "--allow-special", "all", *GREEDY, "--print-ids"))
    ref = tik.encode(HARMONY, allowed_special="all")
    assert ref != tik.encode_ordinary(HARMONY)
    assert special == ids_of(orchid("generate", MODEL, "--prompt-ids", ",".join(map(str, ref)), *GREEDY,
                                    "--print-ids"))
    ordinary = ids_of(orchid("generate", MODEL, "--prompt", HARMONY, *GREEDY, "--print-ids"))
    assert ordinary == ids_of(orchid("generate", MODEL, "--prompt-ids",
                                     ",".join(map(str, tik.encode_ordinary(HARMONY))), *GREEDY, "--print-ids"))
    assert ordinary != special, "the prompt's encoding must show in the output for this test to mean anything"


def generated(orchid, *extra):
    return orchid("generate", MODEL, "--prompt", HARMONY, "--allow-special", "all", *GREEDY, *extra)


def test_printed_text_is_the_decoding_of_the_generated_ids(orchid, tik):
    ids = ids_of(generated(orchid, "--print-ids"))
    text = generated(orchid).stdout
    assert text == tik.decode(ids) + "\n"
    assert len(text) > 24


def test_stop_string_cuts_the_printed_text(orchid, tik):
    ids = ids_of(generated(orchid, "--print-ids"))
    full = tik.decode(ids)
    # A stop string from the middle of the text, and a later one that must lose to it.
    stop = full[len(full) // 2:len(full) // 2 + 3]
    cut = full.find(stop)
    later = full[-2:]
    assert 0 < cut and full.find(later) > cut
    assert generated(orchid, "--stop", stop).stdout == full[:cut] + "\n"
    assert generated(orchid, "--stop", later, "--stop", stop).stdout == full[:cut] + "\n"
    # The ids end with the token that completed the stop string.
    stopped = ids_of(generated(orchid, "--stop", stop, "--print-ids"))
    assert stopped == ids[:len(stopped)] and len(stopped) < len(ids)
    assert stop in tik.decode(stopped) and stop not in tik.decode(stopped[:-1])


@pytest.mark.parametrize("args,words", [
    (["--prompt", "hi", "--prompt-ids", "1,2"], "exactly one of --prompt, --prompt-file or --prompt-ids"),
    (["--prompt", "hi", "--prompt-file", "/dev/null"], "exactly one of"),
    ([], "exactly one of"),
    (["--prompt-ids", "1,2", "--allow-special", "all"], "--allow-special"),
    (["--prompt", ""], "--prompt: the prompt is empty"),
    (["--prompt", "hi", "--allow-special", "<|nope|>"], "<|nope|>"),
    (["--prompt-file", "/no/such/prompt.txt"], "/no/such/prompt.txt"),
    (["--prompt", "hi", "--stop", ""], "--stop"),
])
def test_bad_prompt_flags_are_clear_errors(orchid, args, words):
    res = orchid("generate", MODEL, *args, check=False)
    assert res.returncode not in (0, 70) and res.returncode > 0
    assert words in res.stderr
