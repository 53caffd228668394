"""Trace an eager training step on fake tensors: the ops selective checkpointing sees.

Eager checkpointing (``torch.utils.checkpoint`` with ``create_selective_checkpoint_contexts``)
decides per op call, at the dispatch level below autograd: the aten ops a
``TorchDispatchMode`` sees, with composite ops already decomposed and no compiler
decompositions or functionalization. This module records exactly those calls, once, with
the model's parameters, buffers and inputs swapped for fake tensors (nothing is computed,
no buffer changes, the caller's RNG is untouched):

- every op call becomes an fx node (``meta["val"]``: its fake outputs), so the estimators
  price it as they price a compiled graph's node; a call with several tensor outputs gets a
  ``getitem`` node per output;
- each node knows its module (``GPT.blocks.0.attn``, as ModTracker names it), the candidate
  region (a module whose forward may be checkpointed) it ran in, and its position among the
  region's op calls that the selective-checkpoint policy is asked about;
- every tensor autograd saves for the backward is recorded with the number of op calls made
  when it was saved: checkpointing recomputes a region only up to its last save (early
  stop), and the saves outside checkpointed regions are what autograd keeps as is;
- the ops autograd runs on fake tensors to make a view again after an in-place op on it
  are left out: on real tensors it runs none (:mod:`budget.eager.replays`);
- each call of a candidate's forward is a region of its own, which records the tensors it
  was given (checkpointing keeps them) and where among the saves it started (the hooks
  around it save its positional tensor arguments: how eager offload moves them).

A step may read tensor values in Python (``if mask.all():``), which fake tensors do not
have: such a read gets the value the real step reads (:mod:`budget.eager.reads`), so the
trace takes the real step's branch; the values are kept in ``Trace.reads``.

The result is pure data over one fx graph; :mod:`budget.eager.problem` turns it into a
Problem for a choice of checkpointed regions.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils.checkpoint import SAC_IGNORED_OPS

from ..errors import PreviewError
from ..runtime import _torch_private as T
from ..runtime.values import generator_state_bytes, storage_of, written_args
from . import own_checkpoint
from .fake import KernelGaps, fake_step, real_paths
from .reads import fake_like, host_read, real_output, real_value, transformers_reads_values
from .replays import ViewReplays
from .traced import Read, Region, Save, Trace, every_call


class _Recorder(T.TorchDispatchMode):  # type: ignore[misc,name-defined]
    """Records each op call into an fx graph (under a FakeTensorMode below it)."""

    def __init__(self, tracer: _Tracer) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        replays = self.tracer.replays
        replay = replays.is_replay(func, args)
        try:
            out = host_read(self.tracer, func, args, kwargs)  # a PackedSequence's ops
            if out is not None:
                self.tracer.read(func, out)
            else:
                out = func(*args, **kwargs)
        except T.DataDependentOutputException:
            # a Python value read from tensor data (``bool(t)``, ``.item()``, ``equal``)
            out = real_value(self.tracer, func, args, kwargs)
            if out is None:
                raise
            self.tracer.read(func, out)
        except T.DynamicOutputShapeException:
            # an output whose size depends on values (``nonzero``): the real step's size
            real = real_output(self.tracer, func, args, kwargs)
            if real is None:
                raise
            out = fake_like(real)
            self.tracer.read(func, out)
        replays.note(func, args, kwargs, out, replay)
        if replay:  # autograd's, on fake tensors only: not a call of the real step
            self.tracer.same_as_written(out)
        else:
            self.tracer.record(func, args, kwargs, out)
        return out


class _Tracer:
    def __init__(self, candidates: dict[str, nn.Module], root_name: str) -> None:
        self.graph = fx.Graph()
        self.candidates = list(candidates.items())
        self.named = [(n, f"{root_name}.{n}" if n else root_name) for n in candidates]
        self.calls = [0] * len(candidates)  # each candidate's calls with gradients on
        self.nested: dict[int, str] = {}  # candidate -> the candidate it also ran inside
        self.model_calls = 0  # the model's own forward
        self.root_name = root_name
        self.node_of: dict[int, fx.Node] = {}  # id(tensor) -> node
        self.by_storage: dict[int, fx.Node] = {}  # storage key -> latest node writing it
        self.keep: list[Any] = []  # the tensors behind node_of's ids, kept alive
        self.inputs: list[fx.Node] = []
        self.constants: list[fx.Node] = []  # made in the step outside the dispatcher
        self.ops: list[fx.Node] = []
        self.order, self.region_of, self.mutated_after = {}, {}, {}  # see Trace
        self.module_of: dict[fx.Node, str] = {}
        self.saves: list[Save] = []
        self.producers: dict[int, list[fx.Node]] = {}  # storage key -> ops whose output has it
        self.writers: dict[int, list[fx.Node]] = {}  # storage key -> ops writing it, in order
        self.real: dict[fx.Node, torch.Tensor] = {}  # placeholder -> its real tensor
        self.reads: list[Read] = []  # each read of tensor data
        self.module_stack: list[str] = []
        self.outputs: list[fx.Node] = []  # what the model's forward returned
        self.region: int | None = None
        self.region_list: list[Region] = []  # one per candidate call, in call order
        self.backward_in_step = False  # an op ran inside a backward of the step's own
        self.own_rng_states = 0  # generator states the model's own checkpointing keeps
        self.own_cached: list[fx.Node] = []  # values its selective policies cache
        self.replays = ViewReplays()  # autograd's view replays, left out

    # ---- values -----------------------------------------------------------------------------

    def _remember(self, t: torch.Tensor, node: fx.Node) -> None:
        self.node_of[id(t)] = node
        self.keep.append(t)
        st = storage_of(t)
        if st is not None:
            self.by_storage[st[0]] = node

    def placeholder(self, name: str, t: torch.Tensor, real: torch.Tensor | None = None) -> fx.Node:
        """A graph input: ``t`` (fake, or a real tensor from outside the step) and the real
        tensor behind it, when there is one (for :func:`budget.eager.reads.real_value`)."""
        node = self.graph.placeholder(name.replace(".", "_"))
        node.meta["val"] = t
        self.inputs.append(node)
        self._remember(t, node)
        if real is None and not isinstance(t, T.FakeTensor):
            real = t
        if real is not None:
            self.real[node] = real
        return node

    def same_as_written(self, t: torch.Tensor) -> None:
        """``t``, a view autograd made again, is the value last written to its storage."""
        st = storage_of(t)
        node = self.by_storage.get(st[0]) if st is not None else None
        if node is not None:
            self.node_of[id(t)] = node
            self.keep.append(t)

    def node_for(self, t: torch.Tensor) -> fx.Node:
        """The node that made ``t``: by identity, else a new constant placeholder."""
        node = self.node_of.get(id(t))
        if node is None:
            node = self.constant(t)
        return node

    def constant(self, t: torch.Tensor) -> fx.Node:
        """A tensor no recorded op made: a real tensor from outside the step (free), or
        one the step made without going through the dispatcher (``torch.tensor(...)``:
        fake here, real memory when the step runs)."""
        node = self.placeholder(f"const_{len(self.inputs)}", t)
        if isinstance(t, T.FakeTensor):
            self.constants.append(node)
        return node

    def arg(self, a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return self.node_for(a)
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        if isinstance(a, dict):  # keyword arguments (a write through ``out=``)
            return {k: self.arg(x) for k, x in a.items()}
        return a

    # ---- op calls ---------------------------------------------------------------------------

    def read(self, func: Any, out: Any) -> None:
        """``func``'s call, about to be recorded, read ``out`` from tensor data."""
        region = None if self.region is None else self.region_list[self.region]
        call = len(region.ops) if region is not None and func not in SAC_IGNORED_OPS else None
        self.reads.append(Read(str(func), out, self.region, call))

    def record(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        node = self.graph.call_function(func, self.arg(args), self.arg(kwargs))
        node.meta["val"] = out
        self.backward_in_step = self.backward_in_step or T.in_backward()
        index = len(self.ops)
        self.ops.append(node)
        self.order[node] = index
        self.module_of[node] = self.module_stack[-1] if self.module_stack else self.root_name
        if self.region is not None:
            self.region_of[node] = self.region
            if func not in SAC_IGNORED_OPS:
                region = self.region_list[self.region]
                region.ops.append(str(func))
                region.nodes.append(node)
        for written in written_args(func, args, kwargs):
            st = storage_of(written)
            for op in self.producers.get(st[0], []) if st is not None else []:
                self.mutated_after[op] = index
            if st is not None:
                self.writers.setdefault(st[0], []).append(node)
        if isinstance(out, (tuple, list)):
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor):
                    item = self.graph.call_function(operator.getitem, (node, i))
                    item.meta["val"] = o
                    self._remember(o, item)
                    self._produced(o, node)
        elif isinstance(out, torch.Tensor):
            self._remember(out, node)
            self._produced(out, node)

    def _produced(self, t: torch.Tensor, op: fx.Node) -> None:
        st = storage_of(t)
        if st is not None:
            self.producers.setdefault(st[0], []).append(op)

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        node = self.node_of.get(id(t))
        if node is None:
            st = storage_of(t)
            node = self.by_storage.get(st[0]) if st is not None else None
        if node is None:
            node = self.constant(t)
        count = len(self.ops)
        in_model = bool(self.module_stack) and self.module_stack[0] == self.root_name
        self.saves.append(Save(node, self.region, count, in_model))
        if self.region is not None:
            self.region_list[self.region].last_save = count
        return t

    # ---- modules ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def module_hooks(self, model: nn.Module) -> Iterator[None]:
        root = type(model).__name__
        handles = []
        for name, m in model.named_modules():
            path = f"{root}.{name}" if name else root

            def pre(_m: nn.Module, _a: Any, path: str = path) -> None:
                self.model_calls += not self.module_stack and path == self.root_name
                self.module_stack.append(path)

            def post(_m: nn.Module, _a: Any, out: Any) -> None:
                if self.module_stack == [self.root_name]:  # the model's own forward returns
                    self.outputs.extend(
                        self.node_of[id(t)]
                        for t in T.tree_leaves(out)
                        if isinstance(t, torch.Tensor) and id(t) in self.node_of
                    )
                if self.module_stack:
                    self.module_stack.pop()

            handles.append(m.register_forward_pre_hook(pre))
            handles.append(m.register_forward_hook(post, prepend=True, always_call=True))
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def count_rng_state(self) -> None:
        self.own_rng_states += 1

    def cached(self, out: Any) -> None:
        """The model's own selective checkpointing cached ``out`` (recorded already)."""
        self.own_cached += [
            self.node_of[id(t)] for t in T.tree_leaves(out) if id(t) in self.node_of
        ]

    @contextlib.contextmanager
    def region_markers(self) -> Iterator[None]:
        """Wrap each candidate's forward (as checkpointing will) to mark its op calls."""
        installed = []
        for index, (_, module) in enumerate(self.candidates):
            had = "forward" in module.__dict__
            original = module.forward

            def marked(
                *args: Any, _f: Callable[..., Any] = original, _i: int = index, **kwargs: Any
            ) -> Any:
                return self.run_region(_i, _f, args, kwargs)

            module.forward = marked  # type: ignore[method-assign]
            installed.append((module, had, original))
        try:
            yield
        finally:
            for module, had, original in installed:
                del module.forward
                if had:
                    module.forward = original  # type: ignore[method-assign]

    def run_region(self, index: int, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """Run candidate ``index``'s forward: a call with gradients on, outside every other
        candidate's, is a region."""
        if not torch.is_grad_enabled():
            return fn(*args, **kwargs)  # checkpointing does not apply (nor counts the call)
        if self.region is not None:  # inside another candidate: its recomputation runs it
            self.nested.setdefault(index, self.region_list[self.region].name or self.root_name)
            return fn(*args, **kwargs)
        region = Region(*self.named[index], call=self.calls[index])
        self.calls[index] += 1
        given = [type(a) for a in (*args, *kwargs.values())]
        region.cache = next((t.__name__ for t in given if t.__module__.startswith(_CACHES)), "")
        self.region_list.append(region)
        index = len(self.region_list) - 1
        region.start = len(self.ops)
        region.saves_at = len(self.saves)
        region.in_model = bool(self.module_stack) and self.module_stack[0] == self.root_name
        region.positional = [self.node_for(t) for t in args if isinstance(t, torch.Tensor)]
        region.args = [
            self.node_for(t) for t in T.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
        ]
        self.region = index
        try:
            return fn(*args, **kwargs)
        finally:
            self.region = None
            region.end = len(self.ops)


_CACHES = "transformers.cache_utils"  # key-value caches a layer updates as it runs


def trace_step(
    model: nn.Module,
    step: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    candidates: dict[str, nn.Module],
) -> Trace:
    """Trace ``step(*args, **kwargs)`` (which runs ``model``) on fake tensors.

    ``candidates`` maps qualified module names to the modules whose forwards are candidate
    regions. The model's parameters and buffers are swapped for fake copies for the trace;
    nothing real is read or written.
    """
    root = type(model).__name__
    tracer = _Tracer(candidates, root)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    with contextlib.ExitStack() as stack:
        fake = stack.enter_context(fake_step(model, args, kwargs))
        fake_state, fake_args, fake_kwargs = fake.state, fake.args, fake.kwargs
        for name, t in fake_state.items():
            tracer.placeholder(name, t, state[name])
        real_leaves = T.tree_leaves((args, kwargs))
        for i, t in enumerate(T.tree_leaves((fake_args, fake_kwargs))):
            if isinstance(t, torch.Tensor):
                tracer.placeholder(f"arg_{i}", t, real_leaves[i])
        stack.enter_context(tracer.module_hooks(model))
        stack.enter_context(tracer.region_markers())
        stack.enter_context(torch.enable_grad())
        stack.enter_context(torch.autograd.graph.saved_tensors_hooks(tracer.pack, lambda t: t))
        stack.enter_context(transformers_reads_values())
        stack.enter_context(fake.mode)
        stack.enter_context(KernelGaps())
        stack.enter_context(real_paths())
        stack.enter_context(_Recorder(tracer))
        stack.enter_context(own_checkpoint.rng_states_counted(tracer.count_rng_state))
        stack.enter_context(own_checkpoint.cached_values(tracer.cached))
        try:
            step(*fake_args, **fake_kwargs)
        except (T.DataDependentOutputException, T.DynamicOutputShapeException) as e:
            raise PreviewError(
                "budget.apply cannot trace this step: it reads a tensor's value in Python, "
                f"or makes a tensor whose size depends on values ({e}), that cannot be "
                "known before the step runs (it depends on a random op, or on a tensor "
                "with no real value behind it)"
            ) from e
    devices = [t.device for t in fake_state.values()] + [
        t.device for t in T.tree_leaves((fake_args, fake_kwargs)) if isinstance(t, torch.Tensor)
    ]
    device = devices[0] if devices else torch.device("cpu")
    return Trace(
        graph=tracer.graph,
        inputs=tracer.inputs,
        constants=tracer.constants,
        ops=tracer.ops,
        regions=every_call(tracer.region_list, tracer.named, tracer.calls, tracer.nested),
        order=tracer.order,
        region_of=tracer.region_of,
        module_of=tracer.module_of,
        saves=tracer.saves,
        mutated_after=tracer.mutated_after,
        rng_state_bytes=generator_state_bytes("cpu") if device.type == "cpu" else 0,
        device=device,
        reads=tracer.reads,
        outputs=tracer.outputs,
        backward_in_step=tracer.backward_in_step,
        own_rng_states=tracer.own_rng_states,
        own_cached=tracer.own_cached,
        model_calls=tracer.model_calls,
    )
