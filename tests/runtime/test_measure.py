"""runtime/measure.py: saved bytes counted by device."""

import pytest
import torch

from budget.runtime.measure import saved_bytes


def _step(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() * 2).sum()  # sin saves its input (x: an argument, not counted)...


def _kept(x: torch.Tensor) -> torch.Tensor:
    y = x * 3  # ...and this saves y: 16 floats, new memory
    return y.sin().sum()


def test_counts_only_the_device_asked_for():
    x = torch.ones(16, requires_grad=True)
    assert saved_bytes(_kept, x).saved_bytes == 64
    assert saved_bytes(_kept, x, on=torch.device("cpu")).saved_bytes == 64
    assert saved_bytes(_kept, x, on=torch.device("meta")).saved_bytes == 0
    assert saved_bytes(_step, x).saved_bytes == 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_without_an_index_is_the_current_device():
    x = torch.ones(16, device="cuda", requires_grad=True)
    assert saved_bytes(_kept, x, on=torch.device("cuda")).saved_bytes == 64
    assert saved_bytes(_kept, x, on=torch.device("cpu")).saved_bytes == 0
