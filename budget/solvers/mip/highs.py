"""Exact closure ILP (DESIGN.md) with HiGHS from ``highspy`` (``pip install highspy``).

The model is :class:`~budget.solvers.mip.model.ClosureMatrix` (integer units, so an absolute
gap below one unit proves the exact optimum; with offload where the problem prices it), solved lexicographically by
:func:`~budget.solvers.mip.driver.solve_lexicographic` (one weighted solve where the units
allow it, else two). HiGHS reports its dual bound, so a
time-limited solve is "feasible" with its proven gap. Deterministic: one thread, a
fixed seed, a relative gap of 0 (HiGHS's default, 1e-4, would call a plan 0.01% above
the optimum optimal); the cost with offload to ``MipWeights.cost_gap``.

Why a subprocess. The ``ortools`` wheel ships its own HiGHS (1.12) as ``libhighs.so.1``
and ``highspy`` 1.15 another one under the same name; in one process, whichever loads
second is bound to the first one's symbols and fails to import (google/or-tools#5246).
Every budget process loads OR-Tools (CP-SAT, the min-cut), so HiGHS from ``highspy``
runs in a worker process that loads nothing else (``_highs_child.py``): started on the
first solve and kept for the next ones, it gets each model as arrays in a
temporary ``.npz`` and exits with this process (end of its input). This is also why the
solver does not go through ``pulp.HiGHS``: PuLP would load ``highspy`` into this
process. OR-Tools' own HiGHS is available in-process as ``OrToolsMIP(backend="highs")``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, ClassVar

import numpy as np

from ...core.problem import Problem
from ..base import SolverTimeout
from .driver import MipResult, MipSolver, Plan
from .matrix import ClosureMatrix, closure_matrix
from .model import ClosureModel, MipObjective, MipWeights

_CHILD = Path(__file__).with_name("_highs_child.py")
_GRACE = 30.0  # seconds the child may run past its time limit before it is killed
_OPTIONS = {"mip_rel_gap": 0.0}  # and mip_abs_gap: the driver's, per solve


class _Worker:
    """The HiGHS worker process: one request at a time, restarted after a failure."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.replies: queue.Queue[str | None] = queue.Queue()
        self.stderr: IO[bytes] | None = None
        self.lock = threading.Lock()

    def _start(self) -> subprocess.Popen[str]:
        self.stop()
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        proc = subprocess.Popen(
            [sys.executable, str(_CHILD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            cwd=tempfile.gettempdir(),
        )
        self.replies = queue.Queue()
        threading.Thread(target=self._read, args=(proc, self.replies), daemon=True).start()
        self.proc = proc
        return proc

    @staticmethod
    def _read(proc: subprocess.Popen[str], replies: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(("ok", "error:")):  # anything else is stray output
                replies.put(line.strip())
        replies.put(None)  # end of output: the worker died

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None

    def _failure(self) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        return " / ".join(lines[-3:])

    def run(self, src: str, dst: str, timeout: float) -> None:
        with self.lock:
            proc = self.proc if self.proc is not None and self.proc.poll() is None else None
            proc = proc or self._start()
            assert proc.stdin is not None
            try:
                proc.stdin.write(f"{src}\t{dst}\n")
                proc.stdin.flush()
                reply = self.replies.get(timeout=timeout)
            except queue.Empty:
                self.stop()
                raise SolverTimeout(
                    f"highs did not stop within {timeout - _GRACE:.0f}s (+{_GRACE:.0f}s grace)"
                ) from None
            except OSError:
                reply = None
            if reply is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=_GRACE)  # let it finish writing its error
                why = self._failure()
                self.stop()
                raise RuntimeError(
                    "highs: the HiGHS worker process failed (is highspy installed? "
                    f"pip install highspy): {why}"
                )
            if reply != "ok":
                raise RuntimeError(f"highs: {reply}")


_WORKER = _Worker()
atexit.register(_WORKER.stop)


class HighsChild:
    """A :class:`~budget.solvers.mip.driver.MipModel` that solves each stage in a child."""

    def __init__(self, problem: Problem, matrix: ClosureMatrix) -> None:
        self.problem, self.matrix = problem, matrix

    def minimize(
        self,
        objective: dict[MipObjective, float],
        time_limit: float,
        hint: Plan | None,
        gap: float = 0.5,
    ) -> MipResult:
        m = self.matrix
        if m.num_cols == 0:  # HiGHS calls an empty model an error; nothing to choose
            feasible = bool(np.all(m.row_upper >= 0) and np.all(m.row_lower <= 0))
            return MipResult("optimal" if feasible else "infeasible", [], 0.0)
        arrays = {
            "num_cols": np.int64(m.num_cols),
            "col_upper": m.col_upper,
            "integer": m.integer,
            "start": m.start,
            "index": m.index,
            "value": m.value,
            "row_lower": m.row_lower,
            "row_upper": m.row_upper,
            "objective": m.weighted(objective),
            "time_limit": np.float64(max(0.1, time_limit)),
            **{k: np.float64(v) for k, v in _OPTIONS.items()},
            "mip_abs_gap": np.float64(gap),
        }
        if hint is not None:
            arrays["hint"] = m.point(self.problem, hint.saved, hint.offloaded)
        with tempfile.TemporaryDirectory(prefix="budget-highs-") as tmp:
            src, dst = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
            np.savez(src, **arrays)
            _WORKER.run(src, dst, timeout=max(0.1, time_limit) + _GRACE)
            with np.load(dst) as out:
                status, has_solution = str(out["status"]), bool(out["has_solution"])
                bound, x = float(out["bound"]), out["x"]
        if status in ("kInfeasible", "kUnboundedOrInfeasible"):
            return MipResult("infeasible", [])
        if status == "kOptimal" and has_solution:
            return MipResult("optimal", m.saved(x), bound, m.offloaded(x))
        if status in ("kTimeLimit", "kInterrupt", "kIterationLimit", "kSolutionLimit"):
            if not has_solution:
                return MipResult("none", [])
            return MipResult("feasible", m.saved(x), bound, m.offloaded(x))
        raise RuntimeError(f"highs stopped with model status {status}")

    def cap(self, which: MipObjective, units: int) -> None:
        self.matrix.cap(which, units)


class HiGHS(MipSolver):
    name: ClassVar[str] = "highs"
    requires: ClassVar[str] = "highspy"

    def build(
        self, problem: Problem, m: ClosureModel, weights: MipWeights
    ) -> tuple[HighsChild, dict[str, object]]:
        matrix = closure_matrix(problem, m, weights)
        info = {"backend": "HiGHS (highspy, subprocess)", "variables": matrix.num_cols}
        return HighsChild(problem, matrix), info
