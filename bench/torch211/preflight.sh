#!/usr/bin/env bash
# Before a GPU run, on this CPU: bench/gpu_check.py's tiny mode, the buffer-reuse tests and
# the fake-kernel tests under torch 2.11, the lent machines' torch, with the shim beside
# this file, so a change that breaks on 2.11 shows here, not in minutes of a lent GPU.
# PyPI's torch 2.11 is a CUDA build that runs on a CPU; the venv (about 5 GB with its CUDA
# libraries, once) is $VENV, default /tmp/v211. About 6 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${VENV:-/tmp/v211}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch==2.11.0 "pulp>=3.3,<4" "ortools>=9.10" numpy tqdm pytest
fi
"$venv/bin/python" -c 'import torch; assert torch.__version__.startswith("2.11"), torch.__version__'
export PYTHONPATH=$PWD/bench/torch211:$PWD
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/compile/test_reuse.py tests/eager/test_fake.py tests/eager/test_backward_paths.py
"$venv/bin/python" bench/gpu_check.py --device cpu --tiny --out "${OUT:-$(mktemp -d)}"
