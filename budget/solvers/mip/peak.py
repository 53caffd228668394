"""Plans cheapest first under a peak limit: the closure ILP with the liveness bound's rows,
in OR-Tools CP-SAT, for the exact peak search (:mod:`budget.compile.peak_search`).

Data: a :class:`~budget.core.problem.Problem`, its
:class:`~budget.core.liveness.LivenessBound`, the peak limit, and the memory budget's cap on
saved bytes, all in one unit that divides every size, constant and the limit (so the rows
are exact). Variables: the closure model's s, r, y booleans
(:mod:`budget.solvers.mip.cpsat`); ``x[v]``, v runs in the forward; ``N(v, t)``, v is
recomputed and first needed by backward node t (each an exact OR over v's readers, made
on demand); and, per event literal, a boolean at least the AND of its conditions.
Constraints: the closure ILP's, and one row per step of the bound, at most the limit: the
forward's through a running sum ``F[t]`` of the storages alive at step t (an OR of the
events covering it), the backward nodes' through ``G[t]`` (the forward's storages) and
``C[t]`` (the backward's copies) less what the row counts in its constant, and each
recomputation's row enforced only when the plan first needs the value at its home.
Objective: the recompute cost (integer units); among the cheapest, a second solve of at
most ``SECOND_SOLVE_S`` lowers the highest row (``top``).

:meth:`PeakModel.next` returns the cheapest plan not yet excluded;
:meth:`PeakModel.exclude` rules out a recompute set with the saved sets that contain a
given one (saving more for the same recomputation never lowers a peak), and
:meth:`PeakModel.cheaper_than` keeps only plans cheaper than one found.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from ...core.liveness import LivenessBound
from ...core.problem import Problem
from .enumerated import Enumerated, Next

SECOND_SOLVE_S = 1.0  # the tie-break's time: the lowest rows among the cheapest plans


class PeakModel(Enumerated):
    LINEARIZATION = 2  # one-off: 0.5 s, not 7.5, to solve the built-in GPT

    def __init__(
        self,
        problem: Problem,
        bound: LivenessBound,
        limit_bytes: int,
        cap_bytes: int | None,
        *,
        workers: int = 1,
        seed: int = 0,
    ) -> None:
        super().__init__(problem, cap_bytes, workers=workers, seed=seed)
        model, s = self.model, self.s
        self._bound = bound
        self._needs: dict[tuple[int, int], object] = {}
        _break_view_symmetry(model, problem, s, self.r)
        # one unit divides every size, constant and the limit: the rows are exact
        consts = [row.const for row in bound.rows] + [r.const for r in bound.recompute_rows]
        unit = math.gcd(limit_bytes, *bound.storage_bytes, *consts) or 1
        size = [b // unit for b in bound.storage_bytes]
        cap = limit_bytes // unit
        total = sum(size)
        # top: the highest row, minimised among the cheapest plans (the likeliest to fit)
        self.top = model.new_int_var(0, total + cap + 1, "top")
        model.add(self.top <= cap)
        self._true = model.new_bool_var("true")
        model.add(self._true == 1)
        # x[v]: v runs in the forward (saved, needed by the outputs, or read there)
        self._x = x = {v: model.new_bool_var(f"x{v}") for v in bound.readers}
        for v, xv in x.items():
            if v in bound.always:
                model.add(xv == 1)
            if v in s:
                model.add_implication(s[v], xv)
            for u in bound.readers[v]:
                model.add_implication(x[u], xv)
        self._both: dict[tuple, object] = {}
        self._forward_rows(size, total)
        self._backward_rows(size, total, unit)

    def _literal(self, lit: tuple) -> object | None:
        """The model's boolean for a bound's literal (None: it never holds)."""
        model, s, r = self.model, self.s, self.r
        if lit[0] == "1":
            return self._true
        if lit[0] in ("s", "x", "r"):
            return {"s": s, "x": self._x, "r": r}[lit[0]].get(lit[1])
        if lit in self._both:
            return self._both[lit]
        _, saved, redone, sooner, later = lit
        if any(v not in s for v in saved) or any(v not in r for v in redone):
            return None
        terms = [s[v] for v in saved] + [r[v] for v in redone]
        for v, t in sooner:  # recomputed and first needed by node t
            need = self._need_by(model, v, t)
            if need is None:
                return None
            terms.append(need)
        for v, t in later:  # recomputed and not needed before node t
            if v not in r:
                return None
            terms.append(r[v])
            early = self._need_by(model, v, t - 1)
            if early is not None:
                terms.append(early.Not())
        z = self._both[lit] = self._and(model, terms)
        return z

    def _forward_rows(self, size: list[int], total: int) -> None:
        """F[t] = bytes of the storages alive at forward step t, from the last step back,
        each at most ``top``."""
        model, bound = self.model, self._bound
        switch = self._switches(model, bound.events, size, self._literal)
        leave: dict[int, list[int]] = {}  # step -> storages made at the step after it
        for k, t in enumerate(bound.enters):
            leave.setdefault(t - 1, []).append(k)
        alive: dict[int, object] = {}
        last = None
        for t in range(bound.forward_steps - 1, -1, -1):
            terms = [-size[k] * alive.pop(k) for k in leave.get(t, []) if k in alive]
            terms += self._switch(switch.get(t, []), size, alive)
            if terms or last is None:
                last = self._sum(model, last, terms, total, f"F{t}")
                model.add(last <= self.top)

    def _backward_rows(self, size: list[int], total: int, unit: int) -> None:
        """G[t] = bytes of the forward's storages a plan keeps alive at backward row t, C[t]
        those of the backward's copies of recomputed values; then each row (and each
        recomputation's) at most ``top``."""
        model, bound, r = self.model, self._bound, self.r
        originals = [ev if k not in bound.copies else [] for k, ev in enumerate(bound.bw_events)]
        copies = [ev if k in bound.copies else [] for k, ev in enumerate(bound.bw_events)]
        g_switch = self._intervals(model, originals, size, self._literal)
        c_switch = self._intervals(model, copies, size, self._literal)
        steps = max((row.position for row in bound.rows), default=-1) + 1
        alive: dict[int, object] = {}  # storage -> its "alive at row t" boolean
        g = c = None
        rows = {row.position: row for row in bound.rows}
        through: dict[int, list] = {}
        for rrow in bound.recompute_rows:
            if rrow.value in r:
                through.setdefault(rrow.through, []).append(rrow)
        for t in range(steps - 1, -1, -1):
            terms = self._switch(g_switch.get(t, []), size, alive)
            if terms or g is None:
                g = self._sum(model, g, terms, total, f"G{t}")
            terms = self._switch(c_switch.get(t, []), size, alive)
            if terms or c is None:
                c = self._sum(model, c, terms, total, f"C{t}")
            if t in rows:
                row = rows[t]
                minus = sum(size[k] * alive[k] for k in row.excluded if k in alive)
                model.add(row.const // unit + g + c - minus <= self.top)
            for rrow in through.get(t, []):  # recomputations just before node t
                self._recompute_row(model, rrow, g, alive, size, unit, self._literal, r)

    def _recompute_row(self, model, rrow, running, alive, size, unit, literal, r) -> None:  # type: ignore[no-untyped-def]
        """While ``rrow.value`` is recomputed (when it is): what is alive across, the
        storages alive through its row, and its value and inputs."""
        excluded = set(rrow.excluded)
        expr = rrow.const // unit + running
        expr -= sum(size[k] * alive[k] for k in excluded if k in alive)
        extra: dict[int, list[object]] = {}
        for k, lit in rrow.extra:
            x = literal(lit)
            if x is not None and size[k] and k not in excluded:
                extra.setdefault(k, []).append(x)
        for k, xs in extra.items():
            now = self._or(model, xs + ([alive[k]] if k in alive else []))
            expr += size[k] * now - (size[k] * alive[k] if k in alive else 0)
        when = [r[rrow.value]]  # recomputed, and first needed at its row
        early = self._need_by(model, rrow.value, rrow.through - 1)
        if early is not None:
            when.append(early.Not())
        on_time = self._need_by(model, rrow.value, rrow.through)
        if on_time is None:
            return  # never needed there: it never runs there
        when.append(on_time)
        model.add(expr <= self.top).only_enforce_if(when)

    def _need_by(self, model, v: int, t: int):  # type: ignore[no-untyped-def]
        """A boolean equal to "the plan recomputes ``v`` and the backward needs it by node
        ``t``" (a node up to ``t`` reads it, or reads a recomputed value made from it), or
        None where no plan does."""
        memo = self._needs
        if (v, t) in memo:
            return memo[v, t]
        memo[v, t] = None  # the graph is acyclic: a placeholder against re-entry
        r, bound = self.r, self._bound
        if v not in r or t < 0:
            return None
        terms = [r[v]] if bound.first_read.get(v, t + 1) <= t else []
        for w in bound.readers.get(v, ()):
            sub = self._need_by(model, w, t)
            if sub is not None:
                both = model.new_bool_var("")
                model.add_min_equality(both, [r[v], sub])
                terms.append(both)
        if not terms:
            return None
        need = terms[0] if len(terms) == 1 else model.new_bool_var("")
        if len(terms) > 1:
            model.add_max_equality(need, terms)
        memo[v, t] = need
        return need

    def _switches(self, model, events, size, literal):  # type: ignore[no-untyped-def]
        """The forward's events, ``(last step, literal)``: as intervals from the start."""
        spans = [[(-(1 << 30), p, lit) for p, lit in evs] for evs in events]
        return self._intervals(model, spans, size, literal)

    def _intervals(self, model, events, size, literal):  # type: ignore[no-untyped-def]
        """Step -> [(storage, alive at this step, alive at the next)], walking the steps
        down: a storage is alive at a step while one of its events ``(first, last,
        literal)`` covering the step holds (an OR of them; None: none covers it)."""
        switch: dict[int, list[tuple[int, object | None, object | None]]] = {}
        for k, evs in enumerate(events):
            if not size[k]:
                continue
            evs = [(a, b, x) for a, b, e in evs if (x := literal(e)) is not None]
            points = sorted({b for _, b, _ in evs} | {a - 1 for a, _, _ in evs}, reverse=True)
            prev = None
            for t in points:
                active = [x for a, b, x in evs if a <= t <= b]
                now = self._or(model, active) if active else None
                if now is not prev:
                    switch.setdefault(t, []).append((k, now, prev))
                    prev = now
        return switch

    @staticmethod
    def _switch(changes, size, alive) -> list:  # type: ignore[no-untyped-def]
        terms = []
        for k, now, prev in changes:
            if now is not None:
                terms.append(size[k] * now)
                alive[k] = now
            else:
                alive.pop(k, None)
            if prev is not None:
                terms.append(-size[k] * prev)
        return terms

    @staticmethod
    def _sum(model, last, terms, total, name):  # type: ignore[no-untyped-def]
        var = model.new_int_var(0, total, name)
        model.add(var == (last if last is not None else 0) + sum(terms))
        return var

    @staticmethod
    def _and(model, xs):  # type: ignore[no-untyped-def]
        """A boolean at least the AND of ``xs`` (the rows push it down to it)."""
        if len(xs) == 1:
            return xs[0]
        z = model.new_bool_var("")
        model.add_bool_or([x.Not() for x in xs] + [z])
        return z

    @staticmethod
    def _or(model, xs: Sequence[object]):  # type: ignore[no-untyped-def]
        if len(xs) == 1:
            return xs[0]
        a = model.new_bool_var("")
        for x in xs:
            model.add_implication(x, a)
        return a

    def next(self, time_limit: float) -> Next:
        """The cheapest plan left and, among those as cheap, the one whose highest row is
        lowest (a second solve, when the first proved its cost)."""
        cp = self._cp
        start = time.perf_counter()
        solver, status = self._solve(self.model, time_limit)
        if status == cp.INFEASIBLE:
            return Next(None, exhausted=True)
        if status not in (cp.OPTIMAL, cp.FEASIBLE):
            return Next(None, exhausted=False)
        saved = self.saved_in(solver)
        left = time_limit - (time.perf_counter() - start)
        if status == cp.OPTIMAL and left > 0:
            lowest = self.model.clone()
            var = lowest.get_bool_var_from_proto_index
            lowest.add(
                sum(c * var(self.r[v].index) for v, c in self.weights.items())
                <= int(round(solver.objective_value))
            )
            lowest.minimize(lowest.get_int_var_from_proto_index(self.top.index))
            for x in self.s.values():
                lowest.add_hint(var(x.index), solver.value(x))
            # proving the lowest takes seconds (7 s on the built-in GPT): a good one will do
            second, status = self._solve(lowest, min(left, SECOND_SOLVE_S))
            if status in (cp.OPTIMAL, cp.FEASIBLE):
                saved = self.saved_in(second, lowest)
        return Next(saved, exhausted=False)


def _break_view_symmetry(model, problem: Problem, s, r) -> None:  # type: ignore[no-untyped-def]
    """Views that cost nothing to recompute and hold no storage of their own are saved or
    recomputed alike (same cost, same bytes, same peak): a view of a graph input is never
    saved, and a view is not saved beside the value whose storage it shares. Otherwise
    the search would meet the same plan once per way of deciding its views."""
    inputs = problem.inputs
    for v, sv in s.items():
        if problem.cost[v] != 0 or v not in r:
            continue
        g = int(problem.storage[v])
        if g < 0:
            continue
        if problem.storage_bytes[g] == 0:
            model.add(sv == 0)
            continue
        for u in inputs[v]:
            if u in s and int(problem.storage[u]) == g:
                model.add_bool_or([sv.Not(), s[u].Not()])
