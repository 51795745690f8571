"""The committed Harmony golden cases still agree with openai-harmony: a prefix of them is regenerated live
(named scenarios plus the first random ones, same seed) and compared with the archive."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "golden"))

import harmony_cases as hc  # noqa: E402

ARCHIVE = ROOT / "tests" / "harmony" / "golden" / hc.ARCHIVE


def test_golden_archive_is_reproducible_with_openai_harmony():
    golden = hc.read_archive(ARCHIVE)
    enc = hc.encoding()
    renders = hc.render_cases(enc, hc.DEFAULT_SEED, 80)
    assert len(renders) > 80
    assert renders == golden["render_cases.jsonl"][: len(renders)]
    parses = hc.parse_cases(enc, hc.DEFAULT_SEED, 120, golden["render_cases.jsonl"])
    assert parses == golden["parse_cases.jsonl"][: len(parses)]
    assert hc.builtin_tools() == golden["builtin_tools.json"]


def test_golden_archive_has_the_promised_coverage():
    golden = hc.read_archive(ARCHIVE)
    renders, parses = golden["render_cases.jsonl"], golden["parse_cases.jsonl"]
    assert sum(r["name"].startswith("random_") for r in renders) >= 1000
    assert sum(r["name"].startswith("random_") for r in parses) >= 1000
    ops = {r["op"] for r in renders}
    assert ops == {"completion", "conversation", "training", "message"}
    assert any("error" in r for r in renders)
    assert any(r["strict"]["error"] for r in parses) and any(not r["strict"]["error"] for r in parses)
    assert any(r["lenient"]["recovered"] for r in parses)
