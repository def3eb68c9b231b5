"""Server kills across two platform servers: `bench/faults.py --servers`.

Two real `proctor server` processes share one PostgreSQL database and one data dir behind a
loopback balancer (tests/e2e/servers.py). Each schedule runs, at once, two pushed `proctor
eval reverse-text` runs through the balancer and two hosted evaluations (their sandboxes
report through the balancer too), against `proctor demo-model`. Between 1 and 3 faults
strike at random points of the schedule (a fraction of the pushed runs' episodes):

- `server-kill`: a random server is SIGKILLed and restarted 0.3-2 s later (it takes its own
  sandboxes back at once);
- `server-down`: a random server is SIGKILLed and stays down past its claims' lifetime
  (`PROCTOR_HOSTED_STALE_SECONDS`, 3 s here) plus 1 s: the other server adopts its sandboxes;
  then it comes back;
- `both-kill`: one server is SIGKILLed, then the other, then both come back (nothing serves
  for a moment).

Then: expected = the ids in each pushed run's traces.jsonl, and each hosted run's examples;
stored = the ids the platform holds; duplicated = rows stored twice; lost = expected but not
stored; a false status is a pushed run reported done (exit 0) that is not COMPLETED, a
COMPLETED evaluation that lacks a sample, or a hosted evaluation whose sandbox was never
touched that ends other than COMPLETED. A hosted evaluation claimed more than once is counted
as doubled. Goal: 0 / 0 / 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import BOOTSTRAP_KEY, Platform
from tests.databases import fresh_database
from tests.e2e.durability import (
    demo_model,
    eval_args,
    eval_env,
    line_count,
    run_id,
    runs_sync,
    settled,
    stored_ids,
    trace_ids,
)
from tests.e2e.servers import Balancer, Server, balanced_servers, hosted_rows
from tests.procs import ManagedProcess, wait_http

from proctor.contract import TERMINAL_STATUSES

SERVER_FAULTS = ("server-kill", "server-down", "both-kill")
STALE_SECONDS = 3.0
PUSHED = 2
HOSTED = 2
LATENCY_MS = 200


@dataclass
class ServerOutcome:
    index: int
    faults: list[str]
    samples: int
    expected: int = 0
    stored: int = 0
    duplicated: int = 0
    lost: int = 0
    false_status: int = 0
    adopted: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _restart(server: Server) -> None:
    server.process.start()
    wait_http(f"{server.url}/healthz", proc=server.process.proc, timeout=60)


def _strike(fault: str, rng: random.Random, servers: list[Server]) -> None:
    if fault == "both-kill":
        first, second = rng.sample(servers, 2)
        first.process.kill()
        time.sleep(rng.uniform(0.1, 1.0))
        second.process.kill()
        time.sleep(rng.uniform(0.3, 2.0))
        for server in (first, second):
            _restart(server)
        return
    victim = rng.choice(servers)
    victim.process.kill()
    if fault == "server-kill":
        time.sleep(rng.uniform(0.3, 2.0))
    else:
        time.sleep(STALE_SECONDS + 1.0 + rng.uniform(0.0, 2.0))
    _restart(victim)


def _create_hosted(balancer: Balancer, model: str, n: int) -> str:
    import httpx

    body = {
        "environment_ids": ["reverse-text"],
        "inference_model": "demo",
        "eval_config": {
            "num_examples": n,
            "rollouts_per_example": 1,
            "max_concurrent": 1,
            "api_base_url": model,
        },
    }
    headers = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    with httpx.Client(base_url=f"{balancer.url}/api/v1", headers=headers, timeout=30) as c:
        answer = c.post("/hosted-evaluations", json=body)
        answer.raise_for_status()
        return str(answer.json()["evaluation_id"])


def run_server_schedule(
    index: int,
    rng: random.Random,
    servers: list[Server],
    balancer: Balancer,
    database_url: str,
    model: str,
    work: Path,
    samples: tuple[int, int],
) -> ServerOutcome:
    """One schedule: pushed and hosted runs at once, servers killed under them."""
    faults = rng.sample(SERVER_FAULTS, rng.randint(1, 3))
    sizes = [rng.randint(samples[0] // 2, samples[1] // 2) for _ in range(PUSHED)]
    hosted_n = [rng.randint(samples[0] // 4, samples[1] // 4) for _ in range(HOSTED)]
    out = ServerOutcome(index, faults, 2 * sum(sizes) + sum(hosted_n))
    started = time.monotonic()
    adopted_before = _adoptions(servers)
    home = work / f"s{index:03d}"
    home.mkdir(parents=True)
    plat = Platform(balancer.url, BOOTSTRAP_KEY, home, database_url, servers[0].process)
    hosted = [_create_hosted(balancer, model, n) for n in hosted_n]
    runs = []
    for k, n in enumerate(sizes):
        out_dir = home / f"out{k}"
        flags = ["--push", "--run.finish-timeout", "120"]
        argv = eval_args(model, out_dir, *flags, env="reverse-text", n=n, rollouts=2, concurrency=4)
        env = eval_env(balancer.url, BOOTSTRAP_KEY, home / f"home{k}")
        proc = ManagedProcess(argv, home / f"eval{k}.log", env=env).start()
        runs.append((proc, out_dir / "r"))
    at = sorted(rng.uniform(0.1, 0.8) for _ in faults)
    pending = list(zip(at, faults, strict=True))
    total = 2 * sum(sizes)
    while pending and any(p.proc is not None and p.proc.poll() is None for p, _ in runs):
        if sum(line_count(r / "traces.jsonl") for _, r in runs) < pending[0][0] * total:
            time.sleep(0.02)
            continue
        _strike(pending.pop(0)[1], rng, servers)
    for proc, run_dir in runs:
        assert proc.proc is not None
        code = proc.proc.wait(timeout=600)
        if code == 75:
            out.notes.append("exit 75, then sync")
            done = runs_sync(run_dir, BOOTSTRAP_KEY, "--api-url", balancer.url, timeout=120)
            code = done.returncode
        if code != 0:
            out.notes.append(f"exit {code}: {proc.output().strip().splitlines()[-1:]}")
        eid = run_id(run_dir)
        expected = set(trace_ids(run_dir))
        record = settled(plat, eid)
        stored = stored_ids(plat, eid)
        out.expected += len(expected)
        out.stored += len(set(stored))
        out.duplicated += len(stored) - len(set(stored))
        out.lost += len(expected - set(stored))
        whole = not (expected - set(stored))
        if record["status"] == "COMPLETED" and not whole:
            out.false_status += 1
        if code == 0 and record["status"] != "COMPLETED":
            out.false_status += 1
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        rows = hosted_rows(database_url)
        if all(rows[e]["ended_at"] is not None for e in hosted):
            break
        time.sleep(0.2)
    rows = hosted_rows(database_url)
    for evaluation_id, n in zip(hosted, hosted_n, strict=True):
        record = settled(plat, evaluation_id, timeout=60)
        stored = stored_ids(plat, evaluation_id)
        out.expected += n
        out.stored += len(set(stored))
        out.duplicated += len(stored) - len(set(stored))
        out.lost += max(0, n - len(set(stored)))
        out.duplicated += int(rows[evaluation_id]["attempt"]) - 1  # started more than once
        if record["status"] != "COMPLETED" or record["total_samples"] != n:
            out.false_status += 1
            out.notes.append(f"hosted {record['status']}: {record.get('error_message')}")
        if rows[evaluation_id]["ended_at"] is None or record["status"] not in TERMINAL_STATUSES:
            out.notes.append("hosted left open")
    out.adopted = _adoptions(servers) - adopted_before
    out.seconds = time.monotonic() - started
    return out


def _adoptions(servers: list[Server]) -> int:
    """Sandboxes adopted so far, by the servers' logs (which grow across restarts)."""
    return "".join(s.process.output() for s in servers).count("adopts the sandbox")


def servers_main(args: argparse.Namespace) -> None:
    """Run `args.schedules` server-kill schedules and write `args.out`."""
    url = os.environ.get("PROCTOR_TEST_POSTGRES_URL")
    if not url:
        raise SystemExit(
            "bench/faults.py --servers needs PostgreSQL: set PROCTOR_TEST_POSTGRES_URL"
        )
    rng = random.Random(args.seed)
    load_before = os.getloadavg()
    started = time.monotonic()
    outcomes: list[ServerOutcome] = []
    extra = {
        "PROCTOR_HOSTED_STALE_SECONDS": f"{STALE_SECONDS:g}",
        "PROCTOR_HOSTED_ISOLATION": "none",
    }
    with tempfile.TemporaryDirectory(prefix="proctor-server-faults-") as tmp:
        work = Path(tmp)
        (work / "platform").mkdir()
        with (
            fresh_database("postgres", work) as database_url,
            balanced_servers(work / "platform", database_url, extra_env=extra) as (servers, lb),
            demo_model(work, latency_ms=LATENCY_MS) as model,
        ):
            for i in range(args.schedules):
                o = run_server_schedule(
                    i,
                    rng,
                    servers,
                    lb,
                    database_url,
                    model,
                    work,
                    (args.min_samples, args.max_samples),
                )
                outcomes.append(o)
                print(
                    f"{i:3d} {'+'.join(o.faults):<36} samples={o.samples:3d} "
                    f"expected={o.expected:3d} stored={o.stored:3d} dup={o.duplicated} "
                    f"lost={o.lost} false={o.false_status} adopted={o.adopted} "
                    f"{o.seconds:.0f}s {'; '.join(o.notes)}",
                    flush=True,
                )
    wall = time.monotonic() - started
    total = {
        k: sum(getattr(o, k) for o in outcomes)
        for k in ("samples", "expected", "stored", "duplicated", "lost", "false_status", "adopted")
    }
    print(
        f"TOTAL schedules={len(outcomes)} samples={total['samples']} expected={total['expected']} "
        f"stored={total['stored']} duplicated={total['duplicated']} lost={total['lost']} "
        f"false_statuses={total['false_status']} adopted={total['adopted']} wall={wall:.0f}s"
    )
    _write_report(args, outcomes, total, wall, (load_before, os.getloadavg()))


def _write_report(
    args: argparse.Namespace,
    outcomes: list[ServerOutcome],
    total: dict[str, int],
    wall: float,
    load: tuple[tuple[float, float, float], tuple[float, float, float]],
) -> None:
    before, after = load
    lines = [
        "# Fault benchmark: server kills across two servers",
        "",
        f"Command: `PROCTOR_TEST_POSTGRES_URL=... .venv/bin/python bench/faults.py --servers "
        f"--schedules {args.schedules} --seed {args.seed} --min-samples {args.min_samples} "
        f"--max-samples {args.max_samples}`.",
        "",
        f"Each schedule: {PUSHED} pushed `proctor eval reverse-text -r 2 -c 4` runs and "
        f"{HOSTED} hosted evaluations (`-c 1`, local sandboxes, unconfined) at once, against "
        f"`proctor demo-model --latency-ms {LATENCY_MS}` and two `proctor server` processes on one "
        "PostgreSQL behind a loopback balancer; see the docstring of `bench/faults_servers.py`.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other work (load "
        f"average {before[0]:.1f} at the start, {after[0]:.1f} at the end), Python "
        f"{platform.python_version()}; {wall:.0f} s wall.",
        "",
        "| schedules | samples run | expected | stored | duplicated | lost | false statuses "
        "| sandboxes adopted (by the other server, or by the same one restarted) |",
        "|---|---|---|---|---|---|---|---|",
        f"| {len(outcomes)} | {total['samples']} | {total['expected']} | {total['stored']} "
        f"| {total['duplicated']} | {total['lost']} | {total['false_status']} "
        f"| {total['adopted']} |",
        "",
        "Faults per schedule: "
        + ", ".join(f"`{f}` {sum(f in o.faults for o in outcomes)}" for f in SERVER_FAULTS)
        + ".",
        "",
        "| # | faults | samples | expected | stored | dup | lost | false | adopted | s | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.index} | {' + '.join(o.faults)} | {o.samples} | {o.expected} | {o.stored} "
            f"| {o.duplicated} | {o.lost} | {o.false_status} | {o.adopted} | {o.seconds:.0f} "
            f"| {'; '.join(o.notes)} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
