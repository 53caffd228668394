"""Which modules may be checkpointed: the candidate regions of eager checkpointing.

Eager checkpointing recomputes only inside a checkpointed module's forward; everything
else autograd keeps as usual. The default candidates are the repeated blocks of a model,
found in its ``nn.ModuleList`` and ``nn.Sequential`` containers:

- a container of modules with children of their own (transformer layers, residual
  blocks): each of its entries is a candidate;
- an ``nn.Sequential`` of two leaf modules or more (``Linear, GELU, Linear, ...``): the
  container;
- where no container holds any: children of one parent that share a class, two or more,
  each with children of its own (timm's RegNet sets each stage's blocks as attributes);

outermost first: nothing inside a candidate is a candidate too. And besides them, each
entry of an ``nn.ModuleList`` of leaf modules outside them (a list of ``nn.LSTM`` layers:
each layer; a ModuleList has no forward of its own to checkpoint). ``modules=`` overrides the
default with qualified names (``"blocks.0"``, ``"transformer.h.3"``) or module classes
(``GPT2Block``: every outermost module of that class). A name that is no module, a class
nothing is an instance of, or candidates inside one another are a ValueError that names
what there is.

After the trace, each call of a candidate's forward with gradients on is a region of its
own (a layer shared across depth, run twelve times a step, has twelve, each checkpointed or
not, with a policy of its own). :func:`excluded` names the regions that cannot be
checkpointed (a module that also runs inside another candidate's forward, or given a
key-value cache it updates), and :func:`noted` says why a plan leaves others alone where
that is known.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace

from torch import nn

from ..core.sizes import format_bytes
from ..runtime.values import storage_of
from .plan import EagerPlan
from .traced import Trace

ModuleSpec = str | type


def default_candidates(model: nn.Module) -> dict[str, nn.Module]:
    """The default candidate regions of ``model``, by qualified name, in module order."""
    found: dict[str, nn.Module] = {}
    leaf_lists: dict[str, nn.Module] = {}  # entries of ModuleLists of leaf modules

    def visit(name: str, module: nn.Module) -> None:
        for child_name, child in module.named_children():
            qualified = f"{name}.{child_name}" if name else child_name
            if isinstance(child, (nn.ModuleList, nn.Sequential)) and len(child) >= 1:
                entries = list(child.named_children())
                leaves = all(not list(c.children()) for _, c in entries)
                into = leaf_lists if leaves and isinstance(child, nn.ModuleList) else found
                if leaves and isinstance(child, nn.Sequential):
                    if len(entries) >= 2:
                        found[qualified] = child
                        continue
                else:
                    for entry_name, entry in entries:
                        into[f"{qualified}.{entry_name}"] = entry
                    continue
            visit(qualified, child)

    visit("", model)
    blocks = found or _repeated_blocks(model)
    lists = {n: m for n, m in leaf_lists.items() if not any(_inside(n, b) for b in blocks)}
    order = {n: i for i, (n, _) in enumerate(model.named_modules())}
    return dict(sorted({**blocks, **lists}.items(), key=lambda kv: order[kv[0]]))


def _repeated_blocks(model: nn.Module) -> dict[str, nn.Module]:
    """Where no container holds the blocks (timm's RegNet adds each stage's blocks as
    attributes, ``b1``, ``b2``...): the children of one parent that share a class, two or
    more, each with modules of its own; the outermost such, in module order."""
    found: dict[str, nn.Module] = {}

    def visit(name: str, module: nn.Module) -> None:
        children = list(module.named_children())
        kinds = Counter(type(c) for _, c in children if list(c.children()))
        for child_name, child in children:
            qualified = f"{name}.{child_name}" if name else child_name
            if kinds[type(child)] >= 2 and list(child.children()):
                found[qualified] = child
            else:
                visit(qualified, child)

    visit("", model)
    return found


def select_candidates(
    model: nn.Module,
    modules: Sequence[ModuleSpec] | ModuleSpec | None = None,
    *,
    offload: bool = False,
) -> dict[str, nn.Module]:
    """The candidate regions: ``modules`` (names or classes) or the default ones. With
    ``offload`` a model without default candidates has none (offload alone plans it)."""
    if modules is None:
        found = default_candidates(model)
        if not found and not offload:
            raise ValueError(
                f"{type(model).__name__} has no blocks to checkpoint (no ModuleList or "
                "Sequential of blocks or layers, no repeated blocks): name the modules to consider with "
                f"modules=[...]; its modules: {_some_names(model)}"
            )
        return found
    specs = [modules] if isinstance(modules, (str, type)) else list(modules)
    if not specs:
        raise ValueError("modules= names no module: give names or module classes, or None")
    named = dict(model.named_modules())
    found = {}
    for spec in specs:
        if isinstance(spec, str):
            if spec not in named:
                raise ValueError(
                    f"modules=: {type(model).__name__} has no module {spec!r}; default "
                    f"candidates: {_names(default_candidates(model))}; its modules: "
                    f"{_some_names(model)}"
                )
            found[spec] = named[spec]
        elif isinstance(spec, type) and issubclass(spec, nn.Module):
            matches = {n: m for n, m in named.items() if isinstance(m, spec)}
            if not matches:
                raise ValueError(
                    f"modules=: no module of {type(model).__name__} is a {spec.__name__}; "
                    f"default candidates: {_names(default_candidates(model))}"
                )
            found.update(_outermost(matches))
        else:
            raise ValueError(
                f"modules= takes qualified module names (str) or nn.Module classes; got {spec!r}"
            )
    order = {n: i for i, n in enumerate(named)}
    found = dict(sorted(found.items(), key=lambda kv: order[kv[0]]))
    _check_disjoint(found)
    return found


def _outermost(matches: dict[str, nn.Module]) -> dict[str, nn.Module]:
    names = list(matches)
    return {
        n: matches[n] for n in names if not any(_inside(n, other) for other in names if other != n)
    }


def _inside(name: str, outer: str) -> bool:
    return outer == "" or name.startswith(outer + ".")


def _check_disjoint(found: dict[str, nn.Module]) -> None:
    names = list(found)
    for n in names:
        for other in names:
            if n != other and _inside(n, other):
                raise ValueError(
                    f"modules=: {n!r} is inside {other or '(the model)'!r}: checkpointed "
                    "modules cannot nest; name one of them"
                )


def _names(found: Iterable[str]) -> str:
    names = list(found)
    if not names:
        return "(none)"
    shown = ", ".join(repr(n) for n in names[:8])
    return shown + (f", ... ({len(names)} in all)" if len(names) > 8 else "")


def _some_names(model: nn.Module) -> str:
    return _names(n for n, _ in model.named_modules() if n)


# ---- after the trace: the regions that cannot be, or need not be, checkpointed -------


def excluded(trace: Trace, *, given: bool) -> dict[int, str]:
    """The regions that cannot be checkpointed, or whose checkpointing cannot lower what
    the step keeps, and why. ``given``: the user named the modules, so one that cannot be
    checkpointed is an error, not a region left out."""
    excluded = {}
    for r, region in enumerate(trace.regions):
        if region.calls and not region.cache and not region.nested:
            continue
        if region.cache:
            why = (
                f"it is given a key-value cache ({region.cache}) that it updates: "
                "recomputed, it would read what its first run wrote"
            )
        elif region.nested:
            why = f"it also runs inside {region.nested!r}, whose recomputation would run it again"
        else:
            why = "its forward did not run with gradients on"
        if given:
            raise ValueError(
                f"modules=: {region.name or '(the model)'!r} cannot be checkpointed: {why}"
            )
        excluded[r] = why
    return _no_gain(trace) | excluded


def _no_gain(trace: Trace) -> dict[int, str]:
    """The regions whose checkpointing cannot lower the bytes the step keeps: it frees at
    most the storages autograd saves inside the region (its own inputs, which it keeps, and
    the step's aside) and keeps the generator state it replays random ops with (on a CPU,
    about 5 KiB a region). A step with a backward of its own: :func:`noted` says why
    nothing is freed there."""
    if trace.backward_in_step:
        return {}
    inputs = {
        st
        for n in trace.inputs
        if n not in trace.constants and (st := storage_of(n.meta.get("val")))
    }
    saved: dict[int, dict[int, int]] = {}
    for s in trace.saves:
        st = storage_of(s.value.meta.get("val"))
        if s.region is not None and st is not None and st not in inputs:
            saved.setdefault(s.region, {})[st[0]] = st[1]
    out = {}
    for r, region in enumerate(trace.regions):
        mine = saved.get(r, {})
        args = {st[0] for n in region.args if (st := storage_of(n.meta.get("val")))}
        most = sum(b for k, b in mine.items() if k not in args)  # its inputs stay kept
        if not region.calls or most > trace.rng_state_bytes:
            continue
        rng = format_bytes(trace.rng_state_bytes)
        out[r] = (
            _FREES_NOTHING  # the model checkpoints it itself, say
            if mine and mine.keys() <= args
            else f"checkpointing it cannot lower what the step keeps: it frees at most "
            f"{format_bytes(most)} and keeps the generator state ({rng})"
        )
    return out


_FREES_NOTHING = (
    "checkpointing it frees nothing: its forward saves nothing for the backward but its "
    "inputs (as where the model checkpoints it already: transformers' "
    "gradient_checkpointing_disable() and timm's set_grad_checkpointing(False) let budget "
    "plan it)"
)


_OWN_BACKWARD = (
    "checkpointing frees nothing in this step: it runs a backward of its own "
    "(torch.autograd.grad, as a gradient penalty does), whose graph holds the forward's "
    "values until the loss's backward"
)


def noted(plan: EagerPlan, trace: Trace) -> EagerPlan:
    """``plan`` with why each region it leaves alone is left alone, where that is known:
    the step runs a backward of its own and no plan frees anything, or the region ran,
    saving nothing but the tensors it was given (a module the model checkpoints inside
    its own forward shows so: its inputs, kept for the recomputation, and nothing else)."""
    own_backward = trace.backward_in_step and plan.min_bytes == plan.max_bytes

    def why(r: int) -> str:
        if own_backward:
            return _OWN_BACKWARD
        region = trace.regions[r]
        saves = [s.value for s in trace.saves if s.region == r]
        ran = region.end > region.start  # op calls of its own
        return _FREES_NOTHING if ran and all(v in region.args for v in saves) else ""

    regions = [
        c if c.checkpoint or c.reason else replace(c, reason=why(r))
        for r, c in enumerate(plan.regions)
    ]
    return replace(plan, regions=regions)
