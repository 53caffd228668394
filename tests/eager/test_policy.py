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


@pytest.mark.parametrize(
    "call",
    [
        lambda x, w, b, rm, rv: aten.native_batch_norm.default(x, w, b, rm, rv, True, 0.1, 1e-5),
        lambda x, w, b, rm, rv: aten._native_batch_norm_legit.default(
            x, w, b, rm, rv, True, 0.1, 1e-5
        ),
        lambda x, w, b, rm, rv: aten._batch_norm_with_update.default(x, w, b, rm, rv, 0.1, 1e-5),
    ],
    ids=["native", "legit", "with_update"],
)
def test_a_recomputed_batchnorm_leaves_the_running_statistics_alone(call):
    """StatsAside (under the recompute context) gives BatchNorm copies of its running
    statistics: the outputs are the same, the statistics untouched; without it, the same
    call updates them (which a recomputation would do a second time)."""
    from budget.eager.policy import StatsAside

    x, w, b = torch.randn(4, 3, 5, 5), torch.randn(3), torch.randn(3)
    rm, rv = torch.zeros(3), torch.ones(3)
    with StatsAside():
        aside = call(x, w, b, rm, rv)
    assert torch.equal(rm, torch.zeros(3)) and torch.equal(rv, torch.ones(3))
    plain = call(x, w, b, rm, rv)
    assert not torch.equal(rm, torch.zeros(3))  # the op does update them
    torch.testing.assert_close(aside[0], plain[0], rtol=0, atol=0)
    with StatsAside():  # an overload with no statistics passes through
        aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5)
