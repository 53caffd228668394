"""``EagerPlan``: a Plan plus, per candidate module, whether it is checkpointed and how.

An eager plan is a :class:`~budget.core.plan.Plan` (decisions per value, totals, provenance;
``str(plan)`` prints the usual report) with one :class:`RegionChoice` per candidate module:
whether its forward is checkpointed and, when it is, the selective-checkpoint policy of
each of its op calls, in call order (``save``: cached in forward; ``recompute``: run again
in backward, or not at all after the region's last saved tensor). The op names are kept
so that applying a plan checks each call against the op it was planned for. A plan made
with offload also lists, in order, the tensors autograd saves around the model's forward
outside checkpointed modules (:class:`SaveChoice`), each moved to host memory or not
(:mod:`budget.eager.hooks`). It round-trips through JSON like a Plan (``plan.to_json()``,
``EagerPlan.from_json(text)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from ..core.plan import Plan

Policy = Literal["save", "recompute"]


@dataclass
class RegionChoice:
    """What the plan does with one call of a candidate module's forward (most are called
    once a step; a layer shared across depth has a choice per call, in call order)."""

    module: str  # qualified name in the model ("blocks.0"; "" for the model itself)
    path: str  # as ModTracker names it ("GPT.blocks.0")
    checkpoint: bool
    ops: list[str] = field(default_factory=list)  # op overloads, in call order
    policy: list[Policy] = field(default_factory=list)  # one per op
    saved_bytes: int = 0  # bytes its cached values keep (with its inputs and RNG state)
    recompute_cost: float = 0.0  # in the plan's cost unit
    recompute_flops: float = 0.0
    reason: str = ""  # why it is not a region ("" when it is one)
    # where its backward begins in the plan's predicted timeline (the index of its first
    # point there), None where not predicted or not seen
    backward_at: int | None = None
    call: int = 0  # which call of the module's forward a step makes (0: its first)

    @property
    def key(self) -> tuple[str, int]:
        """The module and the call."""
        return (self.module, self.call)

    @property
    def label(self) -> str:
        """Its name in reports and messages: the module, and the call where not the first."""
        name = self.module or "(the model)"
        return f"{name} call {self.call}" if self.call else name

    @property
    def saved_ops(self) -> int:
        return sum(p == "save" for p in self.policy)

    @property
    def recomputed_ops(self) -> int:
        return sum(p == "recompute" for p in self.policy)


@dataclass
class SaveChoice:
    """One tensor autograd saves during the model's forward, outside checkpointed modules
    (their positional inputs included: checkpointing saves them there), in save order."""

    value: str  # the plan's name of the value saved
    shape: list[int]
    dtype: str  # as torch prints it ("torch.float32")
    offload: bool = False  # moved to host memory after the save, back before its use


@dataclass(frozen=True)
class EagerPlan(Plan):
    """A plan for eager selective checkpointing (``budget.apply``)."""

    regions: list[RegionChoice] = field(default_factory=list)
    saves: list[SaveChoice] = field(default_factory=list)  # empty: planned without offload
    # the step runs the model's forward once, and makes there every call of the modules it
    # runs several times: each run of the model's forward starts a step's count of them
    counted_from_model: bool = True

    @property
    def checkpointed(self) -> list[str]:
        """Qualified names of the modules whose forward is checkpointed (in some call),
        each once."""
        return list(dict.fromkeys(r.module for r in self.regions if r.checkpoint))

    def region(self, module: str, call: int = 0) -> RegionChoice:
        """The choice for ``module``'s forward (its ``call``-th run in a step)."""
        for r in self.regions:
            if r.key == (module, call):
                return r
        names = ", ".join(dict.fromkeys(r.module for r in self.regions))
        raise KeyError(f"no region {module!r} (call {call}); regions: {names}")

    @classmethod
    def from_dict(cls, data: Any) -> EagerPlan:
        if not isinstance(data, dict) or "regions" not in data:
            raise ValueError("not an eager plan: no 'regions' field (budget.apply makes them)")
        data = dict(data)
        try:
            regions = [RegionChoice(**r) for r in data.pop("regions")]
            saves = [SaveChoice(**s) for s in data.pop("saves", [])]
            counted = bool(data.pop("counted_from_model", True))
        except TypeError as e:
            raise ValueError(f"not an eager plan: {e}") from None
        base = Plan.from_dict(data)
        made = {f.name: getattr(base, f.name) for f in fields(Plan)}
        return cls(**made, regions=regions, saves=saves, counted_from_model=counted)

    @classmethod
    def from_json(cls, text: str) -> EagerPlan:
        import json

        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a budget plan: invalid JSON ({e})") from None
        return cls.from_dict(data)

    def __str__(self) -> str:
        from .report import eager_report

        return eager_report(self)
