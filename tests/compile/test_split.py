"""budget.compile.split: each saved set is extracted once and every use of it gets graphs of
its own, and what a rescheduled backward is predicted to peak through the memos is what its
graphs are predicted to peak afresh.

Oracles: a counter on torch's extraction; the graphs' own code; budget.compile.peak run on
the final graphs with no memo.
"""

from __future__ import annotations

import pytest
import torch

from budget.compile import split
from budget.compile.layout import copied_inputs, handed_channels_last, runs_channels_last
from budget.compile.peak import predict_peak
from budget.models import get_builtin
from tests.helpers.partitions import ONCE, capture

SMALL = {
    "gpt": dict(layers=2, d=64, heads=2, seq=64, batch=2, vocab=256),
    # convolutions: workspaces that differ by the clone's sizes
    "resnet": dict(batch=2, size=16, width=8, blocks=2),
}


def _captured(model: str = "gpt"):
    torch.manual_seed(0)
    return capture(get_builtin(model, **SMALL[model]), "eager")


@pytest.fixture
def extracted(monkeypatch) -> list[int]:
    """One entry per call of torch's extraction (split.extract) from here on."""
    calls: list[int] = []
    real = split.extract

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(split, "extract", counted)
    return calls


def test_a_saved_set_is_extracted_once_and_each_use_gets_graphs_of_its_own(extracted):
    """Saving nothing, once with each value recomputed once and once rescheduled below the
    b=1 plan's peak: one extraction, two pairs of graphs sharing no node, and rescheduling
    the second leaves the first's code as it was."""
    got = _captured()
    extracted.clear()
    plan = got.plan([], limit=ONCE)
    fw1, bw1, once = got.partitions.graphs(plan, limit=ONCE)
    code = (fw1.code, bw1.code)
    fw2, bw2, lowered = got.partitions.graphs(plan, limit=None)
    assert lowered.recomputed_again and not once.recomputed_again
    assert len(extracted) <= 1  # none where planning the step extracted this set already
    assert set(bw1.graph.nodes).isdisjoint(bw2.graph.nodes)
    assert set(fw1.graph.nodes).isdisjoint(fw2.graph.nodes)
    assert (fw1.code, bw1.code) == code
    assert fw2.code == fw1.code and bw2.code != bw1.code


@pytest.mark.parametrize("model", sorted(SMALL))
def test_a_rescheduled_backwards_peak_is_its_graphs_peak_predicted_afresh(model):
    """The rescheduler predicts hundreds of backwards through memos (each node's storages
    and workspace, the forward's walk, calls made again by clones); the peak and the live
    bytes after every step it reports are those of its final graphs predicted with none."""
    got = _captured(model)
    limit = int(0.7 * got.partitions.reference_peak())  # below b=1's: rescheduled
    plan = got.plan([], limit=limit)
    assert plan.recomputed_again
    fw, bw, told = got.partitions.graphs(plan, limit=limit)
    n = got.partitions.num_fwd_outputs
    copies = copied_inputs(fw, n, "eager")
    channels_last = runs_channels_last(fw, "eager")
    fresh = predict_peak(
        fw,
        bw,
        num_user_outputs=n,
        copied=frozenset(copies),
        channels_last=channels_last,
        handed_channels_last=handed_channels_last(fw, copies.keys(), channels_last),
    )
    assert told.peak_bytes == fresh.peak_bytes
    assert [p.live_bytes for p in told.timeline] == [p.live_bytes for p in fresh.timeline]


def test_partitions_of_one_graph_sharing_what_they_told_partition_a_saved_set_once(extracted):
    """The attempts that plan one graph again for a peak budget each make a Partitions of
    it, sharing what each saved set told (PlanLog.predictions): the second asked for a
    plan extracts nothing and tells what the first told, which is what a Partitions
    sharing nothing tells afresh, rescheduled backward and b=1 peak included."""
    got = _captured()
    p = got.partitions
    limit = int(0.7 * p.reference_peak())
    plans = [got.plan([], limit=ONCE), got.plan([], limit=limit)]
    assert plans[1].recomputed_again

    def made(shared):  # type: ignore[no-untyped-def]
        args = (p.joint_module, p.nodes, p.node_info, p.num_fwd_outputs, p.settings)
        return split.Partitions(*args, predictions=shared, graph_hash="the graph")

    extracted.clear()
    asked = list(zip(plans, (ONCE, limit), strict=True))
    shared: dict = {}
    one = made(shared)
    first = [one.predicted(q, limit=lim) for q, lim in asked]
    assert extracted
    extracted.clear()
    two = made(shared)
    again = [two.predicted(q, limit=lim) for q, lim in asked]
    assert extracted == [] and two.reference_peak() == p.reference_peak()
    alone = made(None)
    afresh = [alone.predicted(q, limit=lim) for q, lim in asked]
    assert extracted  # sharing nothing, it partitions
    for a, b, c in zip(first, again, afresh, strict=True):
        assert a == b == c
