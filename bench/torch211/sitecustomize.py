"""torch 2.11 seen as 2.13 by budget, for bench/gpu_check.py on a lent GPU only.

budget pins torch 2.13 (private APIs). The GPU machines this project is lent carry torch
2.11 and cannot install another, so the GPU check runs budget there with this file first
on ``PYTHONPATH`` (Python imports ``sitecustomize`` at start-up, in Inductor's compile
workers and pytest's processes too). It fills in the four 2.13 names budget uses that
2.11 lacks, each with 2.11's equivalent, and mends three 2.11 behaviours 2.13 changed:
torch's checkpoint saves a 0-element dummy tensor before its inputs (2.13 saves the inputs
alone, and budget's eager offload hooks check each save against the plan's list), the
fake kernel of ``streams::record_stream`` takes another op's arguments (fixed in 2.13; the
offload pass on a side stream fails without it), and Inductor's ``control_deps`` has no
kernel but its fake one (2.13 adds the eager and autograd ones that its fake propagation
of an ordered backward needs). On torch 2.13 it does nothing.
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


import torch.utils.checkpoint as _checkpoint  # noqa: E402

_Noop = getattr(_checkpoint, "_NoopSaveInputs", None)
if _Noop is not None:

    def _setup_context(ctx, inputs, output):
        # inputs: (dummy, kwargs, *args); save the tensors of args alone, as 2.13 does
        where = {
            i: k
            for k, i in enumerate(
                i for i, o in enumerate(inputs) if i > 0 and isinstance(o, torch.Tensor)
            )
        }
        rest = [None if i in where else o for i, o in enumerate(inputs)]

        def get_args(saved):
            return [saved[where[i]] if i in where else o for i, o in enumerate(rest)][1:]

        ctx.get_args = get_args
        ctx.save_for_backward(*(inputs[i] for i in where))

    _Noop.setup_context = staticmethod(_setup_context)

try:
    import torch._dynamo.variables.streams as _streams  # noqa: E402
except ImportError:
    _streams = None
_record = getattr(_streams, "record_stream", None)
if _record is not None and "to_dealloc" in inspect.signature(_record._abstract_fn).parameters:

    @_record.register_fake
    def _record_stream_fake(tensor, stream_index):
        return None


import torch._inductor.fx_passes.control_dependencies as _control  # noqa: E402

_deps = _control.control_deps
if torch._C.DispatchKey.Autograd not in _deps.py_kernels:
    # 2.11 has control_deps' fake kernel alone: Inductor's fake propagation of a backward
    # whose recomputations budget orders (compile/schedule.py) meets it with autograd state
    # and fails; 2.13 runs the subgraph under either key

    def _control_deps(additional_deps, subgraph, *args, **kwargs):
        return subgraph(*args, **kwargs)

    _deps.py_impl(torch._C.DispatchKey.CompositeExplicitAutograd)(_control_deps)
    _deps.py_impl(torch._C.DispatchKey.Autograd)(_control_deps)
