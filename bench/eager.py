"""Eager checkpointing side by side: budget.apply against torch's hand-picked policies.

For each model, on real CPU tensors, one training step is measured under
  (a) full checkpointing of every block: torch's ``apply_activation_checkpointing``,
  (b) torch's per-op selective checkpointing "save the matmuls, recompute the rest" on
      every block (``create_selective_checkpoint_contexts`` with a list of ops),
  (c) ``torch.distributed._tools.sac_ilp``, torch's per-module SAC ILP, on CPU: its
      estimators (MemTracker, RuntimeEstimator, SACEstimator under FakeTensorMode) with
      torch's roofline fed this CPU's figures, ``sac_milp`` given a peak budget (the
      estimated unmodified peak less what (a) and (b) saved, and its tightest feasible
      budget), each chosen module checkpointed with the op policy of
      ``get_optimal_checkpointing_policy_per_module`` (needs pwlf and PuLP),
then budget.apply is given the bytes each baseline really kept (as a size) and measured
the same way. Reported: bytes kept after the forward (budget.eager.measure.retained_bytes:
what backward needs, the loss aside), recompute FLOPs (backward FLOPs minus the unmodified
model's), and the ratios budget / baseline (FLOPs at no more memory). Gradients of every
budget plan are checked against the unmodified model's, and one step's buffers (BatchNorm's
running statistics) against one step of the unmodified model, for budget and (a), (b).

    python bench/eager.py                # built-in GPT and MLP, transformers GPT-2, Llama, ALBERT
    python bench/eager.py --models gpt   # one of: gpt, mlp, hf-gpt2, hf-llama, hf-albert, tv-resnet18
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import io
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    SelectiveCheckpointContext,
    checkpoint,
    create_selective_checkpoint_contexts,
)

import budget
import budget.eager
from budget.eager.measure import measure_eager
from budget.eager.regions import select_candidates
from budget.models import gpt, mlp
from budget.runtime.measure import measure_peak

if TYPE_CHECKING:
    from torch.distributed._tools.ilp_utils import Graph
    from torch.distributed._tools.sac_estimator import SACStats

MATMULS = [
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.bmm.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
]


@dataclass
class Case:
    name: str
    make: Callable[[], tuple[nn.Module, Callable[..., torch.Tensor], tuple]]


def _builtin(factory: Callable[..., Any], **opts: Any) -> Callable[[], tuple]:
    def make() -> tuple:
        ex = factory(**opts)
        return ex.model, ex.step, tuple(ex.args)

    return make


def _hf(kind: str) -> Callable[[], tuple]:
    def make() -> tuple:
        # the installed torchvision made importable first (tests/helpers/real_models.py):
        # transformers' model imports import it
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        import helpers.real_models  # noqa: F401
        import transformers as tf

        torch.manual_seed(0)
        if kind == "gpt2":
            cfg = tf.GPT2Config(
                n_layer=4,
                n_embd=128,
                n_head=4,
                n_positions=128,
                vocab_size=512,
                use_cache=False,
                attn_implementation="eager",
            )
            model = tf.GPT2LMHeadModel(cfg)
        elif kind == "albert":  # one layer shared across depth: each of its runs a region
            cfg = tf.AlbertConfig(
                num_hidden_layers=4,
                embedding_size=64,
                hidden_size=128,
                intermediate_size=512,
                num_attention_heads=4,
                vocab_size=512,
                max_position_embeddings=128,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
                attn_implementation="eager",
            )
            model = tf.AlbertForMaskedLM(cfg)
        else:
            cfg = tf.LlamaConfig(
                num_hidden_layers=4,
                hidden_size=128,
                intermediate_size=344,
                num_attention_heads=4,
                num_key_value_heads=2,
                vocab_size=512,
                max_position_embeddings=128,
                use_cache=False,
                attn_implementation="eager",
            )
            model = tf.LlamaForCausalLM(cfg)
        model.train()
        ids = torch.randint(512, (4, 128), generator=torch.Generator().manual_seed(1))

        def step(ids: torch.Tensor) -> torch.Tensor:
            return model(input_ids=ids, labels=ids).loss

        return model, step, (ids,)

    return make


def _torchvision_resnet18() -> tuple:
    """torchvision's ResNet-18 (BatchNorm, then in-place ReLUs), 4 x 64x64, 10 classes."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers.real_models import import_torchvision

    torch.manual_seed(0)
    model = import_torchvision().models.resnet18(num_classes=10).train()
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 64, 64, generator=gen), torch.randint(10, (4,), generator=gen)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(x), y)

    return model, step, (x, y)


CASES = {
    "gpt": Case(
        "gpt", _builtin(gpt, layers=4, d=128, heads=4, seq=128, batch=4, vocab=512, dropout=0.1)
    ),
    "mlp": Case("mlp", _builtin(mlp, batch=64, d_in=256, d=1024, layers=4)),
    "hf-gpt2": Case("hf-gpt2", _hf("gpt2")),
    "hf-llama": Case("hf-llama", _hf("llama")),
    "hf-albert": Case("hf-albert", _hf("albert")),
    "tv-resnet18": Case("tv-resnet18", _torchvision_resnet18),
}


def _wrap_all(model: nn.Module, blocks: list[nn.Module], context_fn: Callable | None) -> None:
    for m in blocks:
        original = m.forward
        kw = {"context_fn": context_fn} if context_fn is not None else {}
        m.forward = functools.partial(checkpoint, original, use_reentrant=False, **kw)  # type: ignore[method-assign]


def _measure(step: Callable[..., Any], args: tuple, seed: int = 0) -> tuple[int, int, int]:
    """(bytes kept after the forward, backward FLOPs, peak of the step above the
    parameters, inputs and gradients: budget.runtime.measure.measure_peak)."""
    torch.manual_seed(seed)
    m = measure_eager(step, *args)
    torch.manual_seed(seed)
    peak = measure_peak(step, *args)
    return m.retained_bytes, int(m.backward_flops or 0), peak


def _grads(model: nn.Module, step: Callable[..., Any], args: tuple) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    step(*args).backward()
    out = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return out


def _stats_once(case: Case, prepare: Callable[[nn.Module, Callable, tuple], Any]) -> str:
    """Whether one step of a fresh model, ``prepare``d, leaves its buffers (BatchNorm's
    running statistics, its step count) as one step of the unmodified model does: "-"
    where the model has none."""
    bufs = []
    for ready in (lambda *_: None, prepare):
        model, step, args = case.make()
        ready(model, step, args)
        torch.manual_seed(7)
        step(*args).backward()
        bufs.append([b.clone() for b in model.buffers()])
    ref, got = bufs
    if not ref:
        return "-"
    return str(all(torch.equal(a, b) for a, b in zip(got, ref, strict=True)))


def _full_ac(model: nn.Module, *_: Any) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
    )

    block_ids = {id(m) for m in select_candidates(model).values()}
    apply_activation_checkpointing(model, check_fn=lambda m: id(m) in block_ids)


def _sac_matmuls(model: nn.Module, *_: Any) -> None:
    _wrap_all(
        model,
        list(select_candidates(model).values()),
        functools.partial(create_selective_checkpoint_contexts, MATMULS),
    )


def _same_grads(grads: list[torch.Tensor], ref: list[torch.Tensor]) -> bool:
    return len(grads) == len(ref) and all(
        torch.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(grads, ref, strict=True)
    )


def run_case(case: Case) -> list[dict[str, Any]]:
    model, step, args = case.make()
    ref_grads = _grads(model, step, args)
    base_bytes, base_flops, base_peak = _measure(step, args)
    baselines: dict[str, tuple[int, int, int] | str] = {}
    stats: dict[str, str] = {}  # whether a step leaves the buffers as the unmodified one's
    for name, prepare in (("full AC (every block)", _full_ac), ("SAC save matmuls", _sac_matmuls)):
        model, step, args = case.make()
        prepare(model)
        b, f, pk = _measure(step, args)
        baselines[name] = (b, f - base_flops, pk)
        stats[name] = _stats_once(case, prepare)

    kept = {name: r[0] for name, r in baselines.items() if not isinstance(r, str)}
    sac_rows, details = _sac_ilp(case, (base_bytes, base_flops), kept, ref_grads)
    baselines.update(sac_rows)

    rows = []
    for name, result in baselines.items():
        if isinstance(result, str):
            rows.append({"model": case.name, "baseline": name, "note": result})
            continue
        kept, flops, their_peak = result
        model, step, args = case.make()
        try:
            plan = budget.apply(model, *args, step=step, memory_budget=f"{max(kept, 0)}B")
        except budget.BudgetTooSmallError as e:  # budget's least bytes are above theirs
            least = f"budget keeps at least {_mib(e.min_bytes)} MiB"
            rows.append({"model": case.name, "baseline": name, "note": least})
            continue
        ours_bytes, ours_flops, _ = _measure(step, args)
        same = _same_grads(_grads(model, step, args), ref_grads)
        size = f"{max(kept, 0)}B"
        ours_stats = _stats_once(
            case, lambda m, st, a, size=size: budget.apply(m, *a, step=st, memory_budget=size)
        )
        # the same baseline's measured peak, given to budget as a peak memory budget
        model, step, args = case.make()
        try:
            at_peak = budget.apply(model, *args, step=step, peak_memory_budget=f"{their_peak}B")
            _, peak_flops, our_peak = _measure(step, args)
            peak_row = {
                "peak_pred": at_peak.peak_bytes,
                "our_peak": our_peak,
                "peak_flops": peak_flops - base_flops,
                "peak_grads_equal": _same_grads(_grads(model, step, args), ref_grads),
            }
        except budget.BudgetTooSmallError as e:
            peak_row = {"peak_note": f"below budget's lowest peak {_mib(e.lowest_peak_bytes)}"}
        rows.append(
            {
                "model": case.name,
                "baseline": name,
                "base_bytes": base_bytes,
                "their_bytes": kept,
                "their_flops": flops,
                "our_bytes": ours_bytes,
                "plan_bytes": plan.saved_bytes,
                "our_flops": ours_flops - base_flops,
                "plan_flops": plan.recompute_flops,
                "grads_equal": same,
                "stats": f"{stats.get(name, '-')} / {ours_stats}",
                "blocks": f"{sum(r.checkpoint for r in plan.regions)}/{len(plan.regions)}",
                "detail": details.get(name, ""),
                "base_peak": base_peak,
                "their_peak": their_peak,
                **peak_row,
            }
        )
    return rows


# --------------------------------------------------------------------------- (c) sac_ilp
#
# torch.distributed._tools is private, and so is all of what (c) uses from it: MemTracker
# (and _ModState), RuntimeEstimator (its _estimate attribute), SACEstimator (its
# _estimate_runtime attribute, OPS_TO_ALWAYS_SKIP, SACStats), ilp_utils (aggregate_stats,
# parse_module_info, get_peak_memory_runtime_baseline, Graph), sac_ilp (sac_milp,
# get_optimal_checkpointing_policy_per_module); and torch.utils._runtime_estimation (the
# roofline formulas). aggregate_stats needs pwlf (pip install pwlf), sac_milp PuLP.


@dataclass
class _SacIlpStats:
    """What torch's estimators recorded on the fake model, as ``sac_milp`` takes it."""

    graph: Graph  # the module tree with memory, runtime and trade-off stats per module
    sac_stats: dict[str, SACStats]  # module FQN -> its forward ops in order (SACEstimator)
    peak: int  # the estimated peak of the unmodified step: params + grads + activations
    peak_note: str  # its size, where it is reached and what it is made of


def _cpu_roofline_estimate(func: Any, args: Any, kwargs: Any) -> tuple[Any, float]:
    """``RuntimeEstimator._roofline_estimate`` without its CUDA check.

    The same formula (torch/distributed/_tools/runtime_estimator.py, ``_roofline_estimate``):
    milliseconds = max(transfer, compute) from torch.utils._runtime_estimation's
    ``get_transfer_time`` and ``get_compute_time``; only the ``torch.cuda.is_available()``
    assertion (runtime_estimator.py:236) is left out. The device figures are this CPU's,
    patched in by :func:`_cpu_device_figures`.
    """
    from torch.utils import _runtime_estimation as rte

    kwargs = kwargs or {}
    out = func(*args, **kwargs)
    packet = func._overloadpacket
    if packet in rte._IGNORE_OPS:
        return out, 0.0
    flat_in = pytree.tree_leaves((args, kwargs))
    flat_out = pytree.tree_leaves(out)
    dtypes = {
        t.dtype for t in flat_out if isinstance(t, torch.Tensor) and t.dtype in rte._FLOAT_TYPES
    }
    transfer_ns = rte.get_transfer_time(flat_in, flat_out)
    compute_ns = rte.get_compute_time(packet, args, kwargs, out, dtypes)
    return out, max(transfer_ns, compute_ns) / 1e6


@contextlib.contextmanager
def _cpu_device_figures() -> Iterator[None]:
    """Give torch's roofline this CPU's figures instead of the GPU's.

    torch/utils/_runtime_estimation.py reads ``torch._inductor.utils.get_device_tflops``
    (line 82, CUDA device properties) and ``get_gpu_dram_gbps`` (line 153, triton): both
    are replaced, for the block, by budget's measurement of this CPU
    (``budget.estimators.devices.host_cpu()``: best-of-5 fp32 768^3 matmul rate, 64 MiB
    copy bandwidth), the figures budget's own ``flops``/``roofline`` estimators use.
    """
    from unittest import mock

    from torch.utils import _runtime_estimation as rte

    from budget.estimators.devices import host_cpu

    cpu = host_cpu()
    with (
        mock.patch.object(rte, "get_device_tflops", lambda dtype: cpu.peak(dtype) / 1e12),
        mock.patch.object(rte, "get_gpu_dram_gbps", lambda: cpu.bandwidth / 1e9),
    ):
        yield


def _sac_ilp_stats(case: Case) -> _SacIlpStats:
    """torch's wiring for sac_ilp (test/distributed/_tools/test_sac_ilp.py), on CPU.

    The model is built under FakeTensorMode; one step runs under MemTracker, one under
    RuntimeEstimator, one forward under SACEstimator (its backward outside), then
    ``aggregate_stats`` and ``parse_module_info``. Both estimators use the
    "operator-level-cost-model" roofline through :func:`_cpu_roofline_estimate`
    ("operator-level-benchmark" times kernels with ``torch.cuda.Event``,
    runtime_estimator.py:144, so it cannot run on CPU). No optimizer: the bench's steps have
    none.
    """
    import numpy as np
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.ilp_utils import (
        aggregate_stats,
        get_peak_memory_runtime_baseline,
        parse_module_info,
    )
    from torch.distributed._tools.mem_tracker import MemTracker, _ModState
    from torch.distributed._tools.runtime_estimator import RuntimeEstimator
    from torch.distributed._tools.sac_estimator import SACEstimator

    with FakeTensorMode(), _cpu_device_figures():
        model, step, args = case.make()
        mem = MemTracker()
        mem.track_external(model)
        with mem:
            step(*args).backward()
            last = mem.get_tracker_snapshot("current")
        # Modules whose outputs need no grad (Llama's rotary embedding) get no backward
        # hooks, so no backward snapshots, which aggregate_stats reads: the end-of-step
        # snapshot stands in, as torch's test does for POST_BW.
        for mod_stats in mem.memory_tracking.values():
            for state in (_ModState.PRE_BW, _ModState.PEAK_BW, _ModState.POST_BW):
                mod_stats.snapshots.setdefault(state, [copy.deepcopy(last)])
        model.zero_grad(set_to_none=True)

        runtime = RuntimeEstimator()
        runtime("operator-level-cost-model")._estimate = _cpu_roofline_estimate
        with contextlib.redirect_stdout(io.StringIO()), runtime:  # its exit prints a total
            step(*args).backward()
        model.zero_grad(set_to_none=True)

        sac = SACEstimator()
        sac("operator-level-cost-model")._estimate_runtime = _cpu_roofline_estimate
        with sac:
            loss = step(*args)
        loss.backward()
        # pwlf fits each module's trade-off curve by differential evolution on numpy's
        # global generator: seeded, so that the fits and so the decisions repeat
        np.random.seed(0)
        info = aggregate_stats(model, mem, runtime, sac, torch.device("cpu"))
    graph = parse_module_info(info)
    peak, _ = get_peak_memory_runtime_baseline(graph)
    params = graph.nodes[0]["param_per_module"]
    at = max(
        graph.nodes,
        key=lambda n: params + n["grad_total"] + n["act_grad_per_module"] + n["act_total"],
    )
    note = (
        f"{_mib(peak)} MiB at {at['fqn']}: params {_mib(params)} + grads "
        f"{_mib(at['grad_total'])} + activations {_mib(at['act_total'])} + activation "
        f"grads {_mib(at['act_grad_per_module'])}"
    )
    return _SacIlpStats(graph, dict(sac.sac_mod_stats), peak, note)


def _solve_sac_milp(graph: Graph, budget: int) -> dict[str, float] | None:
    """``sac_milp`` at a peak budget in bytes: {module FQN: fraction of its activation memory
    to discard}, {} where nothing needs AC, None where it finds no solution (its -1)."""
    from torch.distributed._tools.sac_ilp import logger, sac_milp

    logger.disabled = True  # it logs every infeasible budget as an error
    try:
        decisions, _, peak = sac_milp(graph, memory_budget=budget / 2**30)
    finally:
        logger.disabled = False
    return None if peak < 0 else decisions


def _tightest_sac_budget(graph: Graph, peak: int) -> int | None:
    """The smallest peak budget sac_milp finds a solution for, to 0.2 % (bisection from the
    unmodified step's estimated peak); None where even that peak is infeasible."""
    if _solve_sac_milp(graph, peak) is None:
        return None
    lo, hi = 0, peak
    while hi - lo > max(64 * 1024, peak // 500):
        mid = (lo + hi) // 2
        if _solve_sac_milp(graph, mid) is None:
            lo = mid
        else:
            hi = mid
    return hi


def _op_policy_contexts(fqn: str, names: list[str], save: list[int]) -> tuple[Any, Any]:
    """Selective-checkpoint contexts for one call of a module sac_milp checkpoints.

    The i-th op of its forward (the ops of ``OPS_TO_ALWAYS_SKIP`` not counted, as
    SACEstimator leaves them out of ``SACStats``) is saved iff ``save[i]``; each op is
    checked against the one SACEstimator recorded at that index.
    """
    from torch.distributed._tools.sac_estimator import OPS_TO_ALWAYS_SKIP

    counts = {False: 0, True: 0}  # forward, recompute (this torch asks only in the forward)

    def policy(ctx: SelectiveCheckpointContext, func: Any, *args: Any, **kwargs: Any) -> Any:
        if func in OPS_TO_ALWAYS_SKIP:
            return CheckpointPolicy.PREFER_RECOMPUTE
        i = counts[ctx.is_recompute]
        counts[ctx.is_recompute] += 1
        name = func._overloadpacket.__name__
        if i >= len(names) or names[i] != name:
            recorded = names[i] if i < len(names) else "no more ops"
            raise RuntimeError(f"{fqn}: op {i} is {name}; SACEstimator recorded {recorded}")
        return CheckpointPolicy.MUST_SAVE if save[i] else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _apply_sac_decisions(
    model: nn.Module, decisions: dict[str, float], sac_stats: dict[str, SACStats]
) -> list[str]:
    """Checkpoint each module sac_milp chose, saving the ops torch's per-module ILP picks.

    A module with discard ratio r gets ``get_optimal_checkpointing_policy_per_module(stats,
    memory_budget=1 - r)`` (save or recompute per op, keeping at most 1 - r of the module's
    activation memory, least recompute time), applied with ``torch.utils.checkpoint``
    (non-reentrant) and ``create_selective_checkpoint_contexts``. One line per module.
    """
    from torch.distributed._tools.sac_ilp import get_optimal_checkpointing_policy_per_module

    modules = dict(model.named_modules())
    lines = []
    for fqn, discard in decisions.items():
        stats = sac_stats[fqn]
        keep = min(1.0, max(0.0, 1.0 - discard))
        save = get_optimal_checkpointing_policy_per_module(stats, memory_budget=keep)
        if len(save) != len(stats.func_names):
            raise RuntimeError(f"the per-op ILP found no policy for {fqn}")
        name = fqn.partition(".")[2]  # ModTracker's FQNs start with the root's class name
        module = modules[name]
        context_fn = functools.partial(_op_policy_contexts, fqn, stats.func_names, save)
        module.forward = functools.partial(  # type: ignore[method-assign]
            checkpoint, module.forward, use_reentrant=False, context_fn=context_fn
        )
        saved = [n for n, s in zip(stats.func_names, save, strict=True) if s]
        lines.append(
            f"{name or '(root)'} discard {discard:.3f}, saves {len(saved)}/{len(save)} ops "
            f"({' '.join(saved)})"
        )
    return lines


def _sac_ilp(
    case: Case,
    base: tuple[int, int],
    kept: dict[str, int],
    ref_grads: list[torch.Tensor],
) -> tuple[dict[str, tuple[int, int] | str], dict[str, str]]:
    """Baseline (c): torch's sac_ilp on CPU, its decisions applied and measured.

    sac_milp takes a peak budget (params + grads + activations, its own estimate), not
    retained bytes: it is given the unmodified step's estimated peak less the bytes each
    other baseline saved (``base`` retained bytes less ``kept[name]``), and the tightest
    budget it solves. Each solution is applied (:func:`_apply_sac_decisions`) to a fresh
    model and measured like the others. Returns the rows ({label: (bytes kept, recompute
    FLOPs)} or a note) and, per measured row, its decisions and a gradient check.
    """
    base_bytes, base_flops = base
    try:
        stats = _sac_ilp_stats(case)
    except Exception as e:  # report why it does not run here
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return {"sac_ilp": f"does not run on CPU here: {type(e).__name__}: {first[:160]}"}, {}
    tightest = _tightest_sac_budget(stats.graph, stats.peak)
    peak = f"{_mib(stats.peak)} MiB"
    budgets = {
        f"sac_ilp at {name}'s saving": (
            stats.peak - (base_bytes - b),
            f"its estimated peak {peak} less the {_mib(base_bytes - b)} MiB {name} saved",
        )
        for name, b in kept.items()
    }
    if tightest is not None:
        budgets["sac_ilp at its tightest budget"] = (tightest, f"estimated peak {peak}")
    floor = f"{_mib(tightest)} MiB" if tightest is not None else f"none, not even {peak}"
    rows: dict[str, tuple[int, int] | str] = {}
    details: dict[str, str] = {}
    for label, (limit, how) in budgets.items():
        about = f"peak budget {_mib(limit)} MiB ({how})"
        decisions = _solve_sac_milp(stats.graph, limit)
        if decisions is None:
            rows[label] = f"infeasible at {about}; its tightest feasible budget: {floor}"
            continue
        if not decisions:
            rows[label] = (
                f"checkpoints nothing at {about}: no AC lowers its peak, {stats.peak_note}"
            )
            continue
        model, step, args = case.make()
        lines = _apply_sac_decisions(model, decisions, stats.sac_stats)
        b, f, pk = _measure(step, args)
        same = _same_grads(_grads(model, step, args), ref_grads)
        rows[label] = (b, f - base_flops, pk)
        details[label] = f"{about}; its grads equal: {same}; AC " + "; ".join(lines)
    return rows, details


def _peak_table(rows: list[dict[str, Any]]) -> None:
    """At equal peak: each baseline's measured peak given to budget.apply as a peak
    memory budget; budget's measured peak (its prediction) and recompute FLOPs."""
    print(
        "\nAt equal peak (the baseline's measured peak as budget's peak_memory_budget):\n"
        "| model | baseline | unmodified peak MiB | baseline peak MiB | budget peak MiB "
        "(predicted) | fits | baseline recompute GFLOP | budget recompute GFLOP | FLOP ratio "
        "| grads equal |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        if "note" in r:
            continue
        head = (
            f"| {r['model']} | {r['baseline']} | {_mib(r['base_peak'])} | {_mib(r['their_peak'])}"
        )
        if "peak_note" in r:
            print(f"{head} | {r['peak_note']} ||||||")
            continue
        ratio = r["peak_flops"] / r["their_flops"] if r["their_flops"] else float("nan")
        print(
            f"{head} | {_mib(r['our_peak'])} ({_mib(r['peak_pred'])}) | "
            f"{r['our_peak'] <= r['their_peak']} | {r['their_flops'] / 1e9:.4f} | "
            f"{r['peak_flops'] / 1e9:.4f} | {ratio:.3f} | {r['peak_grads_equal']} |"
        )


def _mib(n: float) -> str:
    return f"{n / 2**20:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES)
    )
    opts = parser.parse_args(argv)
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    print(
        "| model | baseline | unmodified MiB | baseline MiB | budget MiB (plan) | baseline recompute GFLOP | budget recompute GFLOP (plan) | FLOP ratio | block runs checkpointed | grads equal | buffers as unmodified (baseline / budget) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    details = []
    rows_all = []
    for name in opts.models.split(","):
        for row in run_case(CASES[name.strip()]):
            rows_all.append(row)
            if "note" in row:
                print(f"| {row['model']} | {row['baseline']} | {row['note']} ||||||||")
                continue
            if row["detail"]:
                details.append(f"- {row['model']}, {row['baseline']}: {row['detail']}")
            ratio = row["our_flops"] / row["their_flops"] if row["their_flops"] else float("nan")
            print(
                f"| {row['model']} | {row['baseline']} | {_mib(row['base_bytes'])} | "
                f"{_mib(row['their_bytes'])} | {_mib(row['our_bytes'])} ({_mib(row['plan_bytes'])}) | "
                f"{row['their_flops'] / 1e9:.4f} | {row['our_flops'] / 1e9:.4f} ({row['plan_flops'] / 1e9:.4f}) | "
                f"{ratio:.3f} | {row['blocks']} | {row['grads_equal']} | {row['stats']} |"
            )
    _peak_table(rows_all)
    if details:
        print("\nsac_ilp's decisions, as applied and measured:")
        print("\n".join(details))
    return 0


if __name__ == "__main__":
    sys.exit(main())
