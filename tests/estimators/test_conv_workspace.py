"""CPU convolution workspace measured on the host (budget.estimators.conv_workspace): what
the peak models add at each convolution by default.

The oracle is torch.profiler around the real call (budget.runtime.measure.
measure_workspace, run here on random operands, not on the zeros the module runs), and,
end to end, the measured peak of a whole training step (tests/compile/test_peak.py and
the eager compiler below).
"""

from __future__ import annotations

import json

import pytest
import torch

import budget
from budget.estimators import conv_workspace
from budget.estimators.memory import workspace_bytes
from budget.planning.options import resolve_settings
from budget.runtime._torch_private import FakeTensorMode
from budget.runtime.measure import measure_peak, measure_workspace

aten = torch.ops.aten
KiB = 1024


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A cache directory of the test's own and nothing measured in this process."""
    monkeypatch.setenv("BUDGET_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(conv_workspace, "_MEMORY", {})
    return tmp_path


def _calls(n, cin, cout, side, k, s, fmt):
    x = torch.randn(n, cin, side, side).to(memory_format=fmt)
    w = torch.randn(cout, cin, k, k).to(memory_format=fmt)
    conv = (x, w, None, [s, s], [k // 2] * 2, [1, 1], False, [0, 0], 1)
    y = aten.convolution.default(*conv)
    g = torch.randn(y.shape).to(memory_format=fmt)
    bwd = (g, x, w, None, [s, s], [k // 2] * 2, [1, 1], False, [0, 0], 1, [True, True, False])
    return [(aten.convolution.default, conv, y), (aten.convolution_backward.default, bwd, None)]


SHAPES = [(8, 64, 128, 32, 3, 2), (2, 256, 256, 2, 3, 1), (8, 3, 64, 32, 3, 1)]


@pytest.mark.parametrize(
    "fmt", [torch.contiguous_format, torch.channels_last], ids=["NCHW", "NHWC"]
)
@pytest.mark.parametrize("shape", SHAPES, ids=["strided", "small-image", "stem"])
def test_the_measured_workspace_is_what_the_call_allocates(fresh, shape, fmt):
    """Each call is priced at what it allocates inside itself on this host (runs of a
    call agree to the byte here, so no margin is added; 1 KiB of slack for a host whose
    runs spread): where the rule can be several times over (a 3-channel stem run
    channels-last: 170 KiB of scratch allowance for a 19 KiB workspace)."""
    for op, args, out in _calls(*shape, fmt):
        measured = measure_workspace(lambda op=op, args=args: op(*args))
        estimate = workspace_bytes(op, args, out)
        assert measured <= estimate <= measured + KiB, (op, measured)


def _calls_nd(n, cin, cout, side, k, dims):
    x = torch.randn(n, cin, *[side] * dims)
    w = torch.randn(cout, cin, *[k] * dims)
    conv = (x, w, None, [2] * dims, [k // 2] * dims, [1] * dims, False, [0] * dims, 1)
    y = aten.convolution.default(*conv)
    g = torch.randn(y.shape)
    bwd = (g, x, w, None, *conv[3:], [True, True, False])
    return [(aten.convolution.default, conv, y), (aten.convolution_backward.default, bwd, None)]


@pytest.mark.parametrize("dims", [1, 3], ids=["1-d", "3-d"])
def test_1d_and_3d_convolutions_are_measured_too(fresh, dims):
    """An audio model's 1-d convolutions and a video model's 3-d ones are measured like
    2-d ones, not priced by the rule, which is fitted on 2-d calls."""
    for op, args, out in _calls_nd(2, 16, 32, 24 if dims == 3 else 256, 3, dims):
        measured = measure_workspace(lambda op=op, args=args: op(*args))
        estimate = workspace_bytes(op, args, out)
        assert measured <= estimate <= measured + KiB, (op, measured)
    (path,) = fresh.glob("conv-workspace-*.json")
    assert len(json.loads(path.read_text())["workspace"]) == 2  # measured, not the rule's


@pytest.mark.slow
def test_an_eager_audio_encoder_is_predicted_at_its_measured_peak():
    """A Whisper-like stem (two 1-d convolutions, the second strided) and a linear head,
    with the eager compiler: the step's predicted peak is its measured peak, within what
    the peak model leaves out (the scalars autograd keeps)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv1d(16, 64, 3, padding=1),
        torch.nn.GELU(),
        torch.nn.Conv1d(64, 64, 3, stride=2, padding=1),
        torch.nn.GELU(),
        torch.nn.Flatten(),
        torch.nn.Linear(64 * 32, 10),
    )
    x, y = torch.randn(4, 16, 64), torch.randint(0, 10, (4,))

    def step(x, y):
        return torch.nn.functional.cross_entropy(model(x), y)

    torch._dynamo.reset()
    be = budget.backend(0.5, compiler="eager")
    measured = measure_peak(torch.compile(step, backend=be), x, y)
    (plan,) = be.plans
    assert measured - 1 * KiB <= plan.peak_bytes <= measured + 1 * KiB, (plan.peak_bytes, measured)


def test_fake_operands_are_priced_as_real_ones_and_measured_once(fresh, monkeypatch):
    """The peak models see fake or meta tensors: the call is run on real zeros of their
    shapes, outside the fake mode, once; later calls, and a new process (an empty
    memory), read the cache file without running anything."""
    (op, args, out), _ = _calls(8, 64, 128, 32, 3, 2, torch.channels_last)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        from_fake = workspace_bytes(op, fake, None)
    assert from_fake == workspace_bytes(op, args, out)
    files = list(fresh.glob("conv-workspace-*.json"))
    assert len(files) == 1
    assert list(json.loads(files[0].read_text())["workspace"].values()) == [from_fake]

    def no_run(sig):
        raise AssertionError("measured again")

    monkeypatch.setattr(conv_workspace, "_run", no_run)
    monkeypatch.setattr(conv_workspace, "_MEMORY", {})
    meta = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
    assert workspace_bytes(op, meta, None, device="cpu") == from_fake


def test_runs_that_spread_are_priced_above_the_largest_by_the_spread(fresh, monkeypatch):
    """Where the profiled runs of a call disagree, the next run may go past the largest:
    the estimate adds the spread (largest less smallest) to the largest."""
    runs = iter([10 * KiB, 13 * KiB, 12 * KiB])
    monkeypatch.setattr(
        "budget.runtime.measure.measure_workspace", lambda fn: next(runs), raising=True
    )
    (op, args, out), _ = _calls(2, 8, 8, 8, 3, 1, torch.contiguous_format)
    assert workspace_bytes(op, args, out) == 13 * KiB + 3 * KiB


def test_a_cache_file_of_the_old_format_is_measured_again(fresh):
    """Entries written with the fixed 4 KiB margin (no "format" in the file) are not read:
    the call is measured again and the file rewritten in the current format."""
    (op, args, out), _ = _calls(2, 8, 8, 8, 3, 1, torch.contiguous_format)
    now = workspace_bytes(op, args, out)
    (path,) = fresh.glob("conv-workspace-*.json")
    data = json.loads(path.read_text())
    assert data["format"] == conv_workspace.FORMAT
    del data["format"]
    data["workspace"] = {k: v + 4 * KiB for k, v in data["workspace"].items()}
    path.write_text(json.dumps(data))
    conv_workspace._MEMORY.clear()
    assert workspace_bytes(op, args, out) == now
    assert json.loads(path.read_text())["format"] == conv_workspace.FORMAT


def test_the_rule_prices_what_is_not_measured(fresh, monkeypatch):
    """A call over the size limit is not run, nor is any with conv_workspace="rule": the
    rule prices them (``measure=False``), and nothing is written."""
    calls = _calls(2, 256, 256, 2, 3, 1, torch.contiguous_format)
    rule = [workspace_bytes(op, args, out, measure=False) for op, args, out in calls]
    with budget.config.patch(conv_workspace="rule"):  # the front ends pass it down
        measure = resolve_settings().measure_workspace
    assert [workspace_bytes(op, args, out, measure=measure) for op, args, out in calls] == rule
    monkeypatch.setattr(conv_workspace, "MAX_OPERAND_BYTES", 1024)
    assert [workspace_bytes(op, args, out) for op, args, out in calls] == rule
    assert not list(fresh.glob("conv-workspace-*.json"))


def test_conv_workspace_option_is_validated():
    with pytest.raises(ValueError, match="conv_workspace must be one of 'measure', 'rule'"):
        budget.config.conv_workspace = "guess"
    assert budget.config.conv_workspace == "measure"


@pytest.mark.slow
def test_an_eager_resnet_on_small_images_is_predicted_at_its_measured_peak():
    """The built-in ResNet on 8x8 images ends on 2x2 images, smaller than its 3x3
    kernels: the rule counts oneDNN's small-image backward path (4 weight copies per
    thread), which some CPUs take and others do not. Measured on the host, the
    prediction with the eager compiler is the step's measured peak within 1%, and not
    under it by more than the scalars the peak model leaves out."""
    from budget.models import get_builtin

    ex = get_builtin("resnet", batch=2, size=8, width=32, blocks=1)
    torch._dynamo.reset()
    be = budget.backend(0.5, compiler="eager")
    measured = measure_peak(torch.compile(ex.step, backend=be), *ex.args)
    (plan,) = be.plans
    assert measured - 1 * KiB <= plan.peak_bytes <= 1.01 * measured, (plan.peak_bytes, measured)


def test_a_gradient_in_strides_of_its_own_is_priced_as_it_is_laid_out(fresh):
    """A patch embedding's gradient reaches its convolution through a transpose
    (B, tokens, D) -> (B, D, h, w): strided otherwise than the input, and oneDNN copies it.
    Priced with every operand in the input's layout, a ViT's step was predicted 20 KiB
    under its measured peak."""
    x = torch.randn(2, 3, 64, 64)
    w = torch.randn(96, 3, 16, 16)
    args = [[16, 16], [0, 0], [1, 1], False, [0, 0], 1]
    tokens = torch.randn(2, 16, 96)  # (B, h*w, D), as the blocks after it make it
    grad = tokens.transpose(1, 2).reshape(2, 96, 4, 4)
    assert not grad.is_contiguous()
    bwd = (grad, x, w, [96], *args, [False, True, True])
    op = aten.convolution_backward.default
    measured = measure_workspace(lambda: op(*bwd))
    assert measured <= workspace_bytes(op, bwd, None) <= measured + KiB


def test_an_nchw_weight_beside_a_channels_last_input_is_priced_with_its_copy(fresh):
    """ConvNeXt's downsampling convolution reads a channels-last input (its LayerNorm
    permutes) with an NCHW weight, and oneDNN copies the weight to meet it: priced as if
    the weight were channels-last already, a ConvNeXt step under the eager compiler is
    predicted under its measured peak."""
    x = torch.randn(2, 80, 8, 8).to(memory_format=torch.channels_last)
    w = torch.randn(160, 80, 2, 2)
    grad = torch.randn(2, 160, 4, 4).to(memory_format=torch.channels_last)
    bwd = (grad, x, w, [160], [2, 2], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True])
    fwd = (x, w, torch.randn(160), [2, 2], [0, 0], [1, 1], False, [0, 0], 1)
    for op, args in ((aten.convolution_backward.default, bwd), (aten.convolution.default, fwd)):
        measured = measure_workspace(lambda op=op, args=args: op(*args))
        assert measured <= workspace_bytes(op, args, None) <= measured + KiB, op


@pytest.mark.parametrize(
    ("cpu", "machine", "broken"),
    [
        ("AVX2", "x86_64", True),
        ("AVX512", "x86_64", False),
        # ATEN_CPU_CAPABILITY=default: torch says DEFAULT, oneDNN still runs its AVX2 kernel
        ("DEFAULT", "x86_64", True),
        ("DEFAULT", "aarch64", False),
    ],
)
def test_a_call_onednn_gets_wrong_on_avx2_is_never_run(fresh, monkeypatch, cpu, machine, broken):
    """The backward of a strided 1x1 convolution over channels-last input with 4 channels
    (oneDNN#6035: on AVX2-only CPUs it writes past its workspace) is not measured there:
    never run, priced by the rule. The same call with 8 channels, unstrided, with a 3x3
    kernel, laid out NCHW, or without the weight's gradient is measured as any other."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: cpu)
    monkeypatch.setattr(conv_workspace.platform, "machine", lambda: machine)
    ran = []
    monkeypatch.setattr(conv_workspace, "_run", lambda sig: ran.append(sig) or 0)
    cl, nchw = torch.channels_last, torch.contiguous_format

    def priced(cin, k, s, fmt, mask=(True, True, False)):
        x = torch.zeros(2, cin, 8, 8).to(memory_format=fmt)
        w = torch.zeros(8, cin, k, k).to(memory_format=fmt)
        g = torch.zeros(2, 8, 8 // s, 8 // s).to(memory_format=fmt)
        pad = [k // 2] * 2
        args = (g, x, w, None, [s, s], pad, [1, 1], False, [0, 0], 1, list(mask))
        before = len(ran)
        conv_workspace.measured_workspace_bytes(
            aten.convolution_backward.default, args, channels_last=fmt is cl
        )
        return len(ran) > before

    assert priced(4, 1, 2, cl) is not broken
    assert priced(8, 1, 2, cl) and priced(4, 1, 1, cl) and priced(4, 3, 2, cl)
    assert priced(4, 1, 2, nchw) and priced(4, 1, 2, cl, mask=(True, False, False))
