"""networkx's Boykov-Kolmogorov max flow for torch's min-cut partitioner, which asks
``nx.minimum_cut`` with the default preflow-push (:func:`budget.runtime._torch_private
.torch_saved_set`)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator


@contextlib.contextmanager
def boykov_kolmogorov_cuts() -> Iterator[None]:
    """Make torch's min-cut partitioner use networkx's Boykov-Kolmogorov max flow.

    torch calls ``nx.minimum_cut`` with the default preflow-push. The minimum cut it reads
    (the nodes that reach the sink in the residual graph) is the same for every maximum
    flow, so the partition is unchanged; Boykov-Kolmogorov is several times faster on
    joint graphs (``python bench/solvers.py``). Restored on exit.
    """
    import networkx as nx
    from networkx.algorithms.flow import boykov_kolmogorov

    original = nx.minimum_cut
    nx.minimum_cut = functools.partial(original, flow_func=boykov_kolmogorov)
    try:
        yield
    finally:
        nx.minimum_cut = original
