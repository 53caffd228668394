"""The ``budget`` command line: preview plans without writing Python.

    budget solve                               # the built-in GPT at the configured budget
    budget solve builtin:resnet --budget 0.3
    budget solve my_model.py:make --budget 512MiB --format json --json plan.json

A TARGET is ``builtin:NAME`` (see :mod:`budget.models`) or ``FILE.py:FACTORY``, where the
factory takes no arguments and returns an :class:`~budget.models.Example` or a
``(step, args)`` pair, ``step(*args)`` computing the training loss. Plans are previewed on
fake tensors (:func:`budget.plans`), so nothing is trained. User errors (a bad target, a
factory that raises, an invalid or unreachable budget) exit with status 2 and one line on
stderr; ``--debug`` shows the traceback. This is the only module of budget that prints.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

DEFAULT_TARGET = "builtin:gpt"
SIZE_FLAGS = ("layers", "d", "heads", "seq", "batch", "vocab")


class UsageError(Exception):
    """A user error: reported as one line, exit status 2."""


def _parser() -> argparse.ArgumentParser:
    from .config import config
    from .models import BUILTINS

    parser = argparse.ArgumentParser(
        prog="budget",
        description="Plan which activations to save and which to recompute within a memory budget.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    solve = sub.add_parser(
        "solve",
        help="preview the plan(s) for a training step",
        description="Preview the save/recompute plan for every graph of a training step.",
    )
    solve.add_argument(
        "target",
        nargs="?",
        default=DEFAULT_TARGET,
        metavar="TARGET",
        help=f"builtin:NAME ({', '.join(BUILTINS)}) or FILE.py:FACTORY (default: {DEFAULT_TARGET})",
    )
    solve.add_argument(
        "--budget",
        default=None,
        help="fraction in [0, 1] of saved activation memory, or a size such as 512MiB "
        f"(default: {config.activation_memory_budget})",
    )
    solve.add_argument("--solver", default=None, help=f"(default: {config.solver})")
    solve.add_argument("--estimator", default=None, help=f"(default: {config.estimator})")
    solve.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"solver time limit per solve (default: {config.time_limit:g})",
    )
    solve.add_argument(
        "--format", choices=("table", "json"), default="table", help="what to print to stdout"
    )
    solve.add_argument(
        "--json", metavar="FILE", help="also write the plan as JSON (several graphs: a list)"
    )
    sizes = solve.add_argument_group("built-in model sizes")
    for flag in SIZE_FLAGS:
        sizes.add_argument(f"--{flag}", type=int, default=None, metavar="N")
    solve.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
    return parser


def parse_budget_arg(text: str | None) -> float | str | None:
    """'0.5' -> 0.5, '512MiB' -> '512MiB' (validated), None -> None (use the config)."""
    from .sizes import parse_budget

    if text is None:
        return None
    try:
        value: float | str = float(text)
    except ValueError:
        value = text
    parse_budget(value)
    return value


def load_target(target: str, sizes: dict[str, int]) -> tuple[Callable[..., Any], tuple]:
    """The training step and its example arguments for a TARGET string."""
    from .models import Example, get_builtin

    if target.startswith("builtin:"):
        ex = get_builtin(target.removeprefix("builtin:"), **sizes)
        return ex.step, tuple(ex.args)
    path, sep, factory_name = target.rpartition(":")
    if not sep or not path or not factory_name:
        raise UsageError(
            f"target {target!r} must be builtin:NAME or FILE.py:FACTORY (e.g. model.py:make)"
        )
    if sizes:
        raise UsageError(f"--{', --'.join(sizes)} apply to built-in models only, not to {target!r}")
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"target {target!r}: no such file {path!r}")
    module = _import_file(file)
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise UsageError(f"target {target!r}: {path} defines no function {factory_name!r}")
    try:
        made = factory()
    except Exception as e:
        raise UsageError(f"target {target!r}: {factory_name}() raised {_describe(e)}") from e
    if isinstance(made, Example):
        return made.step, tuple(made.args)
    if isinstance(made, (tuple, list)) and len(made) == 2 and callable(made[0]):
        fn, args = made
        return fn, tuple(args) if isinstance(args, (tuple, list)) else (args,)
    raise UsageError(
        f"target {target!r}: {factory_name}() must return an Example or a (step, args) pair; "
        f"got {type(made).__name__}"
    )


def _import_file(file: Path) -> Any:
    name = f"_budget_target_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {str(file)!r} (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.resolve().parent))  # let the file import its neighbours
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise UsageError(f"importing {str(file)!r} raised {_describe(e)}") from e
    finally:
        sys.path.pop(0)
    return module


def _describe(e: BaseException) -> str:
    first = str(e).strip().splitlines()
    return f"{type(e).__name__}: {first[0]}" if first else type(e).__name__


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _solve(args: argparse.Namespace) -> int:
    import budget

    from .estimators import get_estimator
    from .solvers import get_solver

    if args.time_limit is not None and not args.time_limit > 0:
        raise UsageError(
            f"--time-limit must be a positive number of seconds; got {args.time_limit}"
        )
    memory_budget = parse_budget_arg(args.budget)
    if args.solver is not None:
        get_solver(args.solver)
    if args.estimator is not None:
        get_estimator(args.estimator)
    if args.json and not Path(args.json).resolve().parent.is_dir():
        raise UsageError(f"cannot write {args.json!r}: its directory does not exist")
    sizes = {k: getattr(args, k) for k in SIZE_FLAGS if getattr(args, k) is not None}
    fn, example_args = load_target(args.target, sizes)
    try:
        plans = budget.plans(
            fn,
            *example_args,
            memory_budget=memory_budget,
            solver=args.solver,
            estimator=args.estimator,
            time_limit=args.time_limit,
        )
    except Exception as e:
        from .torch_backend import root_error

        inner = root_error(e)
        if isinstance(inner, ValueError):  # BudgetTooSmallError, InfeasibleError, ...
            raise inner from e
        raise
    if args.json:
        text = _json(plans)
        try:
            Path(args.json).write_text(text + "\n")
        except OSError as e:
            raise UsageError(f"cannot write {args.json!r}: {e.strerror or e}") from e
    if args.format == "json":
        print(_json(plans))
    else:
        for i, plan in enumerate(plans):
            if len(plans) > 1:
                print(f"{'' if i == 0 else chr(10)}graph {i + 1} of {len(plans)}")
            print(plan)
    return 0


def _json(plans: Sequence[Any]) -> str:
    if len(plans) == 1:
        return plans[0].to_json()
    return json.dumps([json.loads(p.to_json()) for p in plans], indent=2)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``budget`` console script; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.version:
        from . import __version__

        print(f"budget {__version__}")
        return 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return _solve(args)
    except BrokenPipeError:
        # The reader went away (``budget solve | head``): not an error. Point stdout at
        # devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (UsageError, ValueError, OSError, ImportError) as e:
        if args.debug:
            traceback.print_exc()
        print(f"budget: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("budget: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        from .torch_backend import root_error

        if args.debug:
            traceback.print_exc()
        print(
            f"budget: error: unexpected {_describe(root_error(e))} (rerun with --debug for the "
            "traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
