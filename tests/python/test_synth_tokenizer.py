"""`orchid synth` writes the tokenizer files of a Hugging Face model directory, generated from orchid's built-in
vocabulary. Hugging Face `tokenizers` loads the written tokenizer.json and must encode the committed corpus as
tiktoken does, and encode and decode it exactly as it does from the published gpt-oss tokenizer.json
(shared/fixtures/gpt-oss-tokenizer beside the repository; those tests are skipped without it)."""
import json

import pytest
import tokenizers

from conftest import ROOT, find_fixture_dir

CORPUS = ROOT / "tests" / "data" / "tokenizer_corpus.jsonl"
FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")


@pytest.fixture(scope="module")
def published():
    d = find_fixture_dir()
    if d is None:
        pytest.skip("the published gpt-oss tokenizer files are not beside the repository "
                    "(../shared/fixtures/gpt-oss-tokenizer; or set ORCHID_FIXTURES_DIR)")
    return d


@pytest.fixture(scope="module")
def synth_dir(orchid, tmp_path_factory):
    d = tmp_path_factory.mktemp("synth") / "tiny"
    orchid("synth", d, "--preset", "tiny")
    return d


@pytest.fixture(scope="module")
def docs():
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def ours_json(synth_dir):
    return json.loads((synth_dir / "tokenizer.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def published_json(published):
    return json.loads((published / "tokenizer.json").read_text(encoding="utf-8"))


def load(path, specials_as_text):
    tok = tokenizers.Tokenizer.from_file(str(path))
    tok.encode_special_tokens = specials_as_text
    return tok


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize("specials_as_text", [True, False], ids=["ordinary", "specials"])
def test_written_tokenizer_encodes_and_decodes_like_the_published_one(synth_dir, published, docs, specials_as_text):
    ours = load(synth_dir / "tokenizer.json", specials_as_text)
    theirs = load(published / "tokenizer.json", specials_as_text)
    assert ours.get_vocab_size() == theirs.get_vocab_size()
    # With specials recognised, only the documents that hold a literal encode differently.
    texts = docs if specials_as_text else [d for d in docs if "<|" in d]
    assert len(texts) >= 20
    a = [e.ids for e in ours.encode_batch(texts, add_special_tokens=False)]
    b = [e.ids for e in theirs.encode_batch(texts, add_special_tokens=False)]
    bad = [i for i in range(len(texts)) if a[i] != b[i]]
    assert not bad, (f"{len(bad)} of {len(texts)} documents differ; document {bad[0]} at token "
                     f"{first_difference(a[bad[0]], b[bad[0]])}: {texts[bad[0]][:80]!r}")
    decoded_ours = ours.decode_batch(a, skip_special_tokens=False)
    assert decoded_ours == theirs.decode_batch(b, skip_special_tokens=False)
    assert decoded_ours == texts


def test_written_tokenizer_encodes_like_tiktoken(synth_dir, tik, docs):
    """Needs no published file: tiktoken's o200k_harmony is the encoder gpt-oss was trained with."""
    ours = load(synth_dir / "tokenizer.json", specials_as_text=True)
    a = [e.ids for e in ours.encode_batch(docs, add_special_tokens=False)]
    bad = [i for i, (d, ids) in enumerate(zip(docs, a)) if ids != tik.encode_ordinary(d)]
    assert not bad, f"{len(bad)} of {len(docs)} documents differ from tiktoken; first {docs[bad[0]][:80]!r}"


def test_special_tokens_equal_the_published_ones(ours_json, published_json):
    ours, theirs = ours_json["added_tokens"], published_json["added_tokens"]
    assert [(t["id"], t["content"]) for t in ours] == [(t["id"], t["content"]) for t in theirs]
    assert [{k: t[k] for k in FLAGS} for t in ours] == [{k: t[k] for k in FLAGS} for t in theirs]


def test_tokenizer_config_equals_the_published_one(synth_dir, published):
    ours = json.loads((synth_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    theirs = json.loads((published / "tokenizer_config.json").read_text(encoding="utf-8"))
    for key in ["bos_token", "eos_token", "pad_token", "model_max_length", "tokenizer_class", "added_tokens_decoder",
                "clean_up_tokenization_spaces", "model_input_names"]:
        assert ours.get(key) == theirs[key], key
    assert ours == theirs


def test_vocab_equals_the_published_one(ours_json, published_json):
    assert list(ours_json["model"]["vocab"].items()) == list(published_json["model"]["vocab"].items())
    assert {k: v for k, v in ours_json["model"].items() if k not in ("vocab", "merges")} == \
        {k: v for k, v in published_json["model"].items() if k not in ("vocab", "merges")}
    for key in ["pre_tokenizer", "post_processor", "decoder", "normalizer"]:
        assert ours_json[key] == published_json[key], key


def test_merges_equal_the_published_ones(ours_json, published_json):
    ours, theirs = ours_json["model"]["merges"], published_json["model"]["merges"]
    assert len(ours) == len(theirs)
    assert set(map(tuple, ours)) == set(map(tuple, theirs)), "not the same set of merges"
    assert ours == theirs, f"same set, other order: first difference at merge {first_difference(ours, theirs)}"


def test_written_files_are_byte_identical_to_the_published_ones(synth_dir, published):
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        assert (synth_dir / name).read_bytes() == (published / name).read_bytes(), name


def test_orchid_reads_the_written_directory_like_its_builtin_vocabulary(orchid, synth_dir):
    from_dir = orchid("tokenize", synth_dir, "--file", CORPUS, "--jsonl").stdout
    builtin = orchid("tokenize", "synthetic:tiny", "--file", CORPUS, "--jsonl").stdout
    assert from_dir.count("\n") > 1000
    assert from_dir == builtin
