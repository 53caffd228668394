"""Write bench/RESULTS.md from the benchmarks' own JSON output, kept in bench/results/.

    python bench/results.py                                   # render bench/RESULTS.md
    python bench/results.py --add /tmp/gpu/gpu_check.json     # keep a run, then render
    python bench/results.py --add OUT/gpu_check.json --commit 4921bcd   # a lent machine's run

A run is kept as ``bench/results/<bench>-<device>.json`` (a newer run of the same bench on
the same device replaces it), and every kept run is rendered under a header naming its
commit, date, device and torch: the figures are the bench's, never typed by hand.
``--commit`` names the commit a run measured where its checkout could not (a copy of the
working tree on a lent GPU machine reports the base it was copied from).
"""

from __future__ import annotations

import argparse
import json
import re
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


def add(path: Path, commit: str | None) -> Path:
    data = json.loads(path.read_text())
    if "meta" not in data or "checks" not in data:
        raise SystemExit(f"{path}: not a bench/gpu_check.py report (no 'meta' and 'checks')")
    if commit:
        data["meta"]["commit"] = commit
    KEPT.mkdir(exist_ok=True)
    name = f"gpu_check-{_slug(data['meta'].get('device_name', 'unknown'))}"
    target = KEPT / f"{name}-{data['meta'].get('mode', 'full')}.json"
    target.write_text(json.dumps(data, indent=1) + "\n")
    return target


def render() -> str:
    parts = [HEADER]
    for path in sorted(KEPT.glob("gpu_check-*.json")):
        data = json.loads(path.read_text())
        compat = data["meta"].get("compat")
        parts.append(f"## GPU check (`bench/gpu_check.py`), from `{path.name}`\n")
        if compat:
            parts.append(f"Note: {compat}.\n")
        parts.append(markdown(data))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--add", type=Path, help="a report to keep (gpu_check.json)")
    parser.add_argument("--commit", help="the commit the added run measured")
    args = parser.parse_args(argv)
    if args.add:
        print(f"kept {add(args.add, args.commit)}")
    OUT.write_text(render())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
