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

With `--sharded K`, K more schedules each add a hosted evaluation in 3 shards to the mix:
the server kills strike while its shards run, adopted with the rest of a dead server's
sandboxes.

Then: expected = the ids in each pushed run's traces.jsonl, and each hosted run's
(example, rollout) pairs;
stored = the ids the platform holds; duplicated = rows stored twice; lost = expected but not
stored; a false status is a pushed run reported done (exit 0) that is not COMPLETED, a
COMPLETED evaluation that lacks a sample, or a hosted evaluation (whose sandboxes are never
touched) that ends other than COMPLETED with every pair. A hosted evaluation claimed more
than once is counted as doubled. Goal: 0 / 0 / 0.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from bench.fault_tally import (
    SHARDED_HEADING,
    Outcome,
    check_hosted,
    command,
    report,
    write_results,
)
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
from tests.e2e.hosted_helpers import create_hosted
from tests.e2e.servers import Balancer, Server, balanced_servers, hosted_rows
from tests.support.databases import fresh_database
from tests.support.platform import BOOTSTRAP_KEY, Platform
from tests.support.procs import ManagedProcess, wait_http

SERVER_FAULTS = ("server-kill", "server-down", "both-kill")
STALE_SECONDS = 3.0
PUSHED = 2
HOSTED = 2
LATENCY_MS = 200
SHARDS = 3


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


def _create_hosted(plat: Platform, model: str, n: int, shards: int | None) -> str:
    config = {"num_examples": n, "rollouts_per_example": 1, "max_concurrent": 1}
    if shards is not None:
        config["shards"] = shards
    with plat.client() as c:
        return create_hosted(c, "reverse-text", **config, api_base_url=model)


def run_server_schedule(
    index: int,
    rng: random.Random,
    servers: list[Server],
    balancer: Balancer,
    database_url: str,
    model: str,
    work: Path,
    samples: tuple[int, int],
    *,
    sharded: bool = False,
) -> Outcome:
    """One schedule: pushed and hosted runs (one of them sharded) at once, servers killed
    under them."""
    faults = rng.sample(SERVER_FAULTS, rng.randint(1, 3))
    sizes = [rng.randint(samples[0] // 2, samples[1] // 2) for _ in range(PUSHED)]
    hosted_n = [rng.randint(samples[0] // 4, samples[1] // 4) for _ in range(HOSTED)]
    shards: list[int | None] = [None] * HOSTED
    if sharded:
        hosted_n.append(rng.randint(samples[0] // 2, samples[1] // 2))
        shards.append(SHARDS)
    out = Outcome(index, faults, 2 * sum(sizes) + sum(hosted_n))
    started = time.monotonic()
    adopted_before = _adoptions(servers)
    home = work / f"s{index:03d}"
    home.mkdir(parents=True)
    plat = Platform(balancer.url, BOOTSTRAP_KEY, home, database_url, servers[0].process)
    hosted = [_create_hosted(plat, model, n, k) for n, k in zip(hosted_n, shards, strict=True)]
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
    hits = 0  # faults that struck while the sharded evaluation's shards ran
    while pending and any(p.proc is not None and p.proc.poll() is None for p, _ in runs):
        if sum(line_count(r / "traces.jsonl") for _, r in runs) < pending[0][0] * total:
            time.sleep(0.02)
            continue
        if sharded and hosted_rows(database_url)[hosted[-1]]["ended_at"] is None:
            hits += 1
        _strike(pending.pop(0)[1], rng, servers)
    if sharded:
        out.notes.append(f"{hits} of {len(faults)} fault(s) struck while its shards ran")
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
        out.count(expected, stored)
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
    for evaluation_id, n in zip(hosted, hosted_n, strict=True):
        settled(plat, evaluation_id, timeout=60)
        check_hosted(out, plat, database_url, evaluation_id, n, 1)
    out.adopted = _adoptions(servers) - adopted_before
    out.seconds = time.monotonic() - started
    return out


def _adoptions(servers: list[Server]) -> int:
    """Sandboxes (and sharded evaluations) adopted so far, by the servers' logs (which grow
    across restarts)."""
    logs = "".join(s.process.output() for s in servers)
    return logs.count("adopts the sandbox") + logs.count("adopts the shards of")


def servers_main(args: argparse.Namespace) -> None:
    """Run `args.schedules` server-kill schedules, then `args.sharded` more with a sharded
    hosted evaluation in each, and write `args.out`."""
    url = os.environ.get("PROCTOR_TEST_POSTGRES_URL")
    if not url:
        raise SystemExit(
            "bench/faults.py --servers needs PostgreSQL: set PROCTOR_TEST_POSTGRES_URL"
        )
    rng = random.Random(args.seed)
    load_before = os.getloadavg()
    started = time.monotonic()
    outcomes: list[Outcome] = []
    sharded: list[Outcome] = []
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
            for i in range(args.schedules + args.sharded):
                o = run_server_schedule(
                    i,
                    rng,
                    servers,
                    lb,
                    database_url,
                    model,
                    work,
                    (args.min_samples, args.max_samples),
                    sharded=i >= args.schedules,
                )
                (sharded if i >= args.schedules else outcomes).append(o)
                print(o.line(), flush=True)
    wall = time.monotonic() - started
    load = (load_before, os.getloadavg())
    ran = command(args, servers=True)
    head = report(
        "# Fault benchmark: server kills across two servers",
        ran,
        f"Each schedule: {PUSHED} pushed `proctor eval reverse-text -r 2 -c 4` runs and "
        f"{HOSTED} hosted evaluations (`-c 1`, local sandboxes, unconfined) at once, against "
        f"`proctor demo-model --latency-ms {LATENCY_MS}` and two `proctor server` processes on "
        "one PostgreSQL behind a loopback balancer; see the docstring of "
        "`bench/faults_servers.py`.",
        outcomes,
        SERVER_FAULTS,
        ". Adopted: by the other server, or by the same one restarted.",
        wall,
        load,
    )
    section = report(
        SHARDED_HEADING,
        f"{ran} (the last {len(sharded)} schedules)",
        f"As above, plus a third hosted evaluation in {SHARDS} shards (`reverse-text -r 1`, "
        "`-c 1` per shard) in each schedule: the server kills strike while its shards run. "
        "Its (example, rollout) pairs are counted like the others' samples; it must end "
        "COMPLETED with every pair, claimed once. Adopted: sandboxes and sharded evaluations "
        "taken over by the other server, or by the same one restarted.",
        sharded,
        SERVER_FAULTS,
        ".",
        wall,
        load,
        title="sharded schedules",
    )
    write_results(args.out, outcomes, sharded, wall, load, head, section)
