#!/usr/bin/env bash
# The wheels bench/gpu_check.py needs on a lent GPU machine (Python 3.12, no package
# index, torch 2.11 installed): budget's solver dependencies, downloaded here into .whl/
# (ignored by git; carry it with the run). On the machine:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=$PWD/bench/torch211:/tmp/site:$PWD python3 bench/gpu_check.py --out $OUT
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  pulp==3.3.2 ortools==9.15.6755 protobuf==6.33.1 immutabledict==4.2.1
ls -la .whl
