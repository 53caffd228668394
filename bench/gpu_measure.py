"""What bench/gpu_check.py measures of one training step, and where it writes it.

One :class:`Row` per configuration (a model, a dtype, a partitioner and its budget):
measured saved bytes (saved-tensor hooks), the step's peak above what was allocated
before it (allocated blocks, and on CUDA the bytes requested), the median step time
(CUDA events on a GPU, the host clock on a CPU), the gradients' error against the
unplanned step, and budget's predictions from its plans. :class:`Report` keeps the rows
and the pass/fail checks and rewrites its JSON and markdown after every row, so a run cut
short by its time limit still leaves what it measured.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from budget.compile.backend import root_error
from budget.eager.measure import retained_bytes
from budget.runtime.measure import measure_peak, saved_bytes

MiB = 2**20


WARMUP_STEPS = 2  # untimed steps before a configuration's timed ones


@dataclass
class Row:
    block: str
    label: str
    saved: int | None = None  # measured: saved-tensor hooks (compiled) or retained (eager)
    peak: int | None = None  # measured: allocated bytes above the start of the step
    requested: int | None = None  # measured: requested bytes (CUDA; = peak on CPU)
    ms: float | None = None  # median step time, milliseconds
    grad_err: float | None = None  # relative L2 error of all gradients vs the unplanned step
    predicted_saved: int | None = None
    target: int | None = None
    predicted_peak: int | None = None  # the graphs' prediction
    compiled_peak: int | None = None  # the peak of Inductor's code, run on meta tensors
    copied: int | None = None  # Inductor's layout copies of inputs, in the saved bytes
    recompute_gflop: float | None = None
    seconds: float = 0.0  # wall time of this row, compile included
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def prediction(self) -> int | None:
        """The peak budget checks a plan against: the code's where known, else the graphs'."""
        return self.compiled_peak if self.compiled_peak is not None else self.predicted_peak


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""
    timing: bool = False  # a wall-clock target: reported, never asserted on a CPU


class Report:
    """Rows and checks of one run, written to ``out`` (JSON and markdown) as they come."""

    def __init__(self, out: Path, meta: dict[str, Any]) -> None:
        self.out, self.meta = out, meta
        self.rows: list[Row] = []
        self.checks: list[Check] = []
        self.skipped: list[str] = []
        out.mkdir(parents=True, exist_ok=True)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        self.write()
        return row

    def check(self, name: str, ok: bool, detail: str = "", timing: bool = False) -> None:
        self.checks.append(Check(name, bool(ok), detail, timing))
        self.write()

    def skip(self, what: str) -> None:
        self.skipped.append(what)
        self.write()

    def write(self) -> None:
        data = {
            "meta": self.meta,
            "rows": [asdict(r) for r in self.rows],
            "checks": [asdict(c) for c in self.checks],
            "skipped": self.skipped,
        }
        (self.out / "gpu_check.json").write_text(json.dumps(data, indent=1))
        (self.out / "gpu_check.md").write_text(markdown(data))


def _mib(n: Any) -> str:
    return "-" if n is None else f"{n / MiB:.2f}"


def markdown(data: dict[str, Any]) -> str:
    """The report as markdown: a header, the rows, then the checks (what RESULTS.md takes)."""
    m = data["meta"]
    lines = [
        f"### GPU check: {m.get('device_name')}, torch {m.get('torch')}",
        "",
        f"commit {m.get('commit')}, {m.get('date')}, {m.get('mode')}; {m.get('seconds', 0):.0f} s",
        "",
        "| block | config | saved MiB | predicted | target | peak MiB | requested | "
        "predicted peak | compiled peak | ms | grad err | recompute GF | s | error |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in data["rows"]:
        ms = "-" if r["ms"] is None else f"{r['ms']:.2f}"
        err = "-" if r["grad_err"] is None else f"{r['grad_err']:.1e}"
        gf = "-" if r["recompute_gflop"] is None else f"{r['recompute_gflop']:.2f}"
        lines.append(
            f"| {r['block']} | {r['label']} | {_mib(r['saved'])} | {_mib(r['predicted_saved'])} "
            f"| {_mib(r['target'])} | {_mib(r['peak'])} | {_mib(r['requested'])} | "
            f"{_mib(r['predicted_peak'])} | {_mib(r['compiled_peak'])} | {ms} | {err} | {gf} | "
            f"{r['seconds']:.0f} | {r['error'][:120]} |"
        )
    lines += ["", "| check | result | detail |", "|---|---|---|"]
    for c in data["checks"]:
        verdict = "pass" if c["ok"] else ("miss (timing)" if c["timing"] else "FAIL")
        lines.append(f"| {c['name']} | {verdict} | {c['detail']} |")
    if data["skipped"]:
        lines += ["", "Skipped: " + "; ".join(data["skipped"])]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- measuring


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def backprop(step: Callable[..., Any], args: tuple) -> None:
    step(*args).backward()


def step_ms(step: Callable[..., Any], args: tuple, device: torch.device, reps: int) -> float:
    """Median milliseconds of ``reps`` steps (forward and backward) run back to back, after
    ``WARMUP_STEPS`` more. On CUDA, events on the stream between the steps time them with
    no host synchronisation in between, so the host's launches overlap the device's work
    as in training."""
    for _ in range(WARMUP_STEPS):
        backprop(step, args)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
        marks[0].record()
        for mark in marks[1:]:
            backprop(step, args)
            mark.record()
        marks[-1].synchronize()
        times = [a.elapsed_time(b) for a, b in zip(marks, marks[1:], strict=False)]
    else:
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            backprop(step, args)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def warm_gpu(device: torch.device, seconds: float = 2.0) -> None:
    """Run bf16 matrix products for ``seconds``, so the first configuration timed finds the
    GPU's clocks where the later ones do (an idle GPU idles its clocks)."""
    if device.type != "cuda":
        return
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize(device)


def grads_of(model: torch.nn.Module, step: Callable[..., Any], args: tuple) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    backprop(step, args)
    out = [p.grad.detach().float().clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return out


def grad_error(grads: list[torch.Tensor], ref: list[torch.Tensor]) -> float:
    """||g - r|| / ||r|| over all gradients together (inf when their shapes differ)."""
    if len(grads) != len(ref) or any(g.shape != r.shape for g, r in zip(grads, ref, strict=True)):
        return math.inf
    num = sum(float((g - r).double().pow(2).sum()) for g, r in zip(grads, ref, strict=True))
    den = sum(float(r.double().pow(2).sum()) for r in ref)
    return math.sqrt(num / den) if den else math.sqrt(num)


def measure(
    row: Row,
    model: torch.nn.Module,
    step: Callable[..., Any],
    args: tuple,
    ref: list[torch.Tensor] | None,
    *,
    device: torch.device,
    reps: int,
    eager: bool = False,
    saved_on_device: bool = False,
) -> Row:
    """Fill ``row`` with what one configuration's step does. The first step compiles.
    ``eager``: the bytes kept after the forward (checkpointing keeps tensors the hooks
    never see) instead of the saved-tensor hooks' count. ``saved_on_device``: count only
    what is saved on ``device`` (an offload plan's host copies are not)."""
    t0 = time.perf_counter()
    try:
        model.zero_grad(set_to_none=True)
        backprop(step, args)  # compiles
        sync(device)
        params = list(model.parameters()) + list(model.buffers())
        if eager:
            kept = retained_bytes(step, *args)
            row.saved = kept.retained_bytes
            kept.output.backward()
        else:
            m = saved_bytes(step, *args, exclude=params, on=device if saved_on_device else None)
            row.saved = m.saved_bytes
            m.output.backward()
        del params
        row.peak = measure_peak(step, *args, warmup=0)
        # the bytes asked for: on CUDA below the allocator's rounded peak; on CPU the same
        cuda = device.type == "cuda"
        row.requested = measure_peak(step, *args, warmup=0, requested=True) if cuda else row.peak
        if ref is not None:
            row.grad_err = grad_error(grads_of(model, step, args), ref)
        row.ms = step_ms(step, args, device, reps)
    except Exception as e:  # noqa: BLE001 - a row that fails is reported, the run goes on
        inner = root_error(e)
        row.error = f"{type(inner).__name__}: {str(inner).strip().splitlines()[0][:300]}"
    finally:
        model.zero_grad(set_to_none=True)
        row.seconds = time.perf_counter() - t0
    return row


def predictions(row: Row, plans: list[Any]) -> Row:
    """budget's predictions for the step, summed over its plans (one per graph)."""
    if not plans:
        return row
    row.predicted_saved = sum(p.saved_bytes for p in plans)
    row.target = sum(p.target_bytes for p in plans)
    row.predicted_peak = sum(p.peak_bytes or 0 for p in plans)
    if all(getattr(p, "compiled_peak_bytes", None) is not None for p in plans):
        row.compiled_peak = sum(p.compiled_peak_bytes for p in plans)
    row.copied = sum(getattr(p, "copied_input_bytes", 0) for p in plans)
    row.recompute_gflop = sum(p.recompute_flops + p.again_flops for p in plans) / 1e9
    return row


@contextlib.contextmanager
def fresh(device: torch.device) -> Iterator[None]:
    """Compile caches of dynamo reset, device memory of the last configuration given back
    (the measurements themselves pause the garbage collector: budget.runtime.measure)."""
    torch._dynamo.reset()
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
    try:
        yield
    finally:
        torch._dynamo.reset()
        if device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()
