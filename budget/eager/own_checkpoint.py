"""What the model's own checkpointing keeps for its backward, whatever budget's plan.

budget.apply leaves a module the model checkpoints itself (``torch.utils.checkpoint``)
alone, but what that checkpointing keeps is the step's: the CPU generator state it asks
for (``preserve_rng_state``) at each call, and, under a selective policy
(``create_selective_checkpoint_contexts``), the outputs of the ops the policy saves.
torch's caching mode holds those, not autograd's saved tensors, so the trace's saved-
tensor hooks never see them. While the step is traced, these context managers tell the
trace of each (:mod:`budget.eager.trace`, ``Trace.own_rng_states``, ``Trace.own_cached``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy

from ..runtime import _torch_private as T

_CHECKPOINT = os.path.join("torch", "utils", "checkpoint.py")


@contextlib.contextmanager
def rng_states_counted(note: Callable[[], None]) -> Iterator[None]:
    """Call ``note()`` for each CPU generator state ``torch.utils.checkpoint`` asks for."""
    original = torch.get_rng_state

    def counted() -> torch.Tensor:
        if sys._getframe(1).f_code.co_filename.endswith(_CHECKPOINT):
            note()
        return original()

    torch.get_rng_state = counted
    try:
        yield
    finally:
        torch.get_rng_state = original


@contextlib.contextmanager
def cached_values(note: Callable[[Any], None]) -> Iterator[None]:
    """Call ``note(out)`` with the outputs of each op call a selective checkpoint policy
    saves in a forward (torch's caching mode keeps them until the recomputation): the
    policy's own answer, as the mode asks it."""
    mode = T.CachingTorchDispatchMode
    original = mode.__torch_dispatch__

    def dispatch(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        policy_fn, answers = self.policy_fn, []

        def asked(*a: Any, **k: Any) -> Any:
            answers.append(policy_fn(*a, **k))
            return answers[-1]

        self.policy_fn = asked
        try:
            out = original(self, func, types, args, kwargs)
        finally:
            self.policy_fn = policy_fn
        if answers and answers[-1] in _SAVED:
            note(out)
        return out

    mode.__torch_dispatch__ = dispatch
    try:
        yield
    finally:
        mode.__torch_dispatch__ = original


# a policy's answers that cache the op's outputs (a bool policy: True)
_SAVED = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE, True)
