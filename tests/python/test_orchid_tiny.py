"""The shipped tiny model (models/orchid-tiny) on the CPU backend against transformers' FP32 reference
(tests/golden/orchid_tiny, written by tools/train/make_reference.py on the training machine)."""
import subprocess
import sys

from conftest import ROOT, orchid_bin


def test_logits_and_greedy_match_transformers():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "train" / "check_reference.py"), "--orchid", orchid_bin(),
                        "--model", str(ROOT / "models" / "orchid-tiny"), "--reference",
                        str(ROOT / "tests" / "golden" / "orchid_tiny"), "--backend", "cpu", "--greedy", "8"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout and "greedy equal to transformers on 8/8" in r.stdout
