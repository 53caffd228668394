"""Plan files: solve once, train many times.

``budget solve ... --json plan.json`` (or :func:`save_plans`) writes the plans of a
training step; ``budget.backend(plan="plan.json")`` applies them at every compile instead
of solving. A step with graph breaks has one plan per graph, so a file holds either one
Plan's JSON (what :meth:`Plan.from_json` reads) or ``{"version": N, "plans": [...]}``, N
being ``PLAN_FORMAT_VERSION``.

A plan is applied only to the graph it was made for. Each compiled graph is matched by
``graph_hash`` (the joint graph's ops, arguments, shapes and dtypes: it changes with the
model, the input shapes and dtypes, the compiler pipeline and, in practice, the torch
version), then the plan's saved set is taken by node name and checked against the graph:
every name must exist, the plan must be valid (nothing forbidden recomputed) and must
save exactly the bytes and recompute exactly the nodes it says. Anything else raises
:class:`PlanMismatchError` naming both hashes and how to make a fresh plan; there is no
silent fallback to solving.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import PlanMismatchError
from .plan import PLAN_FORMAT_VERSION, READABLE_VERSIONS, Plan
from .problem import Problem

PlanSource = str | os.PathLike | Plan | Sequence[Plan]

REGENERATE = (
    "make a fresh plan for this model, inputs and compiler with "
    "budget.save_plans(budget.plans(step, *args, compiler=...), PATH)"
)


def dumps_plans(plans: Plan | Sequence[Plan]) -> str:
    """JSON for a plan file: one plan as its own JSON, several as a versioned list."""
    plans = [plans] if isinstance(plans, Plan) else list(plans)
    if not plans:
        raise ValueError("no plans to write")
    if len(plans) == 1:
        return plans[0].to_json()
    body = {"version": PLAN_FORMAT_VERSION, "plans": [p.to_dict() for p in plans]}
    return json.dumps(body, indent=2)


def save_plans(plans: Plan | Sequence[Plan], path: str | os.PathLike) -> None:
    """Write a plan file that :func:`load_plans` and ``budget.backend(plan=path)`` read."""
    Path(path).write_text(dumps_plans(plans) + "\n")


def loads_plans(text: str, source: str = "<text>") -> list[Plan]:
    """The plans in plan-file JSON: one plan, ``{"version", "plans"}`` or a list of plans."""
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{source} is not a budget plan file: invalid JSON ({e})") from None
    if isinstance(data, dict) and "plans" in data:
        if data.get("version") not in READABLE_VERSIONS:
            raise ValueError(
                f"{source}: plan file version {data.get('version')!r} is not supported "
                f"(this budget reads versions {', '.join(map(str, READABLE_VERSIONS))})"
            )
        items = data["plans"]
    elif isinstance(data, list):
        items = data
    else:
        items = [data]
    if not isinstance(items, list) or not items:
        raise ValueError(f"{source} is not a budget plan file: it holds no plans")
    plans = []
    for item in items:
        try:
            plans.append(Plan.from_dict(item))
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None
    return plans


def load_plans(source: PlanSource) -> list[Plan]:
    """The plans of a plan file (a path), or of a Plan or a list of Plans as given."""
    if isinstance(source, Plan):
        return [source]
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"plan file {str(path)!r} does not exist")
        return loads_plans(path.read_text(), source=repr(str(path)))
    plans = list(source)
    if not plans or not all(isinstance(p, Plan) for p in plans):
        raise ValueError(
            "plan must be a path to a plan file, a budget.Plan or a non-empty list of Plans"
        )
    return plans


@dataclass
class PlanBook:
    """Saved plans by graph hash, and where they came from (for error messages)."""

    plans: list[Plan]
    source: str

    @classmethod
    def load(cls, source: PlanSource) -> PlanBook:
        where = repr(str(source)) if isinstance(source, (str, os.PathLike)) else "the given plans"
        return cls(load_plans(source), where)

    def for_graph(self, graph_hash: str, compiler: str = "", torch_version: str = "") -> Plan:
        """The plan made for ``graph_hash``; PlanMismatchError when there is none, saying
        why where it can (plans made for another ``compiler`` or ``torch_version``)."""
        for plan in self.plans:
            if plan.graph_hash == graph_hash:
                return plan
        known = ", ".join(sorted({p.graph_hash for p in self.plans}))
        hints = []
        made_for = {p.compiler for p in self.plans if p.compiler}
        if compiler and made_for and compiler not in made_for:
            hints.append(
                f"the plans were made for compiler={'/'.join(sorted(made_for))!s} and this "
                f"backend compiles with {compiler} (plan with compiler={compiler!r})"
            )
        versions = {p.torch_version for p in self.plans}
        if torch_version and versions - {torch_version}:
            hints.append(
                f"they were made with torch {', '.join(sorted(versions))}, this is "
                f"torch {torch_version}"
            )
        why = "; ".join(hints) or (
            "the model, its input shapes or dtypes, or the compiler changed since it was made"
        )
        raise PlanMismatchError(
            f"plan {self.source} has no plan for graph {graph_hash} (it has plans for "
            f"graph {known}): {why}. Not applying it: {REGENERATE}"
        )


def saved_indices(problem: Problem, plan: Plan, source: str = "the plan") -> list[int]:
    """The problem indices ``plan`` saves, after checking it fits ``problem`` exactly."""

    def refuse(what: str) -> PlanMismatchError:
        return PlanMismatchError(
            f"plan {source} for graph {plan.graph_hash} does not fit graph "
            f"{problem.graph_hash}: {what}. Not applying it: {REGENERATE}"
        )

    index = {name: i for i, name in enumerate(problem.names)}
    missing = [d.name for d in plan.decisions if d.name not in index]
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        raise refuse(f"its nodes {shown} are not in the graph")
    saved = sorted(index[name] for name in plan.kept)
    # an offload's own check is torch's offload pass (budget.compile.split), which knows
    # what it can move whether or not this problem prices offload
    errors = problem.check(saved)
    if errors:
        raise refuse("; ".join(errors[:3]))
    nbytes = problem.saved_bytes(saved, [index[name] for name in plan.offloaded])
    if plan.saved_bytes > plan.target_bytes and plan.status != "reference":
        raise refuse(f"it saves {plan.saved_bytes} bytes, over its own target {plan.target_bytes}")
    if nbytes != plan.saved_bytes:
        raise refuse(f"it would save {nbytes} bytes, not the {plan.saved_bytes} it says")
    recomputed = {problem.names[v] for v in problem.recompute_closure(saved)}
    if recomputed != set(plan.recomputed):
        raise refuse(
            f"the graph would recompute {len(recomputed)} nodes, not the "
            f"{len(plan.recomputed)} the plan lists"
        )
    return saved
