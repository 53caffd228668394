"""TARGET strings of the command line -> a training step and its example inputs.

- ``builtin:NAME`` (``gpt``, ``resnet``, ``mlp``): a built-in model of
  :mod:`budget.models`, with size options (``layers=2``...);
- ``FILE.py:FACTORY``: the user's own. ``FACTORY`` is a function of no arguments defined
  in FILE.py that returns one of

  * a :class:`budget.models.Example`;
  * ``(step, args)``: ``step(*args)`` runs the forward and returns the scalar loss;
  * ``(module, args)``: an ``nn.Module`` whose ``module(*args)`` returns the scalar loss.

  ``args`` is a tuple or list of example inputs (a single tensor is taken as one
  argument). Something in the step must require grad (the parameters, usually). The file
  is imported as a module with its own directory on ``sys.path``, so it can import its
  neighbours; nothing is trained, the step is traced on fake tensors.

Every failure is a :class:`TargetError` (a ValueError) with one clear line.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TargetError

DEFAULT_TARGET = "builtin:gpt"

CONTRACT = (
    "FILE.py:FACTORY, where FACTORY() takes no arguments and returns a budget.models.Example, "
    "a (step, args) pair with step(*args) returning the scalar loss, or a (module, args) pair "
    "with module(*args) returning it"
)


@dataclass
class Target:
    """A loaded TARGET: the step, its example arguments, and how to name it."""

    step: Callable[..., Any]
    args: tuple
    description: str


def load_target(target: str, options: Mapping[str, int | float] | None = None) -> Target:
    """The training step and example arguments of a TARGET string.

    ``options`` are sizes for a built-in model; they are an error for a user file.
    """
    options = dict(options or {})
    if target.startswith("builtin:"):
        return _load_builtin(target.removeprefix("builtin:"), options)
    path, sep, factory_name = target.rpartition(":")
    if not sep or not path or not factory_name:
        raise TargetError(
            f"target {target!r} must be builtin:NAME or FILE.py:FACTORY (e.g. model.py:make)"
        )
    if options:
        flags = ", ".join(f"--{k.replace('_', '-')}" for k in options)
        raise TargetError(f"{flags} apply to built-in models only, not to {target!r}")
    file = Path(path)
    if not file.is_file():
        raise TargetError(f"target {target!r}: no such file {path!r}")
    if file.suffix != ".py":
        raise TargetError(f"target {target!r}: {path!r} is not a .py file")
    module = _import_file(file)
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise TargetError(f"target {target!r}: {path} defines no function {factory_name!r}")
    try:
        made = factory()
    except Exception as e:
        raise TargetError(f"target {target!r}: {factory_name}() raised {describe_error(e)}") from e
    step, args = _unpack(made, target, factory_name)
    return Target(step, args, target)


def _load_builtin(name: str, options: dict[str, int | float]) -> Target:
    from ..models import BUILTINS, get_builtin

    if name not in BUILTINS:
        raise TargetError(f"unknown built-in model {name!r}; available: {', '.join(BUILTINS)}")
    try:
        ex = get_builtin(name, **options)
    except (TypeError, ValueError) as e:
        raise TargetError(f"builtin:{name}: {e}") from e
    return Target(ex.step, tuple(ex.args), ex.describe())


def _unpack(made: Any, target: str, factory_name: str) -> tuple[Callable[..., Any], tuple]:
    from ..models import Example

    if isinstance(made, Example):
        return made.step, tuple(made.args)
    if isinstance(made, (tuple, list)) and len(made) == 2 and callable(made[0]):
        fn, args = made
        return fn, tuple(args) if isinstance(args, (tuple, list)) else (args,)
    raise TargetError(
        f"target {target!r}: {factory_name}() must return an Example, a (step, args) or a "
        f"(module, args) pair; got {type(made).__name__}"
    )


def _import_file(file: Path) -> Any:
    name = f"_budget_target_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot import {str(file)!r} (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.resolve().parent))  # let the file import its neighbours
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise TargetError(f"importing {str(file)!r} raised {describe_error(e)}") from e
    finally:
        sys.path.pop(0)
    return module


def describe_error(e: BaseException) -> str:
    """'RuntimeError: boom': the type and the first line of an exception."""
    first = str(e).strip().splitlines()
    return f"{type(e).__name__}: {first[0]}" if first else type(e).__name__


def load_eager_target(target: str, options: dict[str, int | float]) -> tuple[Any, Any, tuple, str]:
    """(model, step or None, example args, description) of a TARGET, for --eager: the
    model itself is needed (its modules are what is checkpointed)."""
    from torch import nn

    from ..models import Example, get_builtin

    loaded = load_target(target, options)  # validates the target, its options and factory
    if target.startswith("builtin:"):
        ex = get_builtin(target.removeprefix("builtin:"), **options)
        return ex.model, ex.step, tuple(ex.args), ex.describe()
    if isinstance(loaded.step, nn.Module):
        return loaded.step, None, loaded.args, loaded.description
    path, _, factory_name = target.rpartition(":")
    made = getattr(_import_file(Path(path)), factory_name)
    try:
        made = made()
    except Exception as e:  # it ran once already; report it the same way
        raise TargetError(f"target {target!r}: {factory_name}() raised {describe_error(e)}") from e
    if isinstance(made, Example):
        return made.model, made.step, tuple(made.args), target
    raise TargetError(
        f"--eager needs the model: {factory_name}() must return a budget.models.Example or a "
        "(module, args) pair, not a (step, args) pair"
    )
