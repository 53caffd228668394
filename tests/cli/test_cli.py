"""``budget solve`` and ``budget sweep``: output, JSON, user targets, and every error path.

Every user error exits with status 2 and one line on stderr, no traceback (``--debug``
shows it). Models are tiny so the file runs in seconds, except the one test of the
bare ``budget solve`` (the default GPT), which is the quickstart.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys

import pytest
import torch

import budget
from budget.cli.main import main
from budget.core.sizes import format_bytes

MLP = ["builtin:mlp", "--batch", "8", "--d-in", "16", "--d", "32", "--layers", "2"]
GPT = ["--layers", "1", "--seq", "16", "--d", "32", "--heads", "2", "--batch", "2", "--vocab", "64"]


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_solve_with_no_arguments_prints_a_plan_for_the_default_gpt(capsys):
    code, out, err = run(["solve"], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[:2] == [  # wrapped to 80 columns
        "budget solve builtin:gpt vocab=1024 d=256 heads=4 layers=4 seq=256 batch=4",
        "             dropout=0.0",
    ]
    assert max(len(line) for line in lines) <= 80
    for needle in (
        "(1 of 1), compiler inductor",
        "budget     1 of the range -> target 70.36 MiB",  # budget.config's default, 1.0
        "range      0 B (budget 0) .. 70.36 MiB (budget 1)",
        "saved      70.36 MiB",
        "torch-mincut: reference",
        "per module (depth 2)",
        "GPT.blocks.3",
        "largest saves (10 of",
        "largest recomputes",
        "wall time load",
        "budget 1 (the default) is torch's own plan",  # and what to ask for instead
    ):
        assert needle in out, needle


def test_solve_report_sections_for_a_budget(capsys):
    code, out, _ = run(["solve", *GPT, "--budget", "0.5", "--depth", "3", "--top", "2"], capsys)
    assert code == 0
    assert "budget     0.5 of the range" in out and "auto: optimal" in out
    assert "GPT.blocks.0.attn" in out and "GPT.blocks.0.mlp" in out  # depth 3
    assert "largest saves (2 of" in out and "largest recomputes (2 of" in out
    assert "(the default)" not in out


def test_json_output_round_trips_into_a_plan(tmp_path, capsys):
    path = tmp_path / "plan.json"
    code, out, _ = run(
        ["solve", *MLP, "--budget", "0.3", "--format", "json", "--json", str(path)], capsys
    )
    assert code == 0
    plan = budget.Plan.from_json(path.read_text())
    assert plan == budget.Plan.from_json(out)  # what is printed is what is written
    assert plan.saved_bytes <= plan.target_bytes and plan.budget == 0.3
    assert plan.compiler == "inductor" and plan.decisions
    assert budget.load_plans(path) == [plan]


def test_size_budget_and_eager_compiler(capsys):
    code, out, _ = run(["solve", *MLP, "--budget", "2KiB", "--compiler", "eager"], capsys)
    assert code == 0
    assert "budget     2.00 KiB -> target 2.00 KiB" in out and "compiler eager" in out


USER_FILES = {
    "pair": (
        "import torch\n"
        "def make():\n"
        "    w = torch.randn(64, 64, requires_grad=True)\n"
        "    return (lambda x: torch.mm(x, w).cos().sum()), (torch.randn(64, 64),)\n"
    ),
    "module": (
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(32, 32)\n"
        "    def forward(self, x):\n"
        "        return self.lin(x).relu().pow(2).mean()\n"
        "def make():\n"
        "    return Net(), torch.randn(8, 32)\n"  # a single tensor is one argument
    ),
    "example": (
        "from budget.models import get_builtin\n"
        "def make():\n"
        "    return get_builtin('mlp', batch=4, d_in=8, d=16, layers=1)\n"
    ),
    "neighbour": ("from helper import make\n"),  # a file may import the files beside it
}


@pytest.mark.parametrize("kind", list(USER_FILES))
def test_user_file_targets(kind, tmp_path, capsys):
    (tmp_path / "helper.py").write_text(USER_FILES["pair"])
    src = tmp_path / f"mine_{kind}.py"
    src.write_text(USER_FILES[kind])
    code, out, err = run(["solve", f"{src}:make", "--budget", "0"], capsys)
    assert (code, err) == (0, "")
    assert out.startswith(f"budget solve {src}:make") and "saved      0 B" in out


def test_module_names_of_a_global_model(tmp_path, capsys):
    src = tmp_path / "glob.py"
    src.write_text(
        "import torch\n"
        "net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))\n"
        "def make():\n"
        "    return (lambda x: net(x).sum()), (torch.randn(8, 16),)\n"
    )
    code, out, _ = run(["solve", f"{src}:make", "--budget", "0", "--depth", "1"], capsys)
    assert code == 0
    rows = [ln.split()[0] for ln in out.split("per module")[1].splitlines()[2:4]]
    assert rows == ["Sequential.0", "Sequential.1"] and "G['" not in out  # ModTracker's names


def test_a_step_with_graph_breaks(tmp_path, capsys):
    src = tmp_path / "breaks.py"
    src.write_text(
        "import torch\n"
        "def make():\n"
        "    w1, w2 = (torch.randn(32, 32, requires_grad=True) for _ in range(2))\n"
        "    def step(x):\n"
        "        h = torch.mm(x, w1).cos()\n"
        "        torch._dynamo.graph_break()\n"
        "        return torch.mm(h, w2).cos().sum()\n"
        "    return step, (torch.randn(32, 32),)\n"
    )
    path = tmp_path / "plans.json"
    code, out, _ = run(["solve", f"{src}:make", "--budget", "0", "--json", str(path)], capsys)
    assert code == 0 and "(1 of 2)" in out and "(2 of 2)" in out and "step (2 graphs)" in out
    assert len(budget.load_plans(path)) == 2 and "is the step's" not in out  # a fraction
    # a size is the step's: the report says what the step keeps, each graph's share above
    code, out, _ = run(["solve", f"{src}:make", "--budget", "10KB", "--json", str(path)], capsys)
    plans = budget.load_plans(path)
    keeps = sum(p.saved_bytes + p.kept_input_bytes for p in plans)
    assert code == 0 and keeps <= 10_000 and plans[1].kept_input_bytes == 4096
    assert f"memory budget 9.77 KiB is the step's: it keeps {format_bytes(keeps)}" in out
    code, out, _ = run(["sweep", f"{src}:make", "--budgets", "0,1", "--format", "csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [r["graph"] for r in rows] == ["0", "0", "1", "1"]


def test_a_step_whose_loss_branches_on_tensor_data(tmp_path, capsys):
    """Previewed on its example inputs, with the same plans as training's."""
    src = tmp_path / "routed.py"
    src.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "w = torch.randn(32, 32, requires_grad=True)\n"
        "@torch._dynamo.disable\n"
        "def loss(h):\n"
        "    keep = h[h > 0]\n"
        "    return keep.sum() if keep.numel() > 100 else h.sum()\n"
        "def step(x):\n"
        "    return loss(torch.mm(x, w).cos())\n"
        "def make():\n"
        "    return step, (torch.randn(32, 32),)\n"
    )
    path = tmp_path / "plans.json"
    code, out, err = run(["solve", f"{src}:make", "--budget", "0", "--json", str(path)], capsys)
    assert code == 0, err
    assert "ran on the example inputs" in out
    sys.path.insert(0, str(tmp_path))
    try:
        import routed
    finally:
        sys.path.remove(str(tmp_path))
    be = budget.backend(0)
    torch.compile(routed.step, backend=be)(*routed.make()[1]).backward()
    assert [p.saved for p in budget.load_plans(path)] == [p.saved for p in be.plans]


def one_line_error(code, err):
    assert code == 2, err
    assert err.startswith("budget: error:") and err.count("\n") == 1, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["solve", "builtin:nope"], "unknown built-in model 'nope'; available: gpt"),
        (["solve", *MLP, "--budget", "1.5"], "fraction in [0, 1]"),
        (["solve", *MLP, "--budget", "lots"], "memory budget"),
        (["solve", *MLP, "--solver", "nope"], "unknown solver"),
        (["solve", *MLP, "--estimator", "nope"], "unknown estimator"),
        (["solve", *MLP, "--time-limit", "0"], "--time-limit must be a positive"),
        (["solve", *MLP, "--depth", "0"], "--depth must be at least 1"),
        (["solve", *MLP, "--vocab", "9"], "has no option vocab"),
        (["solve", *MLP, "--budget", "0.5", "--no-such-flag"], "unrecognized arguments"),
        (["solve", "--layers", "two"], "invalid int value"),
        (["solve", "no_such_file.py:make"], "no such file 'no_such_file.py'"),
        (["solve", "model.py"], "must be builtin:NAME or FILE.py:FACTORY"),
        (["solve", "builtin:mlp", "--json", "/no/such/dir/plan.json"], "does not exist"),
        (["solve", *GPT, "--dropout", "0.1", "--budget", "1B"], "smallest reachable"),
        (["solve", *MLP, "--peak", "0.5"], "--peak: peak memory budget must be an absolute"),
        (["solve", *MLP, "--peak", "1KiB"], "lowest predicted peak"),
        (["solve", *MLP, "--peak", "1GiB", "--plan", "plan.json"], "--peak cannot be used"),
        (["sweep", *MLP, "--budgets", "0,,1"], "comma-separated list"),
        (["sweep", *MLP, "--budgets", "0,2,1"], "--budgets: '2' is not a budget"),
        (["sweep", *MLP, "--budget", "0.5"], "unrecognized arguments: --budget"),
        (["sweep", *MLP, "--plot", "pareto.svg"], "--plot writes a PNG"),
        (["solve", *MLP, "--timeline", "t.svg"], "--timeline writes a PNG"),
        (["sweep", *MLP, "--plot", "/no/such/dir/p.png"], "does not exist"),
        (["solve", *MLP, "--offload"], "offload cannot be planned on the host CPU"),
        (["solve", *MLP, "--offload", "--eager"], "offload cannot be planned on the host CPU"),
    ],
)
def test_errors_exit_2_with_one_line(argv, needle, capsys):
    code, out, err = run(argv, capsys)
    one_line_error(code, err)
    assert needle in err and out == ""


@pytest.mark.parametrize(
    "source,needle",
    [
        ("def make():\n    raise RuntimeError('boom')\n", "make() raised RuntimeError: boom"),
        ("raise ImportError('no torchvision')\n", "raised ImportError: no torchvision"),
        ("def other():\n    pass\n", "defines no function 'make'"),
        ("def make():\n    return 42\n", "must return an Example, a (step, args)"),
        ("import torch\ndef make():\n    return (lambda x: x.sum()), torch.ones(3)\n", "grad"),
    ],
)
def test_bad_user_files(source, needle, tmp_path, capsys):
    src = tmp_path / "bad.py"
    src.write_text(source)
    code, _, err = run(["solve", f"{src}:make"], capsys)
    one_line_error(code, err)
    assert needle in err


def test_sizes_are_for_builtins_only(tmp_path, capsys):
    src = tmp_path / "mine.py"
    src.write_text(USER_FILES["pair"])
    code, _, err = run(["solve", f"{src}:make", "--layers", "2"], capsys)
    one_line_error(code, err)
    assert "--layers apply to built-in models only" in err


def test_debug_shows_the_traceback(tmp_path, capsys):
    src = tmp_path / "bad.py"
    src.write_text("def make():\n    raise RuntimeError('boom')\n")
    for argv in (["--debug", "solve", f"{src}:make"], ["solve", f"{src}:make", "--debug"]):
        code, _, err = run(argv, capsys)
        assert code == 2 and "Traceback" in err and "RuntimeError: boom" in err
        assert err.rstrip().splitlines()[-1].startswith("budget: error:")


def test_missing_matplotlib_is_a_clear_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code, _, err = run(["sweep", *MLP, "--plot", str(tmp_path / "p.png")], capsys)
    one_line_error(code, err)
    assert "pip install budget-remat[plot]" in err
    assert not (tmp_path / "p.png").exists()


# --------------------------------------------------------------------------- sweep


def monotone(rows):
    """The sweep semantics (DESIGN.md): below b=1 each plan is the cheapest under its target
    and, among equal costs, the smallest; so as the budget falls, saved bytes never rise
    and recompute cost never falls. b=1 is torch's own choice: the most bytes, cost aside."""
    solved = sorted((r for r in rows if r["status"] == "optimal"), key=lambda r: float(r["budget"]))
    assert len(solved) >= 2
    for lo, hi in zip(solved, solved[1:], strict=False):
        assert int(lo["saved_bytes"]) <= int(hi["saved_bytes"]), (lo, hi)
        assert float(lo["recompute_cost"]) >= float(hi["recompute_cost"]) * (1 - 1e-12)
        assert int(lo["target_bytes"]) <= int(hi["target_bytes"])
    for r in rows:
        assert int(r["saved_bytes"]) <= int(r["max_bytes"])
        if r["status"] == "reference":
            assert int(r["saved_bytes"]) == int(r["max_bytes"])
        else:
            assert int(r["saved_bytes"]) <= int(r["target_bytes"])
        if float(r["budget"]) == 0.0:
            assert int(r["saved_bytes"]) == int(r["min_bytes"])


def test_sweep_csv_is_monotone_and_default_budgets(capsys):
    code, out, _ = run(["sweep", *GPT, "--format", "csv", "--quiet"], capsys)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [float(r["budget"]) for r in rows] == [i / 10 for i in range(11)]
    assert rows[-1]["status"] == "reference"
    monotone(rows)
    assert int(rows[0]["saved_bytes"]) < int(rows[-1]["saved_bytes"])  # a real range


def test_sweep_table_json_and_plot(tmp_path, capsys):
    png = tmp_path / "pareto.png"
    argv = ["sweep", *MLP, "--budgets", "0, 0.5,1KiB,1", "--plot", str(png)]
    code, out, err = run(argv, capsys)
    assert code == 0 and err == ""  # stderr is not a terminal: no progress bar
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = out.splitlines()
    assert lines[0] == "budget sweep builtin:mlp batch=8 d_in=16 d=32 layers=2 classes=10"
    # every line fits 80 columns but the one echoing the user's path
    wide = [ln for ln in lines if len(ln) > 80 and not ln.startswith(f"plot: {png}")]
    assert not wide, wide
    budgets = [
        ln.split()[0]
        for ln in lines
        if ln.startswith("  ") and ln.split()[-1] in ("optimal", "reference")
    ]
    assert budgets == ["0", "0.5", "1.00", "1"]  # 1KiB is shown as a size
    assert f"plot: {png}" in out
    code, out, _ = run(["sweep", *MLP, "--budgets", "0,0.5,1", "--format", "json"], capsys)
    data = json.loads(out)
    plans = [budget.Plan.from_dict(p) for p in data["graphs"][0]]
    assert [p.budget for p in plans] == [0.0, 0.5, 1.0]
    monotone([p.to_dict() for p in plans])


def test_sweep_compile_shows_the_code_peak_of_the_plan_training_makes_at_each_budget(capsys):
    """``budget sweep --compile``: each budget's row is the plan Inductor training makes at
    that budget, with its code's peak (``compiled_peak_bytes``), and progress reaches every
    budget; with ``--eager`` it is a usage error."""
    from budget.models import get_builtin

    argv = ["sweep", *MLP, "--budgets", "0,1", "--compile", "--format", "csv"]
    code, out, _ = run(argv, capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [float(r["budget"]) for r in rows] == [0.0, 1.0]
    ex = get_builtin("mlp", batch=8, d_in=16, d=32, layers=2)
    for r in rows:
        torch._dynamo.reset()
        be = budget.backend(float(r["budget"]))
        torch.compile(ex.step, backend=be)(*ex.args)
        (trained,) = be.plans
        assert int(r["saved_bytes"]) == trained.saved_bytes
        assert int(r["compiled_peak_bytes"]) == trained.compiled_peak_bytes
    calls = []
    budget.sweep(ex.step, *ex.args, budgets=[0], compile=True, progress=lambda *a: calls.append(a))
    assert calls == [(0, 0, 1), (0, 1, 1)]
    code, _, err = run(["sweep", *MLP, "--compile", "--eager"], capsys)
    assert code == 2 and "--compile" in err


def test_sweep_progress_reaches_every_budget():
    from budget.models import get_builtin

    ex = get_builtin("mlp", batch=8, d_in=16, d=32, layers=2)
    calls = []
    plans = budget.sweep(
        ex.step, *ex.args, budgets=[0, 0.5, 1], progress=lambda *a: calls.append(a)
    )
    assert len(plans) == 3
    assert calls == [(0, 0, 3), (0, 1, 3), (0, 2, 3), (0, 3, 3)]


def test_plans_progress_tells_each_graph_as_it_starts_and_ends():
    from budget.models import get_builtin

    ex = get_builtin("mlp", batch=8, d_in=16, d=32, layers=2)
    calls = []
    budget.plans(ex.step, *ex.args, memory_budget=0.5, progress=lambda *a: calls.append(a))
    assert calls == [(0, 0, 1), (0, 1, 1)]


def test_plans_progress_counts_the_plans_a_peak_search_partitions():
    from budget.models import get_builtin

    ex = get_builtin("mlp", batch=8, d_in=16, d=32, layers=2)
    (b1,) = budget.plans(ex.step, *ex.args, compiler="eager")
    calls = []
    peak = f"{int(0.95 * b1.peak_bytes)}B"
    options = dict(peak_memory_budget=peak, compiler="eager", progress=lambda *a: calls.append(a))
    (plan,) = budget.plans(ex.step, *ex.args, **options)
    assert plan.peak_bytes <= plan.peak_target_bytes
    # 0 of 1 as it starts, then each plan partitioned (no total: the search decides how
    # many), then 1 of 1
    ticks = calls[1:-1]
    assert calls[0] == (0, 0, 1) and calls[-1] == (0, 1, 1) and len(ticks) >= 2
    assert ticks == [(0, k, None) for k in range(1, len(ticks) + 1)]


def test_progress_bar_on_a_terminal(monkeypatch, capsys):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    fake = Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    code = main(["sweep", *MLP, "--budgets", "0,1", "--format", "csv"])
    assert code == 0
    assert "graph 1" in fake.getvalue() and "2/2" in fake.getvalue()
    fake.seek(0)
    fake.truncate()
    assert main(["sweep", *MLP, "--budgets", "0,1", "--quiet"]) == 0
    assert fake.getvalue() == ""
    assert main(["solve", *MLP, "--format", "json"]) == 0  # solve: a bar per graph
    assert "graph 1" in fake.getvalue() and "1/1" in fake.getvalue()
    fake.seek(0)
    fake.truncate()
    assert main(["solve", *MLP, "--quiet"]) == 0
    assert fake.getvalue() == ""
    assert main(["solve", *MLP, "--compiler", "eager", "--peak", "10000B"]) == 0
    assert re.search(r"graph 1: peak search: [1-9]\d* plans partitioned", fake.getvalue())


def test_vs_torch_sets_torchs_plan_beside_budgets_and_needs_a_memory_budget(capsys):
    """``--vs-torch``: solve reports torch's plan at the budget, sweep a table and CSV
    columns of them (what torch saves there is torch's: tests/compile/test_torch_plan.py);
    with --eager, torch's checkpointing of every module; with --peak on the compiled path
    it is a usage error."""
    code, out, _ = run(["solve", *MLP, "--budget", "0.5", "--vs-torch"], capsys)
    assert code == 0 and "  vs torch   activation_memory_budget=0.5: saves" in out
    argv = ["sweep", *MLP, "--budgets", "0,1", "--vs-torch", "--format", "csv"]
    code, out, _ = run(argv, capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and all(r["torch_saved_bytes"] for r in rows)
    assert rows[-1]["torch_saved_bytes"] == rows[-1]["saved_bytes"]  # b=1: torch's own plan
    # at b=0 torch's bytes are budget's, so budget's plan there is the b=0 plan
    assert float(rows[0]["budget_recompute_cost_at_torch_bytes"]) == float(
        rows[0]["recompute_cost"]
    )
    code, out, _ = run(["sweep", *MLP, "--budgets", "0,1", "--vs-torch"], capsys)
    assert "torch's partitioner at the same budgets" in out
    head = next(line for line in out.splitlines() if "vs budget's" in line)
    assert head.endswith("vs budget's  at its bytes") and max(map(len, out.splitlines())) <= 80
    code, _, err = run(["solve", *MLP, "--vs-torch", "--peak", "1MiB"], capsys)
    assert code == 2 and "--vs-torch" in err
    code, _, err = run(["solve", *MLP, "--vs-torch", "--plan", "plan.json"], capsys)
    assert code == 2 and "--vs-torch" in err
    code, out, _ = run(["solve", "builtin:gpt", *GPT, "--eager", "--vs-torch"], capsys)
    assert code == 0 and "  vs torch   checkpoint_wrapper on 1 module (each whole)" in out
    assert "budget 1 (the default) is the step as it is, nothing" in out  # no budget asked
    argv = ["sweep", "builtin:gpt", *GPT, "--eager", "--vs-torch", "--budgets", "0,1"]
    code, out, _ = run(argv, capsys)
    assert code == 0 and "torch's checkpoint_wrapper on every module (each whole)" in out


def test_progress_bar_clock_ticks_between_updates_and_stops_on_close(monkeypatch):
    """A compile can spend a minute on one plan's code with nothing to count: the bar is
    redrawn (its elapsed time) between updates, until it is closed."""
    import time

    from budget.cli import progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    fake = Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    monkeypatch.setattr(progress, "TICK_S", 0.001)
    bar = progress.ProgressBar(1, quiet=False)
    bar.update(0, 0, 1)
    drawn = len(fake.getvalue())
    deadline = time.monotonic() + 10
    while len(fake.getvalue()) == drawn and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(fake.getvalue()) > drawn  # redrawn with no update
    bar.close()
    assert bar._ticker is not None and not bar._ticker.is_alive()
    quiet = progress.ProgressBar(1, quiet=True)
    assert quiet._ticker is None
    quiet.close()


def test_solve_shows_the_predicted_peak_and_meets_a_peak_budget(tmp_path, capsys):
    png = tmp_path / "timeline.png"
    code, out, _ = run(["solve", *MLP, "--compiler", "eager", "--timeline", str(png)], capsys)
    assert code == 0 and any(ln.startswith("  peak ") for ln in out.splitlines())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"timeline: {png}" in out
    code, out, _ = run(["solve", *MLP, "--compiler", "eager", "--format", "json"], capsys)
    peak = json.loads(out)["peak_bytes"]
    argv = ["solve", *MLP, "--compiler", "eager", "--format", "json", "--peak", f"{peak}B"]
    code, out, _ = run(argv, capsys)
    plan = json.loads(out)
    assert code == 0 and plan["peak_target_bytes"] == peak and plan["peak_bytes"] <= peak


def test_solve_peak_search_exact_proves_its_plan_and_needs_a_peak(capsys):
    code, out, _ = run(["solve", *MLP, "--compiler", "eager", "--format", "json"], capsys)
    peak = json.loads(out)["peak_bytes"]
    argv = ["solve", *MLP, "--compiler", "eager", "--format", "json", "--peak", f"{peak}B"]
    code, out, _ = run([*argv, "--peak-search", "exact"], capsys)
    plan = json.loads(out)
    assert code == 0 and plan["peak_bytes"] <= peak
    assert plan["status"] == "optimal"  # b=1's peak: a plan that recomputes nothing fits
    assert "exact search" in plan["timings"]  # the exact search ran ...
    code, out, _ = run(argv, capsys)
    assert code == 0 and "exact search" not in json.loads(out)["timings"]  # ... by request
    code, _, err = run(["solve", *MLP, "--peak-search", "exact"], capsys)
    assert code == 2 and "--peak-search says how --peak is searched: give --peak too" in err


@pytest.mark.slow
def test_solve_compile_shows_the_peak_of_the_generated_code_and_checks_a_budget_on_it(
    capsys, tmp_path
):
    """--compile makes the plan training makes: its report has the compiled peak, and a
    --peak is checked on that peak, which the profiler measures. The graphs' prediction
    of the GPT is over it: 95% of the lowest predicted peak is refused by a
    preview, met by the compiled step, and by training with the plan file it writes."""
    import torch

    from budget.models import get_builtin
    from budget.runtime.measure import measure_peak

    sizes = {"layers": 1, "d": 64, "seq": 64, "batch": 2}
    gpt = ["builtin:gpt", *(f"--{k}={v}" for k, v in sizes.items())]
    ex = get_builtin("gpt", **sizes)
    with pytest.raises(budget.BudgetTooSmallError) as refused:
        budget.plans(ex.step, *ex.args, peak_memory_budget="1B")
    target = int(0.95 * refused.value.lowest_peak_bytes)
    code, out, err = run(["solve", *gpt, "--peak", f"{target}B"], capsys)
    assert code == 2 and "lowest predicted peak" in out + err
    plan_file = tmp_path / "plan.json"
    argv = ["solve", *gpt, "--compile", "--peak", f"{target}B", "--json", str(plan_file)]
    code, out, _ = run(argv, capsys)
    plan = json.loads(plan_file.read_text())
    assert code == 0 and "  compiled " in out
    assert plan["compiled_peak_bytes"] <= target < plan["peak_bytes"]
    # training with the plan file it wrote (no second search) measures within the budget
    torch._dynamo.reset()
    be = budget.backend(plan=plan_file)
    assert measure_peak(torch.compile(ex.step, backend=be), *ex.args) <= target
    assert be.plans[0].saved_bytes == plan["saved_bytes"]
    code, _, err = run(["solve", *gpt, "--compile", "--compiler", "eager"], capsys)
    assert code == 2 and "--compile" in err


WIDE = ["builtin:mlp", "--batch", "8", "--d-in", "16", "--d", "4096", "--layers", "2"]


def test_offload_planned_for_a_gpu_shows_in_solve_and_sweep(tmp_path, capsys, monkeypatch):
    """A wide MLP planned for an H100: at budget 0 copying beats recomputing. A plot of
    an offload sweep draws the recompute-only sweep beside it, torch's plans once."""
    common = ["--offload", "--estimator", "flops:h100", "--compiler", "eager"]
    code, out, _ = run(["solve", *WIDE, "--budget", "0", *common], capsys)
    assert code == 0 and "kept in host memory, copied back for the backward" in out
    eager = ["--offload", "--estimator", "flops:h100", "--eager"]  # budget.apply's plan
    code, out, _ = run(["solve", *WIDE, "--budget", "0", *eager], capsys)
    assert code == 0 and "kept in host memory, copied back for the backward" in out
    assert " offloaded " in out.split("per module")[1]  # the module table's column
    plot = tmp_path / "sweep.png"
    sweeps, sweep = [], budget.sweep

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        sweeps.append((kwargs["offload"], kwargs["vs_torch"]))
        return sweep(*args, **kwargs)

    monkeypatch.setattr(budget, "sweep", spy)
    argv = ["sweep", *WIDE, "--budgets", "0,1", "--quiet", "--plot", str(plot), *common]
    code, out, _ = run([*argv, "--vs-torch"], capsys)
    assert code == 0 and " offloaded " in out and plot.stat().st_size > 0
    assert "torch's partitioner at the same budgets" in out
    assert sweeps == [(True, True), (False, False)]  # (offload, vs_torch)
