"""Drive `proctor eval` as a user would: a subprocess, its output, its run directory."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http
from tests.support.waiting import wait_until


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def cli_env() -> dict[str, str]:
    """The user's environment minus anything that would point the CLI elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env["NO_COLOR"] = "1"
    return env


def run_eval(
    *args: str, cwd: Path, timeout: float = 90, env: dict[str, str] | None = None
) -> Result:
    proc = subprocess.run(
        [*PROCTOR, "eval", *args],
        cwd=cwd,
        env={**cli_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def eval_process(*args: str, cwd: Path) -> ManagedProcess:
    """A running `proctor eval` (own process group) whose output goes to cwd/eval.out."""
    proc = ManagedProcess([*PROCTOR, "eval", *args], cwd / "eval.out", env=cli_env(), cwd=cwd)
    return proc.start()


def start_demo_model(log_dir: Path, *args: str) -> tuple[str, ManagedProcess]:
    port = free_port()
    cmd = [*PROCTOR, "demo-model", "--host", "127.0.0.1", "--port", str(port), *args]
    proc = ManagedProcess(cmd, log_dir / f"demo-model-{port}.log").start()
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_http(f"{url}/models", proc=proc.proc)
    except Exception:
        proc.stop()
        raise RuntimeError(proc.output()) from None
    return url, proc


def read_traces(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def count_complete_lines(path: Path) -> int:
    if not path.exists():
        return 0
    return path.read_bytes().count(b"\n")


def wait_for_lines(
    path: Path, n: int, proc: ManagedProcess | None = None, *, timeout: float = 60.0
) -> None:
    """Wait until `path` holds `n` complete lines; fail at once if `proc` has exited."""

    def reached() -> bool:
        if proc is not None:
            assert proc.proc is not None and proc.proc.poll() is None, proc.output()
        return count_complete_lines(path) >= n

    wait_until(reached, timeout=timeout, what=f"{path} reaching {n} lines")


def read_config(run_dir: Path) -> dict[str, Any]:
    return tomllib.loads((run_dir / "config.toml").read_text(encoding="utf-8"))


def pairs(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(r["example_id"], r["rollout_number"]) for r in records]
