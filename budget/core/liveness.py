"""A lower bound of a plan's predicted peak, as rows linear in its decisions.

The exact peak search (:mod:`budget.compile.peak_search`) needs the step's live bytes as
rows of an integer programme. The peak model of :mod:`budget.compile.peak` is not linear in
the plan (what a recomputation keeps alive depends on when the backward first needs it),
but a bound below it is, for plans that recompute each value once (torch's schedule,
:func:`budget.compile.split.extract`): at each step of the step's fixed order, count
what is alive there under the plan, where it can be said with linear rows, and no more.

- The forward runs a value when the plan saves it, when the user's outputs (the loss) need
  it, or when a value it runs reads it; a storage lives from the node that makes it to its
  last reader that runs, or to the forward's end when saved or an output. This is exact
  but for what kernels allocate inside themselves.
- The backward runs its own nodes in the graph's order, each recomputation just before the
  first backward node that needs it (reads it, or a recomputed value made from it). At
  each backward node, count its own values alive there (tangents, intermediates,
  gradients), the forward values it reads, the user's outputs, and the storages a plan
  keeps alive there: a saved value until its last reader (a backward node, or the
  recomputation of a value it feeds); a recomputed value between its first and last
  backward readers, and until the recomputation of a value it feeds.
- The moment a value is recomputed (when a plan first needs it at its *home*, the first
  backward node reading it or, read by none, the earliest home of its readers): what is
  alive across it, the value, and its inputs.

So for every plan that recomputes each value once, each row's value is at most the plan's
predicted peak, and a plan whose rows exceed a limit cannot fit it. The converse does not
hold (the order within a batch of recomputations, a kernel's workspace): the search
partitions and predicts each plan it finds.

This module is the bound as data (a :class:`LivenessBound`, built from a joint graph by
:mod:`budget.compile.liveness`), with :meth:`LivenessBound.row_values` to evaluate it.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# When a storage counts. In the forward: ("1",) always; ("s", v) v saved; ("x", v) v runs
# there. In the backward and at recomputations: ("AND", saved, recomputed, sooner, later),
# every value of ``saved`` saved, every one of ``recomputed`` recomputed, each (v, t) of
# ``sooner`` first needed at backward node t or earlier, each of ``later`` at t or later.
Literal = tuple
# A backward event: the storage is alive from row ``first`` (-1: from the backward's start)
# to row ``last`` when the literal holds.
Event = tuple[int, int, Literal]


def _holds(
    lit: Literal, kept: set[int], redo: set[int], ran: set[int], need: dict[int, int]
) -> bool:
    """Whether ``lit`` holds for the plan saving ``kept`` and recomputing ``redo``, whose
    forward runs ``ran`` and whose backward first needs each recomputed value at ``need``."""
    kind = lit[0]
    if kind == "1":
        return True
    if kind in ("s", "x"):
        return lit[1] in (kept if kind == "s" else ran)
    _, saved_, redone, sooner, later = lit
    return (
        all(v in kept for v in saved_)
        and all(v in redo for v in redone)
        and all(need.get(v, t + 1) <= t for v, t in sooner)
        and all(v in redo and need.get(v, t) >= t for v, t in later)
    )


@dataclass
class BoundRow:
    """A backward node's row: ``const`` bytes alive there under every plan, plus the bytes
    of each storage with an event holding there that is not ``excluded`` (in ``const``)."""

    position: int  # the node's index in the backward's order
    const: int
    excluded: tuple[int, ...] = ()


@dataclass
class RecomputeRow:
    """The moment the backward recomputes ``value``, when a plan recomputes it and first
    needs it at backward node ``through`` (it runs just before that node): ``const`` bytes
    alive across it under every plan (storages ``excluded``), the storages a plan keeps
    alive from the backward's start through row ``through``, and those of ``extra``
    (``(storage, literal)``: the value and its inputs)."""

    value: int
    through: int
    const: int
    excluded: tuple[int, ...]
    extra: tuple[tuple[int, Literal], ...]


@dataclass
class LivenessBound:
    """The rows of the bound (see the module docstring) over storages of forward values.

    Storage ``k`` holds ``storage_bytes[k]`` bytes. In the forward (``forward_steps`` rows,
    its end last) it is alive from step ``enters[k]`` while one of its ``events[k]``
    (``(last step, literal)``) holds at or after the step. In the backward it is alive at a
    row where one of its ``bw_events[k]`` holds. Storages in ``copies`` are the backward's
    own copies of recomputed values (another allocation than the forward's): they count
    at backward nodes only, never at a recomputation's row.
    """

    storage_bytes: list[int]
    storage_names: list[str]  # the value that makes each storage
    enters: list[int]
    forward_steps: int
    events: list[list[tuple[int, Literal]]]
    readers: dict[int, list[int]]  # problem node -> the problem nodes that read it
    always: set[int]  # problem nodes every plan's forward runs
    bw_events: list[list[Event]]
    copies: set[int] = field(default_factory=set)
    first_read: dict[int, int] = field(default_factory=dict)  # its first backward reader
    last_read: dict[int, int] = field(default_factory=dict)  # its last backward reader
    # problem node -> (its storage, the storage of the backward's copy or -1, the values of
    # the storage it is a view of down to the first, or None): for refine
    holders: dict[int, list[tuple[int, int, tuple[int, ...] | None]]] = field(default_factory=dict)
    step: dict[int, int] = field(default_factory=dict)  # problem node -> its forward step
    backward_nodes: list[str] = field(default_factory=list)  # the backward's rows' nodes
    rows: list[BoundRow] = field(default_factory=list)
    recompute_rows: list[RecomputeRow] = field(default_factory=list)

    def in_forward(self, saved: Iterable[int]) -> set[int]:
        """The problem nodes the forward runs when ``saved`` is saved."""
        inputs: dict[int, list[int]] = {}
        for v, users in self.readers.items():
            for u in users:
                inputs.setdefault(u, []).append(v)
        out: set[int] = set()
        stack = list(self.always) + list(saved)
        while stack:
            v = stack.pop()
            if v not in out:
                out.add(v)
                stack.extend(inputs.get(v, ()))
        return out

    def needed_at(self, recomputed: Iterable[int]) -> dict[int, int]:
        """For each recomputed value, the first backward node that needs it: reads it, or
        reads a recomputed value computed from it (values read by none are left out)."""
        need: dict[int, int] = {}
        for v in sorted(recomputed, key=lambda v: -self.step[v]):  # readers come first
            times = [need[w] for w in self.readers.get(v, ()) if w in need]
            if v in self.first_read:
                times.append(self.first_read[v])
            if times:
                need[v] = min(times)
        return need

    def row_values(self, saved: Iterable[int], recomputed: Iterable[int]) -> list[int]:
        """Each row's bytes for the plan saving ``saved`` and recomputing ``recomputed``
        (problem node indices): the forward's steps, the backward's nodes, then the
        recomputations the plan makes at their homes. Each literal is decided once, and
        each storage's held events become intervals summed over the rows by sweeps."""
        kept, redo = set(saved), set(recomputed)
        ran = self.in_forward(kept)
        need = self.needed_at(redo)
        decided: dict[int, bool] = {}  # id(literal) -> whether it holds for this plan

        def holds(lit: Literal) -> bool:
            got = decided.get(id(lit))
            if got is None:
                got = decided[id(lit)] = _holds(lit, kept, redo, ran, need)
            return got

        out = self._forward_rows(holds)
        held = [[(a, b) for a, b, lit in events if holds(lit)] for events in self.bw_events]
        out += self._backward_rows(held)
        out += self._recompute_rows(held, holds, need)
        return out

    def _forward_rows(self, holds: Callable[[Literal], bool]) -> list[int]:
        """A storage counts at step t from ``enters`` on while an event holding ends at or
        after t: from its entry through its latest holding event's step."""
        delta = [0] * (self.forward_steps + 1)
        for k, events in enumerate(self.events):
            last = max((p for p, lit in events if holds(lit)), default=-1)
            first, last = max(self.enters[k], 0), min(last, self.forward_steps - 1)
            if first <= last:
                delta[first] += self.storage_bytes[k]
                delta[last + 1] -= self.storage_bytes[k]
        return list(itertools.accumulate(delta[:-1]))

    def _backward_rows(self, held: list[list[tuple[int, int]]]) -> list[int]:
        """A backward node's row: its constant, plus each storage not excluded there that
        an event holding covers (summed over all storages, less those excluded)."""
        positions = sorted({row.position for row in self.rows})
        index = {t: i for i, t in enumerate(positions)}
        delta = [0] * (len(positions) + 1)
        for k, spans in enumerate(held):
            covered = -1  # positions[: covered + 1] already count storage k
            for a, b in sorted(spans):
                lo = max(bisect.bisect_left(positions, a), covered + 1)
                hi = bisect.bisect_right(positions, b) - 1
                if lo <= hi:
                    delta[lo] += self.storage_bytes[k]
                    delta[hi + 1] -= self.storage_bytes[k]
                    covered = hi
        alive = list(itertools.accumulate(delta[:-1]))
        out = []
        for row in self.rows:
            t = row.position
            total = row.const + alive[index[t]]
            for k in set(row.excluded):
                if any(a <= t <= b for a, b in held[k]):
                    total -= self.storage_bytes[k]
            out.append(total)
        return out

    def _recompute_rows(
        self,
        held: list[list[tuple[int, int]]],
        holds: Callable[[Literal], bool],
        need: dict[int, int],
    ) -> list[int]:
        """The rows of the recomputations this plan makes where they are: each storage
        (not a copy, not excluded) that an event holding keeps alive from the backward's
        start through the row, or that is one of the row's ``extra`` holding there."""
        # the last row through which a storage is alive from the backward's start
        reach = [max((b for a, b in spans if a <= -1), default=None) for spans in held]
        out = []
        for rrow in self.recompute_rows:
            if need.get(rrow.value) != rrow.through:
                continue
            skipped = self.copies.union(rrow.excluded)
            extra = {j for j, lit in rrow.extra if holds(lit)}
            total = rrow.const
            for k, last in enumerate(reach):
                if k not in skipped and (k in extra or (last is not None and last >= rrow.through)):
                    total += self.storage_bytes[k]
            out.append(total)
        return out

    def refine(self, saved: Iterable[int], recomputed: Iterable[int]) -> int:
        """Add the events that hold for this plan at the times the backward first needs
        its recomputed values (the built events know only a few such times per value: its
        earliest, its home, its readers'): a saved or recomputed value is alive until
        every recomputed value reading it has run, a recomputed one from when it is first
        needed. Each event holds for every plan where its condition does, so the bound
        stays a bound; the search calls this with each plan that did not fit, so that no
        later plan passes the rows by the same gap. Returns how many events were new."""
        kept, redo = set(saved), set(recomputed)
        need = self.needed_at(redo)
        seen = {(k, e) for k, events in enumerate(self.bw_events) for e in events}
        added = 0

        def add(k: int, event: Event) -> None:
            nonlocal added
            if (k, event) not in seen:
                seen.add((k, event))
                self.bw_events[k].append(event)
                added += 1

        for u, readers in self.readers.items():
            if u not in kept and u not in redo:
                continue
            for k, copy, chain in self.holders.get(u, ()):
                for w in readers:
                    t = need.get(w, 0)
                    if w not in redo or t < 1:
                        continue
                    later = ((w, t),)
                    for j, held in enumerate(chain or (u,)):
                        lit = ("AND", (held,), (chain or ())[:j] + (w,), (), later)
                        add(k, (-1, t - 1, lit))
                    start = need.get(u)
                    if chain is not None and start is not None and start <= t - 1:
                        lit = ("AND", (), chain + (w,), ((u, start),), later)
                        add(copy, (start, t - 1, lit))
                start = need.get(u)
                read = self.first_read.get(u)
                if chain is not None and start is not None and read is not None and start < read:
                    lit = ("AND", (), chain, ((u, start),), ())
                    add(copy, (start, self.last_read[u], lit))
        return added

    def floor(self) -> int:
        """The highest row of the plan that saves and recomputes nothing (what its forward
        runs for the outputs, what the backward holds under every plan): no plan's
        predicted peak is lower, whether it recomputes values once or more, for every
        row grows with what a plan saves and recomputes, and what is counted without a
        decision is alive whatever the backward's schedule."""
        delta = [0] * (self.forward_steps + 1)
        for k, events in enumerate(self.events):
            ends = [
                p
                for p, lit in events
                if lit[0] == "1" or lit == ("x", lit[1]) and lit[1] in self.always
            ]
            if ends and max(ends) >= self.enters[k]:
                delta[self.enters[k]] += self.storage_bytes[k]
                delta[min(max(ends), self.forward_steps - 1) + 1] -= self.storage_bytes[k]
        live, forward = 0, 0
        for t in range(self.forward_steps):
            live += delta[t]
            forward = max(forward, live)
        return max([forward] + [row.const for row in self.rows])
