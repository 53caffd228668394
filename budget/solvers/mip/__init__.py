"""Exact solvers of the closure model (DESIGN.md, "The optimisation, exactly"): CP-SAT,
OR-Tools MathOpt (SCIP), PuLP + CBC and HiGHS, behind one lexicographic driver."""
