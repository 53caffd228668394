"""Write bench/RESULTS.md from the benchmarks' own JSON output, kept in bench/results/.

    python bench/results.py                                   # render bench/RESULTS.md
    python bench/results.py --add /tmp/gpu/gpu_check.json     # keep a run, then render
    python bench/results.py --add OUT/gpu_check.json --commit 4921bcd   # a lent machine's run
    python bench/pareto.py --model all --markdown > /tmp/pareto.md
    python bench/results.py --add-markdown pareto /tmp/pareto.md     # a CPU bench's tables
    python bench/results.py --add-markdown peak /tmp/m.md --part mobilenetv3  # one of its parts

A run is kept as ``bench/results/<bench>-<device>.json`` (a newer run of the same bench on
the same device replaces it), and every kept run is rendered under a header naming its
commit, date, device and torch: the figures are the bench's, never typed by hand. A CPU
bench's markdown output (``--markdown``) is kept with a header taken here: the checkout's
commit (``+dirty`` with uncommitted changes), the date, this CPU and its threads, torch.
``--commit`` names the commit a run measured where its checkout could not (a copy of the
working tree on a lent GPU machine reports the base it was copied from).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_measure import markdown  # noqa: E402

HERE = Path(__file__).resolve().parent
KEPT = HERE / "results"
OUT = HERE / "RESULTS.md"

HEADER = """# Results

Written by `python bench/results.py` from the runs kept in `bench/results/` (each bench's
own JSON output); do not edit by hand. Each section names the commit, date, device and
torch of its run. How each bench measures, and what it compares, is in its docstring.
"""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def add(path: Path, commit: str | None, part: str | None = None) -> Path:
    """Keep a GPU check's report; ``part`` (a rerun of some blocks, say) keeps it beside
    the device's full run instead of replacing it."""
    data = json.loads(path.read_text())
    if "meta" not in data or "checks" not in data:
        raise SystemExit(f"{path}: not a bench/gpu_check.py report (no 'meta' and 'checks')")
    if commit:
        data["meta"]["commit"] = commit
    if part:
        data["meta"]["part"] = part
    KEPT.mkdir(exist_ok=True)
    name = f"gpu_check-{_slug(data['meta'].get('device_name', 'unknown'))}"
    suffix = f"-{_slug(part)}" if part else ""
    target = KEPT / f"{name}-{data['meta'].get('mode', 'full')}{suffix}.json"
    target.write_text(json.dumps(data, indent=1) + "\n")
    return target


def _commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=HERE)
        return done.stdout.strip()

    sha = git("rev-parse", "--short", "HEAD") or "unknown"
    return sha + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def add_markdown(bench: str, path: Path, commit: str | None, part: str | None = None) -> Path:
    """Keep a CPU bench's markdown output under a header of this checkout and host;
    ``part`` (a model, say) keeps it beside the bench's other parts, each its own run."""
    import torch

    from budget.estimators.devices import cpu_model

    if not (HERE / f"{bench}.py").is_file():
        raise SystemExit(f"--add-markdown: no bench/{bench}.py")
    text = path.read_text().strip()
    if "|" not in text:
        raise SystemExit(f"{path}: no markdown table in it (run the bench with --markdown)")
    meta = {
        "bench": bench,
        # the vector unit torch uses: oneDNN picks its kernels (and their copies) by it
        "device_name": f"{cpu_model()}, {torch.backends.cpu.get_cpu_capability()}",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "commit": commit or _commit(),
        "date": datetime.date.today().isoformat(),
    }
    if part:
        meta["part"] = part
    KEPT.mkdir(exist_ok=True)
    name = bench if not part else f"{bench}-{_slug(part)}"
    target = KEPT / f"{name}-{_slug(meta['device_name'])}.json"
    target.write_text(json.dumps({"meta": meta, "markdown": text}, indent=1) + "\n")
    return target


def render() -> str:
    parts = [HEADER]
    for path in sorted(KEPT.glob("*.json")):
        data = json.loads(path.read_text())
        if "markdown" not in data:
            continue
        m = data["meta"]
        part = f" ({m['part']})" if m.get("part") else ""
        parts.append(f"## `bench/{m['bench']}.py`{part}, from `{path.name}`\n")
        parts.append(
            f"commit {m['commit']}, {m['date']}, {m['device_name']} ({m['threads']} threads), "
            f"torch {m['torch']}\n"
        )
        parts.append(re.sub(r"^(#+) ", r"#\1 ", data["markdown"], flags=re.M) + "\n")  # nested
    for path in sorted(KEPT.glob("gpu_check-*.json")):
        data = json.loads(path.read_text())
        compat = data["meta"].get("compat")
        part = f" ({data['meta']['part']})" if data["meta"].get("part") else ""
        parts.append(f"## GPU check (`bench/gpu_check.py`){part}, from `{path.name}`\n")
        if compat:
            parts.append(f"Note: {compat}.\n")
        parts.append(markdown(data))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--add", type=Path, help="a report to keep (gpu_check.json)")
    parser.add_argument(
        "--add-markdown",
        nargs=2,
        metavar=("BENCH", "FILE"),
        help="a CPU bench's --markdown output to keep (BENCH: its name, e.g. pareto)",
    )
    parser.add_argument("--commit", help="the commit the added run measured")
    parser.add_argument(
        "--part",
        help="keep the run as one part of the bench (a model; a GPU check's rerun of some blocks)",
    )
    args = parser.parse_args(argv)
    if args.add:
        print(f"kept {add(args.add, args.commit, args.part)}")
    if args.add_markdown:
        bench, path = args.add_markdown
        print(f"kept {add_markdown(bench, Path(path), args.commit, args.part)}")
    OUT.write_text(render())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
