"""The torch-free core: sizes, the Problem, the Plan, the planner, plan files.

Pure data and the budget semantics; nothing here imports torch (a test checks), so a
plan can be read, printed and checked on a machine without it.
"""

from .plan import Decision, Plan
from .problem import Problem
from .sizes import MemoryBudget, format_bytes, parse_budget

__all__ = ["Decision", "MemoryBudget", "Plan", "Problem", "format_bytes", "parse_budget"]
