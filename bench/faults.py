"""Fault benchmark: randomized fault schedules against real pushed `proctor eval` runs.

Each schedule is one `proctor eval reverse-text -n N -r 2 --push` (a few hundred samples)
against `proctor demo-model` and a real `proctor server` (SQLite), all on 127.0.0.1, the
eval reaching the server through a loopback proxy. Between 1 and 3 faults strike at random
points of the run (a fraction of the episodes written to traces.jsonl):

- `server-kill`: the server is SIGKILLed and restarted on the same port 0.3-2 s later;
- `spool-full`: the spool's filesystem (a tmpfs over `<run_dir>/platform`) is filled to
  ENOSPC for 0.2-1.5 s;
- `storm`: the proxy answers 503/429 (with Retry-After 0-1 s) for 1-4 s;
- `resets`: for 1-3 s the proxy resets connections, half of them after forwarding the
  request (the server stored the batch, the client never heard);
- `eval-kill`: the eval is SIGKILLed, then finished by `proctor runs sync RUN_DIR`, by
  the same `proctor eval ... --resume`, or by two such resumes started at once (one of
  them is refused: the run dir has one writer);
- `finalize-kill`: the eval is SIGKILLed once the platform has committed its finalize,
  before the answer reaches it (the proxy kills it after forwarding), then resumed: the
  resume must find the evaluation COMPLETED and open no second one.

An eval that ends with exit 75 (the platform lacks samples) is finished with `proctor runs
sync RUN_DIR`, as its last line says. Then, against the server directly: expected = the ids
in traces.jsonl, stored = the ids the server holds; duplicated = rows stored twice; lost =
expected but not stored (a second evaluation of the same run dir counts its samples as
duplicated); a false status is a COMPLETED evaluation that lacks a sample or an
episode of the run, a run reported done (exit 0) that is not closed, or a whole run reported
done that is not COMPLETED. Goal: 0 / 0 / 0.

Then `--sharded K` schedules (default 10; `--schedules 0` runs only these): one hosted
evaluation of `reverse-text -r 2` in 2-4 shards on the server's in-server launcher (local
sandboxes, unconfined, a demo model at 100 ms), hit by 1-3 faults drawn with repeats from

- `shard-kill`: a running shard's sandbox (its whole process group) is SIGKILLed; the
  launcher starts it again, and the retry stores only the pairs it lacks;
- `server-kill`: the server is SIGKILLed and restarted; its launcher adopts the shards,
  which ran on meanwhile.

Each pair must be stored once, the evaluation COMPLETED with that count and claimed once,
and a shard killed k times run k + 1 times (the notes say where not).

The tmpfs mounts need root; the bench re-runs itself under `unshare --mount` so that no
mount outlives it, whatever happens. The processes and helpers are the fault tests' own
(tests/e2e/durability.py).

Usage (root): .venv/bin/python bench/faults.py [--schedules 50] [--sharded 10] [--seed 1]
[--min-samples 200] [--max-samples 400] [--out bench/results/faults.md]

`--servers` runs server kills across two servers on one PostgreSQL instead (set
PROCTOR_TEST_POSTGRES_URL; no root needed): see bench/faults_servers.py.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fault_tally import (  # noqa: E402
    SHARDED_HEADING,
    Outcome,
    check_hosted,
    command,
    launcher_rows,
    report,
    write_results,
)
from tests.e2e.durability import (  # noqa: E402
    FaultProxy,
    demo_model,
    eval_args,
    eval_env,
    fill,
    line_count,
    run_id,
    runs_sync,
    settled,
    stored_ids,
    trace_ids,
    unfill,
)
from tests.e2e.hosted_helpers import create_hosted  # noqa: E402
from tests.support.platform import Platform, start_platform  # noqa: E402
from tests.support.procs import ManagedProcess, wait_http  # noqa: E402

from proctor.contract import TERMINAL_STATUSES  # noqa: E402

FAULTS = ("server-kill", "spool-full", "storm", "resets", "eval-kill", "finalize-kill")
SHARD_FAULTS = ("shard-kill", "server-kill")
"""Faults of a sharded schedule, drawn with repeats (a shard may be killed twice)."""
SHARD_ATTEMPTS = 3
SHARD_LATENCY_MS = 100
LAUNCHER_ENV = {
    "PROCTOR_HOSTED_ISOLATION": "none",
    "PROCTOR_HOSTED_POLL_SECONDS": "0.1",
    "PROCTOR_HOSTED_STOP_GRACE_SECONDS": "1",
    "PROCTOR_HOSTED_SHARD_ATTEMPTS": str(SHARD_ATTEMPTS),
}
"""The in-server launcher of the sharded schedules: quick, sandboxes unconfined."""
_PRIVATE_MOUNTS = "PROCTOR_BENCH_FAULTS_PRIVATE_MOUNTS"


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def _eval(args: list[str], env: dict[str, str], log: Path) -> ManagedProcess:
    return ManagedProcess(args, log, env=env).start()


def _wait(proc: ManagedProcess, timeout: float = 600) -> int:
    assert proc.proc is not None
    try:
        return proc.proc.wait(timeout=timeout)
    finally:
        proc.stop()


def run_schedule(
    index: int,
    rng: random.Random,
    plat: Platform,
    proxy: FaultProxy,
    model: str,
    work: Path,
    samples: tuple[int, int],
) -> Outcome:
    n = rng.randint(samples[0] // 2, samples[1] // 2)  # tasks; 2 rollouts each
    faults = rng.sample(FAULTS, rng.randint(1, 3))
    out = Outcome(index, faults, 2 * n)
    started = time.monotonic()
    home = work / f"s{index:03d}"
    out_dir = home / "out"
    run_dir = out_dir / "r"
    flags = ["--push", "--run.finish-timeout", "60"]
    argv = eval_args(model, out_dir, *flags, env="reverse-text", n=n, rollouts=2, concurrency=8)
    env = eval_env(proxy.url, plat.api_key, home)
    spool = run_dir / "platform"
    home.mkdir(parents=True)
    mounted = "spool-full" in faults
    if mounted:
        # An empty mount point holds no results: the eval starts there as in a fresh dir.
        spool.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(spool)], check=True)
    finalize_killed: list[str] = []
    try:
        at = {f: rng.uniform(0.1, 0.8) for f in faults}  # when each strikes
        proc = _eval(argv, env, home / "eval.log")
        if "finalize-kill" in faults:

            def kill_after_finalize(method: str, path: str) -> None:
                if path.endswith("/finalize") and not finalize_killed:
                    finalize_killed.append(path)
                    proc.signal(9)

            proxy.answered = kill_after_finalize
        traces = run_dir / "traces.jsonl"
        pending = sorted((f for f in faults if f != "finalize-kill"), key=lambda f: at[f])
        killed = False
        assert proc.proc is not None
        while proc.proc.poll() is None and pending:
            fault = pending[0]
            if line_count(traces) < at[fault] * out.samples:
                time.sleep(0.01)
                continue
            pending.pop(0)
            if fault == "server-kill":
                plat.process.kill()
                time.sleep(rng.uniform(0.3, 2.0))
                plat.process.start()
                wait_http(f"{plat.url}/healthz", proc=plat.process.proc, timeout=60)
            elif fault == "spool-full":
                filler = fill(spool)
                time.sleep(rng.uniform(0.2, 1.5))
                unfill(filler)
            elif fault == "storm":
                proxy.storm(rng.uniform(1.0, 4.0))
            elif fault == "resets":
                proxy.resets(rng.uniform(1.0, 3.0))
            elif fault == "eval-kill" and proc.proc.poll() is None:
                proc.kill()  # the whole process group, as a crash would
                killed = True
        code = _wait(proc)
        proxy.answered = None
        last = _last_line(proc.output())
        if finalize_killed:
            out.notes.append("killed after its finalize, then resume")
            again = _eval([*argv, "--resume"], env, home / "resume.log")
            code = _wait(again)
            last = _last_line(again.output())
            if "nothing to resume" not in again.output():
                out.notes.append(f"resume ran again: {last}")
        elif killed:
            recovery = rng.choice(("sync", "resume", "two resumes"))
            out.notes.append(f"then {recovery}")
            if recovery == "sync":
                done = runs_sync(run_dir, plat.api_key, "--api-url", proxy.url, timeout=120)
                code, last = done.returncode, _last_line(done.stderr)
            elif recovery == "resume":
                again = _eval([*argv, "--resume"], env, home / "resume.log")
                code = _wait(again)
                last = _last_line(again.output())
            else:
                both = [_eval([*argv, "--resume"], env, home / f"resume{k}.log") for k in (1, 2)]
                codes = [_wait(p) for p in both]
                refused = [p for p, c in zip(both, codes, strict=True) if c == 2]
                out.notes.append(f"exits {codes[0]}/{codes[1]}")
                if any("is in use by" not in p.output() for p in refused):
                    out.notes.append("a resume failed for another reason")
                ran = [c for c in codes if c != 2] or [2]
                code = ran[0]
                last = _last_line(both[codes.index(code)].output())
        if code == 75:
            out.notes.append("exit 75, then sync")
            done = runs_sync(run_dir, plat.api_key, "--api-url", proxy.url, timeout=120)
            code, last = done.returncode, _last_line(done.stderr)
        if code != 0:
            out.notes.append(f"exit {code}: {last}")
        proxy.calm()
        eid = run_id(run_dir)
        expected = trace_ids(run_dir)
        rec = settled(plat, eid)
        stored = stored_ids(plat, eid)
        out.count(expected, stored)
        extra = len(set(stored) - set(expected))
        if extra:
            out.notes.append(f"{extra} stored sample(s) not in traces")
        others = [e for e in _evaluations_of(plat, out_dir) if e != eid]
        if others:
            out.notes.append(f"{len(others)} more evaluation(s) of this run dir")
            out.duplicated += sum(len(stored_ids(plat, e)) for e in others)
        out.status = str(rec.get("status"))
        whole = out.lost == 0 and len(set(expected)) >= out.samples
        if out.status == "COMPLETED" and not whole:
            out.false_status += 1  # completed on a lie
        if code == 0 and out.status not in TERMINAL_STATUSES:
            out.false_status += 1  # reported done, left open
        if code == 0 and whole and out.status != "COMPLETED":
            out.false_status += 1  # everything there, reported done, not completed
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(spool)], check=False)
    shutil.rmtree(home, ignore_errors=True)
    out.seconds = time.monotonic() - started
    return out


def _evaluations_of(plat: Platform, out_dir: Path) -> list[str]:
    """Every evaluation a run under `out_dir` created (one run dir, one evaluation)."""
    with plat.client() as c:
        r = c.get("/evaluations/", params={"limit": 500})
        r.raise_for_status()
        return [
            str(e["evaluation_id"])
            for e in r.json()["evaluations"]
            if (e.get("metadata") or {}).get("output_dir") == str(out_dir)
        ]


def _stored_count(db: Path, eid: str) -> tuple[int, bool]:
    """Samples stored for `eid`, and whether the launcher has closed it (read from SQLite:
    it answers while the server is down)."""
    with sqlite3.connect(db, timeout=30) as conn:
        (count,) = conn.execute(
            "SELECT COUNT(*) FROM samples WHERE evaluation_id = ?", (eid,)
        ).fetchone()
        row = conn.execute(
            "SELECT ended_at FROM hosted_evaluations WHERE evaluation_id = ?", (eid,)
        ).fetchone()
    return int(count), row is not None and row[0] is not None


def _kill_a_shard(database_url: str, eid: str, rng: random.Random) -> int | None:
    """SIGKILL the process group of a running shard that has an attempt left; its index."""
    _, shards = launcher_rows(database_url, eid)
    running = [
        s
        for s in shards
        if s["state"] == "running" and s["sandbox_handle"] and s["attempt"] < SHARD_ATTEMPTS
    ]
    rng.shuffle(running)
    for shard in running:
        try:
            os.killpg(int(str(shard["sandbox_handle"]).partition("@")[0]), 9)
        except (ProcessLookupError, ValueError):
            continue  # it ended meanwhile
        return int(shard["shard"])
    return None


def run_sharded_schedule(
    index: int, rng: random.Random, plat: Platform, model: str, samples: tuple[int, int]
) -> Outcome:
    """One hosted evaluation in 2-4 shards (`reverse-text -r 2`, 2 in flight per shard) on the
    in-server launcher; 1-3 faults strike at fractions of its samples stored: a running
    shard's sandbox SIGKILLed (retried by the launcher), or the server SIGKILLed and
    restarted (it adopts the running shards). Each pair must be stored once, the evaluation
    COMPLETED with that count, and each killed shard run once more per kill."""
    count = rng.randint(2, 4)
    examples = rng.randint(samples[0] // 2, samples[1] // 2)
    faults = [rng.choice(SHARD_FAULTS) for _ in range(rng.randint(1, 3))]
    out = Outcome(index, faults, 2 * examples)
    started = time.monotonic()
    db = plat.data_dir / "proctor.db"
    database_url = f"sqlite:///{db}"
    with plat.client() as client:
        eid = create_hosted(
            client,
            "reverse-text",
            num_examples=examples,
            rollouts_per_example=2,
            shards=count,
            max_concurrent=2,
            api_base_url=model,
        )
    kills: Counter[int] = Counter()
    for when, fault in sorted(zip([rng.uniform(0.1, 0.7) for _ in faults], faults, strict=True)):
        stored, closed = _stored_count(db, eid)
        deadline = time.monotonic() + 300
        while stored < when * out.samples and not closed and time.monotonic() < deadline:
            time.sleep(0.02)
            stored, closed = _stored_count(db, eid)
        if closed:
            out.notes.append(f"{fault}: the run had ended")
        elif fault == "server-kill":
            plat.process.kill()
            time.sleep(rng.uniform(0.3, 2.0))
            plat.process.start()
            wait_http(f"{plat.url}/healthz", proc=plat.process.proc, timeout=60)
        elif (victim := _kill_a_shard(database_url, eid, rng)) is not None:
            kills[victim] += 1
        else:
            out.notes.append("shard-kill: no shard running")
    deadline = time.monotonic() + 300
    while not _stored_count(db, eid)[1] and time.monotonic() < deadline:
        time.sleep(0.1)
    settled(plat, eid, timeout=60)
    record = check_hosted(out, plat, database_url, eid, examples, 2, kills)
    out.status = str(record["status"])
    out.adopted = plat.process.output().count(f"adopts the shards of {eid}")
    out.seconds = time.monotonic() - started
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=50, help="pushed-run schedules")
    parser.add_argument(
        "--sharded", type=int, default=10, help="sharded hosted schedules, run after the others"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-samples", type=int, default=200)
    parser.add_argument("--max-samples", type=int, default=400)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--servers",
        action="store_true",
        help="server kills across two servers on PostgreSQL (bench/faults_servers.py)",
    )
    args = parser.parse_args()
    if args.servers:
        from bench.faults_servers import servers_main

        args.out = args.out or ROOT / "bench" / "results" / "faults_servers.md"
        servers_main(args)
        return
    args.out = args.out or ROOT / "bench" / "results" / "faults.md"
    if os.geteuid() != 0:
        sys.exit("bench/faults.py mounts tmpfs filesystems: run it as root")
    if os.environ.get(_PRIVATE_MOUNTS) != "1":
        # A mount namespace of its own: every tmpfs goes when the bench does, even killed.
        os.environ[_PRIVATE_MOUNTS] = "1"
        unshare = ["unshare", "--mount", "--propagation", "private"]
        os.execvp("unshare", [*unshare, sys.executable, *sys.argv])
    rng = random.Random(args.seed)
    random.seed(args.seed)  # the proxy's choices
    load_before = os.getloadavg()
    started = time.monotonic()
    outcomes: list[Outcome] = []
    sharded: list[Outcome] = []
    bounds = (args.min_samples, args.max_samples)
    with tempfile.TemporaryDirectory(prefix="proctor-faults-") as tmp:
        work = Path(tmp)
        (work / "platform").mkdir()
        (work / "slow").mkdir()
        plat = start_platform(work / "platform", extra_env=LAUNCHER_ENV)
        try:
            with (
                demo_model(work, latency_ms=5) as model,
                demo_model(work / "slow", latency_ms=SHARD_LATENCY_MS) as slow_model,
                FaultProxy(plat.url) as proxy,
            ):
                for i in range(args.schedules):
                    o = run_schedule(i, rng, plat, proxy, model, work, bounds)
                    outcomes.append(o)
                    print(o.line(), flush=True)
                for i in range(args.sharded):
                    o = run_sharded_schedule(i, rng, plat, slow_model, bounds)
                    sharded.append(o)
                    print(o.line(), flush=True)
        finally:
            plat.process.stop()
    wall = time.monotonic() - started
    load = (load_before, os.getloadavg())
    ran = command(args)
    head = report(
        "# Fault benchmark",
        f"{ran} (as root, for the tmpfs mounts)",
        "Each schedule is a real `proctor eval reverse-text -n N -r 2 -c 8 --push` against "
        "`proctor demo-model --latency-ms 5` and `proctor server` (SQLite) on 127.0.0.1, "
        "through a loopback fault proxy; see the docstring of `bench/faults.py`.",
        outcomes,
        FAULTS,
        ". A killed eval finished by `runs sync` is closed FAILED with what it wrote "
        "(expected < samples); one finished by `--resume` runs the rest.",
        wall,
        load,
    )
    section = report(
        SHARDED_HEADING,
        f"{ran} (the last {len(sharded)} schedules)",
        "Each schedule is one hosted evaluation of `reverse-text -r 2` in 2-4 shards "
        "(`max_concurrent` 2 each) on the server's in-server launcher (local sandboxes, "
        f"unconfined, {SHARD_ATTEMPTS} attempts per shard) against `proctor demo-model "
        f"--latency-ms {SHARD_LATENCY_MS}`; 1-3 faults drawn with repeats from "
        "`shard-kill` (a running shard's sandbox, its whole process group, SIGKILLed) and "
        "`server-kill` (the server SIGKILLed and restarted 0.3-2 s later), each when a "
        "random 10-70 % of the samples are stored. Expected: every (example, rollout) pair "
        "once; COMPLETED with that count; claimed once; a shard killed k times ran k + 1 "
        "times (notes say otherwise).",
        sharded,
        SHARD_FAULTS,
        ". Adopted: the restarted server's launcher taking the running shards back.",
        wall,
        load,
        title="sharded schedules",
    )
    write_results(args.out, outcomes, sharded, wall, load, head, section)


if __name__ == "__main__":
    main()
