"""The plan cache: the plans of a warm start, when torch's compile caches skip planning.

budget's Inductor compiles use torch's FX graph cache and AOTAutograd cache. On an
AOTAutograd cache hit torch loads the compiled forward and backward and never calls the
partitioner, so no plan is made, and ``backend.plans`` (and ``on_plan``) would have
nothing to show. The plan cache keeps the plans each compile made, on disk, under a key
known when the backend is called, before torch looks at its own caches:

- **what was compiled**: the code of the graph dynamo hands the backend (and of its
  subgraphs), the metadata of its example inputs (type, shape, stride, dtype, device,
  requires_grad, parameter or not, which inputs share storage), grad mode, autocast,
  deterministic algorithms, the selective-checkpoint ``cache_hash`` of each subgraph,
  the names of the CUDA devices, and torch's functorch and Inductor configs (what changes
  the joint graph torch builds from it);
- **what decides the plan** (:func:`settings_key`, also the partitioner's ``uuid()``, in
  torch's cache keys): budget's version and a hash of its planning code, the memory and peak
  budgets, solver, estimator spec (a device-less ``flops``/``roofline``/``profile`` prices
  for the host: its CPU model and thread count), time limit, compiler, the content of
  the saved plans applied (``plan=``), offload and whether its copies run on a side
  stream (``budget.compile.offload.SIDE_STREAM``);
- torch's version.

The backend reads the entry before compiling and writes the plans after: when the
partitioner ran (torch missed), its plans replace the entry; when torch hit, the entry's
plans go to ``backend.plans`` and ``on_plan``, with ``timings == {"plan cache": seconds}``
(nothing was solved). An entry is a JSON file ``plans-<key>.json`` in ``plans/`` under
:func:`budget.estimators.devices.cache_dir` (``$BUDGET_CACHE_DIR``, else
``~/.cache/budget``; ``BUDGET_CACHE_DIR=""`` turns the plan cache off, and with it
AOTAutograd's cache for budget's compiles, so that every compile plans; the FX graph
cache still skips code generation). An entry is used only if it names the same full key,
budget version and torch version, and its plans match the checksum written with them;
anything missing, unreadable, edited or stale is ignored. If torch hits but no entry can
be used, the backend plans again (the pipeline up to the partitioner, without code
generation) and writes the entry: a plan never comes from anywhere but this key. An
attempt of a peak search stopped as a plan compiled before (budget.compile.attempts)
writes its plans too, with the peak of the code compiled for that same partition under
another key; and each attempt's entry is read before it compiles, so that a later start
stops such a return before partitioning (budget.compile.inductor_compile).

Why a key of budget's own rather than torch's: AOTAutograd computes its key inside
``aot_autograd`` from state the backend never sees, and on a hit it calls no hook that
could name it. This key covers what torch's covers about the graph and what the plan
depends on, so a hit of torch's finds the entry its miss wrote; where this key is the
stricter, the cost is a re-plan, never another graph's plan. Not handled: with dynamic
shapes torch may hit for other sizes, and a re-plan then shows the plan for the sizes of
this call; entries are never evicted (a few hundred KiB per graph of a large model).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from .._version import __version__
from ..core.plan import Plan
from ..core.settings import PlanSettings
from .offload import side_stream

FORMAT = 1

stats = {"hits": 0, "misses": 0, "writes": 0, "replans": 0}
"""This process's plan-cache lookups that found a usable entry (hits) or none (misses),
entries written, and re-plans after a torch cache hit without a usable entry."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# The code that makes plans: what training's compiles import (the CLI, eager mode and
# the models do not make plans; tests/compile/test_warmstart.py checks the list).
PLANNING_CODE = (
    "config.py",
    "errors.py",
    "core",
    "solvers",
    "estimators",
    "planning",
    "runtime",
    "compile",
)


@functools.cache
def code_hash() -> str:
    """A hash of the source of budget's planning code: a code change invalidates the
    caches, even without a version bump."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for name in PLANNING_CODE:
        paths = sorted((root / name).rglob("*.py")) if (root / name).is_dir() else [root / name]
        for path in paths:
            h.update(path.relative_to(root).as_posix().encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _host(estimator: str, workspace: str) -> str:
    """What a device-less estimator prices for on this host, and what the peak models
    price a CPU convolution's workspace by (``workspace``: measured on this host, or the
    rule)."""
    from ..estimators.devices import cpu_model

    if workspace == "measure" or not (":" in estimator or estimator == "unit"):
        workspace = f"{cpu_model()}|{torch.get_num_threads()} threads|{workspace}"
    return workspace


def settings_key(settings: PlanSettings) -> str:
    """Everything besides the graph that decides the plans of a compile (the partitioner's
    ``uuid()`` in torch's cache keys)."""
    s = settings
    book = [p.to_dict() for p in s.book.plans] if s.book else []
    fixed = _sha(json.dumps(book, sort_keys=True))[:16]
    sweep = ",".join(str(b.to_json()) for b in s.sweep)
    side = f"/side={side_stream()}"  # how offload copies are priced and run
    return (
        f"budget-{__version__}-{code_hash()}-{s.budget.to_json()}-{s.peak_bytes}-"
        f"{s.search_peak_bytes}-{s.saved_cap_bytes}-{s.peak_search}-{s.solver}-"
        f"{s.estimator}-{s.time_limit!r}-{s.compiler}-{fixed}-[{sweep}]-offload={s.offload}{side}-"
        f"reuse={s.buffer_reuse}-fusion={s.fusion_distance}-{_host(s.estimator, s.conv_workspace)}"
    )


def _tensor_meta(t: torch.Tensor, storages: dict[tuple[str, int], int], i: int) -> list[Any]:
    shared = i  # the first input sharing this tensor's storage (itself when none does)
    try:
        ptr = t.untyped_storage().data_ptr()
        if ptr:
            shared = storages.setdefault((str(t.device), ptr), i)
    except (RuntimeError, NotImplementedError, TypeError):
        pass  # fake tensors have no address: taken as not shared
    strided = t.layout == torch.strided
    return [
        type(t).__name__,
        [str(s) for s in t.shape],
        [str(s) for s in t.stride()] if strided else [],
        str(t.storage_offset()) if strided else "",
        str(t.dtype),
        str(t.device),
        str(t.layout),
        bool(t.requires_grad),
        isinstance(t, torch.nn.Parameter),
        shared,
    ]


def graph_key(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], settings_id: str) -> str:
    """The plan-cache key of compiling ``gm`` on ``example_inputs`` (see the module's
    docstring for what it covers)."""
    from ..runtime import _torch_private as T

    storages: dict[tuple[str, int], int] = {}
    inputs: list[Any] = []
    cuda: set[str] = set()
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor):
            inputs.append(_tensor_meta(x, storages, i))
            if x.device.type == "cuda":
                cuda.add(f"{x.device}={torch.cuda.get_device_name(x.device)}")
        else:
            inputs.append([type(x).__name__, str(x)])
    modules = []
    for name, m in gm.named_modules():
        if isinstance(m, torch.fx.GraphModule):
            fn = m.meta.get("_checkpoint_context_fn") if hasattr(m, "meta") else None
            sac = repr(getattr(fn, "cache_hash", None)) if fn is not None else ""
            modules.append([name, m.code, sac])
    autocast = {
        d: str(torch.get_autocast_dtype(d)) for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)
    }
    body = {
        "format": FORMAT,
        "settings": settings_id,
        "torch": torch.__version__,
        "modules": modules,
        "inputs": inputs,
        "grad": torch.is_grad_enabled(),
        "autocast": autocast,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "cuda": sorted(cuda),
        "functorch": T.functorch_config.save_config_portable(),
        "inductor": T.inductor_config.save_config_portable(
            ignore_private_configs=False, readonly_values=True
        ),
    }
    return _sha(json.dumps(body, sort_keys=True, default=repr))


def _dir() -> Path | None:
    from ..estimators.devices import cache_dir

    d = cache_dir()
    return None if d is None else d / "plans"


def enabled() -> bool:
    """False when ``BUDGET_CACHE_DIR=""`` turns the disk caches off."""
    return _dir() is not None


def entry_path(key: str) -> Path | None:
    d = _dir()
    return None if d is None else d / f"plans-{key[:40]}.json"


def _checksum(plans: list[dict[str, Any]]) -> str:
    return _sha(json.dumps(plans, sort_keys=True))


def load(key: str) -> list[Plan] | None:
    """The plans stored under ``key``, marked as read from the cache; None when there is
    no usable entry (none, unreadable, edited, or for another budget or torch version)."""
    start = time.perf_counter()
    path = entry_path(key)
    plans = _read(path, key) if path is not None else None
    if plans is None:
        stats["misses"] += 1
        return None
    stats["hits"] += 1
    took = time.perf_counter() - start
    return [replace(p, timings={"plan cache": took}) for p in plans]


def _read(path: Path, key: str) -> list[Plan] | None:
    try:
        data = json.loads(path.read_text())
        ok = (
            isinstance(data, dict)
            and data.get("format") == FORMAT
            and data.get("key") == key
            and data.get("budget") == __version__
            and data.get("torch") == torch.__version__
            and isinstance(data.get("plans"), list)
            and data.get("checksum") == _checksum(data["plans"])
        )
        return [Plan.from_dict(p) for p in data["plans"]] if ok else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # missing or corrupt: plan again


def plans_digest(plans: Sequence[Plan] | None) -> str | None:
    """What decides the graphs of ``plans`` (graph, saved and offloaded sets, values
    recomputed again, peak budget of each), as a short hash: ranks compare it to know they
    hold the same plans, which partition alike and so stop alike as a plan compiled before
    (budget.compile.attempts) (None: no plans)."""
    if plans is None:
        return None
    what = [
        [p.graph_hash, p.saved, p.offloaded, p.recomputed_again, p.peak_target_bytes] for p in plans
    ]
    return _sha(json.dumps(what))


def store(key: str, plans: Sequence[Plan]) -> None:
    """Write ``plans`` under ``key`` (atomically: a reader sees the old entry or the new)."""
    path = entry_path(key)
    if path is None:
        return
    dicts = [p.to_dict() for p in plans]
    body = {
        "format": FORMAT,
        "key": key,
        "budget": __version__,
        "torch": torch.__version__,
        "checksum": _checksum(dicts),
        "plans": dicts,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, path)
        stats["writes"] += 1
    except (OSError, TypeError, ValueError):
        pass  # a read-only cache dir is not an error: the next start plans again
