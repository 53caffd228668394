"""The README's figures that the code can check: how many tests need a GPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_counts_the_cuda_tests_there_are():
    """README says how many ``cuda`` tests the suite has (skipped without a GPU, run by
    bench/gpu_check.py): as many as pytest collects with ``-m cuda``."""
    said = re.search(r"the\s+(\d+)\s+`cuda` tests", (ROOT / "README.md").read_text())
    assert said, "README names no count of `cuda` tests"
    # the modules that mark tests cuda (collecting only them: a few seconds, not the suite's)
    marking = [str(p) for p in (ROOT / "tests").rglob("test_*.py") if "mark.cuda" in p.read_text()]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "cuda"]
        + ["-p", "no:cacheprovider", *marking],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    collected = re.search(r"(\d+)(?:/\d+)? tests? collected", out)
    assert collected, out[-2000:]
    assert int(said.group(1)) == int(collected.group(1))
