"""torch 2.11 seen as 2.13 by budget, for bench/gpu_check.py on a lent GPU only.

budget pins torch 2.13 (private APIs). The GPU machines this project is lent carry torch
2.11 and cannot install another, so the GPU check runs budget there with this file first
on ``PYTHONPATH`` (Python imports ``sitecustomize`` at start-up, in Inductor's compile
workers and pytest's processes too). It fills in the four 2.13 names budget uses that
2.11 lacks, each with 2.11's equivalent; on torch 2.13 it does nothing.
"""

import inspect

import torch
import torch._functorch._aot_autograd.graph_compile as _graph_compile
import torch._functorch.partitioners as _partitioners
import torch.fx.experimental.symbolic_shapes as _symbolic_shapes
from torch.utils._config_module import ConfigModule

if not hasattr(_symbolic_shapes, "optimization_hint"):
    _symbolic_shapes.optimization_hint = _symbolic_shapes.size_hint

if "readonly_values" not in inspect.signature(ConfigModule.save_config_portable).parameters:
    _save = ConfigModule.save_config_portable

    def _portable(self, *, ignore_private_configs=True, readonly_values=False):
        return _save(self, ignore_private_configs=ignore_private_configs)

    ConfigModule.save_config_portable = _portable

if not hasattr(_graph_compile, "is_opaque_node"):

    def is_opaque_node(node):
        from torch._library.fake_class_registry import FakeScriptObject

        val = getattr(node, "meta", {}).get("val")
        return isinstance(val, (torch.ScriptObject, FakeScriptObject))

    _graph_compile.is_opaque_node = is_opaque_node

_extract = _partitioners._extract_fwd_bwd_modules
if "saved_opaque_nodes" not in inspect.signature(_extract).parameters:

    def _extract_fwd_bwd_modules(*args, saved_opaque_nodes=(), **kwargs):
        assert not saved_opaque_nodes, "opaque saved values need torch 2.13"
        return _extract(*args, **kwargs)

    _partitioners._extract_fwd_bwd_modules = _extract_fwd_bwd_modules
