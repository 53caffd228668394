"""HiGHS MIP solves on models stored as arrays: the worker process of ``highs``.

Usage: ``python _highs_child.py``, then one request per line on stdin, ``IN.npz<TAB>OUT.npz``,
each answered by a line ``ok`` (or ``error: ...``) on stdout; the worker exits at the end
of its input. It is run by path, not as part of the package, so it loads highspy and
nothing of OR-Tools (see :mod:`budget.solvers.mip.highs` for why). IN holds the MIP (column
upper bounds over a lower bound of 0 and which columns are integer, CSR rows, bounds,
objective, options, an optional starting point); OUT gets the model status, whether a
primal solution exists, the dual bound and the column values.
"""

from __future__ import annotations

import sys


def solve(src: str, dst: str) -> None:
    import highspy
    import numpy as np

    data = np.load(src)
    n = int(data["num_cols"])
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = len(data["row_lower"])
    lp.col_cost_ = data["objective"]
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = data["col_upper"]
    lp.row_lower_ = np.where(np.isinf(data["row_lower"]), -highspy.kHighsInf, data["row_lower"])
    lp.row_upper_ = np.where(np.isinf(data["row_upper"]), highspy.kHighsInf, data["row_upper"])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = n
    lp.a_matrix_.num_row_ = lp.num_row_
    lp.a_matrix_.start_ = data["start"].astype(np.int32)
    lp.a_matrix_.index_ = data["index"].astype(np.int32)
    lp.a_matrix_.value_ = data["value"]
    kinds = (highspy.HighsVarType.kContinuous, highspy.HighsVarType.kInteger)
    lp.integrality_ = [kinds[int(i)] for i in data["integer"]]
    h.passModel(lp)
    for key in ("time_limit", "mip_rel_gap", "mip_abs_gap"):
        h.setOptionValue(key, float(data[key]))
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    if "hint" in data.files:
        start = highspy.HighsSolution()
        start.col_value = data["hint"].tolist()
        start.value_valid = True
        h.setSolution(start)
    h.run()
    info = h.getInfo()
    has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
    x = np.asarray(h.getSolution().col_value, np.float64) if has_solution else np.zeros(0)
    np.savez(
        dst,
        status=h.getModelStatus().name,
        has_solution=has_solution,
        bound=float(info.mip_dual_bound),
        x=x,
    )


def main() -> int:
    for line in sys.stdin:
        src, dst = line.rstrip("\n").split("\t")
        try:
            solve(src, dst)
        except Exception as e:  # noqa: BLE001 - reported to the parent, which raises
            print(f"error: {type(e).__name__}: {e}".replace("\n", " "), flush=True)
        else:
            print("ok", flush=True)
    return 0


if __name__ == "__main__":
    # Run by path, Python put this package directory first on sys.path, where modules
    # named like ours (highs, base, ...) would shadow real ones: take it out.
    if sys.path and sys.path[0] and __file__.startswith(sys.path[0]):
        sys.path.pop(0)
    sys.exit(main())
