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


def pytest_collection_modifyitems(config, items):
    """Run the ``slow`` tests (Inductor compiles, real models: 10 s to 4 min each) first.

    pytest-xdist hands tests out in collection order, and the slow ones were collected
    last (tests/test_real_models.py, tests/test_notebooks.py): one worker then ran them
    alone for minutes while the other had finished. Longest first packs the two workers.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
