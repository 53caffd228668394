"""Run a script as two gloo ranks on this CPU and read what each printed last (JSON)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(script: str, arg: str, world: int = 2, timeout: float = 300) -> list[dict]:
    """``python -c script arg`` once per rank (RANK, WORLD_SIZE, MASTER_* set), all at
    once; each must exit 0 and print a JSON object as its last line."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env["WORLD_SIZE"] = str(world)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, arg],
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    done = [proc.communicate(timeout=timeout) for proc in procs]  # every rank, then check
    outs = []
    for proc, (out, err) in zip(procs, done, strict=True):
        assert proc.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs
