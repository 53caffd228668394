"""budget's backend under DDP and FSDP2 (fully_shard), two gloo processes on CPU.

Each rank gets its own estimator and time limit (which give different plans alone on the
GPT of tests/compile/test_ranks.py), its own data, and trains one step: every graph's plan is
the same on both ranks (rank 0's), and the gradients equal a single-process reference on
both ranks' data (the mean of the two per-rank gradients).
"""

from __future__ import annotations

import pytest
from helpers.ranks import run_ranks

RANK = r"""
import faulthandler, json, os, sys
faulthandler.dump_traceback_later(90, exit=True)  # a hang fails with every thread's stack
import torch, torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import budget

rank, world = int(os.environ["RANK"]), 2
wrapper = sys.argv[1]
SETTINGS = [{"estimator": "flops", "time_limit": 60}, {"estimator": "unit", "time_limit": 5}]


class Block(nn.Module):  # user modules: dynamo compiles their forwards (not torch's own)
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(512, 512), nn.Linear(512, 512)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(x)))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(512, 8)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def make():
    torch.manual_seed(0)
    return MLP()


def data(r):
    g = torch.Generator().manual_seed(100 + r)
    return torch.randn(32, 512, generator=g), torch.randint(0, 8, (32,), generator=g)


dist.init_process_group("gloo", init_method="env://")

# the reference: one process, both ranks' data, the mean of the per-rank gradients
ref_model = make()
for r in range(world):
    x, y = data(r)
    (F.cross_entropy(ref_model(x), y) / world).backward()
reference = {n: p.grad for n, p in ref_model.named_parameters()}

model = make()
if wrapper == "ddp":
    from torch.nn.parallel import DistributedDataParallel

    # 1 MiB buckets (DDP's first bucket's size) for 1 MiB layers: DDP's optimizer splits
    # the graph at bucket boundaries, so the step has several graphs
    wrapped = DistributedDataParallel(model, bucket_cap_mb=1)
else:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # torchtitan's recipe: shard each block and compile it (FSDP2's hooks, which dynamo
    # does not trace, run between the compiled blocks), then shard the root
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    wrapped = fully_shard(model, mesh=mesh)

be = budget.backend(0.3, compiler="eager", **SETTINGS[rank])
if wrapper == "ddp":
    step = torch.compile(wrapped, backend=be)
else:
    for layer in model.layers:
        layer.compile(backend=be)
    step = wrapped
x, y = data(rank)
F.cross_entropy(step(x), y).backward()
grads = {}
for n, p in model.named_parameters():
    g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
    grads[n.replace("_fsdp_wrapped_module.", "")] = g
diff = max(float((grads[n] - reference[n]).abs().max()) for n in reference)
print(json.dumps({
    "plans": [[p.graph_hash, p.saved] for p in be.plans],
    "solvers": [p.solver for p in be.plans],
    "diff": diff,
}), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "wrapper",
    ["ddp", "fsdp2"],
)
def test_every_rank_trains_with_rank_0s_plans(wrapper):
    r0, r1 = run_ranks(RANK, wrapper)
    assert r0["plans"], r0
    assert r0["plans"] == r1["plans"]  # every graph: the same graph, the same saved set
    assert len(r0["plans"]) > 1  # DDP: split at its buckets; FSDP2: one graph per block
    for r in (r0, r1):
        assert r["diff"] < 1e-5, r
