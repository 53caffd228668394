"""The ``budget`` command line: preview plans and sweeps without writing Python.

    budget solve                                 # the built-in GPT at the configured budget
    budget solve builtin:resnet --budget 0.3
    budget solve my_model.py:make --budget 512MiB --json plan.json
    budget sweep builtin:mlp --budgets 0,0.25,0.5,1 --plot pareto.png

A TARGET is ``builtin:NAME`` or ``FILE.py:FACTORY`` (:mod:`budget.cli.targets` has the
contract). Plans are previewed on fake tensors through the same pipeline training uses
(:func:`budget.plans`), so nothing is trained; ``--json`` writes a plan file that
``budget.backend(plan=FILE)`` applies. User errors (a bad target, a factory that raises,
an invalid option or an unreachable budget) exit with status 2 and one line on stderr;
``--debug`` shows the traceback. This is the only module of budget that prints; the text
itself comes from :mod:`budget.cli.report` (built on :mod:`budget.core.report`).
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core.text import WIDTH
from ..errors import PlanMismatchError, SolverTimeout
from .args import (
    UsageError,
    build_parser,
    check_options,
    check_png,
    check_report_options,
    parse_budget_arg,
    parse_budgets,
    parse_modules_arg,
    parse_peak_arg,
    planning_options,
    size_options,
)
from .progress import ProgressBar
from .sweeps import sweep_runs
from .targets import Target, describe_error, load_eager_target, load_target

__all__ = ["UsageError", "main", "parse_budget_arg", "parse_budgets"]


def _write(flag: str, path: str, write: Callable[[], Any]) -> None:
    """Write an output file; an OSError is the user's (a full disk, a directory gone)."""
    try:
        write()
    except OSError as e:
        raise UsageError(f"cannot write {flag} {path!r}: {e.strerror or e}") from e


def _target(args: argparse.Namespace) -> Target:
    return load_target(args.target, size_options(args))


def _planning(run: Callable[[], Any]) -> Any:
    """Run a planning call; surface the user error behind torch.compile's wrappers."""
    try:
        return run()
    except Exception as e:
        from ..compile.backend import root_error

        inner = root_error(e)
        if isinstance(inner, ValueError):  # BudgetTooSmallError, InfeasibleError, ...
            raise inner from e
        raise


# --------------------------------------------------------------------------- commands


def _solve(args: argparse.Namespace) -> int:
    import budget

    check_options(args)
    _check_preview_flags(args)
    if args.eager or args.modules is not None:
        return _solve_eager(args)
    memory_budget, peak = _check_solve_args(args)
    start = time.perf_counter()
    target = _target(args)
    loaded = time.perf_counter()
    with ProgressBar(1, quiet=args.quiet) as bar:
        plans = _planning(
            lambda: budget.plans(  # compile=True: the plans training makes (Inductor's code)
                target.step,
                *target.args,
                memory_budget=memory_budget,
                peak_memory_budget=peak,
                plan=args.plan,
                peak_search=args.peak_search,
                compile=args.compile,
                progress=bar.update,
                **planning_options(args),
            )
        )
    done = time.perf_counter()
    _write_solve_files(args, plans, target.description)
    if args.format == "json":
        from ..core.plan_files import dumps_plans

        print(dumps_plans(plans))
        return 0
    stages = sum(sum(p.timings.values()) for p in plans)
    timings = {
        "load": loaded - start,
        "trace": max(0.0, done - loaded - stages),
        "plan": stages,
        "total": done - start,
    }
    _print_solve(args, plans, target.description, timings)
    return 0


def _check_preview_flags(args: argparse.Namespace) -> None:
    if args.compile and (args.eager or args.modules is not None or args.compiler != "inductor"):
        raise UsageError(
            "--compile generates Inductor's code: it cannot be used with --eager, --modules "
            "or --compiler eager"
        )
    compiled_peak = not args.eager and getattr(args, "peak", None)
    if args.vs_torch and (compiled_peak or getattr(args, "plan", None)):
        raise UsageError(
            "--vs-torch sets torch's partitioner's plan at the same memory budget beside "
            "budget's: it cannot be used with --plan, nor with --peak unless --eager"
        )


def _check_solve_args(args: argparse.Namespace) -> tuple[Any, str | None]:
    """``budget solve``'s compiled-path options checked together (each error names the
    flags); the memory budget and the peak budget, parsed."""
    memory_budget = parse_budget_arg(args.budget)
    peak = parse_peak_arg(args.peak)
    if args.peak_search is not None and peak is None:
        raise UsageError("--peak-search says how --peak is searched: give --peak too")
    check_report_options(args)
    if args.plan is not None:
        given = [
            f for f in ("budget", "peak", "solver", "time_limit") if getattr(args, f) is not None
        ]
        if given:
            flags = ", ".join(f"--{f.replace('_', '-')}" for f in given)
            raise UsageError(f"--plan applies a saved plan: {flags} cannot be used with it")
        if not Path(args.plan).is_file():
            raise UsageError(f"--plan {args.plan!r}: no such file")
    return memory_budget, peak


def _write_solve_files(args: argparse.Namespace, plans: list[Any], description: str) -> None:
    """The plan file (``--json``) and the timeline plot (``--timeline``)."""
    from ..core.plan_files import dumps_plans

    if args.json:
        _write("--json", args.json, lambda: Path(args.json).write_text(dumps_plans(plans) + "\n"))
    if args.timeline:
        from .plots import save_timeline_plot

        _write(
            "--timeline",
            args.timeline,
            lambda: save_timeline_plot(plans, args.timeline, title=description),
        )


def _size(given: str | None) -> int | None:
    """The memory budget as a size (the step's), where it is one: given, or the config's."""
    from ..planning.options import resolve_settings

    return resolve_settings(memory_budget=parse_budget_arg(given)).budget.nbytes


def _print_solve(
    args: argparse.Namespace, plans: list[Any], description: str, timings: dict[str, float]
) -> None:
    from .report import solve_report

    report = solve_report(
        plans,
        description,
        depth=args.depth,
        top=args.top,
        timings=timings,
        compiled=args.compile,
        size=None if args.plan else _size(args.budget),
    )
    print(report)
    unknown = [i for i, p in enumerate(plans) if p.compiled_peak_bytes is None]
    if args.compile and unknown:
        print(
            f"\nthe peak of the generated code is unknown for graph(s) {unknown} (C++ wrapper "
            "code, or code the meta run could not run): their peak is predicted from the "
            "graphs"
        )
    if args.plan:
        print(f"\napplied the saved plan {args.plan}: it fits {description}")
    if args.json:
        print(f"\nplan file: {args.json} (apply with budget.backend(plan={args.json!r}))")
    if args.timeline:
        print(f"\ntimeline: {args.timeline}")
    if not args.plan:
        _hint_at_b1(args, plans, "torch's own plan")


def _hint_at_b1(args: argparse.Namespace, plans: Sequence[Any], what: str) -> None:
    """Where no budget was asked and every plan is budget.config's default of 1 (``what``
    that is), what to ask for instead."""
    if args.budget is not None or args.peak is not None:
        return
    if all(p.budget == 1.0 and p.peak_target_bytes is None for p in plans):
        hint = (
            f"budget 1 (the default) is {what}: --budget 0.5 or --peak SIZE trades "
            "recompute for memory, and budget sweep shows the trade-off at every budget"
        )
        print("\n" + textwrap.fill(hint, WIDTH))


def _solve_eager(args: argparse.Namespace) -> int:
    """``budget solve --eager``: the eager plan (modules to checkpoint, per-op policy)."""
    from .report import eager_solve_report

    modules = parse_modules_arg(args)
    if args.plan is not None:
        raise UsageError(
            "--plan cannot be used with --eager (compiled plans only; an eager plan file is "
            "applied with budget.apply(model, plan=EagerPlan.from_json(text)))"
        )
    memory_budget = parse_budget_arg(args.budget)
    peak = parse_peak_arg(args.peak)
    check_report_options(args)
    from ..eager.apply import plan as eager_plan

    start = time.perf_counter()
    model, step, example, description = load_eager_target(args.target, size_options(args))
    loaded = time.perf_counter()
    with ProgressBar(1, quiet=args.quiet, eager=True) as bar:
        plan = _planning(
            lambda: eager_plan(
                model,
                *example,
                step=step,
                memory_budget=memory_budget,
                peak_memory_budget=peak,
                modules=modules,
                solver=args.solver,
                estimator=args.estimator,
                time_limit=args.time_limit,
                peak_search=args.peak_search,
                offload=args.offload,
                progress=bar.update,
                vs_torch=args.vs_torch,
            )
        )
    done = time.perf_counter()
    if args.json:
        _write("--json", args.json, lambda: Path(args.json).write_text(plan.to_json() + "\n"))
    if args.timeline:
        from .plots import save_timeline_plot

        _write(
            "--timeline",
            args.timeline,
            lambda: save_timeline_plot([plan], args.timeline, title=description),
        )
    if args.format == "json":
        print(plan.to_json())
        return 0
    stages = sum(plan.timings.values())
    timings = {
        "load": loaded - start,
        "trace": max(0.0, done - loaded - stages),
        "plan": stages,
        "total": done - start,
    }
    print(eager_solve_report(plan, description, depth=args.depth, top=args.top, timings=timings))
    if args.timeline:
        print(f"\ntimeline: {args.timeline}")
    if args.json:
        print(f"\nplan file: {args.json} (budget.apply(model, plan=EagerPlan.from_json(text)))")
    _hint_at_b1(args, [plan], "the step as it is, nothing checkpointed")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from .report import sweep_csv, sweep_json, sweep_table

    check_options(args)
    _check_preview_flags(args)
    modules = parse_modules_arg(args) if args.eager or args.modules is not None else None
    budgets = parse_budgets(args.budgets)
    if args.plot:
        check_png(args.plot, "--plot")
    run, description = sweep_runs(args, budgets, modules)
    with ProgressBar(len(budgets), quiet=args.quiet, eager=args.eager) as bar:
        sweeps = _planning(lambda: run(args.offload, bar.update))
    if args.plot:
        from .plots import save_sweep_plot

        # with offload, the recompute-only curve beside it
        plain = _planning(lambda: run(False, None)) if args.offload else []
        _write(
            "--plot",
            args.plot,
            lambda: save_sweep_plot(sweeps, args.plot, title=description, without_offload=plain),
        )
    if args.format == "json":
        print(sweep_json(sweeps, description))
    elif args.format == "csv":
        print(sweep_csv(sweeps))
    else:
        print(sweep_table(sweeps, description))
        if args.plot:
            print(f"\nplot: {args.plot}")
    return 0


# --------------------------------------------------------------------------- main


def _one_line(e: BaseException) -> str:
    """The error as one line, with the command-line way out where the library's message
    names the Python one (the library never speaks of flags)."""
    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, PlanMismatchError):
        text += " (on the command line: budget solve TARGET --json PLAN.json, with --compiler)"
    elif isinstance(e, SolverTimeout):
        text += " (on the command line: --time-limit SECONDS)"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``budget`` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2, already printed)
        return int(e.code or 0)
    debug = getattr(args, "debug", False)
    if args.version:
        from .._version import __version__

        print(f"budget {__version__}")
        return 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    command = _solve if args.command == "solve" else _sweep
    try:
        return command(args)
    except BrokenPipeError:
        # The reader went away (``budget solve | head``): not an error. Point stdout at
        # devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (UsageError, ValueError, OSError, ImportError) as e:
        if debug:
            traceback.print_exc()
        print(f"budget: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("budget: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        from ..compile.backend import root_error

        if debug:
            traceback.print_exc()
        inner = root_error(e)
        if isinstance(inner, SolverTimeout):
            print(f"budget: error: {_one_line(inner)}", file=sys.stderr)
            return 1
        print(
            f"budget: error: unexpected {describe_error(inner)} (rerun with --debug for the "
            "traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
