"""The seam to PyTorch's private partitioner APIs, in one place.

budget reuses torch's own joint-graph machinery (node classification, the fwd/bwd
extraction, the min-cut that defines the b=1.0 end, RNG functionalisation) instead of
re-deriving it. These are private APIs: every one is imported here, the tested torch
range is pinned in pyproject.toml, and tests/test_torch_seam.py checks they still exist.
"""

from __future__ import annotations

from torch._functorch import config as functorch_config
from torch._functorch._aot_autograd.graph_compile import is_opaque_node
from torch._functorch._aot_autograd.utils import _is_fwd_seed_offset, _is_primal
from torch._functorch.compile_utils import fx_graph_cse
from torch._functorch.partitioners import (
    NodeInfo,
    _extract_fwd_bwd_modules,
    choose_saved_values_set,
    classify_nodes,
    cleanup_recompute_tags,
    default_partition,
    force_save_bw_mutation_src,
    force_save_collectives,
    force_save_effectful_ops,
    functionalize_rng_ops,
    has_recomputable_ops,
    has_recomputable_rng_ops,
    must_recompute,
    raise_getitems,
    reordering_to_mimic_autograd_engine,
    thread_graphsafe_rng_from_hops,
)
from torch.fx.experimental.proxy_tensor import is_sym_node

__all__ = [
    "NodeInfo",
    "_extract_fwd_bwd_modules",
    "_is_fwd_seed_offset",
    "_is_primal",
    "choose_saved_values_set",
    "classify_nodes",
    "cleanup_recompute_tags",
    "default_partition",
    "force_save_bw_mutation_src",
    "force_save_collectives",
    "force_save_effectful_ops",
    "functionalize_rng_ops",
    "functorch_config",
    "fx_graph_cse",
    "has_recomputable_ops",
    "has_recomputable_rng_ops",
    "is_opaque_node",
    "is_sym_node",
    "must_recompute",
    "raise_getitems",
    "reordering_to_mimic_autograd_engine",
    "thread_graphsafe_rng_from_hops",
]
