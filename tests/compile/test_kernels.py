"""compile/kernels.py: kernels of code generated under ``deferred`` are built only by
``build`` (or on first use), and compute what Inductor's code computes when built."""

from __future__ import annotations

import random

import pytest
import torch

from budget.compile import kernels
from budget.compile.kernels import _Deferred

pytestmark = pytest.mark.slow


def _fresh_fn():
    """A function whose generated code no earlier compile made (a constant of its own):
    Inductor's in-memory module cache cannot hand back a module it built before."""
    k = 1.0 + random.random()

    def fn(x):
        return (x.sin() * k).relu() + x.cos()

    return fn


def test_deferred_code_requests_its_kernels_and_build_builds_and_binds_them():
    from torch._inductor.compile_fx import compile_fx

    fn = _fresh_fn()
    x = torch.randn(64)
    gm = torch.fx.symbolic_trace(lambda x: (fn(x),))
    with kernels.deferred() as unbuilt:
        compiled = compile_fx(gm, [x])  # generated and loaded, not run
    deferred = [v for scope in unbuilt for v in scope.values() if isinstance(v, _Deferred)]
    assert deferred, "no generated module asked for its kernels"
    assert all(d.kind in kernels.KINDS and d.kernel is None for d in deferred)
    kernels.build(unbuilt)
    assert not [v for scope in unbuilt for v in scope.values() if isinstance(v, _Deferred)]
    (got,) = compiled(x)
    torch.testing.assert_close(got, fn(x))


def test_a_deferred_kernel_used_before_build_builds_itself():
    fn = _fresh_fn()
    x = torch.randn(32)
    with kernels.deferred() as unbuilt:
        compiled = torch.compile(fn, backend="inductor")
        got = compiled(x)
    torch.testing.assert_close(got, fn(x))
    built = [v for s in unbuilt for v in s.values() if isinstance(v, _Deferred) and v.kernel]
    assert built, "the call ran no kernel it had deferred"


def test_outside_deferred_inductor_builds_as_it_always_does():
    fn = _fresh_fn()
    with kernels.deferred():
        pass
    from budget.runtime import _torch_private as T

    assert T.AsyncCompile.cpp_pybinding is kernels._ORIGINAL["cpp_pybinding"]
    assert T.AsyncCompile.wait is kernels._ORIGINAL["wait"]
    x = torch.randn(16)
    torch.testing.assert_close(torch.compile(fn, backend="inductor")(x), fn(x))
