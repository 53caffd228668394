"""Eager selective checkpointing: budget's plans without torch.compile.

``budget.apply(model, *example_inputs, memory_budget=0.5)`` plans a training step and
checkpoints the chosen modules in place, each with a per-op save/recompute policy taken
from the plan; ``budget.unapply(model)`` restores the model. The layers:

- :mod:`.regions`: which modules may be checkpointed (the candidates);
- :mod:`.fake`:    the model and inputs swapped for fake tensors (the fake runs below);
- :mod:`.trace`:   the step traced on fake tensors, as selective checkpointing sees it;
- :mod:`.reads`:   values the step reads from tensor data (data-dependent Python);
- :mod:`.problem`: the trace -> a Problem, for a set of checkpointed regions;
- :mod:`.planner`: budget semantics and the choice of regions -> :class:`EagerPlan`;
- :mod:`.peak`:    a plan's predicted peak: the step run on fake tensors with it applied;
- :mod:`.policy`:  a region's policy for ``torch.utils.checkpoint``;
- :mod:`.install`: a plan installed on the model in place, and unapply;
- :mod:`.apply`:   apply, and its previews plan and sweep;
- :mod:`.measure`: what an eager step really keeps after its forward;
- :mod:`.report`:  an eager plan as text.
"""

from __future__ import annotations

from .apply import apply, plan, sweep
from .install import applied_plan, unapply
from .plan import EagerPlan, RegionChoice

__all__ = ["EagerPlan", "RegionChoice", "applied_plan", "apply", "plan", "sweep", "unapply"]
