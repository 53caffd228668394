"""eager/policy.py: the k-th op call gets the k-th choice, in the forward and again in
the recomputation where torch asks there too (torch before 2.13)."""

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy, SelectiveCheckpointContext

from budget.eager.plan import RegionChoice
from budget.eager.policy import RegionPolicy, _Pass
from budget.errors import PlanMismatchError

aten = torch.ops.aten
OPS = [aten.mm.default, aten.relu.default, aten.mm.default]
CHOICE = RegionChoice(
    "blocks.0", "M.blocks.0", True, [str(op) for op in OPS], ["save", "recompute", "recompute"]
)
SAVE, RECOMPUTE = CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_RECOMPUTE


def _ask(p: _Pass, recompute: bool, ops=OPS) -> list[CheckpointPolicy]:
    x = torch.ones(2, 2)  # real tensors: an eager step, checked call by call
    return [p(SelectiveCheckpointContext(is_recompute=recompute), op, x, x) for op in ops]


def test_the_recomputation_is_counted_apart_from_the_forward():
    p = _Pass(RegionPolicy(CHOICE))
    assert _ask(p, False) == [SAVE, RECOMPUTE, RECOMPUTE]
    assert _ask(p, True) == [SAVE, RECOMPUTE, RECOMPUTE]
    # early stop: a recomputation may end before the region does; the forward still ends
    with pytest.raises(PlanMismatchError, match="end of the region"):
        _ask(p, False, [aten.mm.default])


def test_another_op_in_the_recomputation_is_refused():
    p = _Pass(RegionPolicy(CHOICE))
    _ask(p, False)
    with pytest.raises(PlanMismatchError, match="relu"):
        _ask(p, True, [aten.relu.default])
