"""Every test starts and ends with a fresh dynamo: compiled frames never leak between tests.

budget's own cache directory (plan cache, profile timings) is a fresh one per test session
(``BUDGET_CACHE_DIR``), so tests never read or write the user's ``~/.cache/budget``; a
test that needs the variable otherwise sets it itself (monkeypatch, or a child process's
environment).
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch

_SESSION_CACHE = tempfile.TemporaryDirectory(prefix="budget-tests-")
os.environ["BUDGET_CACHE_DIR"] = _SESSION_CACHE.name


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
