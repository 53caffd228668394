"""What ``budget sweep`` plans: a target's sweep, on the compiled path or (``--eager``)
``budget.apply``'s."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .args import planning_options, size_options
from .targets import load_eager_target, load_target


def sweep_runs(
    args: argparse.Namespace, budgets: list[float | str], modules: list[str] | None
) -> tuple[Callable[[bool, Any], list[list[Any]]], str]:
    """``run(offload, progress)``: the sweep's plans per graph (eager: the one step), and
    the target's description. torch's plans (``--vs-torch``) come with the sweep the
    user asked for, not with the recompute-only curve a plot draws beside an offload one
    (``offload`` False where ``args.offload`` is set), which would only repeat them."""
    import budget

    if args.eager:
        from ..eager.apply import sweep as eager_sweep

        model, step, example, description = load_eager_target(args.target, size_options(args))
        options = {"step": step, "modules": modules, "solver": args.solver}
        options |= {"estimator": args.estimator, "time_limit": args.time_limit}

        def eager(offload: bool, progress: Any) -> list[list[Any]]:
            vs_torch = args.vs_torch and offload == args.offload
            found = eager_sweep(
                model,
                *example,
                budgets=budgets,
                offload=offload,
                progress=progress,
                vs_torch=vs_torch,
                **options,
            )
            return [found]

        return eager, f"{description} eager checkpointing (budget.apply)"
    target = load_target(args.target, size_options(args))

    def compiled(offload: bool, progress: Any) -> list[list[Any]]:
        options = {**planning_options(args), "offload": offload, "compile": args.compile}
        options["vs_torch"] = args.vs_torch and offload == args.offload
        found = budget.sweep(
            target.step, *target.args, budgets=budgets, progress=progress, **options
        )
        return found if found and isinstance(found[0], list) else [found]

    return compiled, target.description
