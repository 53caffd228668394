"""A joint graph's identity: what a saved plan is matched by (``Plan.graph_hash``).

The hash covers each node's op, target, arguments, shapes and dtypes, and not the memory
ids of names, so the same model step traced again (in another process, on another day)
hashes the same; a change of shape, dtype or code gives another hash.
"""

from __future__ import annotations

import hashlib

import torch
import torch.fx as fx


def graph_hash(graph: fx.Graph) -> str:
    """A hash of the graph's structure, ops, shapes and dtypes (not of names' memory ids)."""
    h = hashlib.sha256()
    for node in graph.nodes:
        val = node.meta.get("val")
        desc = (
            f"{tuple(val.shape)}{val.dtype}"
            if isinstance(val, torch.Tensor)
            else type(val).__name__
        )
        h.update(f"{node.op}|{node.target}|{node.args}|{node.kwargs}|{desc}\n".encode())
    return h.hexdigest()[:16]
