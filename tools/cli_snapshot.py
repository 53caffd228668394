"""Snapshot what users see from the CLI, to compare two versions of budget.

    python tools/cli_snapshot.py write DIR      # run the cases, store their outputs in DIR
    python tools/cli_snapshot.py compare DIR    # run them again, diff against DIR

Covers `budget solve` (table and plan JSON) and `budget sweep` (table, JSON) on every
built-in model. Timings are removed (they differ run to run): the "timings" and
"wall time" lines of tables, the "timings" field of JSON, and anything after "seconds".
Refactors that promise unchanged behaviour run `compare` against a `write` made before.
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CASES: dict[str, list[str]] = {}
for model in ("gpt", "resnet", "mlp"):
    for b in ("1", "0.5", "0.2", "0"):
        CASES[f"solve-{model}-{b}"] = ["solve", f"builtin:{model}", "--budget", b]
    CASES[f"sweep-{model}"] = ["sweep", f"builtin:{model}", "--quiet"]
    CASES[f"sweepjson-{model}"] = ["sweep", f"builtin:{model}", "--quiet", "--format", "json"]
CASES["solve-gpt-eager-0.3"] = ["solve", "--compiler", "eager", "--budget", "0.3"]
CASES["solve-mlp-size"] = ["solve", "builtin:mlp", "--budget", "200KiB"]
CASES["solve-gpt-toosmall"] = ["solve", "--budget", "1KiB"]
# peak budgets (the grid search) on both front ends, one met and one refused
for peak in ("40MiB", "20MiB"):
    CASES[f"solve-gpt-peak-{peak}"] = ["solve", "--compiler", "eager", "--peak", peak]
    CASES[f"solve-gpt-eagerpath-peak-{peak}"] = ["solve", "--eager", "--peak", peak]
CASES["solve-gpt-eagerpath-0.3"] = ["solve", "--eager", "--budget", "0.3"]
CASES["solve-resnet-peak"] = ["solve", "builtin:resnet", "--compiler", "eager", "--peak", "30MiB"]

_TIMING_LINE = re.compile(r"^\s*(timings|wall time)\b")
_TMP = re.compile(r"/tmp/tmp\w+")  # the per-run folder of --json FILE


def _strip_json(data: object) -> object:
    if isinstance(data, dict):
        return {k: _strip_json(v) for k, v in data.items() if k not in ("timings", "seconds")}
    if isinstance(data, list):
        return [_strip_json(x) for x in data]
    return data


def _normalise(text: str) -> str:
    text = _TMP.sub("<tmp>", text)
    try:
        return json.dumps(_strip_json(json.loads(text)), indent=1, sort_keys=True)
    except json.JSONDecodeError:
        pass
    lines, skipping = [], False
    for line in text.splitlines():
        if _TIMING_LINE.match(line):
            skipping = True  # wrapped continuation lines follow, indented
            continue
        if skipping and line.startswith(" " * 10) and line.strip():
            continue
        skipping = False
        lines.append(line)
    return "\n".join(lines)


def run_case(args: list[str]) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        extra = ["--json", f"{tmp}/plan.json"] if args[0] == "solve" else []
        code = "import sys; from budget.cli.main import main; sys.exit(main(sys.argv[1:]))"
        proc = subprocess.run(
            [sys.executable, "-c", code, *args, *extra], capture_output=True, text=True
        )
        out = {"stdout": _normalise(proc.stdout), "stderr": proc.stderr.strip().splitlines()[-1:]}
        out = {
            "exit": str(proc.returncode),
            "stdout": out["stdout"],
            "stderr": "\n".join(out["stderr"]),
        }
        plan = Path(tmp, "plan.json")
        if plan.exists():
            out["plan"] = _normalise(plan.read_text())
    return out


def main() -> int:
    mode, folder = sys.argv[1], Path(sys.argv[2])
    failures = 0
    for name, args in CASES.items():
        got = run_case(args)
        path = folder / f"{name}.json"
        if mode == "write":
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(got, indent=1))
            print(f"wrote {name} (exit {got['exit']})")
            continue
        want = {k: _TMP.sub("<tmp>", v) for k, v in json.loads(path.read_text()).items()}
        if got == want:
            print(f"same  {name}")
            continue
        failures += 1
        print(f"DIFF  {name}")
        for key in sorted(set(want) | set(got)):
            a, b = want.get(key, "").splitlines(), got.get(key, "").splitlines()
            sys.stdout.writelines(
                line + "\n"
                for line in difflib.unified_diff(
                    a, b, f"before/{key}", f"after/{key}", lineterm="", n=1
                )
            )
    if mode == "compare":
        print(f"{len(CASES) - failures} same, {failures} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
