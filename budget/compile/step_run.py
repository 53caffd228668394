"""Running a step for a preview: dynamo and the backend on fake tensors, or on the
example inputs where code outside the compiled graphs depends on tensor values, and what
autograd saves outside the compiled graphs meanwhile (eager code's own activations), put
on the plans of the graphs it follows (:class:`OutsideSaves`)."""

from __future__ import annotations

import os
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from ..errors import BudgetError, PreviewError
from ..runtime._torch_private import (
    BackendCompilerFailed,
    FakeTensor,
    FakeTensorMode,
    forget_compiled,
    sizes_seen_kept,
    tree_leaves,
    tree_map,
)
from ..runtime.restore import modules_of, optimizers_of, references_kept, restored
from ..runtime.values import data_dependent, hint
from .backend import BudgetBackend, in_compiled_graph
from .own_code import compiled_modules, own_code

# torch's errors for Python that needs a fake tensor's values (a branch on a data-dependent
# size, .item() used as a number, an op whose output size it cannot bound)
DATA_DEPENDENT = {
    "GuardOnDataDependentSymNode",
    "DataDependentOutputException",
    "DynamicOutputShapeException",
}


def run_on_fake(
    be: BudgetBackend, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    # A shape environment lets eager code between graphs run data-dependent ops (nonzero,
    # masked_select: a MoE's routing) on fake tensors, as training runs them for real. A
    # number read from a tensor (``.item()``) is not made a symbol: where training gets
    # the number, the code after it would take a symbol (dynamo then runs that frame
    # eagerly, and marks it so for training too); the read raises, and the step runs on
    # its examples instead.
    shape_env = ShapeEnv(allow_scalar_outputs=False)
    with FakeTensorMode(allow_non_fake_inputs=True, shape_env=shape_env) as mode:

        def fake(x: Any) -> Any:
            return mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x

        args, kwargs = tree_map(fake, (args, kwargs))
        with references_kept(modules_of(fn), optimizers_of(fn)):
            _run(be, fn, args, kwargs, OutsideSaves(be, (args, kwargs), mode))


def run_on_examples(
    be: BudgetBackend,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    cause: Exception,
) -> None:
    """The step on its example inputs (:func:`run_for_real`); a PreviewError naming
    where the step failed when even that cannot run."""
    try:
        run_for_real(be, fn, args, kwargs)
    except BudgetError:
        raise
    except Exception as e:
        raise PreviewError(
            "the step cannot be previewed: on fake tensors, code outside the compiled "
            f"graphs depends on tensor values ({_first_line(cause)}), and on the example "
            f"inputs it raised {_first_line(e)}{_where(e)}"
        ) from e


def run_for_real(
    be: BudgetBackend, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """``fn`` on real tensors: the modules and optimizers it reaches and the generators
    restored after (a train step's own optimizer step undone), the modules' parameters and
    buffers not counted as eager code's saves."""
    modules = modules_of(fn)
    resident = [t for m in modules for t in (*m.parameters(), *m.buffers())]
    outside = OutsideSaves(be, (args, kwargs, resident), None)
    with restored(modules, optimizers_of(fn)):
        _run(be, fn, args, kwargs, outside)


def _run(
    be: BudgetBackend,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    outside: OutsideSaves,
) -> None:
    # compiled as training compiles it (torch.compile's default, dynamic=None: a module's
    # frame compiled again at other sizes gets symbolic ones), leaving what dynamo has
    # seen as it was, so that training compiles the same graphs after it; where the step
    # reaches modules compiled on their own, the step runs eagerly and they compile
    try:
        with (
            sizes_seen_kept(),
            compiled_modules(fn, be) as blocks,
            torch.autograd.graph.saved_tensors_hooks(outside.pack, lambda t: t),
        ):
            (fn if blocks else torch.compile(own_code(fn), backend=be))(*args, **kwargs)
    except BackendCompilerFailed as e:  # show our own error, not dynamo's wrapper
        raise e.inner_exception from None
    finally:
        for code in be.preview_codes:
            forget_compiled(code)
        be.preview_codes.clear()
    outside.attribute()


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def _where(e: BaseException) -> str:
    """`` at FILE:LINE``: the innermost frame of the traceback outside torch and budget."""
    line = user_line(traceback.extract_tb(e.__traceback__))
    return f" at {line}" if line else ""


# folders, each ending in a separator (torchvision's is not torch's)
_OURS = tuple(
    os.path.join(str(p), "") for p in (Path(torch.__file__).parent, Path(__file__).parents[1])
)
# installed packages and the standard library: a model's library code (transformers)
_LIBRARIES = tuple(
    {
        os.path.join(sysconfig.get_paths()[k], "")
        for k in ("purelib", "platlib", "stdlib", "platstdlib")
    }
)


def user_line(frames: list[traceback.FrameSummary]) -> str:
    """``FILE:LINE`` of the innermost of ``frames`` outside torch and budget, or ''.
    Where that is library code (an installed package, as a transformers model is), the
    innermost frame outside libraries follows: ``LIB:LINE from FILE:LINE``, the line
    of the user's own code that got there."""
    outside = [f for f in frames if not f.filename.startswith(_OURS)]
    if not outside:
        return ""
    inner = outside[-1]
    line = f"{inner.filename}:{inner.lineno}"
    if _in_library(inner.filename):
        users = [f for f in outside if not _in_library(f.filename)]
        if users:
            line += f" from {users[-1].filename}:{users[-1].lineno}"
    return line


def _in_library(filename: str) -> bool:
    parts = Path(filename).parts
    return filename.startswith(_LIBRARIES) or "site-packages" in parts or "dist-packages" in parts


class OutsideSaves:
    """What autograd saves outside the compiled graphs during a preview's run: eager
    code's own activations, which no plan covers. Each distinct storage once, parameters
    and the step's inputs aside, sized by its upper bound where its size depends on data
    (a MoE's routing, on fake tensors), at a guess where torch bounds it nowhere
    (``Plan.eager_guessed_at``), and put on the plan of the graph it follows, with the
    line of the step's code that saved it (``Plan.eager_saved_at``)."""

    def __init__(self, be: BudgetBackend, inputs: Any, mode: Any) -> None:
        self.be = be
        self.mode = mode  # the fake mode; None on the example inputs (real tensors)
        leaves = [t for t in tree_leaves(inputs) if isinstance(t, torch.Tensor)]
        self.inputs = {id(t.untyped_storage()) for t in leaves}
        # id(storage) -> (bytes, runs before, the FILE:LINE of the code that saved it)
        self.saved: dict[int, tuple[int, int, str]] = {}
        self.guessed: set[int] = set()  # the ids of those sized at a guess
        self.keep: list[Any] = []  # the storages, alive so that their ids stay theirs

    def pack(self, t: Any) -> Any:
        # on fake tensors, parameters are the real ones; on the example inputs, a leaf
        # that requires grad is one the step did not make (a parameter it reached)
        made = _fake(t) if self.mode is not None else not (t.is_leaf and t.requires_grad)
        if made and not in_compiled_graph():
            storage = t.untyped_storage()
            key = id(storage)
            if key not in self.inputs and key not in self.saved:
                line = user_line(traceback.extract_stack())
                if data_dependent(t) == "guessed":
                    self.guessed.add(key)
                # a data-dependent size at its upper bound, or at the graphs' guess
                self.saved[key] = (hint(storage.nbytes()), len(self.be.preview_runs), line)
                self.keep.append(storage)
        return t

    def attribute(self) -> None:
        """Each plan's eager saves (those after a run of its graph, until the next graph's
        run; before the first run: the first graph's) and what the step holds outside its
        graph while it runs (``held_bytes``: over its runs, the most)."""
        plans, runs = self.be.plans, self.be.preview_runs
        if not plans:  # no graph to put them on (the preview says so)
            return
        ran = [i for i in runs if i is not None]
        eager = [0] * len(plans)
        at: list[dict[str, int]] = [{} for _ in plans]  # each plan's, by line
        guessed: list[list[str]] = [[] for _ in plans]
        saves_before = [0] * (len(runs) + 1)  # eager bytes saved after k runs, by k
        for key, (nbytes, k, line) in self.saved.items():
            saves_before[min(k, len(runs))] += nbytes
            last = next((i for i in reversed(runs[:k]) if i is not None), None)
            i = last if last is not None else (ran[0] if ran else 0)
            eager[i] += nbytes
            if nbytes:
                where = line or "?"  # no frame of the step's own (torch or budget code)
                at[i][where] = at[i].get(where, 0) + nbytes
                if key in self.guessed and where not in guessed[i]:
                    guessed[i].append(where)
        held: list[int] = [0] * len(plans)
        outside = 0  # the step's bytes outside the graph about to run
        for k, i in enumerate(runs):
            outside += saves_before[k]
            if i is not None:
                held[i] = max(held[i], outside)
                outside += plans[i].saved_bytes + plans[i].kept_input_bytes
        for i in range(len(plans)):
            lines = dict(sorted(at[i].items(), key=lambda kv: -kv[1]))  # the most first
            self.be.log.update(
                i,
                eager_saved_bytes=eager[i],
                eager_saved_at=lines,
                eager_guessed_at=guessed[i],
                held_bytes=held[i],
            )
        self.be.preview_eager = saves_before
        self.keep.clear()


def _fake(t: Any) -> bool:
    return isinstance(t, FakeTensor)
