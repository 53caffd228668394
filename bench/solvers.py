"""Solver benchmark: time and quality of every solver on random and real problems.

    python bench/solvers.py                      # everything (several minutes on 2 cores)
    python bench/solvers.py --quick              # small sizes only
    python bench/solvers.py --markdown           # tables for the README
    python bench/solvers.py --solvers cpsat,cpsat:plain --only-solve   # with/without reduction
    python bench/solvers.py --offload --layers 4,12,24 --markdown   # planning with offload

For each problem (random layered DAGs of 1k/5k/20k nodes; joint graphs of the built-in
GPT with 4/12/24/48 layers and the ResNet) and budget 0.1 ... 0.9, every available solver
gets the same Problem and byte target; we report its solve time and its objective against
the best known bound (the proven optimum when an exact solver proves one). Beside them,
in the same run: the time torch 2.13 spends in its own ``choose_saved_values_set`` on the
same real graphs (traced on fake tensors, so nothing is executed), and the first-call
time of ``torch.compile`` with budget's backend against torch's own memory-budget path.
Solvers run as ``get_solver`` gives them (the exact ones on the reduced problem, see
``budget/solvers/reduce.py``); ``NAME:plain`` runs one without the reduction. A table of
node and edge counts before and after the reduction is printed too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

import budget
from budget.core.problem import Problem
from budget.core.sizes import parse_budget
from budget.models import get_builtin
from budget.planning.planner import solve_ends, target_bytes
from budget.solvers import InfeasibleError, Solver, SolverTimeout, available_solvers, get_solver
from budget.solvers.reduce import reduce_problem


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def layered_dag(n: int, seed: int = 0, width: int = 64) -> Problem:
    """A random training-like DAG: layers of ``width`` nodes, each reading 1-3 nodes of the
    previous two layers; a third are matmul-like (cost ~ bytes * 64), the rest pointwise
    (cost 0); 40% are read by the backward; 3% can't be recomputed (random ops)."""
    rng = np.random.default_rng(seed)
    n_in = width
    edges = []
    for v in range(n_in, n):
        layer_start = (v // width) * width
        lo = max(0, layer_start - 2 * width)
        k = int(rng.integers(1, 4))
        for u in rng.choice(
            np.arange(lo, layer_start), size=min(k, layer_start - lo), replace=False
        ):
            edges.append((int(u), v))
    size = rng.choice([1, 2, 4], size=n) * 2**20
    matmul = rng.random(n) < 1 / 3
    cost = np.where(matmul, size * 64.0, 0.0)
    cost[:n_in] = 0
    is_input = np.arange(n) < n_in
    return Problem(
        names=[f"n{i}" for i in range(n)],
        ops=["mm" if m else "pointwise" for m in matmul],
        is_input=is_input,
        needed=(rng.random(n) < 0.4) & ~is_input,
        can_save=np.ones(n, bool),
        can_recompute=(rng.random(n) > 0.03) & ~is_input,
        storage=np.arange(n),
        storage_bytes=np.where(is_input, 0, size),
        cost=cost,
        flops=cost,
        edges=edges,
    )


def real_problems(layers: Sequence[int], d: int) -> list[tuple[str, Callable[[], Any], Problem]]:
    out = []
    for n_layers in layers:
        ex = get_builtin("gpt", layers=n_layers, d=d, heads=4)
        t = time.perf_counter()
        (problem,) = budget.problems(ex.step, *ex.args)
        log(f"captured gpt-{n_layers} ({problem.n} nodes) in {time.perf_counter() - t:.1f}s")
        out.append(
            (
                f"gpt-{n_layers}L d={d}",
                lambda n_layers=n_layers: get_builtin("gpt", layers=n_layers, d=d, heads=4),
                problem,
            )
        )
    ex = get_builtin("resnet")
    (problem,) = budget.problems(ex.step, *ex.args)
    out.append(("resnet", lambda: get_builtin("resnet"), problem))
    return out


def make_solver(spec: str) -> Solver:
    """``name`` as get_solver gives it, ``name:plain`` without the problem reduction."""
    name, _, mode = spec.partition(":")
    if mode not in ("", "plain"):
        raise SystemExit(f"unknown solver mode {mode!r} in {spec!r} (NAME or NAME:plain)")
    return get_solver(name, reduce=False) if mode else get_solver(name)


def reduction_row(name: str, problem: Problem) -> list[str]:
    t = time.perf_counter()
    red = reduce_problem(problem)
    seconds = time.perf_counter() - t
    q = red.problem
    return [
        name,
        str(problem.n),
        str(len(problem.edges)),
        str(q.n),
        str(len(q.edges)),
        f"{seconds:.3f}",
        ", ".join(f"{k} {v}" for k, v in sorted(red.rules.items(), key=lambda kv: -kv[1])),
    ]


def run_solvers(
    problem: Problem, budgets: Sequence[float], solvers: Sequence[str], time_limit: float
) -> list[dict[str, Any]]:
    ends = solve_ends(problem, get_solver("auto"), time_limit)
    rows = []
    for b in budgets:
        target = target_bytes(parse_budget(b), ends)
        results: dict[str, dict[str, Any]] = {}
        for name in solvers:
            t = time.perf_counter()
            try:
                sol = make_solver(name).solve(problem, target, time_limit=time_limit)
                results[name] = {
                    "obj": sol.objective,
                    "status": sol.status,
                    "bound": sol.bound,
                    "s": time.perf_counter() - t,
                }
                assert problem.saved_bytes(sol.saved) <= target, f"{name} over budget"
            except (InfeasibleError, SolverTimeout) as e:
                results[name] = {
                    "obj": None,
                    "status": type(e).__name__,
                    "bound": None,
                    "s": time.perf_counter() - t,
                }
        # "optimal" is a proof, whichever solver says it (heuristics never do)
        proven = [r["obj"] for r in results.values() if r["status"] == "optimal"]
        best = min((r["obj"] for r in results.values() if r["obj"] is not None), default=None)
        bound = max(
            [r["bound"] for r in results.values() if r["bound"] is not None] + proven, default=None
        )
        rows.append({"b": b, "target": target, "best": best, "bound": bound, "results": results})
    return rows


def torch_choose_time(make: Callable[[], Any], b: float) -> float:
    """Seconds torch spends in choose_saved_values_set for this step at budget b (fake tensors)."""
    import torch._functorch.partitioners as P
    from torch._subclasses.fake_tensor import FakeTensorMode

    spent = []
    original = P.choose_saved_values_set

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = original(*args, **kwargs)
        spent.append(time.perf_counter() - t)
        return out

    ex = make()
    torch._dynamo.reset()
    P.choose_saved_values_set = timed
    try:
        with (
            torch._functorch.config.patch(activation_memory_budget=b),
            FakeTensorMode(allow_non_fake_inputs=True) as mode,
        ):
            f = torch.compile(ex.step, backend="aot_eager_decomp_partition")
            f(*[mode.from_tensor(a) for a in ex.args])
    finally:
        P.choose_saved_values_set = original
    return sum(spent)


def budget_plan_time(make: Callable[[], Any], b: float) -> tuple[float, float]:
    """Seconds budget spends choosing what to save (classify, incl. torch's b=1 min-cut, our
    reference end; estimate; both ends and the solve), and then on the peak tie-break
    (which runs torch's own choice at ``b`` and extracts the forward and backward graphs
    of both plans and of torch's b=1 plan to predict their peaks; the partition reuses the
    plan's own). Tracing excluded, as it is for torch's choose_saved_values_set."""
    ex = make()
    torch._dynamo.reset()
    plan = budget.plan(ex.step, *ex.args, memory_budget=b)
    tie = plan.timings.get("tie-break", 0.0)
    return sum(v for k, v in plan.timings.items() if k not in ("partition", "tie-break")), tie


def offload_rows(layers: Sequence[int], d: int, estimator: str) -> list[list[str]]:
    """Per GPT depth and budget: what budget.plan spends choosing what to save
    (classify, estimate, both ends and the solve; tracing and the peak tie-break aside)
    without and with offload (a second search), planned for ``estimator``'s GPU, and the
    solver's status and the host bytes of the plan with offload."""
    rows = []
    warm = get_builtin("gpt", layers=1, d=d, heads=4)  # the solvers' first-use imports
    budget.plan(warm.step, *warm.args, memory_budget=0.5, offload=True, estimator=estimator)
    for n_layers in layers:
        ex = get_builtin("gpt", layers=n_layers, d=d, heads=4)
        for b in (0.5, 0.2):
            spent = []
            for offload in (False, True):
                torch._dynamo.reset()
                plan = budget.plan(
                    ex.step, *ex.args, memory_budget=b, offload=offload, estimator=estimator
                )
                spent.append(
                    sum(v for k, v in plan.timings.items() if k not in ("partition", "tie-break"))
                )
            log(f"gpt-{n_layers}L b={b}: {spent[0]:.2f}s, with offload {spent[1]:.2f}s")
            rows.append(
                [
                    f"gpt-{n_layers}L d={d}",
                    f"{b}",
                    f"{spent[0]:.2f}",
                    f"{spent[1]:.2f}",
                    f"{spent[1] / spent[0]:.1f}",
                    plan.status,
                    f"{plan.offloaded_bytes / 2**20:.2f}",
                ]
            )
    return rows


def first_call(make: Callable[[], Any], b: float, ours: bool) -> float:
    """Seconds of the first compiled training step (compile + run), Inductor on CPU."""
    ex = make()
    torch._dynamo.reset()
    t = time.perf_counter()
    # cold on both sides: no compile cache (FX graph, AOTAutograd; budget's backend keeps
    # the user's settings, and without AOTAutograd's cache it always plans); a warm start
    # is bench/warmstart.py's
    with (
        torch._functorch.config.patch(activation_memory_budget=b, enable_autograd_cache=False),
        torch._inductor.config.patch(fx_graph_cache=False),
    ):
        f = torch.compile(ex.step, backend=budget.backend(b)) if ours else torch.compile(ex.step)
        f(*ex.args).backward()
    return time.perf_counter() - t


def fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def table(title: str, header: list[str], rows: list[list[str]], markdown: bool) -> None:
    print(f"\n## {title}\n")
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---:" for _ in header) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))


def _within(obj: float | None, bound: float | None, tol: float = 1e-3) -> bool:
    """Objective within ``tol`` (relative) of the best bound; exact when the bound is 0."""
    if obj is None or bound is None:
        return False
    return obj <= bound + tol * abs(bound) if bound else obj == 0


def summarise(name: str, n: int, rows: list[dict[str, Any]], solvers: Sequence[str]) -> list[str]:
    cells = [name, str(n)]
    for s in solvers:
        times = [r["results"][s]["s"] for r in rows]
        ratios = [
            r["results"][s]["obj"] / r["bound"]
            for r in rows
            if r["bound"] and r["results"][s]["obj"] is not None
        ]
        within = sum(_within(r["results"][s]["obj"], r["bound"]) for r in rows)
        failed = sum(r["results"][s]["obj"] is None for r in rows)
        worst = max(ratios) if ratios else None
        cells.append(
            f"{statistics.median(times):.3f}/{max(times):.3f}s {within}/{len(rows)} "
            f"x{fmt(worst, '.3f')}" + (f" {failed} fail" if failed else "")
        )
    return cells


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1k-node DAG and GPT 4/12 only")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--solvers", default=",".join(available_solvers()))
    ap.add_argument("--d", type=int, default=128, help="GPT width")
    ap.add_argument("--no-compile", action="store_true", help="skip the first-call compile timing")
    ap.add_argument("--dags", help="random DAG sizes, e.g. 1000,20000 (default: 1000,5000,20000)")
    ap.add_argument("--layers", help="GPT depths, e.g. 4,24 (default: 4,12,24,48)")
    ap.add_argument(
        "--only-solve",
        action="store_true",
        help="solver and reduction tables only (no torch timings, no compile)",
    )
    ap.add_argument(
        "--offload",
        action="store_true",
        help="only the planning time with offload (budget.plan, estimator flops:h100)",
    )
    args = ap.parse_args(argv)
    solvers = [s for s in args.solvers.split(",") if s]
    budgets = [round(0.1 * i, 1) for i in range(1, 10)]
    sizes = [1000] if args.quick else [1000, 5000, 20000]
    layers = [4, 12] if args.quick else [4, 12, 24, 48]
    if args.dags is not None:
        sizes = [int(x) for x in args.dags.split(",") if x]
    if args.layers is not None:
        layers = [int(x) for x in args.layers.split(",") if x]

    if args.offload:
        print(
            f"torch {torch.__version__}, budget {budget.__version__}, "
            f"{torch.get_num_threads()} threads, time limit {budget.config.time_limit:g}s"
        )
        table(
            f"planning with offload (flops:h100, {budget.config.solver}): budget.plan's "
            "classify, estimate and solve, without and with offload",
            ["graph", "budget", "plan s", "with offload s", "ratio", "status", "offloaded MiB"],
            offload_rows(layers, args.d, "flops:h100"),
            args.markdown,
        )
        return 0
    print(
        f"torch {torch.__version__}, budget {budget.__version__}, {torch.get_num_threads()} threads, "
        f"time limit {args.time_limit:g}s, budgets {budgets[0]}..{budgets[-1]}"
    )
    print(
        "cell: median/max solve time over the budgets; budgets solved within 0.1% of the best "
        "bound (a proven optimum where one exists); worst objective/bound where the bound > 0"
    )
    for spec in solvers:
        make_solver(spec)  # unknown names fail before anything runs
    summary, reductions = [], []
    for n in sizes:
        p = layered_dag(n)
        log(f"dag-{n}: solving")
        reductions.append(reduction_row(f"dag-{n}", p))
        summary.append(
            summarise(f"dag-{n}", p.n, run_solvers(p, budgets, solvers, args.time_limit), solvers)
        )
    reals = real_problems(layers, args.d)
    torch_rows = []
    for name, make, p in reals:
        log(f"{name}: solving")
        reductions.append(reduction_row(name, p))
        rows = run_solvers(p, budgets, solvers, args.time_limit)
        summary.append(summarise(name, p.n, rows, solvers))
        if args.only_solve:
            continue
        t_torch = [torch_choose_time(make, b) for b in (0.5, 0.2)]
        (choose5, tie5), (choose2, tie2) = (budget_plan_time(make, b) for b in (0.5, 0.2))
        torch_rows.append(
            [name, str(p.n)]
            + [f"{x:.3f}" for x in (*t_torch, choose5, choose2, tie5, tie2)]
            + [f"{choose5 / t_torch[0]:.2f}", f"{(choose5 + tie5) / t_torch[0]:.2f}"]
        )
    table(
        "solve time and quality per solver", ["problem", "nodes", *solvers], summary, args.markdown
    )
    table(
        "problem reduction (budget/solvers/reduce.py)",
        ["problem", "nodes", "edges", "reduced nodes", "reduced edges", "reduce s", "rules"],
        reductions,
        args.markdown,
    )
    if args.only_solve:
        return 0
    table(
        f"choosing saved values: torch's choose_saved_values_set vs budget ({budget.config.solver}: "
        "classify, estimate, solve), and budget's peak tie-break after it",
        [
            "graph",
            "nodes",
            "torch b=0.5 s",
            "torch b=0.2 s",
            "budget b=0.5 s",
            "budget b=0.2 s",
            "tie-break b=0.5 s",
            "tie-break b=0.2 s",
            "budget / torch b=0.5",
            "with tie-break / torch b=0.5",
        ],
        torch_rows,
        args.markdown,
    )
    if not args.no_compile:
        make = reals[0][1]
        rows = []
        warm = torch.compile(lambda x: (x.sin() @ x).cos().sum())  # Inductor's one-time set-up
        warm(torch.randn(8, 8, requires_grad=True)).backward()
        for b in (0.5,):
            # alternate, best of two each: the order of two cold compiles matters on a CPU
            theirs = min(first_call(make, b, ours=False), first_call(make, b, ours=False))
            ours = min(first_call(make, b, ours=True), first_call(make, b, ours=True))
            rows.append(
                [reals[0][0], f"{b}", f"{theirs:.1f}", f"{ours:.1f}", f"{ours / theirs:.2f}"]
            )
        table(
            "first call of torch.compile (Inductor, CPU): compile + one step",
            ["graph", "budget", "torch s", "budget s", "ratio"],
            rows,
            args.markdown,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
