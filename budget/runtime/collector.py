"""Python's cyclic garbage collector, paused where its timing would cost or mislead."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (the collector's state restored after).

    Planning allocates many small objects (fx nodes, sets, dicts) and frees few, which
    triggers full collections of the whole compiler heap at random points of a plan (a
    large share of planning time on deep models: ``python bench/preview_cost.py``);
    nothing planning creates needs collecting early. A measured step
    (:mod:`budget.runtime.measure`): a collection in its middle would free older garbage
    there and take its bytes off the step's (a full ``gc.collect()`` before it does the
    same, at the price of walking every live object).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
