import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def orchid_bin():
    return os.environ.get("ORCHID_BIN", str(ROOT / "build" / "cpu" / "src" / "cli" / "orchid"))


@pytest.fixture(scope="session")
def orchid():
    path = orchid_bin()
    if not os.path.exists(path):
        pytest.fail(f"orchid binary not found at {path} (build the cpu preset or set ORCHID_BIN)")

    def run(*args, check=True, **kw):
        res = subprocess.run([path, *map(str, args), "--log-level", "warn"], capture_output=True, text=True, **kw)
        if check and res.returncode != 0:
            raise AssertionError(f"orchid {' '.join(map(str, args))} failed ({res.returncode}):\n{res.stderr}")
        return res

    return run
