"""Live bytes of a run on fake or meta tensors: each storage an op call makes, counted from
that call until Python frees it.

Two predictions run a step on tensors that hold no data and count what it allocates:
the eager planner runs the training step itself on fake tensors
(:mod:`budget.eager.peak`), and the compiled peak runs Inductor's generated code on meta
tensors (:mod:`budget.compile.compiled_peak`). Both count the same way, here. A storage
is counted when an op call makes it (not a view or an in-place write of an input, which
share the input's storage) and uncounted when its Python object dies, which is when its
last tensor does (torch keeps one Python object per live storage): the same frees, in
the same order, as in the real run. What a kernel allocates inside itself and frees
before returning is added at its call (:func:`budget.estimators.memory.workspace_bytes`).
Storages made before the mode is entered (what is resident) are never counted.
"""

from __future__ import annotations

import weakref
from typing import Any

from ..runtime import _torch_private as T
from ..runtime.values import op_tensors
from .memory import workspace_bytes


class LiveStorages(T.TorchDispatchMode):  # type: ignore[misc,name-defined]
    """Counts the bytes of the storages op calls make, until each is freed; ``peak`` is
    the most at any call, with that call's workspace, and ``recent`` the most since a user
    of the count last set it (to the live bytes, at a timeline's point or a code line).
    ``device``: the device the ops stand for, where the tensors are on ``meta`` (workspace
    rules are per device);
    ``measure_workspace``: CPU workspace measured on this host, else by rule
    (:func:`~budget.estimators.memory.workspace_bytes`)."""

    def __init__(self, device: str | None = None, *, measure_workspace: bool = True) -> None:
        super().__init__()
        self.device = device
        self.measure_workspace = measure_workspace
        self.live = 0
        self.peak = 0
        self.recent = 0
        self.alive: dict[int, weakref.finalize] = {}  # id(storage) -> its finalizer

    def count(self, storage: Any) -> None:
        key = id(storage)
        if key in self.alive:
            return
        nbytes = int(storage.nbytes())
        self.alive[key] = weakref.finalize(storage, self._freed, key, nbytes)
        self.live += nbytes
        self._reach(self.live)

    def free(self, storage: Any) -> None:
        """Uncount ``storage`` now, as ``resize_(0)`` frees it with its tensors alive (a
        storage not counted is left as it is)."""
        finalizer = self.alive.get(id(storage))
        if finalizer is not None:
            finalizer()  # calls _freed once, and never again

    def _reach(self, nbytes: int) -> None:
        self.peak, self.recent = max(self.peak, nbytes), max(self.recent, nbytes)

    def _freed(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self.alive.pop(key, None)

    def called(self, func: Any) -> None:
        """After each op call that made a tensor (subclasses record a timeline)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        given = {id(t.untyped_storage()) for t in op_tensors(args, kwargs) if T._has_storage(t)}
        # sparse tensors (an embedding's sparse gradient) have no storage: not counted
        made = [t for t in op_tensors(out) if T._has_storage(t)]
        if not made:  # prim.device and the like: no memory, not a step of the timeline
            return out
        transient = workspace_bytes(
            func, args, out, device=self.device, measure=self.measure_workspace, kwargs=kwargs
        )
        self._reach(self.live + transient)  # inputs and workspace, no outputs
        for t in made:
            storage = t.untyped_storage()
            if id(storage) not in given:  # not a view or in-place write of an input
                self.count(storage)
        self._reach(self.live + transient)  # outputs and workspace
        self.called(func)
        return out
