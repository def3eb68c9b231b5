"""Hosted verifiers environments: sandbox start-up, cold and warm.

    .venv-verifiers/bin/python bench/verifiers_hosted.py [--envs glossary reverse-text]
        [--warm 2] [-n 2] [-r 1]

Starts its own `proctor server` (SQLite, temp data dir, confined local sandboxes, offline: the
harness index scripts/test builds and an empty package index) and demo model on loopback;
pushes each vendored verifiers environment (tests/envs/verifiers_envs) with `proctor envs
push`, then runs it hosted one run at a time: once cold (its package directory is built for
its content hash, outside the sandbox) and `--warm` times warm (that directory reused).
Reported per run, from the server's own timestamps: create → RUNNING (launcher pick-up and
the install step), create → first sample stored (start-up: the install, Python and verifiers
imports, the harness program prepared with uv, the first rollout), and create → closed; and
the install step's own time from the sandbox log. Written to bench/results/verifiers_hosted.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.measure import push, run_hosted  # noqa: E402
from tests.e2e.verifiers_hub import launcher_environment, project, share  # noqa: E402
from tests.envs.verifiers_fixtures import SUBPROCESS_RUNTIME, write_datasets  # noqa: E402
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http  # noqa: E402

KEY = "pk-bench-vf-hosted-0123456789abcdef"
RESULTS = ROOT / "bench" / "results" / "verifiers_hosted.md"
_INSTALLED = re.compile(r"proctor: installed \S+ in ([0-9.]+)s")
_LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"
_ATTACHED = re.compile(r"^(\S+ \S+) INFO proctor\.runs\._run: run \S+ attached", re.MULTILINE)


def hosted_run(
    client: httpx.Client, data_dir: Path, ref: str, eval_config: dict[str, Any]
) -> dict[str, float]:
    """One hosted run to its end; its intervals in seconds."""
    end = run_hosted(client, data_dir, ref, eval_config, timeout=900)
    assert end.first_sample is not None
    installed = _INSTALLED.search(end.log)
    attached = _ATTACHED.search(end.log)
    # The sandbox logs in UTC on this machine: when `proctor eval` had imported everything
    # (verifiers included), built the environment and attached.
    ready = (
        datetime.strptime(attached.group(1), _LOG_TIME).replace(tzinfo=UTC).timestamp()
        if attached
        else end.running
    )
    return {
        "running": end.running - end.created,
        "attached": ready - end.created,
        "first_sample": end.first_sample - end.created,
        "closed": end.closed - end.created,
        "install": float(installed.group(1)) if installed else 0.0,
    }


def report(rows: list[tuple[str, str, dict[str, float]]], args: argparse.Namespace) -> str:
    lines = [
        "# Hosted verifiers environments: sandbox start-up, cold and warm",
        "",
        f"Command: `.venv-verifiers/bin/python bench/verifiers_hosted.py --envs "
        f"{' '.join(args.envs)} --warm {args.warm} -n {args.n} -r {args.r}` "
        f"({platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
        f"load {os.getloadavg()[0]:.1f}, Python {platform.python_version()}; confined local "
        "sandboxes, SQLite, offline).",
        "",
        "Cold: the first run of a pushed version, whose package directory is built (outside "
        "the sandbox, once per content hash). Warm: later runs, which reuse it. Each sandbox "
        "still prepares verifiers' harness program with uv from the harness index: its uv "
        "cache lives in the sandbox's own home. Attached: `proctor eval` has started, "
        "imported verifiers, composed the environment and attached to the evaluation; from "
        "there to the first sample is verifiers' harness program prepared with uv, its tool "
        "servers started, and the first rollout.",
        "",
        "| environment | run | create → RUNNING s | install step s | create → attached s "
        "| create → first sample s | create → closed s |",
        "|---|---|---|---|---|---|---|",
    ]
    for env, run, r in rows:
        lines.append(
            f"| {env} | {run} | {r['running']:.1f} | {r['install']:.1f} | "
            f"{r['attached']:.1f} | {r['first_sample']:.1f} | {r['closed']:.1f} |"
        )
    lines.append("")
    for env in args.envs:
        cold = [r["first_sample"] for e, run, r in rows if e == env and run == "cold"]
        warm = [r["first_sample"] for e, run, r in rows if e == env and run != "cold"]
        installs = [r["install"] for e, run, r in rows if e == env and run == "cold"]
        if cold and warm:
            lines.append(
                f"- {env}: start-up (create → first sample) cold {cold[0]:.1f} s, warm "
                f"{statistics.median(warm):.1f} s (median of {len(warm)}). The install step, "
                f"the only work a warm start skips, took {installs[0]:.1f} s; the rest of the "
                "difference is the machine's load."
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["glossary", "reverse-text"])
    parser.add_argument("--warm", type=int, default=2)
    parser.add_argument("-n", type=int, default=2)
    parser.add_argument("-r", type=int, default=1)
    args = parser.parse_args()
    rows: list[tuple[str, str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="proctor-bench-vf-hosted-") as tmp:
        data_dir, shared = Path(tmp) / "data", Path(tmp) / "shared"
        for folder in (data_dir, shared, Path(tmp) / "empty-index", Path(tmp) / "projects"):
            folder.mkdir()
        datasets = write_datasets(shared)
        share(shared)
        model_port, port = free_port(), free_port()
        model = ManagedProcess(
            [*PROCTOR, "demo-model", "--host", "127.0.0.1", "--port", str(model_port)],
            Path(tmp) / "demo-model.log",
        ).start()
        env = {
            "PROCTOR_BOOTSTRAP_KEY": KEY,
            **launcher_environment(shared, Path(tmp) / "empty-index"),
        }
        serve = ["server", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir)]
        server = ManagedProcess(
            [*PROCTOR, *serve],
            Path(tmp) / "server.log",
            env=env,
        ).start()
        try:
            wait_http(f"http://127.0.0.1:{model_port}/v1/models", proc=model.proc)
            wait_http(f"http://127.0.0.1:{port}/healthz", proc=server.proc, timeout=60)
            url = f"http://127.0.0.1:{port}"
            client = httpx.Client(
                base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {KEY}"}, timeout=60
            )
            owner = client.get("/user/whoami").json()["data"]["name"]
            for name in args.envs:
                push(url, KEY, project(Path(tmp) / "projects", name.replace("-", "_")))
                config = {
                    "num_examples": args.n,
                    "rollouts_per_example": args.r,
                    "api_base_url": f"http://127.0.0.1:{model_port}/v1",
                    "env_args": {**SUBPROCESS_RUNTIME, **datasets.get(name, {})},
                }
                for i in range(1 + args.warm):
                    figures = hosted_run(client, data_dir, f"{owner}/{name}", config)
                    rows.append((name, "cold" if i == 0 else f"warm {i}", figures))
                    print(name, rows[-1][1], json.dumps(figures), flush=True)
        finally:
            server.stop()
            model.stop()
    text = report(rows, args)
    RESULTS.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
