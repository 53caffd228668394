"""One plan on every rank: rank 0 plans each graph, every other rank applies its plan.

In a job of several processes (torch.distributed initialised, world size > 1) every rank
must save the same values, or collectives and memory diverge between ranks; but time
limits and timing-based estimators (``profile``) let plans solved independently differ.
So for each compiled graph the ranks first check that they all compile the same graph
(its hash: a graph that differs is an error naming the ranks), then rank 0 plans and
broadcasts its plan, and the others apply it as they would a plan file. Ranks compile
their graphs in the same order (they run the same program), which keeps these
collectives paired.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.plan import Plan
from ..errors import BudgetError, PlanMismatchError
from ..runtime._torch_private import _disable_current_modes, no_python_dispatcher


def _outside_tracing(collective: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Run a collective on real tensors, outside torch's Python dispatcher.

    Planning runs inside the compiler's (and the preview's) fake-tensor mode, where the
    tensors a collective makes would be fake. And AOTAutograd traces with the Python
    dispatcher on, which routes the collective's C++ call back through Python: it would
    hold the GIL while gloo's enqueue waits for the work-queue mutex, which gloo's worker
    thread holds while freeing the previous collective's tensors, which needs the GIL.
    That deadlock hung about 1 run in 30 of two ranks (both in broadcast_object_list)."""
    with _disable_current_modes(), no_python_dispatcher():
        collective(*args, **kwargs)


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) when torch.distributed is not initialised."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def _gather(value: str | None) -> list[str | None]:
    """Every rank's ``value``, on every rank (rank order)."""
    import torch.distributed as dist

    values: list[str | None] = [None] * dist.get_world_size()
    _outside_tracing(dist.all_gather_object, values, value)
    return values


def agree_on_graph(graph_hash: str) -> None:
    """Raise on every rank when the ranks are not compiling the same graph."""
    hashes = _gather(graph_hash)
    if len(set(hashes)) > 1:
        by_rank = ", ".join(f"rank {r}: {h}" for r, h in enumerate(hashes))
        raise PlanMismatchError(
            "the ranks are compiling different graphs, so no one plan fits them all "
            f"({by_rank}); every rank must run the same model on inputs of the same "
            "shapes and dtypes"
        )


def all_hold(digest: str | None) -> bool:
    """True on every rank when every rank passes the same ``digest`` and none passes None
    (each holds the same cached plans for the graph at hand)."""
    digests = _gather(digest)
    return None not in digests and len(set(digests)) == 1


def share_plan(plan: Plan | BaseException | None) -> Plan:
    """Rank 0's ``plan``, on every rank (the other ranks pass None). When rank 0 could not
    plan, it passes its error: the other ranks raise too, instead of waiting forever."""
    import torch.distributed as dist

    if isinstance(plan, BaseException):
        box: list[object] = [{"error": f"{type(plan).__name__}: {plan}"}]
    else:
        box = [plan.to_dict() if plan is not None else None]
    _outside_tracing(dist.broadcast_object_list, box, src=0)
    data = box[0]
    if isinstance(data, dict) and "error" in data:
        raise BudgetError(f"rank 0 could not plan this graph: {data['error']}")
    return Plan.from_dict(data)
