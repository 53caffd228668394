"""bench/gpu_check.py at toy sizes on the CPU (``--device cpu --tiny``): the GPU check's
code runs in CI, so it cannot rot between the rare runs on a lent GPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.slow


def test_the_gpu_checks_code_runs_at_toy_sizes_and_what_is_deterministic_holds(tmp_path):
    """One run (all its blocks share it; a fixture would run once per xdist worker).
    Every block runs; what is deterministic on a CPU holds: saved bytes as predicted and
    within the target, gradients equal to the unplanned step's, the GPT's peaks as
    predicted (the eager compiler's prediction is exact on it), budget.apply's bytes and
    peak. Timing targets are the GPU's to meet. Not asserted: peaks of the convnet and of
    the ``profile`` plan, under bf16 autocast with the eager compiler (the prediction is
    a few percent off for some plans; the profile plan changes with the host's timings)."""
    sys.path.insert(0, str(BENCH))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(BENCH))
    argv = ["--device", "cpu", "--tiny", "--compiler", "eager", "--out", str(tmp_path)]
    gpu_check.main([*argv, "--blocks", "gpt,peak,reuse,eager,offload,estimators,convnet"])
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert (tmp_path / "gpu_check.md").read_text().startswith("### GPU check")

    assert not data["skipped"]
    assert {r["block"] for r in data["rows"]} == {
        "gpt",
        "peak",
        "reuse",
        "eager",
        "offload",
        "estimators",
        "convnet",
    }
    assert not [r["label"] for r in data["rows"] if r["error"]]
    assert not [c["name"] for c in data["checks"] if c["name"].endswith(": runs")]
    failed = [
        c["name"]
        for c in data["checks"]
        if not c["ok"]
        and not c["timing"]
        and not (c["name"].startswith(("convnet", "profile")) and "peak" in c["name"])
    ]
    assert failed == []
    names = {c["name"] for c in data["checks"]}
    assert "gpt bf16 b=0.5: saved = predicted" in names
    assert "eager: peak within 3% of predicted" in names
    assert "peak 0.8x: measured <= budget" in names  # tiny: the budget that fits
    assert "reuse off b=1: saved = predicted" in names
    assert "reuse b=1: neutral reuse's peak <= reuse off's" in names
    assert "eager offload: kept = predicted" in names


def test_the_gpu_checks_compiled_preview_check_runs_under_inductor(tmp_path):
    """The peak block's compiled-preview check (Inductor only, so not in the toy run
    above, which uses the eager compiler) on a small MLP on the CPU: its check passes."""
    from types import SimpleNamespace

    import torch

    import budget

    sys.path.insert(0, str(BENCH))
    try:
        from gpu_blocks import compiled_preview
    finally:
        sys.path.remove(str(BENCH))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))
    x = torch.randn(32, 16)

    def step(x):
        return model(x).square().sum()

    (b1,) = budget.plans(step, x, memory_budget=1.0)
    target = b1.peak_bytes - 1  # binding: the check's search compiles more than one plan
    torch._dynamo.reset()
    be = budget.backend(peak_memory_budget=f"{target}B")
    torch.compile(step, backend=be)(x).backward()
    checks = []
    report = SimpleNamespace(check=lambda *a: checks.append(a))
    c = SimpleNamespace(device=torch.device("cpu"), compiler="inductor", report=report)
    compiled_preview(c, step, (x,), be.plans, target)
    ((name, ok, detail),) = checks
    assert name == "peak 0.8x: compile=True previews training's plans" and ok, detail
