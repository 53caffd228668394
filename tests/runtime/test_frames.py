"""budget/runtime/frames.py: a call on a fresh chunk of CPython's frame stack.

The chunk thrash is found, not assumed: a loop of calls is run at every depth (and every
frame-size offset), and some map a stack chunk per call, counted as page faults; through
``on_fresh_stack`` none may, at any of those depths (a frame that only shifted the stack
would move the thrash to another depth). Where no depth thrashes (CPython 3.10's heap
frames, a CPython that keeps a spare chunk), there is nothing to check and the test says
so.
"""

from __future__ import annotations

import gc
import sys

import pytest

from budget.runtime.frames import PAD_SLOTS, _padding_frame, on_fresh_stack

resource = pytest.importorskip("resource")

CALLS = 400  # calls per loop: a thrashing loop faults at least once per call


def test_the_call_gets_its_arguments_and_returns_or_raises_as_a_direct_call():
    assert on_fresh_stack(lambda a, b=0, *, c: (a, b, c), 1, b=2, c=3) == (1, 2, 3)
    error = ValueError("from the callee")

    def fails() -> None:
        raise error

    with pytest.raises(ValueError) as raised:
        on_fresh_stack(fails)
    assert raised.value is error


def test_the_padding_frame_never_fits_in_an_ordinary_chunk():
    """16 KiB chunks: a frame of more pointers than that is always given a new one (the
    compiler keeps the never-bound names as locals)."""
    assert _padding_frame().__code__.co_nlocals >= PAD_SLOTS > 16 * 1024 // 8


def _leaf() -> None:
    return None


def _loop(n: int) -> None:
    for _ in range(n):
        _leaf()


def _shims() -> list:
    """Callers of ``_loop`` whose frames differ by one slot each: with the recursion's
    depth, every position of ``_loop``'s frame in a chunk is tried."""
    shims = []
    for k in range(24):
        names = ", ".join(f"_{i}" for i in range(k + 1))
        source = (
            "def shim(run, loop, n):\n"
            f"    if False:\n        del {names}\n"
            "    return run(loop, n)\n"
        )
        namespace: dict = {}
        exec(compile(source, f"<shim {k}>", "exec"), namespace)
        shims.append(namespace["shim"])
    return shims


def _direct(loop, n):  # type: ignore[no-untyped-def]
    return loop(n)


def _faults(depth: int, shim, run) -> int:  # type: ignore[no-untyped-def]
    """Page faults of ``CALLS`` calls of ``_leaf``, ``depth`` frames down, through
    ``shim`` and ``run`` (a direct call or ``on_fresh_stack``)."""
    if depth:
        return _faults(depth - 1, shim, run)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    shim(run, _loop, CALLS)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def _thrashing(trials: list, run, least: int) -> list:  # type: ignore[no-untyped-def]
    """The trials whose loop faults ``least`` times or more, twice running (a one-off
    burst of faults, from the collector or the allocator, is not a thrash)."""
    return [t for t in trials if _faults(*t, run) >= least and _faults(*t, run) >= least]


def test_no_loop_maps_a_stack_chunk_per_call_through_it_at_any_depth():
    shims = _shims()
    trials = [(depth, shim) for depth in range(0, 400, 3) for shim in shims]
    paused = gc.isenabled()
    gc.disable()
    try:
        direct = _thrashing(trials, _direct, CALLS)
        if not direct:
            pytest.skip(f"no depth thrashes on Python {sys.version.split()[0]}: nothing to check")
        assert not _thrashing(trials, on_fresh_stack, CALLS // 10)
    finally:
        if paused:
            gc.enable()
