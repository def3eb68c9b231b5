"""Hosted launcher: 20 hosted evaluations at once on the local backend.

    .venv/bin/python bench/hosted.py [--count 20] [-n 10] [-r 2]

Starts its own `proctor server` (SQLite, temp data dir, in-server launcher with its default
poll interval, `--count` sandboxes allowed at once) and demo model on loopback, then runs two
batches of `--count` hosted evaluations, all created at once:

- **complete**: alphabet-sort, `-n` x `-r` against the demo model; every one must end
  COMPLETED with all its samples;
- **failing**: a pushed package whose dependency cannot be installed, so each sandbox's pip
  fails and the launcher alone sets the terminal status (FAILED);
- **pushed**: `--pushed-runs` versions of the example package under tests/e2e/hub_env are
  pushed with `proctor envs push`; each is run hosted twice, one at a time: cold (its venv
  is built: venv + pip install of the wheel) and warm (the venv cached by content hash).
  Reported: create → first sample stored, next to the same for the installed alphabet-sort.

Reported per batch, from the server's own timestamps: create → RUNNING (launcher pick-up
and sandbox start), sandbox exit (the wrapper's exit-code file) → terminal status (failing
batch) and → the launcher closing the sandbox (both batches), and the sandbox's own run time
for scale. Figures are printed and written to bench/results/hosted.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from proctor.contract import TERMINAL_STATUSES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.measure import percentile, push, run_hosted, stored_time  # noqa: E402
from tests.e2e.hosted_helpers import hub_project  # noqa: E402
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http  # noqa: E402

KEY = "pk-bench-hosted-0123456789abcdef"
RESULTS = ROOT / "bench" / "results" / "hosted.md"
TERMINAL = TERMINAL_STATUSES
NO_ISOLATION = ("--no-build-isolation",)


def run_batch(
    client: httpx.Client, data_dir: Path, *, env: str, count: int, n: int, r: int, model_url: str
) -> dict[str, Any]:
    body = {
        "environment_ids": [env],
        "inference_model": "demo",
        "eval_config": {"num_examples": n, "rollouts_per_example": r, "api_base_url": model_url},
    }
    t0 = time.monotonic()
    ids = []
    for _ in range(count):
        answer = client.post("/hosted-evaluations", json=body)
        answer.raise_for_status()
        ids.append(answer.json()["evaluation_id"])
    db = data_dir / "proctor.db"
    deadline = time.monotonic() + 600
    rows: list[sqlite3.Row] = []
    while time.monotonic() < deadline:
        with sqlite3.connect(db, timeout=30) as conn:
            conn.row_factory = sqlite3.Row
            marks = ",".join("?" * len(ids))
            rows = conn.execute(
                "SELECT e.id, e.status, e.total_samples, e.created_at, e.started_at, "
                "e.completed_at, h.ended_at FROM evaluations e JOIN hosted_evaluations h "
                f"ON h.evaluation_id = e.id WHERE e.id IN ({marks})",
                ids,
            ).fetchall()
        if len(rows) == count and all(row["ended_at"] is not None for row in rows):
            break
        time.sleep(0.2)
    wall = time.monotonic() - t0
    pickup, exit_to_status, exit_to_closed, runtime = [], [], [], []
    statuses: dict[str, int] = {}
    samples_ok = 0
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
        samples_ok += row["total_samples"] == n * r
        created, started = stored_time(row["created_at"]), stored_time(row["started_at"])
        ended, completed = stored_time(row["ended_at"]), stored_time(row["completed_at"])
        exited = (data_dir / "sandboxes" / row["id"] / "exit_code").stat().st_mtime
        assert created is not None and started is not None and ended is not None
        pickup.append(started - created)
        runtime.append(exited - started)
        exit_to_closed.append(ended - exited)
        if row["status"] == "FAILED" and completed is not None:
            exit_to_status.append(completed - exited)
    return {
        "env": env,
        "count": count,
        "statuses": statuses,
        "samples_ok": samples_ok,
        "wall": wall,
        "pickup": pickup,
        "runtime": runtime,
        "exit_to_closed": exit_to_closed,
        "exit_to_status": exit_to_status,
    }


def first_sample_latency(
    client: httpx.Client, data_dir: Path, env: str, n: int, r: int, model_url: str
) -> float:
    """Seconds from creating one hosted evaluation to its first stored sample."""
    config = {"num_examples": n, "rollouts_per_example": r, "api_base_url": model_url}
    end = run_hosted(client, data_dir, env, config, timeout=300)
    if end.first_sample is None:
        raise RuntimeError(f"hosted run of {env} stored no sample")
    return end.first_sample - end.created


def run_pushed(
    client: httpx.Client, data_dir: Path, url: str, *, runs: int, n: int, r: int, model_url: str
) -> dict[str, list[float]]:
    installed, cold, warm = [], [], []
    n = min(n, 8)  # tiny-echo has 8 tasks
    for i in range(runs):
        push(url, KEY, hub_project(data_dir / "projects", version=f"0.1.{i}"), *NO_ISOLATION)
        installed.append(first_sample_latency(client, data_dir, "alphabet-sort", n, r, model_url))
        cold.append(first_sample_latency(client, data_dir, "admin/tiny-echo", n, r, model_url))
        warm.append(first_sample_latency(client, data_dir, "admin/tiny-echo", n, r, model_url))
    return {"installed": installed, "cold": cold, "warm": warm}


def _row(name: str, values: list[float]) -> str:
    if not values:
        return f"| {name} | - | - | - |"
    ms = [v * 1000 for v in values]
    return f"| {name} | {percentile(ms, 0.5):.0f} | {percentile(ms, 0.99):.0f} | {max(ms):.0f} |"


def report(
    batches: list[dict[str, Any]],
    pushed: dict[str, list[float]],
    args: argparse.Namespace,
    poll: float,
) -> str:
    lines = [
        "# Hosted launcher benchmark",
        "",
        f"Command: `.venv/bin/python bench/hosted.py --count {args.count} -n {args.n} -r {args.r} "
        f"--pushed-runs {args.pushed_runs}` "
        f"({platform.machine()}, {_cores()} cores, Python {platform.python_version()}; "
        f"in-server launcher, local backend, poll interval {poll} s, SQLite).",
        "",
    ]
    for b in batches:
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(b["statuses"].items()))
        lines += [
            f"## {b['count']} at once: `{b['env']}`",
            "",
            f"Outcome: {statuses}; with all {args.n}x{args.r} samples: {b['samples_ok']}; "
            f"batch wall time {b['wall']:.1f} s.",
            "",
            "| interval | p50 ms | p99 ms | max ms |",
            "|---|---|---|---|",
            _row("create → RUNNING (launcher overhead)", b["pickup"]),
            _row("sandbox exit → terminal status (set by the launcher)", b["exit_to_status"]),
            _row("sandbox exit → sandbox closed by the launcher", b["exit_to_closed"]),
            _row("sandbox run time (RUNNING → exit), for scale", b["runtime"]),
            "",
        ]
    ok = batches[0]
    ratio = statistics.median(ok["pickup"]) / statistics.median(ok["runtime"])
    lines.append(
        f"Launcher pick-up is {ratio:.2f}x the median sandbox run time in the complete batch "
        "(the sandbox's own time is mostly Python start-up and imports of `proctor eval`)."
    )
    lines += [
        "",
        f"## A pushed environment: create → first sample ({args.pushed_runs} versions, "
        "one run at a time)",
        "",
        "Each version of tests/e2e/hub_env is pushed with `proctor envs push`, then run hosted "
        "cold (a venv made for its content hash: `venv` linking the server's site-packages, "
        "then `pip install` of the wheel) and warm (that venv reused).",
        "",
        "| run | p50 ms | p99 ms | max ms |",
        "|---|---|---|---|",
        _row("installed alphabet-sort (no install step)", pushed["installed"]),
        _row("pushed tiny-echo, cold (venv built)", pushed["cold"]),
        _row("pushed tiny-echo, warm (cached by content hash)", pushed["warm"]),
        "",
        f"Cold is {statistics.median(pushed['cold']) / statistics.median(pushed['warm']):.2f}x "
        "warm; warm is "
        f"{statistics.median(pushed['warm']) / statistics.median(pushed['installed']):.2f}x "
        "the installed environment (medians).",
    ]
    return "\n".join(lines) + "\n"


def _cores() -> int:

    return len(os.sched_getaffinity(0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("-r", type=int, default=2)
    parser.add_argument("--pushed-runs", type=int, default=5)
    args = parser.parse_args()
    from proctor.server.hosted.settings import LauncherSettings

    poll = LauncherSettings().poll_seconds
    with tempfile.TemporaryDirectory(prefix="proctor-bench-hosted-") as tmp:
        data_dir = Path(tmp)
        model_port, port = free_port(), free_port()
        model = ManagedProcess(
            [*PROCTOR, "demo-model", "--host", "127.0.0.1", "--port", str(model_port)],
            data_dir / "demo-model.log",
        ).start()
        server = ManagedProcess(
            [
                *PROCTOR,
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--data-dir",
                str(data_dir),
            ],
            data_dir / "server.log",
            env={
                "PROCTOR_BOOTSTRAP_KEY": KEY,
                "PROCTOR_HOSTED_MAX_SANDBOXES": str(args.count),
                "PROCTOR_HOSTED_IN_SERVER": "true",
                # Dependencies come only from what the machine has locally (no network).
                "PROCTOR_HOSTED_PACKAGE_INDEX": (data_dir / "empty-index").as_uri(),
            },
        ).start()
        try:
            wait_http(f"http://127.0.0.1:{model_port}/v1/models", proc=model.proc)
            wait_http(f"http://127.0.0.1:{port}/healthz", proc=server.proc, timeout=60)
            client = httpx.Client(
                base_url=f"http://127.0.0.1:{port}/api/v1",
                headers={"Authorization": f"Bearer {KEY}"},
                timeout=60,
            )
            model_url = f"http://127.0.0.1:{model_port}/v1"
            url = f"http://127.0.0.1:{port}"
            (data_dir / "empty-index").mkdir()
            broken = '"proctor-bench-missing-dependency>=1"'
            project = hub_project(data_dir / "projects", name="broken-echo", deps=broken)
            push(url, KEY, project, *NO_ISOLATION)
            batches = [
                run_batch(
                    client,
                    data_dir,
                    env=env,
                    count=args.count,
                    n=args.n,
                    r=args.r,
                    model_url=model_url,
                )
                for env in ("alphabet-sort", "admin/broken-echo")
            ]
            pushed = run_pushed(
                client,
                data_dir,
                url,
                runs=args.pushed_runs,
                n=args.n,
                r=args.r,
                model_url=model_url,
            )
        finally:
            server.stop()
            model.stop()
    text = report(batches, pushed, args, poll)
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    complete = batches[0]["statuses"].get("COMPLETED", 0) == args.count
    return 0 if complete and batches[0]["samples_ok"] == args.count else 1


if __name__ == "__main__":
    raise SystemExit(main())
