"""The seam to torch's private partitioner APIs (budget/_torch_api.py).

If a torch upgrade moves or changes these, this file fails first and says which.
At b=1.0 budget must reproduce torch's own partition exactly (same saved bytes).
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from helpers.steps import compile_with
from torch import nn

from budget.compile import _torch_private as T
from budget.compile.measure import measure_step


def test_private_apis_have_the_signatures_we_call():
    params = inspect.signature(T._extract_fwd_bwd_modules).parameters
    for name in ("saved_values", "saved_sym_nodes", "saved_opaque_nodes", "num_fwd_outputs"):
        assert name in params
    assert "memory_budget" in inspect.signature(T.choose_saved_values_set).parameters
    assert list(inspect.signature(T.classify_nodes).parameters)[:3] == [
        "joint_module",
        "static_lifetime_input_indices",
        "num_fwd_outputs",
    ]
    from torch._inductor.compile_fx import partition_fn  # noqa: F401
    from torch._inductor.custom_graph_pass import CustomPartitionerFn  # noqa: F401

    assert hasattr(torch._inductor.config, "custom_partitioner_fn")


class Block(nn.Module):
    def __init__(self, d: int = 64) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).view(b, t, 3, 4, d // 4).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + a
        return (x + self.mlp(x)).pow(2).mean()


def test_budget_one_is_torchs_own_partition():
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(2, 32, 64)
    exclude = list(model.parameters())
    with torch._functorch.config.patch(activation_memory_budget=1.0):
        theirs = measure_step(
            torch.compile(model, backend="aot_eager_decomp_partition"), x, exclude=exclude
        )
    torch._dynamo.reset()
    f, be = compile_with(model, 1.0)
    ours = measure_step(f, x, exclude=exclude)
    assert (
        ours.saved_bytes == theirs.saved_bytes == be.plans[0].saved_bytes == be.plans[0].max_bytes
    )
    assert ours.backward_flops == theirs.backward_flops


def test_faster_max_flow_gives_torchs_exact_cut():
    """budget runs torch's b=1.0 min-cut with Boykov-Kolmogorov: same saved set as torch's default."""
    import networkx as nx

    from budget.models import get_builtin

    ex = get_builtin("gpt", layers=2, d=64, seq=64)
    seen = []
    original = nx.minimum_cut

    def both(G, s, t, **kwargs):
        default = original(G, s, t)
        fast = original(G, s, t, **kwargs)
        seen.append((default[0], default[1][0]) == (fast[0], fast[1][0]) and "flow_func" in kwargs)
        return fast

    nx.minimum_cut = both
    try:
        import budget

        budget.plan(ex.step, *ex.args, memory_budget=0.5)
    finally:
        nx.minimum_cut = original
    assert seen and all(seen)
