"""budget.compile.kernel_workspace: what a node's kernel allocates inside itself, kept by
what each call is read from."""

from __future__ import annotations

import torch

from budget.compile.kernel_workspace import _call

aten = torch.ops.aten


def test_a_calls_workspace_is_kept_by_what_it_is_read_from():
    """The workspace memo's key (kernel_workspace._call): the same for a call made again on
    values of the same metadata on storages of their own (a rescheduler's clone), and
    different where sizes, strides, offsets, dtypes, storage bytes, the sharing of a storage
    between operands, the op or the flags differ."""
    conv = aten.convolution.default

    def key(*args, target=conv, flags=(None, True, False)):
        return _call(target, (list(args), {}, None), *flags)

    x, w = torch.zeros(2, 3, 8, 8, device="meta"), torch.zeros(4, 3, 3, 3, device="meta")
    same = key(torch.zeros(2, 3, 8, 8, device="meta"), torch.zeros(4, 3, 3, 3, device="meta"))
    assert key(x, w) == same
    base = torch.zeros(2 * 3 * 8 * 8 + 1, device="meta")
    others = [
        key(torch.zeros(2, 3, 8, 9, device="meta"), w),  # sizes
        key(x.contiguous(memory_format=torch.channels_last), w),  # strides
        key(base[1:].view(2, 3, 8, 8), w),  # offset, storage bytes
        key(x.half(), w),  # dtype
        key(x, w, target=aten.mul.Tensor),
        key(x, w, flags=(True, True, False)),
    ]
    assert same not in others and len(set(others)) == len(others)
    assert key(x, x) != key(x, torch.zeros_like(x))  # one storage for both operands, or two
