import os
import pathlib
import subprocess
from unittest import mock

import pytest
import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tiktoken_ext import openai_public

ROOT = pathlib.Path(__file__).resolve().parents[2]
VOCAB = ROOT / "assets" / "tokenizer" / "o200k_base.tiktoken"


def find_fixture_dir():
    """The published gpt-oss tokenizer files (shared/fixtures/gpt-oss-tokenizer beside the repository), or None."""
    candidates = [os.environ.get("ORCHID_FIXTURES_DIR", ""), ROOT.parent / "shared" / "fixtures" / "gpt-oss-tokenizer",
                  ROOT.parent.parent / "shared" / "fixtures" / "gpt-oss-tokenizer"]
    for c in candidates:
        if c and (pathlib.Path(c) / "tokenizer.json").exists():
            return pathlib.Path(c)
    return None


@pytest.fixture(scope="session")
def tik():
    """tiktoken's own o200k_harmony definition (regex, specials), reading the committed ranks instead of
    downloading them; tiktoken checks the file's sha256."""
    def local_ranks(_url, expected_hash=None):
        return load_tiktoken_bpe(str(VOCAB), expected_hash=expected_hash)
    with mock.patch.object(openai_public, "load_tiktoken_bpe", local_ranks):
        params = openai_public.o200k_harmony()
    enc = tiktoken.Encoding(**params)
    assert enc.n_vocab == 201088
    return enc


def orchid_bin():
    return os.environ.get("ORCHID_BIN", str(ROOT / "build" / "cpu" / "src" / "cli" / "orchid"))


@pytest.fixture(scope="session")
def orchid():
    path = orchid_bin()
    if not os.path.exists(path):
        pytest.fail(f"orchid binary not found at {path} (build the cpu preset or set ORCHID_BIN)")

    def run(*args, check=True, **kw):
        res = subprocess.run([path, *map(str, args), "--log-level", "warn"], capture_output=True, encoding="utf-8", **kw)
        if check and res.returncode != 0:
            raise AssertionError(f"orchid {' '.join(map(str, args))} failed ({res.returncode}):\n{res.stderr}")
        return res

    return run
