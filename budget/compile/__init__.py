"""Everything that touches torch's compile machinery.

The joint graph becomes a :class:`~budget.core.problem.Problem` (:mod:`.graph`), a Plan
becomes forward and backward graphs (:mod:`.partition`), :mod:`.backend` is the
``torch.compile`` backend, :mod:`.preview` plans on fake tensors, :mod:`.measure` measures
what a step really saves. Private torch APIs are imported in :mod:`._torch_private` only.
Submodules load on use: importing this package imports nothing heavy.
"""
