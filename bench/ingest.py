"""Benchmark of the platform server: sample ingest rate and read latency at 1M samples.

Starts `proctor server` as a subprocess on loopback (SQLite in a temp dir; PostgreSQL in a
fresh database when a URL is given), then measures:

1. ingest: several writer threads POST batches of 100 samples of ~2 KB each to one
   evaluation over HTTP; reports samples/s over the whole run and per-batch latency;
2. fill: the evaluation is grown to `--fill` samples in-process through the same repository
   function the endpoint uses (HTTP would only make the fill slower; it is not measured);
3. read: p50/p99 of `GET /evaluations/{id}` and of `GET /evaluations/{id}/samples` at a
   random page (limit 100) with that many samples stored, one request at a time.

Usage: .venv/bin/python bench/ingest.py [--backend sqlite|postgres|both] [--fill 1000000]
PostgreSQL: --postgres-url URL or PROCTOR_TEST_POSTGRES_URL (a database is created in it).
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.procs import PROCTOR, ManagedProcess, free_port, wait_http  # noqa: E402

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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


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


def measure_ingest(url: str, writers: int, batches: int) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=120) as client:
        evaluation_id = client.post("/evaluations/", json={"name": "bench-ingest"}).json()[
            "evaluation_id"
        ]
    bodies = [batch_body(f"b{n}", n * BATCH) for n in range(batches)]
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(writers + 1)

    def writer(w: int) -> None:
        with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=120) as client:
            start.wait()
            for body in bodies[w::writers]:
                t0 = time.perf_counter()
                response = client.post(f"/evaluations/{evaluation_id}/samples", content=body)
                response.raise_for_status()
                with lock:
                    latencies.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers) as client:
        stored = client.get(f"/evaluations/{evaluation_id}").json()["total_samples"]
    assert stored == batches * BATCH, stored
    return {
        "samples": stored,
        "seconds": elapsed,
        "samples_per_s": stored / elapsed,
        "mb_per_s": sum(len(b) for b in bodies) / elapsed / 1e6,
        "batch_p50_ms": percentile(latencies, 0.5) * 1000,
        "batch_p99_ms": percentile(latencies, 0.99) * 1000,
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


def measure_reads(url: str, evaluation_id: str, total: int, requests: int) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {KEY}"}
    rng = random.Random(7)
    pages = max(1, total // 100)
    results: dict[str, float] = {}
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=60) as client:
        for name, path in (
            ("get_evaluation", lambda: f"/evaluations/{evaluation_id}"),
            (
                "samples_page",
                lambda: (
                    f"/evaluations/{evaluation_id}/samples?page={rng.randint(1, pages)}&limit=100"
                ),
            ),
        ):
            for _ in range(20):  # warm-up
                client.get(path()).raise_for_status()
            times = []
            for _ in range(requests):
                target = path()
                t0 = time.perf_counter()
                response = client.get(target)
                times.append(time.perf_counter() - t0)
                response.raise_for_status()
            results[f"{name}_p50_ms"] = percentile(times, 0.5) * 1000
            results[f"{name}_p99_ms"] = percentile(times, 0.99) * 1000
            results[f"{name}_mean_ms"] = statistics.fmean(times) * 1000
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
            print(
                f"[{backend}] ingest: {args.writers} writers x {args.batches} batches", flush=True
            )
            ingest = measure_ingest(url, args.writers, args.batches)
            print(f"[{backend}] {ingest}", flush=True)
            headers = {"Authorization": f"Bearer {KEY}"}
            evaluation_id = httpx.post(
                f"{url}/api/v1/evaluations/", json={"name": "bench-read"}, headers=headers
            ).json()["evaluation_id"]
            print(f"[{backend}] fill to {args.fill} samples (in-process)", flush=True)
            fill_s = fill(database_url, evaluation_id, args.fill)
            print(f"[{backend}] filled in {fill_s:.1f}s", flush=True)
            reads = measure_reads(url, evaluation_id, args.fill, args.requests)
            print(f"[{backend}] {reads}", flush=True)
        finally:
            proc.stop()
            if backend == "postgres":
                drop_postgres_database(database_url)
    return {"backend": backend, **ingest, "fill_s": fill_s, **reads}


def report(results: list[dict[str, Any]], args: argparse.Namespace, command: str) -> str:
    lines = [
        "# Ingest and read benchmark",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; other work may share the cores.",
        f"Ingest: {args.writers} concurrent writers, {args.batches} batches of {BATCH} samples "
        "(~2 KB each) over loopback HTTP. Reads: one request at a time, "
        f"{args.requests} each, with {args.fill:,} samples in the evaluation, page limit 100.",
        "",
        "| backend | samples/s | MB/s | batch p50 ms | batch p99 ms | GET eval p50 ms | "
        "GET eval p99 ms | samples page p50 ms | samples page p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['backend']} | {r['samples_per_s']:,.0f} | {r['mb_per_s']:.1f} | "
            f"{r['batch_p50_ms']:.1f} | {r['batch_p99_ms']:.1f} | "
            f"{r['get_evaluation_p50_ms']:.1f} | {r['get_evaluation_p99_ms']:.1f} | "
            f"{r['samples_page_p50_ms']:.1f} | {r['samples_page_p99_ms']:.1f} |"
        )
    lines += [
        "",
        "Goals: >= 5,000 samples/s on SQLite; GET evaluation p99 <= 20 ms and samples page "
        "p99 <= 50 ms at 1M samples.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--fill", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--postgres-url", default=os.environ.get("PROCTOR_TEST_POSTGRES_URL"))
    parser.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    args = parser.parse_args()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    if "postgres" in backends and not args.postgres_url:
        if args.backend == "postgres":
            parser.error("--postgres-url (or PROCTOR_TEST_POSTGRES_URL) is required")
        backends.remove("postgres")
    results = [run_backend(b, args) for b in backends]
    command = "python bench/ingest.py " + " ".join(sys.argv[1:])
    text = report(results, args, command.strip())
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
