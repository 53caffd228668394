"""Inductor's buffer reuse, kept only where it leaves the step's peak where it is.

Inductor reuses a dead buffer for a later one of the same size (``buf9 = buf4; del buf4
# reuse``): one allocator call fewer, but the dead buffer stays allocated from its death
to the reuse, and where that span crosses the peak, the peak rises (Inductor's own rule
judges that on an estimate of the graph's memory, which misses on the plans here:
bench/buffer_reuse.py). Without reuse every buffer is an allocator call, which a
launch-bound GPU step pays on its host thread.

``buffer_reuse="neutral"`` keeps the reuses that cost no peak, exactly. Inductor is asked
for every reuse it can make, and marks where each reused buffer died (``MARK``: the line
at which it would have been deleted). :func:`keep_neutral` then runs the graph's wrapper
code on meta tensors, line by line, as the compiled peak runs it
(:func:`~budget.compile.compiled_peak.compiled_peak`: a forward alone, a backward after
its forward, whose saved values it frees where the code deletes them), and takes the live
bytes at every line without any reuse. It keeps the reuses in the code's order while no
line rises above the peak without reuse, and undoes the others in the code (a fresh
allocation at the reuse, a ``del`` at the death). A graph's peak unchanged leaves the
step's unchanged: what the other graph holds is constant while it runs. The rewritten code
is kept only if it peaks no higher than the code with every marked reuse undone, both run
again; otherwise, and where the code cannot be run (a construct the meta run does not
know, no graph captured), no marked reuse is kept.
"""

from __future__ import annotations

import ast
import contextlib
import re
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..estimators.live import LiveStorages
from ..runtime import _torch_private as T
from .compiled_peak import COMPILING, compiled_peak

MARK = "# budget: dies here if not reused: "  # Inductor's reused buffer, at its death
_REUSE = re.compile(r"^\s*(\w+) = (.+?)(?:; del \w+|;)?\s+# reuse$")
_ALLOC = re.compile(r"^\s*(\w+) = empty_strided_\w+\((.*)\)$")


@dataclass
class _Reuse:
    line: int  # 0-based index of the reuse line in the source
    new: str
    old: str
    death: int  # 0-based index of the old buffer's death mark
    value: str  # what the reuse line assigns
    layout: str | None = None  # the new buffer's "size, stride, dtype" (None: unknown)
    size: int = 0  # the old buffer's storage bytes


def neutral_reuse() -> contextlib.AbstractContextManager[None]:
    """Inductor's compiles in it make every reuse they can and keep the neutral ones."""
    return T.wrapper_reuse(MARK, keep_neutral)


def keep_neutral(source: str, device: str) -> str:
    """``source`` (the wrapper code of the graph being compiled, with Inductor's reuses
    and their death marks) with the reuses that raise the step's peak undone (module
    docstring); ``device``: the graph's device type."""
    lines = source.split("\n")
    if f"empty_strided_{device} =" not in source:  # no allocator to undo a reuse with
        return source
    reuses = _marked(lines)
    every = {i for i, r in enumerate(reuses) if r.layout is not None}
    try:
        return _keep_neutral(lines, reuses, every, device) if reuses else source
    except Exception:  # noqa: BLE001 - code the meta run does not know: no reuse kept
        return _undo(lines, reuses, every, device)


def _keep_neutral(lines: list[str], reuses: list[_Reuse], every: set[int], device: str) -> str:
    """The greedy of the module docstring; ``every``: the reuses that can be undone."""
    timeline = _timeline("\n".join(lines), reuses)
    costs = [_cost(timeline, r, lines) for r in reuses]
    base = dict(timeline)
    for cost in costs:
        for k, extra in cost.items():
            base[k] -= extra
    limit = max(base.values(), default=0)
    undone = set()
    for i, (r, cost) in enumerate(zip(reuses, costs, strict=True)):  # as Inductor planned
        if r.layout is not None and any(base[k] + b > limit for k, b in cost.items()):
            undone.add(i)
            continue
        for k, extra in cost.items():
            base[k] += extra
    none = _undo(lines, reuses, every, device)  # the check: against the code without reuse
    if undone == every:
        return none
    kept = _undo(lines, reuses, undone, device)
    # every reuse kept: the code as Inductor wrote it, whose timeline is at hand
    peak = _peak(kept) if undone else max(timeline.values(), default=0)
    return kept if peak <= _peak(none) else none


def _peak(source: str) -> int:
    return max(_timeline(source, []).values(), default=0)


def _marked(lines: list[str]) -> list[_Reuse]:
    """The reuses whose old buffer has a death mark before them, in the code's order, each
    with its new buffer's layout (from the old's allocation, or the reuse's view)."""
    deaths: dict[str, int] = {}
    layouts: dict[str, str] = {}
    reuses = []
    for i, text in enumerate(lines):
        stripped = text.strip()
        if stripped.startswith(MARK):
            deaths[stripped[len(MARK) :]] = i
            continue
        m = _ALLOC.match(text)
        if m is not None:
            layouts[m.group(1)] = m.group(2)
            continue
        m = _REUSE.match(text)
        if m is None:
            continue
        new, value = m.group(1), m.group(2)
        old = value.removeprefix("reinterpret_tensor(").split(",")[0].strip()
        layouts[new] = _view_layout(value, layouts.get(old, ""))
        if old in deaths:
            reuses.append(_Reuse(i, new, old, deaths.pop(old), value, layouts[new] or None))
    return reuses


def _view_layout(value: str, old: str) -> str:
    """The "size, stride, dtype" of what ``value`` assigns: the old buffer as it is (its
    layout ``old``), or ``reinterpret_tensor(old, size, stride, 0)`` ("": unknown)."""
    if not value.startswith("reinterpret_tensor(") or not old:
        return old
    try:
        view: Any = ast.parse(value, mode="eval").body
        dtype = ast.parse(f"f({old})", mode="eval").body.args[2]  # type: ignore[attr-defined]
        return ", ".join(ast.unparse(a) for a in (*view.args[1:3], dtype))
    except (SyntaxError, AttributeError, IndexError):
        return ""


def _cost(timeline: dict[int, int], r: _Reuse, lines: list[str]) -> dict[int, int]:
    """What the reuse adds to each line's live bytes: the old buffer's from its death mark
    to the reuse, and, while the new buffer lives, what the old's storage has beyond what
    the new would allocate (Inductor can reuse a larger one)."""
    ends = (MARK + r.new, f"del {r.new}")
    end = next((j for j in range(r.line + 1, len(lines)) if lines[j].strip() in ends), None)
    larger = r.size - _nbytes(r.layout) if r.layout else 0
    cost = {k: r.size for k in timeline if r.death < k < r.line}
    if larger > 0:
        cost |= {k: larger for k in timeline if r.line <= k < (end or len(lines))}
    return cost


def _nbytes(layout: str) -> int:
    """The bytes an allocation of ``layout`` ("size, stride, dtype") takes."""
    size, stride = ast.literal_eval(layout.rsplit(",", 1)[0])
    dtype = getattr(torch, layout.rsplit(".", 1)[-1].strip())
    if any(n == 0 for n in size):
        return 0
    return (1 + sum((n - 1) * st for n, st in zip(size, stride, strict=True))) * dtype.itemsize


def _timeline(source: str, reuses: list[_Reuse]) -> dict[int, int]:
    """The step's live bytes at each line the graph being compiled runs (0-based line
    index: the most while the line runs), its code being ``source``: a forward run alone,
    a backward after its forward (:func:`~budget.compile.compiled_peak.compiled_peak`).
    Fills each reuse's ``size``. Raises LookupError outside a CodeCapture's compile."""
    compiling = COMPILING.get()
    if compiling is None:
        raise LookupError("no graph is being compiled under a CodeCapture")
    graph, forward = compiling
    at_line = {r.line: r for r in reuses}
    timeline: dict[int, int] = {}
    last: list[int | None] = [None]

    def tracer(frame: Any, live: LiveStorages) -> None:
        # f_locals is a snapshot that holds the frame's tensors until it is taken again:
        # taken at every line, before the line's bytes are read, it frees what the line
        # before deleted (after that line's most was counted), as the run would
        names = frame.f_locals
        if last[0] is not None:
            timeline[last[0]] = max(timeline.get(last[0], 0), live.recent)
        live.recent = live.live
        k = last[0] = frame.f_lineno - 1
        r = at_line.get(k)
        if r is not None and isinstance(t := names.get(r.old), torch.Tensor):
            r.size = int(t.untyped_storage().nbytes())
            if r.layout is None:  # the old buffer's layout is not in the code: its tensor's
                r.layout = _view_layout(
                    r.value, f"{tuple(t.shape)}, {tuple(t.stride())}, {t.dtype}"
                )

    this = replace(graph, source=source)
    compiled_peak(forward or this, this if forward else None, tracer=tracer)
    return timeline


def _undo(lines: list[str], reuses: list[_Reuse], undone: set[int], device: str) -> str:
    """The code with the reuses ``undone`` made fresh allocations and their old buffers
    deleted at their death marks."""
    out = list(lines)
    for i in undone:
        r = reuses[i]
        pad = re.match(r"\s*", lines[r.line]).group(0)  # type: ignore[union-attr]
        out[r.line] = f"{pad}{r.new} = empty_strided_{device}({r.layout})"
        indent = re.match(r"\s*", lines[r.death]).group(0)  # type: ignore[union-attr]
        out[r.death] = f"{indent}del {r.old}"
    return "\n".join(out)
