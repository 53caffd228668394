"""Every test starts and ends with a fresh dynamo: compiled frames never leak between tests.

budget's own cache directory (plan cache, profile timings) is a fresh one per test session
(``BUDGET_CACHE_DIR``), so tests never read or write the user's ``~/.cache/budget``; a
test that needs the variable otherwise sets it itself (monkeypatch, or a child process's
environment).

A test module's shared setup is a session-scoped fixture (or a ``functools.cache``d helper
where the fixture is parametrized), built once per xdist worker: the workers take tests
longest first from every module at once, so a module-scoped fixture was torn down each
time a worker moved to another module and built again when it came back.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

# Two xdist workers share two cores: one intra-op thread each. torch's default (a thread
# per core in each worker) makes the workers' threads wait on each other.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Inductor checks once per cache directory that this host's compiler builds vector code
# (several test builds); the tests' child processes compile into fresh directories, so
# each paid it. The answer is the CPU's own flags here: the check is skipped.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")

import torch  # noqa: E402
import torch._inductor.config  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # were torch loaded before
# Inductor builds this process's CPU kernels scalar: vectorised C++ is slower to build, and
# most of an Inductor test's time is its cold compile. budget reads what the wrapper code
# allocates, not the kernels' bodies. Child processes (the CLI's, other ranks') build
# vectorised kernels, as users do.
torch._inductor.config.cpp.simdlen = 1
_SESSION_CACHE = tempfile.TemporaryDirectory(prefix="budget-tests-")
os.environ["BUDGET_CACHE_DIR"] = _SESSION_CACHE.name


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# Seconds each test of 2 s or more took in the default run (`python -m pytest -q -n 2 --dist
# load --maxschedchunk 1 --durations=0`, Inductor's cache cold: a fresh
# TORCHINDUCTOR_CACHE_DIR), those run only with -m full from a full run's longest, new tests
# guessed: only the order uses them.
_DURATIONS = json.loads((Path(__file__).parent / "durations.json").read_text())


def pytest_collection_modifyitems(config, items):
    """Run the longest tests first: pytest-xdist hands tests out in collection order, and
    the long ones were collected last (tests/test_real_models.py, tests/test_notebooks.py)
    or among the short ones, so one worker ran them alone for minutes while the other had
    finished. With ``--dist load --maxschedchunk 1`` (README's command) each worker takes
    the next test when it finishes one, so longest-first is list scheduling: the workers
    end within about one test of each other. (``--dist worksteal`` and plain ``load`` hand
    out contiguous blocks first, so one worker got every long test.) Tests the file does
    not name count 10 s when marked ``slow``, else 0."""
    items.sort(
        key=lambda item: (
            -_DURATIONS.get(item.nodeid, 10.0 if item.get_closest_marker("slow") else 0.0)
        )
    )
