"""Kernels built only for the compile that is kept: the others' code is generated and read.

Under Inductor a peak budget compiles several plans to read each one's generated peak
(:mod:`budget.compile.peak_check`), and a convnet's memory budget compiles the b=1 plan
beside its own (``hold_b1_peak``); all but one are thrown away. What the peak needs is the
generated code (lowering, scheduling, the wrapper). Building its kernels (a C++ compiler
run per CPU kernel, a Triton compile per GPU kernel) is needed only to run it.

Under :func:`deferred`, the kernels a generated module asks Inductor's ``AsyncCompile``
for (``cpp``, ``cpp_pybinding``, ``triton``) are not built: each binds a
:class:`_Deferred` that holds the request, and the module's closing
``async_compile.wait(globals())`` records the module's globals instead of waiting for
them. :func:`build` then makes every request of those modules through Inductor's own pool
(all submitted before any is waited for: in parallel) and binds the results in place,
where the code looks its kernels up when it runs. A deferred kernel used before that
builds itself on first use (a module Inductor's caches hand to a later compile, or code a
search threw away and a later compile shares), so code is never wrong, only slower to
start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..runtime import _torch_private as T

# AsyncCompile's methods that build one kernel from its source and return it (or a future)
KINDS = ("cpp", "cpp_pybinding", "triton")
_ORIGINAL: dict[str, Any] = {}  # the methods as Inductor defines them


class _Deferred:
    """A kernel requested and not built: built on :func:`build`, or on first use."""

    def __init__(self, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.kind, self.args, self.kwargs = kind, args, kwargs
        self.kernel: Any = None

    def start(self) -> Any:
        """Inductor's own request: the kernel, or a future of it."""
        return _ORIGINAL[self.kind](T.AsyncCompile(), *self.args, **self.kwargs)

    def built(self) -> Any:
        if self.kernel is None:
            made = self.start()
            self.kernel = made.result() if hasattr(made, "result") else made
        return self.kernel

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.built()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # a Triton kernel's .run(...)
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.built(), name)


def _originals() -> type:
    cls = T.AsyncCompile
    if not _ORIGINAL:
        _ORIGINAL.update({name: getattr(cls, name) for name in (*KINDS, "wait")})
    return cls


@contextlib.contextmanager
def deferred() -> Iterator[list[dict[str, Any]]]:
    """Inside, generated modules request their kernels without building them; yields the
    list the globals of each such module are added to, for :func:`build`."""
    cls = _originals()
    before = {name: cls.__dict__[name] for name in (*KINDS, "wait")}
    scopes: list[dict[str, Any]] = []

    def request(kind: str) -> Any:
        def make(self: Any, *args: Any, **kwargs: Any) -> _Deferred:
            return _Deferred(kind, args, kwargs)

        return make

    def wait(self: Any, scope: dict[str, Any]) -> None:
        if any(isinstance(v, _Deferred) for v in scope.values()):
            scopes.append(scope)
        _ORIGINAL["wait"](self, scope)  # the module's other futures, Inductor's timers

    for kind in KINDS:
        setattr(cls, kind, request(kind))
    cls.wait = wait
    try:
        yield scopes
    finally:
        for name, method in before.items():
            setattr(cls, name, method)


def build(scopes: list[dict[str, Any]]) -> None:
    """Build the deferred kernels of the modules ``scopes`` (from :func:`deferred`), all
    requested first, then waited for, and bind them in each module's globals."""
    if not scopes:
        return
    _originals()
    for scope in scopes:
        for name, value in list(scope.items()):
            if isinstance(value, _Deferred):
                scope[name] = value.kernel if value.kernel is not None else value.start()
    for scope in scopes:  # futures resolved in place (with one compile thread, none)
        _ORIGINAL["wait"](T.AsyncCompile(), scope)
