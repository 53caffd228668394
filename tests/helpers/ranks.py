"""Run a script as two gloo ranks on this CPU and read what each printed last (JSON)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(script: str, arg: str, world: int = 2, timeout: float = 300) -> list[dict]:
    """``python -c script arg`` once per rank (RANK, WORLD_SIZE, MASTER_* set), all at
    once; each must exit 0 and print a JSON object as its last line."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env["WORLD_SIZE"] = str(world)
    # Output goes to files, not pipes: reading one rank's pipes to the end first would
    # leave another rank blocked on a full pipe, waiting, while the first waits for it.
    with tempfile.TemporaryDirectory() as tmp:
        procs, files = [], []
        for r in range(world):
            out = open(os.path.join(tmp, f"out{r}"), "w+")  # noqa: SIM115 (closed below)
            err = open(os.path.join(tmp, f"err{r}"), "w+")  # noqa: SIM115
            files.append((out, err))
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", script, arg],
                    env={**env, "RANK": str(r)},
                    stdout=out,
                    stderr=err,
                    text=True,
                )
            )
        try:
            for proc in procs:  # every rank, then check
                proc.wait(timeout=timeout)
        finally:
            for proc in procs:
                proc.kill()
        outs = []
        for proc, (out, err) in zip(procs, files, strict=True):
            out.seek(0)
            err.seek(0)
            text, errors = out.read(), err.read()
            out.close()
            err.close()
            assert proc.returncode == 0, errors[-3000:]
            outs.append(json.loads(text.strip().splitlines()[-1]))
    return outs
