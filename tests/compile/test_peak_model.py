"""budget.compile.peak on hand-drawn forward/backward graphs with hand-computed peaks.

Values are real tensors of known sizes (1 MiB = 262144 float32) standing in for the
fake values the partitioner leaves in ``meta["val"]``; sharing a tensor object (or a
view of it) is sharing a storage, as in a real joint graph.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from budget.compile.peak import Memo, predict_peak

MiB = 2**20
aten = torch.ops.aten


def mib(n: float = 1) -> torch.Tensor:
    return torch.zeros(int(n * MiB) // 4)


class G:
    """A tiny graph builder: placeholders and ops with the value each one holds."""

    def __init__(self) -> None:
        self.graph = fx.Graph()

    def input(self, name: str, val: torch.Tensor) -> fx.Node:
        node = self.graph.placeholder(name)
        node.meta["val"] = val
        return node

    def op(self, name: str, target, args: tuple, val: torch.Tensor) -> fx.Node:
        node = self.graph.call_function(target, args)
        node.name = name
        node.meta["val"] = val
        return node

    def done(self, outputs: tuple) -> fx.GraphModule:
        self.graph.output(outputs)
        return fx.GraphModule(torch.nn.Module(), self.graph)


def test_a_user_output_that_is_also_saved_is_held_to_the_end_unless_a_graph_break_drops_it():
    #  forward:  x ─ sigmoid → s ; outputs (s [user], s [saved])
    #  backward: s, t ─ mul → g ─ cat(g, g) → h [2 MiB] ; outputs (h)
    #  live: fw s=1 | bw t: 2, g: 3, h: s + g + h = 4 -> peak 4 MiB (t, a gradient autograd
    #  made, is freed after its last read, g: torch 2.13's compiled backward takes its
    #  gradients in a list it clears; only the loss's 0-dim gradient is held to the end)
    x, s, t, g, h = mib(), mib(), mib(), mib(), mib(2)
    f = G()
    fx_ = f.input("x", x)
    fs = f.op("s", aten.sigmoid.default, (fx_,), s)
    fw = f.done((fs, fs))
    b = G()
    bs, bt = b.input("s", s), b.input("tangents_1", t)
    bg = b.op("g", aten.mul.Tensor, (bt, bs), g)
    bh = b.op("h", aten.cat.default, ([bg, bg],), h)
    bw = b.done((bh,))
    pred = predict_peak(fw, bw, num_user_outputs=1)
    assert pred.peak_bytes == 4 * MiB
    assert [p.live_bytes // MiB for p in pred.timeline] == [1, 1, 2, 3, 4]
    # past a graph break the code after the graph drops its output s: s is freed after
    # its last read (g), so at h: g + h = 3, as at g: s + t + g
    dropped = predict_peak(fw, bw, num_user_outputs=1, outputs_held=False)
    assert dropped.peak_bytes == 3 * MiB
    assert [p.live_bytes // MiB for p in dropped.timeline] == [1, 1, 2, 3, 3]


def test_a_recomputed_value_is_new_memory_even_when_a_view_of_its_twin_was_saved():
    #  forward:  x ─ relu → a ─ view → v ; a ─ sum → loss ; outputs (loss [user], v [saved])
    #  backward: x, v, t ; relu(x) → a2 (recomputed: the same fake value as a, new memory)
    #            mul(a2, v) → g ; outputs (g)
    #  live: fw a=1 (v is a), loss ~0 | bw v=1, t, a2: 2, g: 3 -> peak 3 MiB (+ scalars)
    x, t, g, loss = mib(), torch.zeros(()), mib(), torch.zeros(())
    a = x.relu()
    v = a.view(512, 512)
    f = G()
    fx_ = f.input("x", x)
    fa = f.op("a", aten.relu.default, (fx_,), a)
    fv = f.op("v", aten.view.default, (fa, [512, 512]), v)
    fl = f.op("loss", aten.sum.default, (fa,), loss)
    fw = f.done((fl, fv))
    b = G()
    bx, bv, bt = b.input("x", x), b.input("v", v), b.input("tangents_1", t)
    ba = b.op("a", aten.relu.default, (bx,), a)
    bg = b.op("g", aten.mul.Tensor, (ba, bv), g)
    bw = b.done((bg, bt))
    pred = predict_peak(fw, bw, frozenset({"a"}), num_user_outputs=1)
    assert 3 * MiB <= pred.peak_bytes <= 3 * MiB + 16
    assert [p.phase for p in pred.timeline if p.node == "a"] == ["forward", "recompute"]


def _mul_add() -> tuple[fx.GraphModule, fx.Node]:
    """forward: x (resident), w = x * 2 (1 MiB), y = w + 1 (1 MiB); and its node w."""
    f = G()
    fx_ = f.input("x", mib())
    fw_ = f.op("w", aten.mul.Tensor, (fx_, 2), mib())
    fy = f.op("y", aten.add.Tensor, (fw_, 1), mib())
    return f.done((fy,)), fw_


def test_forward_only_and_inputs_are_free():
    #  forward: x (resident), w = x * 2 (1 MiB), y = w + 1 (1 MiB): peak 2 MiB, and only
    #  while y is made (w is freed after its last read), with the 12 bytes the add wraps
    #  its 1 in (an 8-byte int64, cast to float32 inside it)
    fw, _ = _mul_add()
    pred = predict_peak(fw, None)
    assert pred.peak_bytes == 2 * MiB + 12
    assert [p.live_bytes for p in pred.timeline] == [MiB, 2 * MiB]


def test_a_memo_walks_the_forward_again_once_a_value_in_it_changed():
    #  forward: x (resident), w = x * 2 (1 MiB), y = w + 1 (1 MiB) -> 2 MiB; w made 2 MiB
    #  in place of 1 (a node's value replaced) -> 3 MiB, with the memo as without it
    fw, w = _mul_add()
    memo = Memo()
    assert predict_peak(fw, None, memo=memo).peak_bytes == 2 * MiB + 12
    w.meta["val"] = mib(2)
    assert predict_peak(fw, None, memo=memo).peak_bytes == 3 * MiB + 12
    assert predict_peak(fw, None).peak_bytes == 3 * MiB + 12


def test_a_memo_reads_the_forwards_workspace_again_for_another_layout():
    #  forward: x, w (resident) ─ convolution → y: its workspace by rule depends on the
    #  layout the compiler runs it in (contiguous: copies of input and weight; channels-
    #  last: the weight's), so a memo that kept the first layout's would mispredict the
    #  second
    x, w = torch.zeros(1, 3, 16, 16), torch.zeros(8, 3, 3, 3)
    f = G()
    fx_, fw_ = f.input("x", x), f.input("w", w)
    args = (fx_, fw_, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    fy = f.op("y", aten.convolution.default, args, torch.zeros(1, 8, 14, 14))
    fw = f.done((fy,))
    memo = Memo()
    by_layout = {}
    for channels_last in (False, True, False):
        kept = predict_peak(
            fw, None, channels_last=channels_last, memo=memo, measure_workspace=False
        )
        alone = predict_peak(fw, None, channels_last=channels_last, measure_workspace=False)
        assert kept.peak_bytes == alone.peak_bytes
        by_layout[channels_last] = alone.peak_bytes
    assert by_layout[True] != by_layout[False]
