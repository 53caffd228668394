"""Plan files: solve once (``budget solve --json``), apply at every compile
(``budget.backend(plan=FILE)``), refuse a plan made for another graph.

Applying a plan must give exactly what solving gives (same saved set, same measured
bytes, same gradients) without solving, and a plan for another graph (shapes, dtypes,
model, compiler) must be refused with both graph hashes, never applied.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers.steps import grads_of

import budget
from budget.cli.main import main
from budget.compile.backend import root_error
from budget.core.plan import PLAN_FORMAT_VERSION, READABLE_VERSIONS
from budget.core.plan_files import dumps_plans, load_plans, loads_plans
from budget.models import get_builtin
from budget.runtime.measure import measure_step

MLP = dict(batch=8, d_in=16, d=32, layers=2)
MLP_FLAGS = ["builtin:mlp"] + [f"--{k.replace('_', '-')}={v}" for k, v in MLP.items()]


def compile_step(ex, **backend_kw):
    be = budget.backend(compiler=backend_kw.pop("compiler", "eager"), **backend_kw)
    return torch.compile(ex.step, backend=be), be


def params(ex):
    return list(ex.model.parameters())


def test_applied_plan_saves_what_solving_afresh_saves(tmp_path, monkeypatch, capsys):
    path = tmp_path / "plan.json"
    argv = ["solve", *MLP_FLAGS, "--budget", "0.5", "--compiler", "eager", "--json", str(path)]
    assert main(argv) == 0
    capsys.readouterr()
    ex = get_builtin("mlp", **MLP)
    fresh_step, fresh = compile_step(ex, memory_budget=0.5)
    measured_fresh = measure_step(fresh_step, *ex.args, exclude=params(ex))
    _, grads_fresh = grads_of(fresh_step, params(ex), *ex.args)

    # Applying must not solve anything: make every solving entry point fail.
    import budget.compile.partition as partition

    def no_solving(*a, **k):
        raise AssertionError("a saved plan was re-solved")

    monkeypatch.setattr(partition, "solve_problem", no_solving)
    monkeypatch.setattr(partition, "solve_sweep", no_solving)
    torch._dynamo.reset()
    ex = get_builtin("mlp", **MLP)
    step, be = compile_step(ex, plan=str(path))
    measured = measure_step(step, *ex.args, exclude=params(ex))
    _, grads = grads_of(step, params(ex), *ex.args)

    applied, solved = be.plans[0], fresh.plans[0]
    assert 0 < applied.saved_bytes < applied.max_bytes  # a real choice, not an end
    assert measured.saved_bytes == measured_fresh.saved_bytes == applied.saved_bytes
    assert (
        applied.saved_bytes
        == solved.saved_bytes
        == budget.Plan.from_json(path.read_text()).saved_bytes
    )
    assert (applied.saved, applied.recomputed) == (solved.saved, solved.recomputed)
    assert measured.backward_flops == measured_fresh.backward_flops
    assert "apply" in applied.timings and "solve" not in applied.timings
    for g, r in zip(grads, grads_fresh, strict=True):
        torch.testing.assert_close(g, r)


def test_a_plan_for_other_shapes_is_refused(tmp_path, capsys):
    path = tmp_path / "plan.json"
    ex = get_builtin("mlp", **MLP)
    budget.save_plans(budget.plans(ex.step, *ex.args, memory_budget=0.5, compiler="eager"), path)
    made_for = budget.Plan.from_json(path.read_text()).graph_hash
    ex = get_builtin("mlp", **{**MLP, "batch": 4})
    step, be = compile_step(ex, plan=path)
    with pytest.raises(Exception) as e:
        step(*ex.args)
    err = root_error(e.value)
    assert isinstance(err, budget.PlanMismatchError)
    msg = str(err)
    assert f"plans for graph {made_for}" in msg and "budget.plans" in msg and "Not applying" in msg
    assert not be.plans
    # the same check in a preview and on the command line (exit 2, one line, both hashes)
    with pytest.raises(budget.PlanMismatchError, match=made_for):
        budget.plans(ex.step, *ex.args, plan=path, compiler="eager")
    argv = ["solve", *MLP_FLAGS, "--batch=4", "--compiler", "eager", "--plan", str(path)]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("budget: error: plan") and err.count("\n") == 1
    assert made_for in err and "Traceback" not in err
    assert "budget.plans" in err and "budget solve TARGET --json PLAN.json" in err  # both ways


def test_a_plan_for_another_compiler_says_so(tmp_path):
    ex = get_builtin("mlp", **MLP)
    inductor = budget.plans(ex.step, *ex.args, memory_budget=0.5)
    with pytest.raises(budget.PlanMismatchError, match="made for compiler=inductor .* eager"):
        budget.plans(ex.step, *ex.args, plan=inductor, compiler="eager")


def test_a_plan_that_does_not_fit_its_graph_is_refused():
    ex = get_builtin("mlp", **MLP)
    (plan,) = budget.plans(ex.step, *ex.args, memory_budget=0.5, compiler="eager")
    renamed = plan.to_dict()
    first = next(d for d in renamed["decisions"] if d["decision"] == "save")
    first["name"] = "no_such_node"
    cases = [
        (budget.Plan.from_dict(renamed), "no_such_node are not in the graph"),
        (replace(plan, saved_bytes=plan.saved_bytes - 1), "would save"),
        (replace(plan, target_bytes=plan.saved_bytes - 1), "over its own target"),
    ]
    for bad, needle in cases:
        with pytest.raises(budget.PlanMismatchError, match=needle) as e:
            budget.plans(ex.step, *ex.args, plan=bad, compiler="eager")
        assert str(e.value).count(plan.graph_hash) == 2  # both hashes (equal here) are named
    # and the untouched plan applies to the very graph it was made for
    (again,) = budget.plans(ex.step, *ex.args, plan=[plan], compiler="eager")
    assert (again.saved, again.saved_bytes) == (plan.saved, plan.saved_bytes)


def test_plan_files_with_several_graphs(tmp_path):
    torch.manual_seed(0)
    w1, w2 = (torch.randn(128, 128, requires_grad=True) for _ in range(2))

    def step(x):
        h = torch.mm(x, w1).cos()
        torch._dynamo.graph_break()
        return torch.mm(h, w2).cos().sum()

    x = torch.randn(128, 128)
    plans = budget.plans(step, x, memory_budget=0.0, compiler="eager")
    path = tmp_path / "plans.json"
    budget.save_plans(plans, path)
    data = json.loads(path.read_text())
    assert data["version"] == PLAN_FORMAT_VERSION and len(data["plans"]) == 2
    assert load_plans(path) == plans
    with pytest.raises(ValueError, match="holds 2 plans .* budget.load_plans"):
        budget.Plan.from_json(path.read_text())
    _, ref = grads_of(step, [w1, w2], x)
    torch._dynamo.reset()
    be = budget.backend(plan=path, compiler="eager")
    _, got = grads_of(torch.compile(step, backend=be), [w1, w2], x)
    assert [p.graph_hash for p in be.plans] == [p.graph_hash for p in plans]
    assert [p.saved for p in be.plans] == [p.saved for p in plans]
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r)


_HASH_SCRIPT = """
import json, budget
from budget.models import get_builtin
ex = get_builtin("mlp", batch=8, d_in=16, d=32, layers=2)
print(json.dumps([budget.plans(ex.step, *ex.args, compiler=c)[0].graph_hash
                  for c in ("eager", "inductor")]))
"""


def test_graph_hash_is_stable_across_processes_and_tracks_the_graph():
    def graph_hash(compiler="eager", **sizes):
        ex = get_builtin("mlp", **{**MLP, **sizes})
        return budget.plans(ex.step, *ex.args, compiler=compiler)[0].graph_hash

    # the other process runs while this one traces
    other = subprocess.Popen(
        [sys.executable, "-c", _HASH_SCRIPT], stdout=subprocess.PIPE, text=True
    )
    here = [graph_hash("eager"), graph_hash("inductor")]
    out, _ = other.communicate(timeout=300)
    assert other.returncode == 0 and json.loads(out) == here
    assert here[0] != here[1]  # Inductor's joint-graph passes change the graph
    changed = [graph_hash(batch=4), graph_hash(layers=3), graph_hash(d=16)]  # shapes, model
    assert len({*here, *changed}) == 5


def test_graph_hash_tracks_dtypes():
    ex = get_builtin("mlp", **MLP)
    (single,) = budget.plans(ex.step, *ex.args, compiler="eager")
    ex.model.double()
    (double,) = budget.plans(ex.step, ex.args[0].double(), ex.args[1], compiler="eager")
    assert single.graph_hash != double.graph_hash
    assert double.saved_bytes == 2 * single.saved_bytes


def test_plan_sources_and_their_errors(tmp_path):
    ex = get_builtin("mlp", **MLP)
    (plan,) = budget.plans(ex.step, *ex.args, memory_budget=0.5)
    assert loads_plans(dumps_plans(plan)) == [plan] == load_plans(plan) == load_plans([plan])
    legacy = json.dumps([plan.to_dict()] * 2)  # a bare list of plans reads too
    assert loads_plans(legacy) == [plan, plan]
    with pytest.raises(
        ValueError, match=r"\(memory_budget, peak_memory_budget\) or plan, not both"
    ):
        budget.backend(0.5, plan=plan)
    with pytest.raises(ValueError, match="does not exist"):
        budget.backend(plan=tmp_path / "missing.json")
    with pytest.raises(ValueError, match="a budget.Plan or a non-empty list"):
        budget.backend(plan=[1, 2])
    bad = [
        ("{", "invalid JSON"),
        ("[]", "holds no plans"),
        (
            f'{{"version": {PLAN_FORMAT_VERSION + 1}, "plans": [{{}}]}}',
            f"version {PLAN_FORMAT_VERSION + 1} is not supported",
        ),
        ('{"plans": []}', "version None is not supported"),
        ('[{"version": 1, "what": 1}]', "not a budget plan"),
    ]
    for text, needle in bad:
        with pytest.raises(ValueError, match=needle):
            loads_plans(text)


@pytest.mark.slow
def test_inductor_training_applies_the_plan_budget_solve_wrote(tmp_path, capsys):
    """The quickstart of plan files: `budget solve --json` (default compiler, Inductor),
    then torch.compile with budget.backend(plan=FILE) (default compiler, Inductor)."""
    path = tmp_path / "plan.json"
    assert main(["solve", *MLP_FLAGS, "--budget", "0.5", "--json", str(path)]) == 0
    capsys.readouterr()
    saved = budget.Plan.from_json(path.read_text())
    ex = get_builtin("mlp", **MLP)
    be = budget.backend(plan=str(path))
    step = torch.compile(ex.step, backend=be)
    measured = measure_step(step, *ex.args, exclude=params(ex))
    assert be.plans[0].graph_hash == saved.graph_hash
    assert (be.plans[0].saved, be.plans[0].saved_bytes) == (saved.saved, saved.saved_bytes)
    assert measured.saved_bytes == saved.saved_bytes


def test_a_plan_is_made_once():
    """Plans are frozen: a later stage makes a new one (dataclasses.replace), so a plan
    a user holds, or one kept in a sweep or a cache, never changes under them."""
    import dataclasses

    from helpers.plans import make_plan

    plan = make_plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.peak_bytes = 1  # type: ignore[misc]
    told = dataclasses.replace(plan, compiled_peak_bytes=123)
    assert told.compiled_peak_bytes == 123 and plan.compiled_peak_bytes is None


def test_the_docs_name_the_plan_file_version_this_budget_writes():
    """USAGE and DESIGN show a plan file's versioned list and the versions read: both
    are the code's, so a user who writes one by hand writes one budget reads."""
    root = Path(__file__).parents[2]
    newest = f'{{"version": {PLAN_FORMAT_VERSION}, "plans": [...]}}'
    for doc, versions in (("docs/USAGE.md", "versions 1-"), ("docs/DESIGN.md", "versions 1 to ")):
        text = " ".join((root / doc).read_text().split())
        assert newest in text, doc
        assert f"{versions}{max(READABLE_VERSIONS)}" in text, doc
