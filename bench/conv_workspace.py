"""CPU convolution workspace: what oneDNN allocates inside a convolution and frees before
it returns, measured per op, beside the estimate the peak models add
(``budget.estimators.memory.workspace_bytes``).

For each shape, the op runs once to warm up, then once under torch.profiler with memory
events; workspace = the peak of the running sum during the call, less the bytes of its
outputs. Ratio: estimate / measured (at least 1: the estimate covers the workspace).

    python bench/conv_workspace.py              # a few seconds, 2 threads
    python bench/conv_workspace.py --threads 8  # oneDNN's scratch grows with threads
"""

from __future__ import annotations

import argparse
import itertools

import torch

from budget.estimators.memory import workspace_bytes
from budget.runtime.measure import measure_workspace

aten = torch.ops.aten
# batch, in channels, out channels, image side, kernel, stride
SHAPES = [
    (8, 3, 64, 32, 3, 1),
    (8, 64, 64, 32, 3, 1),
    (8, 64, 128, 32, 3, 2),
    (8, 64, 128, 32, 1, 2),
    (8, 128, 128, 16, 3, 1),
    (8, 256, 256, 8, 3, 1),
    (4, 16, 32, 8, 3, 1),
    (2, 3, 8, 16, 3, 1),
    (2, 8, 8, 16, 3, 1),
    (2, 8, 16, 16, 3, 2),
    (2, 8, 16, 16, 1, 2),
    (2, 256, 256, 2, 3, 1),  # images smaller than the kernel (a ResNet's last stage)
]
# contiguous (eager's default), and channels-last (what Inductor's layout optimisation
# gives convolutions' inputs, weights and gradients on CPU)
FORMATS = {torch.contiguous_format: "NCHW", torch.channels_last: "NHWC"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, CPU, {args.threads} threads")
    print("| shape (n, cin->cout, side, k, s) | layout | op | measured B | estimate B | ratio |")
    print("|---|---|---|---:|---:|---:|")
    for (n, cin, cout, side, k, s), fmt in itertools.product(SHAPES, FORMATS):
        x = torch.randn(n, cin, side, side).to(memory_format=fmt)
        w = torch.randn(cout, cin, k, k).to(memory_format=fmt)
        conv = (x, w, None, [s, s], [k // 2] * 2, [1, 1], False, [0, 0], 1)
        y = aten.convolution.default(*conv)
        g = torch.randn(y.shape).to(memory_format=fmt)
        bwd = (g, x, w, None, [s, s], [k // 2] * 2, [1, 1], False, [0, 0], 1, [True, True, False])
        for name, op, args, out in (
            ("forward", aten.convolution.default, conv, y),
            ("backward", aten.convolution_backward.default, bwd, None),
        ):
            measured = measure_workspace(lambda op=op, args=args: op(*args))
            estimate = workspace_bytes(op, args, out)
            shape = f"{n}, {cin}->{cout}, {side}, {k}, {s}"
            layout = FORMATS[fmt]
            print(
                f"| {shape} | {layout} | {name} | {measured} | {estimate} | {estimate / measured:.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
