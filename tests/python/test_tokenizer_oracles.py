"""orchid's tokenizer against the oracles: tiktoken's o200k_harmony (the encoder gpt-oss was trained with; it
decides) and Hugging Face `tokenizers` on the published gpt-oss tokenizer.json.

Drives the built CLI (build/cpu/src/cli/orchid) in its batch modes over the committed corpus
(tests/data/tokenizer_corpus.jsonl, made by tools/corpus/make_corpus.py), over probes of every Unicode code
point, and over random id lists for decoding and the incremental detokenizer.
"""
import codecs
import json
import random
import subprocess

import pytest
import tokenizers

from conftest import ROOT, find_fixture_dir

ORCHID = ROOT / "build" / "cpu" / "src" / "cli" / "orchid"
CORPUS = ROOT / "tests" / "data" / "tokenizer_corpus.jsonl"
MODEL = "synthetic:tiny"  # the built-in vocabulary

# Documents of the corpus on which tiktoken and Hugging Face tokenizers give different ids (tiktoken decides).
# None with tokenizers 0.23.3 and tiktoken 0.14.0.
KNOWN_ORACLE_DISAGREEMENTS = []


def fixture_dir():
    d = find_fixture_dir()
    if d is None:
        pytest.fail("gpt-oss tokenizer fixtures (shared/fixtures/gpt-oss-tokenizer) not found beside the repository")
    return d


@pytest.fixture(scope="module")
def hf():
    tok = tokenizers.Tokenizer.from_file(str(fixture_dir() / "tokenizer.json"))
    tok.encode_special_tokens = True  # special-token literals stay plain text, like encode_ordinary
    return tok


@pytest.fixture(scope="module")
def docs():
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def orchid(*args, check=True):
    if not ORCHID.exists():
        pytest.fail(f"{ORCHID} is missing: build first (cmake --preset cpu && cmake --build --preset cpu)")
    return subprocess.run([str(ORCHID), *map(str, args)], capture_output=True, check=check)


def orchid_jsonl(*args):
    out = orchid(*args).stdout.decode("utf-8")
    return [json.loads(line) for line in out.splitlines()]


def describe(enc, doc, ours, theirs):
    k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return (f"first difference at token {k}: orchid {[enc.decode_single_token_bytes(t) for t in ours[k:k + 3]]} "
            f"oracle {[enc.decode_single_token_bytes(t) for t in theirs[k:k + 3]]} near {doc[:80]!r}")


def test_corpus_size_and_variety(docs):
    total = sum(len(d.encode("utf-8")) for d in docs)
    assert total >= 2_000_000
    scripts = {"Cyrillic": "ж", "Greek": "λ", "Arabic": "ع", "Hebrew": "ש", "Devanagari": "क", "Thai": "ก",
               "Hangul": "한", "CJK": "的", "emoji ZWJ": "\u200d", "ideographic space": "\u3000", "CRLF": "\r\n"}
    text = "".join(docs)
    missing = [name for name, probe in scripts.items() if probe not in text]
    assert not missing


def test_corpus_ids_equal_tiktoken(tik, docs):
    ours = orchid_jsonl("tokenize", MODEL, "--file", CORPUS, "--jsonl")
    assert len(ours) == len(docs)
    bad = [i for i, (d, ids) in enumerate(zip(docs, ours)) if ids != tik.encode_ordinary(d)]
    assert not bad, f"{len(bad)} documents differ; doc {bad[0]}: " + describe(
        tik, docs[bad[0]], ours[bad[0]], tik.encode_ordinary(docs[bad[0]]))


def test_corpus_ids_equal_hf_tokenizers_except_listed(tik, hf, docs):
    ours = orchid_jsonl("tokenize", MODEL, "--file", CORPUS, "--jsonl")
    theirs = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    disagreements = [i for i, (d, ids) in enumerate(zip(docs, theirs)) if ids != tik.encode_ordinary(d)]
    assert disagreements == KNOWN_ORACLE_DISAGREEMENTS
    bad = [i for i in range(len(docs)) if i not in KNOWN_ORACLE_DISAGREEMENTS and ours[i] != theirs[i]]
    assert not bad, describe(tik, docs[bad[0]], ours[bad[0]], theirs[bad[0]])


def test_model_directory_tokenizer_json_gives_same_ids():
    builtin = orchid("tokenize", MODEL, "--file", CORPUS, "--jsonl").stdout
    from_json = orchid("tokenize", fixture_dir(), "--file", CORPUS, "--jsonl").stdout
    assert builtin == from_json


def test_allowed_specials_equal_tiktoken(tik, docs, tmp_path):
    with_specials = [d for d in docs if "<|" in d]
    assert len(with_specials) >= 20
    path = tmp_path / "specials.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in with_specials), encoding="utf-8")
    ours = orchid_jsonl("tokenize", MODEL, "--file", path, "--jsonl", "--allow-special", "all")
    for d, ids in zip(with_specials, ours):
        assert ids == tik.encode(d, allowed_special="all"), describe(tik, d, ids, tik.encode(d, allowed_special="all"))
    some = "<|start|>,<|message|>,<|end|>"
    ours = orchid_jsonl("tokenize", MODEL, "--file", path, "--jsonl", "--allow-special", some)
    for d, ids in zip(with_specials, ours):
        assert ids == tik.encode(d, allowed_special=set(some.split(",")), disallowed_special=())


def test_cli_text_and_ids(tik):
    for text in ["hello world", "<|start|>", "\U0001F496", "analysis", "  leading\tand trailing  \n"]:
        out = orchid("tokenize", MODEL, "--text", text).stdout
        assert json.loads(out) == tik.encode_ordinary(text)
    ids = tik.encode_ordinary("hello world") + [200006]
    out = orchid("detokenize", MODEL, "--ids", ",".join(map(str, ids))).stdout
    assert out == tik.decode_bytes(ids) + b"\n"


def test_cli_errors_are_user_errors():
    r = orchid("tokenize", "/no/such/model", "--text", "x", check=False)
    assert r.returncode == 2 and b"/no/such/model" in r.stderr
    r = orchid("detokenize", MODEL, "--ids", "201088", check=False)
    assert r.returncode == 2 and b"201088" in r.stderr
    r = orchid("tokenize", MODEL, check=False)
    assert r.returncode == 2


# Contexts that expose each class the regex uses: lowercase-like ("a" + X), uppercase-like (X + "A"), letter vs
# mark (" !" + X continues a punctuation run only for non-letters), number ("1" + X, four in a row), whitespace
# (X X b), and the case-insensitive contraction letters ('X, 'rX, 'lX).
PROBES = ["a{x}", "{x}A", "{x}'s", "{x}{x}b", "1{x}", "{x}{x}{x}{x}", " !{x}", "a'{x}", "a'r{x}", "a'l{x}"]


def test_every_code_point_is_classified_like_tiktoken(tik, tmp_path):
    path = tmp_path / "probes.jsonl"
    docs = []
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, 0x110000, 1024):
            x = [chr(c) for c in range(start, start + 1024) if not 0xD800 <= c <= 0xDFFF]
            if not x:
                continue
            doc = "\n".join(p.format(x=ch) for ch in x for p in PROBES)
            docs.append(doc)
            f.write(json.dumps(doc) + "\n")
    proc = subprocess.Popen([str(ORCHID), "tokenize", MODEL, "--file", str(path), "--jsonl"],
                            stdout=subprocess.PIPE, text=True)
    bad = []
    for doc, line in zip(docs, proc.stdout):
        if json.loads(line) != tik.encode_ordinary(doc):
            bad.append(doc)
    proc.stdout.close()
    assert proc.wait() == 0
    assert not bad, f"{len(bad)} blocks of 1024 code points differ; first starts {bad[0][:40]!r}"


def random_id_lists(tik, seed, count):
    rng = random.Random(seed)
    partial = [i for i in range(199998) if not is_utf8(tik.decode_single_token_bytes(i))]
    lists = []
    for _ in range(count):
        n = rng.randint(1, 24)
        lists.append([rng.choice(partial) if rng.random() < 0.5 else rng.randrange(201088) for _ in range(n)])
    return lists


def is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_decode_equals_tiktoken_decode_bytes(tik, tmp_path):
    lists = random_id_lists(tik, 1, 3000)
    path = tmp_path / "ids.jsonl"
    path.write_text("".join(json.dumps(ids) + "\n" for ids in lists))
    out = orchid_jsonl("detokenize", MODEL, "--file", path, "--jsonl", "--hex")
    assert len(out) == len(lists)
    for ids, hexed in zip(lists, out):
        assert bytes.fromhex(hexed) == tik.decode_bytes(ids), ids


def test_incremental_detokenizer_equals_python_incremental_decoder(tik, tmp_path):
    """Each delta equals what Python's incremental UTF-8 decoder (errors="replace") returns for the same token
    bytes, and the flush equals its final call: partial characters are held back, never split."""
    lists = random_id_lists(tik, 2, 3000)
    path = tmp_path / "ids.jsonl"
    path.write_text("".join(json.dumps(ids) + "\n" for ids in lists))
    out = orchid_jsonl("detokenize", MODEL, "--file", path, "--jsonl", "--stream")
    assert len(out) == len(lists)
    for ids, deltas in zip(lists, out):
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        expected = [dec.decode(tik.decode_single_token_bytes(i)) for i in ids] + [dec.decode(b"", final=True)]
        assert deltas == expected, ids
        assert "".join(deltas) == tik.decode(ids)
