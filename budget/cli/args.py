"""The command line's grammar: the ``budget`` argument parser and option checks.

Builds the parser of ``budget solve`` and ``budget sweep`` (shared options, built-in
model sizes) and validates what argparse cannot (budgets, lists of budgets, solver and
estimator names, writable output paths). Every problem is a :class:`UsageError` or a
ValueError with one clear line; :mod:`budget.cli.main` turns them into exit status 2.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import NoReturn

from ..config import COMPILERS
from ..errors import UsageError
from .targets import CONTRACT, DEFAULT_TARGET

DEFAULT_BUDGETS = "0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1"

TARGET_HELP = """\
targets:
  builtin:gpt, builtin:resnet, builtin:mlp   built-in models; sizes by the flags below
  FILE.py:FACTORY                            your own: FACTORY() takes no arguments and
                                             returns one of
      a budget.models.Example
      (step, args)    step(*args) runs the model and returns the scalar loss
      (module, args)  an nn.Module whose module(*args) returns the scalar loss
  args is a tuple or list of example inputs (one tensor is one argument); something in
  the step must require grad. For example, in model.py:

      import torch
      from torch import nn

      def make():
          model = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 10))
          x, y = torch.randn(32, 128), torch.randint(10, (32,))
          step = lambda x, y: nn.functional.cross_entropy(model(x), y)
          return step, (x, y)

  then: budget solve model.py:make --budget 0.5
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line like every other user error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"budget: error: {message} (see {self.prog} --help)\n")


# --------------------------------------------------------------------------- parser


def _builtin_flags() -> dict[str, tuple[type, list[str]]]:
    """Every size option of the built-in models: its type and the models that take it."""
    from ..models import BUILTINS, builtin_defaults

    flags: dict[str, tuple[type, list[str]]] = {}
    for name in BUILTINS:
        for opt, default in builtin_defaults(name).items():
            kind = float if isinstance(default, float) else int
            flags.setdefault(opt, (kind, []))[1].append(name)
    return flags


def size_options(args: argparse.Namespace) -> dict[str, int | float]:
    """The built-in model sizes given on the command line (``--layers 2`` -> layers=2)."""
    return {k: getattr(args, k) for k in _builtin_flags() if getattr(args, k, None) is not None}


def _add_common(p: argparse.ArgumentParser) -> None:
    from ..config import config
    from ..models import BUILTINS

    p.add_argument(
        "target",
        nargs="?",
        default=DEFAULT_TARGET,
        metavar="TARGET",
        help=f"builtin:NAME ({', '.join(BUILTINS)}) or {CONTRACT} (default: {DEFAULT_TARGET})",
    )
    p.add_argument("--solver", default=None, help=f"(default: {config.solver})")
    p.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    p.add_argument("--estimator", default=None, help=f"(default: {config.estimator})")
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"solver time limit per solve (default: {config.time_limit:g})",
    )
    p.add_argument(
        "--offload",
        action="store_true",
        default=None,
        help="the solver may also keep saved values in host memory, copied back for the "
        "backward, where that is cheaper than recomputing them (GPU plans: name the GPU "
        "in --estimator, e.g. flops:h100, to preview on a CPU)",
    )
    p.add_argument(
        "--vs-torch",
        action="store_true",
        help="beside each plan, torch's own: its partitioner's plan of the same graph at the "
        "same budget (activation_memory_budget); with --eager, its checkpointing of every "
        "module budget.apply may checkpoint, each whole: what it saves, recomputes, peaks at",
    )
    p.add_argument(
        "--compiler",
        choices=COMPILERS,
        default="inductor",
        help="the torch.compile pipeline to plan for; a plan applies only to the pipeline it "
        "was made for (default: inductor, as budget.backend())",
    )
    p.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors"
    )
    sizes = p.add_argument_group("built-in model sizes")
    for opt, (kind, models) in _builtin_flags().items():
        sizes.add_argument(
            f"--{opt.replace('_', '-')}",
            dest=opt,
            type=kind,
            default=None,
            metavar="X" if kind is float else "N",
            help=f"({', '.join(models)})",
        )


def build_parser() -> argparse.ArgumentParser:
    from ..config import config

    parser = _Parser(
        prog="budget",
        description="Plan which activations to save and which to recompute within a memory budget.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_solve(sub, config.activation_memory_budget)
    _add_sweep(sub)
    return parser


def _add_solve(sub: argparse._SubParsersAction, default_budget: float) -> None:
    solve = sub.add_parser(
        "solve",
        allow_abbrev=False,
        help="preview the plan(s) for a training step",
        description="Preview the save/recompute plan for every graph of a training step: "
        "the budget's two ends, saved bytes, recompute cost, a table per module and the "
        "largest decisions. --json writes a plan file for budget.backend(plan=FILE).",
        epilog=TARGET_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_common(solve)
    _add_solve_budgets(solve, default_budget)
    _add_solve_outputs(solve)
    _add_eager(solve)


def _add_solve_budgets(solve: argparse.ArgumentParser, default_budget: float) -> None:
    """``budget solve``'s budgets and how a peak budget is searched and checked."""
    solve.add_argument(
        "--budget",
        default=None,
        help="fraction in [0, 1] of saved activation memory, or a size such as 512MiB "
        f"(default: {default_budget})",
    )
    solve.add_argument(
        "--peak",
        default=None,
        metavar="SIZE",
        help="the most memory the step may use at its peak, e.g. 6GiB: the plan with the "
        "least recompute that fits (within --budget too when given); the peak predicted "
        "from the graphs, or with --compile the peak of Inductor's generated code",
    )
    solve.add_argument(
        "--peak-search",
        choices=("grid", "exact"),
        default=None,
        help="how --peak is searched: grid (default: the best plans of a grid of budgets, "
        "recomputing values again where that helps) or exact (then CP-SAT over the plans "
        "that recompute each value once, cheapest first; proves the plan optimal among them "
        "when it can; slower)",
    )
    solve.add_argument(
        "--compile",
        action="store_true",
        help="compile the step's graphs with Inductor as training does (on fake tensors, "
        "no kernel built): the plan then carries the peak of the generated code, and a "
        "--peak is checked on it, as in training (slower: Inductor's code generation)",
    )


def _add_solve_outputs(solve: argparse.ArgumentParser) -> None:
    """What ``budget solve`` prints and writes."""
    solve.add_argument(
        "--format", choices=("table", "json"), default="table", help="what to print to stdout"
    )
    solve.add_argument(
        "--timeline",
        metavar="FILE.png",
        help="also draw the live bytes across the step (forward, backward, recompute) to a PNG",
    )
    solve.add_argument(
        "--json",
        metavar="FILE",
        help="also write the plan file (one plan's JSON; several graphs: "
        '{"version": N, "plans": [...]}) for budget.backend(plan=FILE)',
    )
    solve.add_argument(
        "--plan",
        metavar="FILE",
        help="apply a saved plan file instead of solving, as budget.backend(plan=FILE) "
        "would: shows it, or exits with status 2 when it no longer fits TARGET",
    )
    solve.add_argument(
        "--depth",
        type=int,
        default=2,
        metavar="N",
        help="module depth of the per-module table: 1 = the model's children (default: 2)",
    )
    solve.add_argument(
        "--top", type=int, default=10, metavar="N", help="largest decisions to list (default: 10)"
    )


def _add_eager(parser: argparse.ArgumentParser) -> None:
    """``--eager``: budget.apply's plans (``budget.eager.plan``, ``budget.eager.sweep``)."""
    parser.add_argument(
        "--eager",
        action="store_true",
        help="plan eager selective checkpointing (budget.apply) instead of a compiled step: "
        "which modules to checkpoint and each op's save/recompute choice inside them "
        "(TARGET must give the model: builtin:NAME, or a factory returning an Example or "
        "(module, args))",
    )
    parser.add_argument(
        "--modules",
        default=None,
        metavar="NAMES",
        help="with --eager: comma-separated module names to consider for checkpointing "
        "(default: the blocks of the model's ModuleLists and Sequentials)",
    )


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    sweep = sub.add_parser(
        "sweep",
        allow_abbrev=False,
        help="plan many budgets: the memory/recompute Pareto table",
        description="Plan the step at many budgets from one trace and print the Pareto "
        "table (budget, target, saved bytes, recompute cost, status), with a progress "
        "bar on stderr; --plot draws the frontier to a PNG.",
        epilog=TARGET_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_common(sweep)
    sweep.add_argument(
        "--budgets",
        default=DEFAULT_BUDGETS,
        metavar="LIST",
        help="comma-separated fractions and sizes, e.g. 0,0.5,1 or 0,64MiB,1 "
        f"(default: {DEFAULT_BUDGETS})",
    )
    sweep.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="what to print to stdout",
    )
    sweep.add_argument("--plot", metavar="FILE.png", help="also draw the frontier to a PNG")
    sweep.add_argument(
        "--compile",
        action="store_true",
        help="plan each budget as Inductor training does, with the peak of the code it "
        "generates (the step compiled once per budget, on fake tensors, no kernel built: "
        "slower)",
    )
    _add_eager(sweep)


# --------------------------------------------------------------------------- options


def parse_budget_arg(text: str | None) -> float | str | None:
    """'0.5' -> 0.5, '512MiB' -> '512MiB' (validated), None -> None (use the config)."""
    from ..core.sizes import parse_budget

    if text is None:
        return None
    try:
        value: float | str = float(text)
    except ValueError:
        value = text.strip()
    parse_budget(value)
    return value


def parse_budgets(text: str) -> list[float | str]:
    """'0,0.5,64MiB' -> [0.0, 0.5, '64MiB']; an empty item or a bad budget is an error."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise UsageError(f"--budgets must be a comma-separated list of budgets; got {text!r}")
    budgets: list[float | str] = []
    for item in items:
        try:
            budgets.append(parse_budget_arg(item))  # type: ignore[arg-type]
        except ValueError as e:
            raise UsageError(f"--budgets: {item!r} is not a budget: {e}") from None
    return budgets


def parse_peak_arg(text: str | None) -> str | None:
    """--peak: a size with a unit, or None; a UsageError that says what is allowed."""
    from ..core.sizes import parse_peak_budget

    if text is None:
        return None
    try:
        parse_peak_budget(text)
    except ValueError as e:
        raise UsageError(f"--peak: {e}") from None
    return text


def planning_options(args: argparse.Namespace) -> dict[str, object]:
    """The planning options both commands pass to budget.plans / budget.sweep."""
    return {
        "solver": args.solver,
        "estimator": args.estimator,
        "time_limit": args.time_limit,
        "compiler": args.compiler,
        "offload": args.offload,
        "vs_torch": args.vs_torch,
    }


def parse_modules_arg(args: argparse.Namespace) -> list[str] | None:
    """``--modules`` (with ``--eager`` only), as a list of names."""
    if not args.eager:
        raise UsageError("--modules applies to --eager plans only")
    if args.modules is None:
        return None
    modules = [m.strip() for m in args.modules.split(",")]
    if not all(modules):
        raise UsageError(f"--modules must be comma-separated module names; got {args.modules!r}")
    return modules


def check_options(args: argparse.Namespace) -> None:
    from ..estimators import get_estimator
    from ..solvers import get_solver

    if args.time_limit is not None and not args.time_limit > 0:
        raise UsageError(
            f"--time-limit must be a positive number of seconds; got {args.time_limit}"
        )
    if args.solver is not None:
        get_solver(args.solver)
    if args.estimator is not None:
        get_estimator(args.estimator)


def check_report_options(args: argparse.Namespace) -> None:
    """The options of ``budget solve``'s report and its files, compiled or eager."""
    if args.depth < 1:
        raise UsageError(f"--depth must be at least 1; got {args.depth}")
    if args.top < 0:
        raise UsageError(f"--top must be 0 or more; got {args.top}")
    if args.json:
        check_writable(args.json, "--json")
    if args.timeline:
        check_png(args.timeline, "--timeline")


def check_png(path: str, flag: str) -> None:
    """A PNG the command may write: named *.png, in a writable directory, matplotlib there."""
    from .plots import require_matplotlib

    if Path(path).suffix.lower() != ".png":
        raise UsageError(f"{flag} writes a PNG: name the file *.png; got {path!r}")
    check_writable(path, flag)
    require_matplotlib()


def check_writable(path: str, flag: str) -> None:
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise UsageError(f"cannot write {flag} {path!r}: its directory does not exist")
    if not os.access(parent, os.W_OK) or Path(path).is_dir():
        raise UsageError(f"cannot write {flag} {path!r}: not writable")
