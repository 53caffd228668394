"""A model and its example inputs swapped for fake tensors, for a run that computes nothing.

Both fake runs of an eager step use it: the trace (:mod:`budget.eager.trace`) and the
peak prediction with a plan applied (:mod:`budget.eager.peak`). Parameters and buffers
are replaced by fake copies for the duration (tied parameters stay tied, so nothing is
left on a real one, not even a gradient), and the CPU RNG state is restored on exit.
:class:`KernelGaps` runs, on fake tensors, the calls whose fake kernel refuses what the
device's kernel takes; :func:`real_paths` runs the composite ops whose C++ code takes
another path for fake tensors as they run on the device.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple
from unittest import mock

import torch
from torch import nn

from ..runtime import _torch_private as T


@dataclass
class FakeStep:
    """What a fake run of the step gets."""

    mode: Any  # the FakeTensorMode the run enters
    args: tuple  # the example inputs, tensors made fake
    kwargs: dict[str, Any]
    state: dict[str, torch.Tensor]  # the fake parameters and buffers, by qualified name


@contextlib.contextmanager
def fake_step(model: nn.Module, args: tuple, kwargs: dict[str, Any]) -> Iterator[FakeStep]:
    """``model`` with fake parameters and buffers, and fake copies of the inputs. Nothing
    real is read or written; the CPU RNG state is restored on exit."""
    mode = T.FakeTensorMode(allow_non_fake_inputs=True)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    with mode:
        fake_state = {k: mode.from_tensor(v) for k, v in state.items()}
        fake_args, fake_kwargs = T.tree_map(
            lambda x: mode.from_tensor(x) if isinstance(x, torch.Tensor) else x, (args, kwargs)
        )
    rng = torch.get_rng_state()
    try:
        with T.reparametrize_module(model, fake_state, tie_weights=True):
            yield FakeStep(mode, tuple(fake_args), dict(fake_kwargs), fake_state)
    finally:
        torch.set_rng_state(rng)


class KernelGaps(T.TorchDispatchMode):  # type: ignore[misc,name-defined]
    """Entered just above a run's FakeTensorMode: the op calls whose fake kernel refuses
    what the CPU's kernel runs get fake outputs of the CPU kernel's shape and dtype.

    - ``aten._grouped_mm`` in float32 on the CPU (transformers' mixture-of-experts layers
      call it so): torch's meta function accepts bfloat16 alone. Run in bfloat16 for the
      shape, its output is made again in the operands' dtype (or ``out_dtype``).

    - ``aten.mkldnn_rnn_layer`` (an LSTM layer on the CPU): its meta function makes the
      workspace the backward reads empty, where oneDNN's kernel makes it of a size only
      the kernel knows. The kernel, run once per signature on zeros, gives the size. Its
      backward's meta function returns one tensor as both bias gradients, where the
      kernel makes two: the second is made again.

    - an integer CPU tensor a composite op writes through its data pointer (the lengths
      ``_pad_packed_sequence`` returns, inside :func:`real_paths`'s scope): made real, as
      a fake tensor has no data to write.

    - a CPU kernel that returns an output in a storage larger than its shape
      (``_LARGER_STORAGES``): a loss reduced in place (``mse_loss`` and others return the
      loss as a view of the unreduced losses' storage, which lives as long as the loss),
      ``F.fold``'s ``col2im`` (made the size of its input, then resized down),
      EmbeddingBag's ``offset2bag``; fake tensors make storages of the shapes. The kernel,
      run once per signature on zeros, gives each storage's size.

    And those whose fake kernel makes another dtype than the device's kernel:

    - a batch norm's saved mean and inverse standard deviation: fake tensors make them in
      the input's dtype, the CPU kernel in float32 where a bfloat16 or float16 input meets
      float32 parameters (a convnet under autocast); both are saved for the backward, so
      the plan would count half their bytes. The device's own kernel, run once per
      overload, dtypes and device on a one-channel input of zeros, says which dtype.

    And those whose fake kernel lays an output out otherwise than the device's kernel:

    - ``native_layer_norm_backward``'s input gradient: laid out as the output gradient by
      its fake kernel, contiguous by the CPU and CUDA kernels. A non-contiguous gradient
      makes autograd copy it where a view of it is taken (a reshape), so the fake run
      would count a copy the step never makes (Swin's windows, transposed).
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func is torch.ops.aten._grouped_mm.default and _float_on_cpu(args[:2]):
            a, b = args[0], args[1]
            out_dtype = kwargs.get("out_dtype") or a.dtype
            low = func(a.to(torch.bfloat16), b.to(torch.bfloat16), *args[2:], **kwargs)
            return torch.empty_strided(low.shape, low.stride(), dtype=out_dtype, device=a.device)
        if _HOST_WRITES[0] and func is aten.empty.memory_format and _host_int_kwargs(kwargs):
            with T._disable_current_modes():  # written through its data pointer: real
                return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if func is aten.mkldnn_rnn_layer.default and out[3].numel() == 0:
            shape, dtype = _rnn_workspace(_signature(args))
            return (*out[:3], torch.empty(shape, dtype=dtype, device=out[3].device))
        if func is aten.mkldnn_rnn_layer_backward.default and out[3] is out[4]:
            return (*out[:4], torch.empty_like(out[3]), *out[5:])
        if _larger_storages(func, args):
            return _with_storages(out, _kernel_storages(func, _signature(args)))
        grad = out[0] if func is aten.native_layer_norm_backward.default else None
        if isinstance(grad, torch.Tensor) and not grad.is_contiguous():
            # the kernels' empty_like(input, contiguous)
            return (torch.empty(grad.shape, dtype=grad.dtype, device=grad.device), *out[1:])
        if func in _BATCH_NORMS and isinstance(args[0], torch.Tensor):
            dtype = _stats_dtype(func, args)
            if dtype is not None and any(t.dtype != dtype for t in out[1:3]):
                stats = [
                    torch.empty_strided(t.shape, t.stride(), dtype=dtype, device=t.device)
                    for t in out[1:3]
                ]
                return (out[0], *stats, *out[3:])
        return out


@contextlib.contextmanager
def real_paths() -> Iterator[None]:
    """For a fake run (its recomputations in the backward included): the composite ops
    whose C++ code takes another path for fake tensors than for the device's run the
    device's path on them, so that the run makes the op calls the real step makes
    (``budget.apply`` matches them call by call). Patched where models call them, as a
    torch function mode is not asked while checkpointing recomputes in the backward.

    - ``torch.nn.functional.one_hot`` (a mixture of experts' routing): for fake tensors
      ``arange`` and ``eq``; on a device ``zeros`` and ``scatter_``, after the class values
      are read (ATen/native/Onehot.cpp; on a CPU ``aminmax`` in torch 2.13, ``min`` and
      ``max`` in 2.11); the reads are answered as the run answers every read of values.
    - ``_pad_packed_sequence`` (``torch.nn.utils.rnn.pad_packed_sequence``) writes the
      lengths it returns through their data pointer: made real while it runs
      (:class:`KernelGaps`); the batch sizes it reads are real already
      (:func:`budget.eager.reads.host_read`).
    """
    original = torch.nn.functional.one_hot
    pad = T.VF._pad_packed_sequence

    def pad_packed(*args: Any, **kwargs: Any) -> Any:
        _HOST_WRITES[0] += 1
        try:
            return pad(*args, **kwargs)
        finally:
            _HOST_WRITES[0] -= 1

    def one_hot(input: torch.Tensor, num_classes: int = -1) -> torch.Tensor:  # noqa: A002
        if isinstance(input, T.FakeTensor):
            return _one_hot_on_device(input, num_classes, original)
        return original(input, num_classes)

    with (
        mock.patch.object(torch.nn.functional, "one_hot", one_hot),
        mock.patch.object(T.VF, "_pad_packed_sequence", pad_packed),
    ):
        yield


_HOST_WRITES = [0]  # calls of _pad_packed_sequence under way (real_paths)


def _host_int_kwargs(kwargs: dict) -> bool:
    dtype, device = kwargs.get("dtype"), kwargs.get("device")
    integer = dtype is not None and not dtype.is_floating_point and not dtype.is_complex
    return integer and device is not None and torch.device(device).type == "cpu"


def _one_hot_on_device(x: torch.Tensor, num_classes: int, original: Any) -> torch.Tensor:
    """``one_hot`` as ATen runs it for a tensor that is not fake, its reads of the class
    values included: ``aminmax`` (torch 2.13 on a CPU), ``min`` then ``max`` (2.11), or,
    on an accelerator, ``max`` where ``num_classes`` is to be found; as the installed
    torch's kernel reads them on ``x``'s device (:func:`_reads`)."""
    if x.dtype != torch.long or (x.numel() == 0 and num_classes <= 0):
        return original(x, num_classes)  # refused
    if x.numel() == 0:
        return torch.empty((*x.shape, num_classes), dtype=x.dtype, device=x.device)
    reads = _reads(original, x.device.type, num_classes == -1)
    high = None
    if "aminmax" in reads:
        low, high = torch.aminmax(x)
        if low.item() < 0:
            raise RuntimeError("Class values must be non-negative.")
    elif "min" in reads and x.min().item() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if high is None and "max" in reads:
        high = x.max()
    if num_classes == -1:
        num_classes = int(high.item() if high is not None else x.max().item()) + 1
    elif high is not None and num_classes <= high.item():
        raise RuntimeError("Class values must be smaller than num_classes.")
    elif num_classes < 1:
        raise RuntimeError("num_classes should be positive")
    out = torch.zeros((*x.shape, num_classes), dtype=x.dtype, device=x.device)
    return out.scatter_(-1, x.unsqueeze(-1), 1)


@functools.cache
def _reads(original: Any, device: str, infer: bool) -> tuple[str, ...]:
    """The ops (by name) the installed torch's ``one_hot`` reads class values with on a
    real tensor of ``device`` (``infer``: ``num_classes`` left to find), in call order:
    its kernel run once on a one-element tensor, the modes of the fake run set aside."""
    seen: list[str] = []

    class Record(T.TorchDispatchMode):  # type: ignore[misc,name-defined]
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(func._schema.name.split("::")[-1])
            return func(*args, **(kwargs or {}))

    with T._disable_current_modes(), Record():
        original(torch.zeros(1, dtype=torch.long, device=device), -1 if infer else 1)
    return tuple(n for n in seen if n in ("aminmax", "min", "max"))


aten = torch.ops.aten
# batch norms whose outputs 1 and 2 are the saved mean and inverse standard deviation, and
# where among their arguments the parameters (weight, bias, running mean and variance) are
_BATCH_NORMS = {
    aten._batch_norm_with_update.default: slice(1, 5),
    aten._batch_norm_no_update.default: slice(1, 5),
    aten.native_batch_norm.default: slice(1, 5),
    aten._native_batch_norm_legit.default: slice(1, 5),
    aten._native_batch_norm_legit.no_stats: slice(1, 3),
    aten._native_batch_norm_legit_no_training.default: slice(1, 5),
}


def _stats_dtype(func: Any, args: tuple) -> torch.dtype | None:
    """The dtype the device's kernel makes a batch norm's saved statistics in (None where
    it refuses the call): the kernel run on a one-channel input of zeros."""
    x, params = args[0], args[_BATCH_NORMS[func]]
    dtypes = tuple(t.dtype if isinstance(t, torch.Tensor) else None for t in params)
    rest = tuple(args[_BATCH_NORMS[func].stop :])
    return _kernel_stats_dtype(func, x.dtype, x.dim(), x.device.type, dtypes, rest)


@functools.cache
def _kernel_stats_dtype(
    func: Any, dtype: torch.dtype, dim: int, device: str, params: tuple, rest: tuple
) -> torch.dtype | None:
    with T._disable_current_modes():
        x = torch.zeros((2, 1) + (1,) * (dim - 2), dtype=dtype, device=device)
        made = [
            None
            if p is None
            else (torch.ones if i == 3 else torch.zeros)(1, dtype=p, device=device)
            for i, p in enumerate(params)
        ]
        try:
            out = func(x, *made, *rest)
        except RuntimeError:  # a combination the kernel refuses: the fake one stands
            return None
    return out[1].dtype


def _signature(args: tuple) -> tuple:
    """A call's arguments as a cache key: tensors by shape and dtype, lists as tuples."""
    return tuple(
        _Like(tuple(a.shape), a.dtype)
        if isinstance(a, torch.Tensor)
        else (tuple(a) if isinstance(a, list) else a)
        for a in args
    )


# CPU kernels that return an output in a storage larger than its shape: reduced losses (a
# view of the unreduced losses), ``col2im`` (``F.fold``: made the size of its input, then
# resized down), EmbeddingBag's ``offset2bag`` (made one element longer)
_LARGER_STORAGES = ("mse_loss", "smooth_l1_loss", "binary_cross_entropy", "soft_margin_loss")
_LARGER_STORAGES += ("col2im", "_embedding_bag", "_embedding_bag_forward_only")


def _larger_storages(func: Any, args: tuple) -> bool:
    return (
        isinstance(func, T.OpOverload)
        and func.name().removeprefix("aten::") in _LARGER_STORAGES
        and all(a.device.type == "cpu" for a in args if isinstance(a, torch.Tensor))
    )


@functools.cache
def _kernel_storages(func: Any, signature: tuple) -> tuple[int, ...]:
    """The bytes of the storage of each output the CPU kernel of ``func`` returns, for a
    call of ``signature`` (:func:`_signature`)."""
    made = _on_zeros(func, signature)
    outs = made if isinstance(made, tuple) else (made,)
    return tuple(int(t.untyped_storage().nbytes()) for t in outs)


def _with_storages(out: Any, nbytes: tuple[int, ...]) -> Any:
    """``out`` (a tensor or tuple of them), each output whose kernel's storage is larger
    made again as a view of a storage of that size."""

    def larger(t: torch.Tensor, n: int) -> torch.Tensor:
        if n <= t.untyped_storage().nbytes():
            return t
        flat = torch.empty(n // t.dtype.itemsize, dtype=t.dtype, device=t.device)
        return flat.as_strided(t.shape, t.stride(), t.storage_offset())

    if isinstance(out, torch.Tensor):
        return larger(out, nbytes[0])
    return tuple(larger(t, n) for t, n in zip(out, nbytes, strict=True))


def _on_zeros(func: Any, signature: tuple) -> Any:
    """What the device's kernel of ``func`` returns for a call of ``signature``
    (:func:`_signature`), run on real zeros outside the run's modes (with grad mode as it
    is: the LSTM kernel makes its workspace only where a backward may read it)."""
    with T._disable_current_modes():
        args = [
            torch.zeros(a.shape, dtype=a.dtype)
            if isinstance(a, _Like)
            else (list(a) if isinstance(a, tuple) else a)
            for a in signature
        ]
        return func(*args)


class _Like(NamedTuple):
    shape: tuple[int, ...]
    dtype: torch.dtype


@functools.cache
def _rnn_workspace(signature: tuple) -> tuple[tuple[int, ...], torch.dtype]:
    """The shape and dtype of the workspace the CPU's LSTM layer kernel makes for a call of
    ``signature`` (:func:`_signature`)."""
    workspace = _on_zeros(aten.mkldnn_rnn_layer.default, signature)[3]
    return tuple(workspace.shape), workspace.dtype


def _float_on_cpu(tensors: tuple) -> bool:
    return all(
        isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dtype != torch.bfloat16
        for t in tensors
    )
