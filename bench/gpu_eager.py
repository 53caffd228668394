"""The GPU check's blocks on the eager path and for offload: ``budget.apply`` beside
torch's checkpointing on every block, with and without offload, and ``offload=True``
on the compiled path beside recompute-only plans and ``save_on_cpu``."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import torch
import torch._functorch.config

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_context import (  # noqa: E402
    EAGER_DTYPE,
    PEAK_TOLERANCE,
    TIME_NOISE,
    TOLERANCE,
    Check,
    check_plan_row,
    mib,
    sci,
)
from gpu_measure import Row, grads_of, measure  # noqa: E402

import budget  # noqa: E402
from budget.models import Example  # noqa: E402


def block_eager(c: Check) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
    )

    from budget.eager.regions import select_candidates

    if not c.clock.fits(2):
        c.report.skip("eager (time)")
        return
    ex, step, args = c.gpt(EAGER_DTYPE)
    ref = grads_of(ex.model, step, args)
    base = eager_row(c, "none (unplanned)", ex, step, args, ref)
    ex, step, args = c.gpt(EAGER_DTYPE)
    blocks = {id(m) for m in select_candidates(ex.model).values()}
    apply_activation_checkpointing(ex.model, check_fn=lambda m: id(m) in blocks)
    ac = eager_row(c, "torch AC, every block", ex, step, args, ref)
    ex, step, args = c.gpt(EAGER_DTYPE)
    kept = f"{max(ac.saved or 0, 0)}B"
    plan = budget.apply(ex.model, *args, step=step, memory_budget=kept)
    ours = eager_row(c, f"budget.apply at AC's {mib(ac.saved)} MiB", ex, step, args, ref)
    ours.predicted_saved, ours.predicted_peak = plan.saved_bytes, plan.peak_bytes
    ours.recompute_gflop = plan.recompute_flops / 1e9
    c.report.write()
    r = c.report
    r.check(
        "eager: kept = predicted",
        ours.saved == plan.saved_bytes,
        f"{ours.saved} vs {plan.saved_bytes} B",
    )
    r.check(
        "eager: budget.apply keeps <= AC's bytes",
        (ours.saved or 0) <= (ac.saved or 0),
        f"{mib(ours.saved)} vs {mib(ac.saved)} MiB (unplanned {mib(base.saved)})",
    )
    got = ours.requested if ours.requested is not None else ours.peak
    if plan.peak_bytes and got:
        err = (got - plan.peak_bytes) / plan.peak_bytes
        r.check(
            "eager: peak within 3% of predicted",
            abs(err) <= PEAK_TOLERANCE,
            f"{err:+.2%} (requested {mib(got)} vs {mib(plan.peak_bytes)} MiB)",
        )
    r.check(
        "eager: gradients = unplanned",
        ours.grad_err is not None and ours.grad_err <= TOLERANCE[EAGER_DTYPE],
        f"{sci(ours.grad_err)}",
    )
    if ours.ms and ac.ms:
        r.check(
            "eager: step time <= AC's (within noise)",
            ours.ms <= ac.ms * TIME_NOISE,
            f"{ours.ms / ac.ms:.3f}",
            timing=True,
        )
    if c.clock.fits(1):
        eager_offload(c, ac, ref)


def eager_offload(c: Check, ac: Row, ref: Any) -> None:
    """``budget.apply(offload=True)`` at b=0 on the same GPT: device bytes kept and peak
    against predicted, gradients, step time against AC on every block (on a CPU the plan
    is made for an H100 and its host copies are this device's memory too)."""
    cpu = c.device.type == "cpu"
    ex, step, args = c.gpt(EAGER_DTYPE)
    plan = budget.apply(
        ex.model,
        *args,
        step=step,
        memory_budget=0.0,
        offload=True,
        estimator="flops:h100" if cpu else "flops",
    )
    row = eager_row(c, "budget.apply+offload b=0", ex, step, args, ref)
    row.predicted_saved, row.predicted_peak = plan.saved_bytes, plan.peak_bytes
    row.extra["offloaded_bytes"] = plan.offloaded_bytes
    c.report.write()
    want = plan.saved_bytes + (plan.offloaded_bytes if cpu else 0)
    r = c.report
    r.check(
        "eager offload: kept = predicted",
        row.saved == want,
        f"{row.saved} vs {want} B; {len(plan.offloaded)} values, "
        f"{mib(plan.offloaded_bytes)} MiB offloaded",
    )
    r.check(
        "eager offload: gradients = unplanned",
        row.grad_err is not None and row.grad_err <= TOLERANCE[EAGER_DTYPE],
        f"{sci(row.grad_err)}",
    )
    got = row.requested if row.requested is not None else row.peak
    if not cpu and plan.peak_bytes and got:
        err = (got - plan.peak_bytes) / plan.peak_bytes
        r.check(
            "eager offload: peak within 3% of predicted",
            abs(err) <= PEAK_TOLERANCE,
            f"{err:+.2%} (requested {mib(got)} vs {mib(plan.peak_bytes)} MiB)",
        )
    if not cpu and row.ms and ac.ms and row.peak is not None and ac.peak is not None:
        figures = f"{row.ms:.1f} vs {ac.ms:.1f} ms; peaks {mib(row.peak)} vs {mib(ac.peak)} MiB"
        if row.peak < ac.peak:  # a lower peak for its time: a trade, not judged
            r.skip(f"eager offload's step time against AC's, at a lower peak ({figures})")
        else:
            r.check(
                "eager offload: step time <= AC's at no lower a peak",
                row.ms <= ac.ms * TIME_NOISE,
                figures,
                timing=True,
            )


def eager_row(c: Check, label: str, ex: Example, step: Any, args: tuple, ref: Any) -> Row:
    row = measure(
        Row("eager", label), ex.model, step, args, ref, device=c.device, reps=c.reps, eager=True
    )
    c.clock.learn(row)
    return c.report.add(row)


OFFLOAD_FRACTIONS = [0.2, 0.0]


def _offload_row(
    c: Check,
    name: str,
    ex: Example,
    step: Any,
    args: tuple,
    ref: Any,
    exposed: bool,
    must_offload: bool = True,
    **where: Any,
) -> Row:
    """One ``offload=True`` row (``where``: its budget, as ``budget.backend`` takes it) and
    its checks; ``exposed``: the copies are priced in full (on the compute stream);
    ``must_offload``: a plan that offloads nothing fails (under a peak budget, the plan
    without offload may rightly be the cheaper)."""
    estimator = "flops:h100" if c.device.type == "cpu" else "flops"
    be = budget.backend(compiler=c.compiler, offload=True, estimator=estimator, **where)
    cuda = c.device.type == "cuda"
    o = c.run("offload", f"bf16 budget+{name}", ex, step, args, ref, be, saved_on_device=cuda)
    host = sum(p.offloaded_bytes for p in be.plans)
    o.extra["offloaded_bytes"] = host
    if not cuda:  # the host copies are this device's memory too
        o.predicted_saved = (o.predicted_saved or 0) + host
        o.target = (o.target or 0) + host
    check_plan_row(c, o, name, TOLERANCE["bf16"], None)
    count = sum(len(p.offloaded) for p in be.plans)
    why = ""
    if not count and c.tiny:
        why = " (toy sizes: copying costs more than recomputing)"
    elif not count and exposed:
        why = " (copies on the compute stream cost more than recomputing)"
    elif not count and not must_offload:
        why = " (recomputation alone costs no more at this peak)"
    ok = count > 0 or c.tiny or exposed or not must_offload
    c.report.check(f"{name}: offloads", ok, f"{count} values, {mib(host)} MiB{why}")
    return o


def _lowest_recompute_row(c: Check) -> Row | None:
    """The gpt block's bf16 budget row at the lowest fraction above 0 (b=0's peak is no
    lower on torch 2.11, whose Inductor runs unpinned recomputations early)."""
    rows = {b: r for (d, who, b), r in c.gpt_rows.items() if d == "bf16" and who == "budget"}
    low = min((b for b, r in rows.items() if b > 0 and r.peak and not r.error), default=None)
    return None if low is None else rows[low]


def block_offload(c: Check) -> None:
    """budget with ``offload=True`` on the bf16 GPT at low fractions: device bytes and
    peak against predicted, gradients; then, at no higher measured peak, its step time
    against budget's recompute-only plans (the gpt block's rows) and against offloading
    every saved tensor (``save_on_cpu``, as torchtune does; eager, CUDA only). One more
    plan is given the measured peak of the gpt block's lowest-fraction plan above 0 as its
    peak budget: offload against recomputation at the same peak. On a CPU
    the plan is made for an H100 (``flops:h100``) and its copies stay in host memory.

    Where torch's offload copies run on the compute stream (torch 2.11:
    ``budget.compile.offload.SIDE_STREAM`` off), budget prices them in full and may
    rightly offload nothing; one more plan, priced as if compute hid the copies, then
    runs them so the copies' bytes, peak and gradients are still checked (its step time
    is not judged)."""
    import budget.compile.offload as copies

    ex, step, args = c.gpt("bf16")
    ref = grads_of(ex.model, step, args)
    exposed = not copies.SIDE_STREAM
    rows = []
    for b in OFFLOAD_FRACTIONS[-1:] if c.tiny else OFFLOAD_FRACTIONS:
        if not c.clock.fits(2):
            c.report.skip(f"offload b={b:g} and after (time)")
            break
        row = _offload_row(c, f"offload b={b:g}", ex, step, args, ref, exposed, memory_budget=b)
        rows.append(row)
    base = _lowest_recompute_row(c)
    if base is None or not c.clock.fits(2):
        c.report.skip("offload at a recompute-only plan's peak (no gpt bf16 row, or time)")
    else:  # the same peak by construction: the comparison
        name = f"offload at {base.label}'s peak"
        o = _offload_row(
            c, name, ex, step, args, ref, exposed, False, peak_memory_budget=f"{base.peak}B"
        )
        rows.append(o)
        if not o.error and o.peak is not None and base.peak is not None:
            c.report.check(
                f"{name}: measured <= budget",
                o.peak <= base.peak,
                f"{mib(o.peak)} <= {mib(base.peak)} MiB",
            )
        if o.ms and base.ms:
            c.report.check(
                f"{name}: step time <= {base.label}'s",
                o.ms <= base.ms * TIME_NOISE,
                f"{o.ms:.2f} vs {base.ms:.2f} ms",
                timing=True,
            )
    if exposed and not c.clock.fits(2):
        c.report.skip("offload b=0 priced as hidden (time)")
    elif exposed:
        before, copies.SIDE_STREAM = copies.SIDE_STREAM, True
        try:
            hidden = "offload b=0 priced as hidden"
            _offload_row(c, hidden, ex, step, args, ref, False, memory_budget=0.0)
        finally:
            copies.SIDE_STREAM = before
    every = None
    if c.device.type == "cuda" and c.clock.fits(1):

        def on_cpu(*a: Any) -> torch.Tensor:
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                return step(*a)

        every = eager_row(c, "save_on_cpu, every saved tensor", ex, on_cpu, args, ref)
    if every is not None and every.peak and c.clock.fits(2):  # the other baseline
        name = "offload at save_on_cpu's peak"
        at = f"{every.peak}B"
        rows.append(
            _offload_row(c, name, ex, step, args, ref, exposed, False, peak_memory_budget=at)
        )
    c.report.write()
    for o in rows:
        if not o.error and o.ms and o.peak is not None:
            _compare_at_peak(c, o, every)


def _compare_at_peak(c: Check, o: Row, every: Row | None) -> None:
    """``o``'s step time against the fastest recompute-only plan of the gpt block and
    against offloading every saved tensor, each where it peaks no higher than ``o``; a
    baseline that peaks higher everywhere is said so (``o`` reaches a peak it does not),
    never left out in silence."""
    assert o.ms is not None and o.peak is not None
    at_most = o.peak * (1 + PEAK_TOLERANCE)
    recompute = [
        r
        for (d, who, _), r in c.gpt_rows.items()
        if d == "bf16" and who == "budget" and r.ms and r.peak is not None
    ]
    fits = [r for r in recompute if r.peak is not None and r.peak <= at_most]
    if fits:
        best = min(fits, key=lambda r: r.ms or math.inf)
        c.report.check(
            f"{o.label}: step time <= the fastest recompute-only plan at its peak",
            o.ms <= (best.ms or 0) * TIME_NOISE,
            f"{o.ms:.1f} vs {best.ms:.1f} ms ({best.label}, peak {mib(best.peak)} MiB)",
            timing=True,
        )
    elif recompute:  # nothing to judge its time against: said, not counted as a pass
        lowest = min(r.peak for r in recompute if r.peak is not None)
        c.report.skip(
            f"{o.label} against recompute-only plans: it peaks at {mib(o.peak)} MiB, "
            f"which none reaches (their lowest: {mib(lowest)} MiB)"
        )
    if every is None or not every.ms or every.peak is None:
        return
    if every.peak <= at_most:
        c.report.check(
            f"{o.label}: step time <= offloading every saved tensor (as low a peak)",
            o.ms <= every.ms * TIME_NOISE,
            f"{o.ms:.1f} vs {every.ms:.1f} ms; peaks {mib(o.peak)} vs {mib(every.peak)} MiB",
            timing=True,
        )
    else:
        c.report.skip(
            f"{o.label} against offloading every saved tensor, which peaks lower "
            f"({mib(every.peak)} MiB against {mib(o.peak)}; the row at its peak compares them)"
        )
