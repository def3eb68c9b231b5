"""Benchmark of the platform server: sample ingest rate and read latency at 1M samples.

Starts `proctor server` (uvicorn) as a subprocess on loopback (SQLite in a temp dir;
PostgreSQL in a fresh database when a URL is given), then measures:

1. ingest over real HTTP: `--writers` threads POST batches of 100 samples of ~2 KB each,
   first each writer into its own evaluation, then all of them into one shared evaluation
   (the row lock / SQLite write lock is contended there); reports samples/s per phase and
   per-batch latency;
2. fill: a separate evaluation is grown to `--fill` samples in-process through the
   repository's bulk insert (`repository.insert_samples`, the function the endpoint uses,
   5,000 rows per transaction), not over HTTP: only the reads below are measured on it;
3. read: p50/p99 of `GET /evaluations/{id}` and of `GET /evaluations/{id}/samples`
   (limit 100) at pages near the start, the middle and the end, one request at a time.

Usage: .venv/bin/python bench/ingest.py [--backend sqlite|postgres|both] [--fill 1000000]
PostgreSQL: --postgres-url URL or PROCTOR_TEST_POSTGRES_URL (a database is created in it).
The report goes to bench/results/ingest.md (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.measure import percentile  # noqa: E402
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http  # noqa: E402

KEY = "pk-bench-0123456789abcdef0123456789"
BATCH = 100


def sample_text(sample_id: str, example_id: int, reward: float) -> str:
    """One sample of about 2 KB, shaped like a real episode record."""
    filler = "The quick brown fox jumps over the lazy dog. " * 30
    return json.dumps(
        {
            "sample_id": sample_id,
            "example_id": example_id,
            "rollout_number": 1,
            "episode_id": sample_id,
            "task": {"idx": example_id, "names": ["Ada Lovelace", "Alan Turing"]},
            "prompt": [],
            "completion": [
                {"role": "user", "content": "Sort these names."},
                {"role": "assistant", "content": filler},
            ],
            "answer": None,
            "reward": reward,
            "metrics": {"num_turns": 1.0},
            "timing": {"start": 1.0, "agent": {"start": 1.0, "end": 2.5}},
            "token_usage": {"prompt_tokens": 120, "completion_tokens": 340},
            "is_completed": True,
            "is_truncated": False,
            "error": None,
            "stop_condition": "agent_completed",
            "alphabet_sort": reward,
        },
        separators=(",", ":"),
    )


def batch_body(prefix: str, start: int) -> bytes:
    samples = [sample_text(f"{prefix}-{start + i}", start + i, (i % 10) / 10) for i in range(BATCH)]
    return ('{"samples":[' + ",".join(samples) + "]}").encode()


def start_server(data_dir: Path, database_url: str | None) -> tuple[ManagedProcess, str]:
    port = free_port()
    env = {"PROCTOR_BOOTSTRAP_KEY": KEY}
    if database_url:
        env["PROCTOR_DATABASE_URL"] = database_url
    args = [*PROCTOR, "server", "--port", str(port), "--data-dir", str(data_dir)]
    args += ["--log-level", "warning"]
    proc = ManagedProcess(args, data_dir / "server.log", env=env).start()
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/healthz", proc=proc.proc, timeout=60)
    return proc, url


def _create(client: httpx.Client, name: str) -> str:
    response = client.post("/evaluations/", json={"name": name, "environments": [], "tags": []})
    response.raise_for_status()
    return str(response.json()["evaluation_id"])


def server_cpu_s(pid: int) -> float:
    """CPU seconds the server process has used so far (user + system)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def measure_ingest(
    url: str, pid: int, writers: int, batches: int, *, shared: bool
) -> dict[str, float]:
    """POST `batches` batches from `writers` threads, into one evaluation each or one shared."""
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=120) as client:
        if shared:
            targets = [_create(client, "bench-shared")] * writers
        else:
            targets = [_create(client, f"bench-own-{w}") for w in range(writers)]
    tag = "s" if shared else "o"
    bodies = [batch_body(f"{tag}{n}", n * BATCH) for n in range(batches)]
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(writers + 1)

    def writer(w: int) -> None:
        with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=120) as client:
            start.wait()
            for body in bodies[w::writers]:
                t0 = time.perf_counter()
                response = client.post(f"/evaluations/{targets[w]}/samples", content=body)
                response.raise_for_status()
                with lock:
                    latencies.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    start.wait()
    cpu0 = server_cpu_s(pid)
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    cpu = server_cpu_s(pid) - cpu0
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers) as client:
        stored = sum(
            client.get(f"/evaluations/{e}").json()["total_samples"] for e in sorted(set(targets))
        )
    assert stored == batches * BATCH, stored
    return {
        "samples": stored,
        "seconds": elapsed,
        "samples_per_s": stored / elapsed,
        "mb_per_s": sum(len(b) for b in bodies) / elapsed / 1e6,
        "batch_p50_ms": percentile(latencies, 0.5) * 1000,
        "batch_p99_ms": percentile(latencies, 0.99) * 1000,
        "server_cpu_ms_per_batch": cpu * 1000 / batches,
        "samples_per_server_cpu_s": stored / cpu,
    }


def fill(database_url: str, evaluation_id: str, total: int) -> float:
    """Grow the evaluation to `total` samples in-process; returns the seconds it took."""
    from proctor.server.db.base import utcnow
    from proctor.server.db.models import Evaluation
    from proctor.server.db.session import Database
    from proctor.server.evaluations import repository

    db = Database(database_url)
    template = sample_text("__ID__", 0, 0.5)
    chunk = 5000
    t0 = time.perf_counter()
    done = 0
    while done < total:
        n = min(chunk, total - done)
        now = utcnow()
        rows: list[dict[str, Any]] = [
            {
                "evaluation_id": evaluation_id,
                "seq": done + i + 1,
                "sample_id": f"fill-{done + i}",
                "example_id": done + i,
                "rollout_number": 1,
                "reward": 0.5,
                "has_error": False,
                "data": template.replace("__ID__", f"fill-{done + i}"),
                "created_at": now,
            }
            for i in range(n)
        ]
        with db.write() as session:
            repository.insert_samples(session, rows)
            evaluation = session.get(Evaluation, evaluation_id)
            assert evaluation is not None
            evaluation.total_samples = done + n
            evaluation.reward_sum += 0.5 * n
            evaluation.reward_count += n
        done += n
    db.dispose()
    return time.perf_counter() - t0


def _timed_gets(client: httpx.Client, pid: int, paths: list[str]) -> tuple[list[float], float]:
    """Latency of each GET, and the server's CPU seconds per request."""
    for path in paths[:20]:  # warm-up
        client.get(path).raise_for_status()
    times = []
    cpu0 = server_cpu_s(pid)
    for path in paths:
        t0 = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - t0)
        response.raise_for_status()
    return times, (server_cpu_s(pid) - cpu0) / len(paths)


def measure_reads(
    url: str, pid: int, evaluation_id: str, total: int, requests: int
) -> dict[str, float]:
    """p50/p99 of the record and of samples pages near the start, middle and end."""
    headers = {"Authorization": f"Bearer {KEY}"}
    rng = random.Random(7)
    pages = max(1, total // 100)
    # Ten neighbouring pages per position, so one hot page does not stand for all of them.
    positions = {"start": 1, "middle": max(1, pages // 2 - 5), "end": max(1, pages - 9)}
    results: dict[str, float] = {}
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=60) as client:
        runs = {"get_evaluation": [f"/evaluations/{evaluation_id}"] * requests}
        for name, first in positions.items():
            runs[f"page_{name}"] = [
                f"/evaluations/{evaluation_id}/samples?page={first + rng.randrange(10)}&limit=100"
                for _ in range(requests)
            ]
        for name, paths in runs.items():
            times, cpu = _timed_gets(client, pid, paths)
            results[f"{name}_server_cpu_ms"] = cpu * 1000
            results[f"{name}_p50_ms"] = percentile(times, 0.5) * 1000
            results[f"{name}_p99_ms"] = percentile(times, 0.99) * 1000
            results[f"{name}_mean_ms"] = statistics.fmean(times) * 1000
        last = client.get(f"/evaluations/{evaluation_id}/samples?page={pages}&limit=100").json()
        assert len(last["samples"]) == min(100, total) and last["total"] == total, last["total"]
    return results


def postgres_database(admin_url: str) -> str:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin_url = admin_url.replace("postgresql://", "postgresql+psycopg://", 1)
    name = f"proctor_bench_{uuid.uuid4().hex[:8]}"
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def drop_postgres_database(url: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    engine = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)'))
    engine.dispose()


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"proctor-bench-{backend}-") as tmp:
        data_dir = Path(tmp)
        if backend == "sqlite":
            database_url = f"sqlite:///{data_dir / 'proctor.db'}"
        else:
            database_url = postgres_database(args.postgres_url)
        proc, url = start_server(data_dir, database_url)
        try:
            ingest: dict[str, dict[str, float]] = {}
            for phase in ("own", "shared"):
                print(
                    f"[{backend}] ingest ({phase} evaluations): "
                    f"{args.writers} writers x {args.batches} batches",
                    flush=True,
                )
                ingest[phase] = measure_ingest(
                    url, proc.pid, args.writers, args.batches, shared=phase == "shared"
                )
                print(f"[{backend}] {ingest[phase]}", flush=True)
            headers = {"Authorization": f"Bearer {KEY}"}
            evaluation_id = httpx.post(
                f"{url}/api/v1/evaluations/",
                json={"name": "bench-read", "environments": [], "tags": []},
                headers=headers,
            ).json()["evaluation_id"]
            print(f"[{backend}] fill to {args.fill} samples (in-process bulk insert)", flush=True)
            fill_s = fill(database_url, evaluation_id, args.fill)
            print(f"[{backend}] filled in {fill_s:.1f}s", flush=True)
            reads = measure_reads(url, proc.pid, evaluation_id, args.fill, args.requests)
            print(f"[{backend}] {reads}", flush=True)
        finally:
            proc.stop()
            if backend == "postgres":
                drop_postgres_database(database_url)
    return {"backend": backend, "ingest": ingest, "fill_s": fill_s, "reads": reads}


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _code_version() -> str:
    """The commit measured, and whether the server's files differ from it."""
    import subprocess

    def git(*argv: str) -> str:
        done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "src/proctor/server")
    return f"{commit}" + (" (server files modified in the working tree)" if dirty else "")


def _load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def report(
    results: list[dict[str, Any]],
    args: argparse.Namespace,
    command: str,
    load_before: str,
    code: str,
) -> str:
    load = _load()
    lines = [
        "# Ingest and read benchmark",
        "",
        f"Command: `{command}`",
        "",
        f"Code: {code}.",
        "",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; load average before the run {load_before}, "
        f"after it {load} (other work shares the cores; the client threads run on them too). "
        "Latencies are wall-clock and include waiting for a core; the server CPU columns "
        "(user + system time of the server process, from psutil) are the cost of the work "
        "itself and depend far less on the load.",
        "",
        f"Ingest: `proctor server` (uvicorn) on loopback; {args.writers} writer threads, "
        f"{args.batches} batches of {BATCH} samples (~2 KB each, ~{BATCH * 2} KB a request) per "
        "phase over HTTP: *own* = each writer its own evaluation, *shared* = all writers into "
        "one evaluation.",
        "",
        "| backend | phase | samples/s | MB/s | batch p50 ms | batch p99 ms | "
        "server CPU ms / batch | samples / server CPU s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for phase, m in r["ingest"].items():
            lines.append(
                f"| {r['backend']} | {phase} | {m['samples_per_s']:,.0f} | {m['mb_per_s']:.1f} | "
                f"{m['batch_p50_ms']:.1f} | {m['batch_p99_ms']:.1f} | "
                f"{m['server_cpu_ms_per_batch']:.1f} | {m['samples_per_server_cpu_s']:,.0f} |"
            )
    lines += [
        "",
        f"Reads with {args.fill:,} samples stored in one evaluation (seeded in-process through "
        "`repository.insert_samples`, the endpoint's bulk insert, not over HTTP), one request "
        f"at a time, {args.requests} requests per row, samples pages of limit 100 drawn from "
        "ten neighbouring pages at each position:",
        "",
        "| backend | request | p50 ms | p99 ms | mean ms | server CPU ms / request |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        reads = r["reads"]
        for name, label in (
            ("get_evaluation", "GET /evaluations/{id}"),
            ("page_start", "samples page, start"),
            ("page_middle", "samples page, middle"),
            ("page_end", "samples page, end"),
        ):
            lines.append(
                f"| {r['backend']} | {label} | {reads[name + '_p50_ms']:.1f} | "
                f"{reads[name + '_p99_ms']:.1f} | {reads[name + '_mean_ms']:.1f} | "
                f"{reads[name + '_server_cpu_ms']:.2f} |"
            )
    lines += ["", "| backend | fill s |", "|---|---:|"]
    lines += [f"| {r['backend']} | {r['fill_s']:.1f} |" for r in results]
    lines += ["", "Goals:", ""]
    for r in results:
        b, reads = r["backend"], r["reads"]
        page_p99 = max(reads[f"page_{p}_p99_ms"] for p in ("start", "middle", "end"))
        if b == "sqlite":
            rate = min(m["samples_per_s"] for m in r["ingest"].values())
            lines.append(
                f"- {b}: >= 5,000 samples/s (slowest phase {rate:,.0f}): {_verdict(rate >= 5000)}"
            )
        lines.append(
            f"- {b}: GET evaluation p99 <= 20 ms ({reads['get_evaluation_p99_ms']:.1f}): "
            f"{_verdict(reads['get_evaluation_p99_ms'] <= 20)}"
        )
        lines.append(
            f"- {b}: samples page p99 <= 50 ms at {args.fill:,} (worst position "
            f"{page_p99:.1f}): {_verdict(page_p99 <= 50)}"
        )
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--writers", type=int, default=6, help="concurrent writer threads")
    parser.add_argument("--batches", type=int, default=300, help="batches of 100 per phase")
    parser.add_argument("--fill", type=int, default=1_000_000, help="samples for the reads")
    parser.add_argument("--requests", type=int, default=300, help="timed requests per row")
    parser.add_argument("--postgres-url", default=os.environ.get("PROCTOR_TEST_POSTGRES_URL"))
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "bench" / "results" / "ingest.md",
        help="where the markdown report goes",
    )
    args = parser.parse_args()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    if "postgres" in backends and not args.postgres_url:
        if args.backend == "postgres":
            parser.error("--postgres-url (or PROCTOR_TEST_POSTGRES_URL) is required")
        print("no PostgreSQL URL given; measuring SQLite only", flush=True)
        backends.remove("postgres")
    load_before, code = _load(), _code_version()
    results = [run_backend(b, args) for b in backends]
    command = ".venv/bin/python bench/ingest.py " + " ".join(
        a if "://" not in a else "URL" for a in sys.argv[1:]
    )
    text = report(results, args, command.strip(), load_before, code)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
