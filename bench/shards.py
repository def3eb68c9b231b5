"""Shard benchmark: one evaluation's rollouts per second with 1, 2, 4 and 8 shards.

    .venv/bin/python bench/shards.py [--shards 1 2 4 8] [-c 32] [--per-shard 960]
        [--latency-ms 500] [--repeat 1] [--direct] [--out bench/results/shards.md]

A real `proctor server` (SQLite, in-server launcher with its default poll interval, local
sandboxes, unconfined) and `proctor demo-model --latency-ms 500` on loopback. For each N, one
hosted evaluation of `reverse-text` (one model call per rollout) with `shards` N and
`max_concurrent` C, `--per-shard` rollouts per shard (so N times as many in all: the
per-shard work and concurrency stay the same and the ideal throughput is N times one
shard's). The Ns run one after another; `--repeat` runs the whole series again.
`--direct` also runs each N without the launcher: `proctor evals create`, N `proctor eval
--shard I/N --run.attach ID` started by the bench at once, `proctor evals finalize`.

Each shard's command runs under bench/shard_probe.py (through `PROCTOR_HOSTED_COMMAND`, or
directly), which records when its process started and ended and the CPU of its process tree.
The rest comes from the server's own records: the evaluation's create and COMPLETED times,
and each sample's `timing` (start and end of its rollout, epoch seconds, same clock).

Reported per run:

- whole-run throughput: rollouts / (create -> COMPLETED);
- steady-state throughput: rollouts that ended between the moment every shard had ended its
  first rollout and the moment the first shard ended its last, per second of that window;
- per shard: process start -> its first rollout's start (start-up: Python, imports, the
  environment, attaching to the evaluation), its last rollout's end -> its exit (the final
  flush), CPU ms per rollout of its whole process tree;
- the launcher's: create -> every shard's process started, the last rollout's end ->
  COMPLETED (every shard's exit noticed, the count checked, the summary computed), and the
  server's and the demo model's CPU per rollout.

Figures are ratios within one invocation (the machine is shared); the report notes the load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.durability import demo_model, eval_args, eval_env  # noqa: E402
from tests.e2e.hosted_helpers import create_hosted, wait_closed  # noqa: E402
from tests.support.platform import Platform, start_platform  # noqa: E402
from tests.support.procs import PROCTOR, ManagedProcess  # noqa: E402

from proctor.sandboxes.command import DEFAULT_COMMAND  # noqa: E402

PROBE = ROOT / "bench" / "shard_probe.py"
ENV = "reverse-text"
ROLLOUTS = 16
"""Rollouts per example: the examples are `total / 16` of reverse-text's 1,000 tasks."""
EPOCH = "(julianday({}) - 2440587.5) * 86400.0"
"""SQL: a stored naive-UTC timestamp as epoch seconds."""


@dataclass
class Shard:
    index: int
    rollouts: int
    started: float
    ended: float
    cpu_s: float
    first_start: float
    last_end: float

    @property
    def startup(self) -> float:
        return self.first_start - self.started

    @property
    def exit(self) -> float:
        return self.ended - self.last_end


@dataclass
class Run:
    path: str
    shards: int
    rollouts: int
    status: str = ""
    stored: int = 0
    exact: bool = False
    created: float = 0.0
    completed: float = 0.0
    steady: float = 0.0
    first_end: float = 0.0
    last_end: float = 0.0
    server_cpu: float = 0.0
    model_cpu: float = 0.0
    per_shard: list[Shard] = field(default_factory=list)

    @property
    def whole(self) -> float:
        return self.rollouts / (self.completed - self.created)

    @property
    def all_started(self) -> float:
        return max(s.started for s in self.per_shard) - self.created

    @property
    def closing(self) -> float:
        return self.completed - self.last_end

    @property
    def noticed(self) -> float:
        """The last shard's exit -> COMPLETED: the launcher's (or `evals finalize`'s) part."""
        return self.completed - max(s.ended for s in self.per_shard)

    @property
    def cores(self) -> float:
        """Cores the run's own processes (shards, server, model) kept busy, on average."""
        cpu = sum(s.cpu_s for s in self.per_shard) + self.server_cpu + self.model_cpu
        return cpu / (self.completed - self.created)


def _cpu(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    times = proc.cpu_times()
    return float(times.user + times.system)


def _model_process() -> psutil.Process | None:
    for child in psutil.Process().children(recursive=True):
        try:
            if "demo-model" in child.cmdline():
                return child
        except psutil.Error:
            continue
    return None


def _probe_command(probes: Path) -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(PROBE))} {shlex.quote(str(probes))} -- "


def run_hosted(plat: Platform, model: str, n: int, per_shard: int, c: int) -> str:
    with plat.client() as client:
        eid = create_hosted(
            client,
            env=ENV,
            num_examples=n * per_shard // ROLLOUTS,
            rollouts_per_example=ROLLOUTS,
            shards=n,
            max_concurrent=c,
            api_base_url=model,
        )
        wait_closed(client, plat, eid, timeout=900)
    return eid


def run_direct(plat: Platform, model: str, n: int, per_shard: int, c: int, work: Path) -> str:
    home = work / f"direct-{n}-{time.monotonic_ns()}"
    home.mkdir(parents=True)
    env = eval_env(plat.url, plat.api_key, home)
    examples = n * per_shard // ROLLOUTS
    size = ["-n", str(examples), "-r", str(ROLLOUTS)]
    created = subprocess.run(
        [*PROCTOR, "evals", "create", ENV, *size], env=env, capture_output=True, text=True
    )
    if created.returncode != 0:
        raise RuntimeError(f"evals create failed: {created.stderr}")
    eid = created.stdout.strip()
    probe = [sys.executable, str(PROBE), str(work / "probes"), "--"]
    procs = []
    for i in range(n):
        argv = eval_args(
            model,
            home / "out",
            "--shard",
            f"{i}/{n}",
            "--run.attach",
            eid,
            env=ENV,
            n=examples,
            rollouts=ROLLOUTS,
            concurrency=c,
            name=f"shard-{i}",
        )
        procs.append(ManagedProcess([*probe, *argv], home / f"shard-{i}.log", env=env).start())
    for i, proc in enumerate(procs):
        assert proc.proc is not None
        if proc.proc.wait(timeout=900) != 0:
            raise RuntimeError(f"shard {i}/{n} failed: {proc.output()[-2000:]}")
    done = subprocess.run(
        [*PROCTOR, "evals", "finalize", eid], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"evals finalize failed: {done.stderr}")
    return eid


def measure(plat: Platform, eid: str, path: str, n: int, expected: int, probes: Path) -> Run:
    """What the server and the probes recorded of one finished run."""
    with sqlite3.connect(plat.data_dir / "proctor.db", timeout=30) as conn:
        status, stored, created, completed = conn.execute(
            f"SELECT status, total_samples, {EPOCH.format('created_at')}, "
            f"{EPOCH.format('completed_at')} FROM evaluations WHERE id = ?",
            (eid,),
        ).fetchone()
        rows = conn.execute(
            "SELECT example_id, rollout_number, data FROM samples WHERE evaluation_id = ?", (eid,)
        ).fetchall()
    run = Run(path, n, expected, status=status, stored=stored, created=created, completed=completed)
    pairs = {(e, r) for e, r, _ in rows}
    timings: dict[int, list[tuple[float, float]]] = {i: [] for i in range(n)}
    for example, rollout, data in rows:
        timing = json.loads(data)["timing"]
        timings[(example * ROLLOUTS + rollout - 1) % n].append((timing["start"], timing["end"]))
    records = [json.loads(p.read_text()) for p in probes.glob(f"{eid}-*.json")]
    run.exact = len(rows) == len(pairs) == stored == run.rollouts
    for record in sorted(records, key=lambda r: r["shard"]):
        mine = timings[record["shard"]]
        run.per_shard.append(
            Shard(
                index=record["shard"],
                rollouts=len(mine),
                started=record["started"],
                ended=record["ended"],
                cpu_s=record["cpu_s"],
                first_start=min(s for s, _ in mine),
                last_end=max(e for _, e in mine),
            )
        )
    if len(run.per_shard) != n:
        raise RuntimeError(f"{eid}: {len(run.per_shard)} probe records for {n} shards")
    ends = sorted(e for t in timings.values() for _, e in t)
    run.first_end = max(min(e for _, e in t) for t in timings.values())
    run.last_end = ends[-1]
    window_end = min(max(e for _, e in t) for t in timings.values())
    inside = sum(run.first_end <= e <= window_end for e in ends)
    run.steady = inside / (window_end - run.first_end) if window_end > run.first_end else 0.0
    return run


def _row(runs: list[Run], base: list[Run], floor: float) -> str:
    """One row: the best whole-run and the best steady-state figure of the repeats, each on
    its own; the overheads of the run with the best steady state."""
    run = max(runs, key=lambda r: r.steady)
    whole = max(r.whole for r in runs)
    shards = run.per_shard
    n = run.shards
    whole_eff = whole / max(r.whole for r in base) / n
    steady_eff = run.steady / max(r.steady for r in base) / n
    cpu = sum(s.cpu_s for s in shards) / run.rollouts * 1000
    exact = all(r.exact and r.status == "COMPLETED" for r in runs)
    return (
        f"| {run.path} | {n} | {run.rollouts} | {'yes' if exact else 'NO'} "
        f"| {whole:.1f} | {whole_eff:.2f} | {run.steady:.1f} | {steady_eff:.2f} "
        f"| {run.steady / (n * floor):.2f} "
        f"| {statistics.median(s.startup for s in shards):.2f} / "
        f"{max(s.startup for s in shards):.2f} "
        f"| {max(s.exit for s in shards):.2f} | {cpu:.2f} "
        f"| {run.all_started:.2f} | {run.closing:.2f} | {run.noticed:.2f} "
        f"| {run.server_cpu / run.rollouts * 1000:.2f} "
        f"| {run.model_cpu / run.rollouts * 1000:.2f} | {run.cores:.2f} |"
    )


def report(args: argparse.Namespace, runs: list[Run], load: list[tuple[float, ...]]) -> str:
    repeats: dict[tuple[str, int], list[Run]] = {}
    for run in runs:
        repeats.setdefault((run.path, run.shards), []).append(run)
    floor = args.c / (args.latency_ms / 1000)
    paths = sorted({r.path for r in runs}, key=lambda p: p != "hosted")
    command = (
        f".venv/bin/python bench/shards.py --shards {' '.join(map(str, args.shards))} "
        f"-c {args.c} --per-shard {args.per_shard} --latency-ms {args.latency_ms:g} "
        f"--repeat {args.repeat}{' --direct' if args.direct else ''}"
    )
    lines = [
        "# Shard benchmark",
        "",
        f"Command: `nice {command}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"One evaluation of `{ENV}` (one model call per rollout) against `proctor demo-model "
        f"--latency-ms {args.latency_ms:g}`, N shards at `max_concurrent` {args.c} each, "
        f"{args.per_shard} rollouts per shard (N x {args.per_shard} in all, {ROLLOUTS} per "
        "example), hosted through a real `proctor server` (SQLite, in-server launcher at its "
        "default poll interval, local sandboxes, unconfined)"
        + (
            "; `direct`: `proctor evals create`, N `proctor eval --shard I/N --run.attach ID` "
            "started by the bench, `proctor evals finalize`"
            if args.direct
            else ""
        )
        + ". See the docstring of `bench/shards.py`.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other work, Python "
        f"{platform.python_version()}; load average (1, 5, 15 min) "
        f"{', '.join(f'{x:.1f}' for x in load[0])} before, "
        f"{', '.join(f'{x:.1f}' for x in load[1])} after. The latency floor of one shard is "
        f"{args.c} / {args.latency_ms / 1000:g} s = {args.c / (args.latency_ms / 1000):.0f} "
        "rollouts/s.",
        "",
        f"Best of {args.repeat} run(s) per figure: the whole-run and the steady-state "
        "throughput each the best of the repeats, the overheads those of the run with the "
        "best steady state. Efficiency = throughput / (N x the one-shard throughput of the "
        "same path); the goal is >= 0.8. Of floor = steady state / (N x one shard's latency "
        "floor). Exact: every run of the row COMPLETED with each (example, rollout) pair "
        "stored once.",
        "",
        "| path | N | rollouts | exact | whole run/s | efficiency | steady run/s "
        "| efficiency | of floor | shard start-up s (median / max) | shard exit s (max) "
        "| shard CPU ms / rollout | create -> all shards started s | last rollout -> COMPLETED s "
        "| last shard exit -> COMPLETED s | server CPU ms / rollout | model CPU ms / rollout "
        "| cores busy |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for path in paths:
        base = repeats.get((path, min(args.shards)), [])
        for n in args.shards:
            if (path, n) in repeats and base:
                lines.append(_row(repeats[(path, n)], base, floor))
    lines += [
        "",
        "All runs:",
        "",
        "| path | N | whole run/s | steady run/s | status | exact |",
        "|---|---:|---:|---:|---|---|",
    ]
    lines += [
        f"| {r.path} | {r.shards} | {r.whole:.1f} | {r.steady:.1f} | {r.status} | {r.exact} |"
        for r in runs
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("-c", type=int, default=32, help="max_concurrent of each shard")
    parser.add_argument("--per-shard", type=int, default=960, help="rollouts per shard")
    parser.add_argument("--latency-ms", type=float, default=500.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--direct", action="store_true", help="also run without the launcher")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "shards.md")
    args = parser.parse_args()
    if args.per_shard % ROLLOUTS or max(args.shards) * args.per_shard // ROLLOUTS > 1000:
        parser.error(f"--per-shard must be a multiple of {ROLLOUTS}, and N x it at most 16,000")
    load_before = os.getloadavg()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="proctor-bench-shards-") as tmp:
        work = Path(tmp)
        probes = work / "probes"
        probes.mkdir()
        (work / "platform").mkdir()
        extra = {
            "PROCTOR_HOSTED_ISOLATION": "none",
            "PROCTOR_HOSTED_MAX_SANDBOXES": str(max(args.shards)),
            "PROCTOR_HOSTED_COMMAND": _probe_command(probes) + DEFAULT_COMMAND,
        }
        plat = start_platform(work / "platform", extra_env=extra)
        server = psutil.Process(plat.process.pid)
        try:
            with demo_model(work, latency_ms=args.latency_ms) as model:
                model_proc = _model_process()
                for _ in range(args.repeat):
                    for path in ("hosted", "direct") if args.direct else ("hosted",):
                        for n in args.shards:
                            cpu = _cpu(server), _cpu(model_proc)
                            if path == "hosted":
                                eid = run_hosted(plat, model, n, args.per_shard, args.c)
                            else:
                                eid = run_direct(plat, model, n, args.per_shard, args.c, work)
                            run = measure(plat, eid, path, n, n * args.per_shard, probes)
                            run.server_cpu = _cpu(server) - cpu[0]
                            run.model_cpu = _cpu(model_proc) - cpu[1]
                            runs.append(run)
                            print(
                                f"{path} N={n} {run.status} exact={run.exact} "
                                f"whole={run.whole:.1f}/s steady={run.steady:.1f}/s "
                                f"start-up={max(s.startup for s in run.per_shard):.2f}s "
                                f"all-started={run.all_started:.2f}s closing={run.closing:.2f}s",
                                flush=True,
                            )
        finally:
            plat.process.stop()
    text = report(args, runs, [load_before, os.getloadavg()])
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0 if all(r.exact and r.status == "COMPLETED" for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
