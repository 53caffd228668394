"""Non-exact solvers kept for comparison: ``greedy`` and ``dp`` (torch's knapsack)."""
