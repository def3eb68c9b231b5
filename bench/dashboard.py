"""Benchmark of the web dashboard and the statistics API: latency at 100,000+ samples.

Seeds a database directly through the evaluations repository (the same insert the samples
endpoint uses; going through HTTP would only make seeding slower and is not what is
measured): one evaluation of `--samples` samples (~1.2 KB each, a tool-call transcript,
`--rollouts` rollouts per example, 3% errored), plus a second evaluation of the same
environment for compare. Then starts `proctor server` on that database as a subprocess on
loopback, signs in through `/login`, and times each page one request at a time, and the
statistics endpoints (`/api/v1/evaluations/{id}/stats`, `/api/v1/evaluations/compare`).

Figures are the server's own time per page (its `Server-Timing` header) and the client's
wall time over loopback (API endpoints have no `Server-Timing`: their wall time bounds the
server's). The first request of each page is reported apart ("cold") and excluded from
p50/p99. Evaluations are seeded as COMPLETED without the finalize task, so the first view
pays for the statistics a real run computes when it finalizes.

The first evaluation is RUNNING and short of `--stream` samples: they are posted through
the API in batches while the live page is polled as its script does (JSON twin, then the
HTML it redraws from, and the stats API), which gives the poll's wall time while a run
streams in. Then `--cpu-polls` more batches, each stored before the page polls, with the
server process's CPU time read around each request (load-robust: waiting for a core is not
CPU time). Then the pages above, compare sorted over all examples, the statistics' CPU time
in this process (from the running tallies, and once recounted from the samples), and the
first views after a server restart (`--live-only` stops after the live phases).

`--baseline DIR` serves another checkout's proctor (DIR/src first on PYTHONPATH) on its own
copy of the same database and runs the live phases against both servers, taking turns, so
a before/after comparison shares the machine's load. `--seed-dir` seeds SQLite once and
copies it per run (a 1M-sample seed takes minutes).

Usage: .venv/bin/python bench/dashboard.py [--samples 100000] [--repeat 30]
       [--stream 20000] [--batch 250] [--cpu-polls 40] [--live-only]
       [--baseline DIR [--rounds 4]] [--seed-dir DIR]
       [--database-url postgresql://...] [--out bench/results/dashboard.md [--append]]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.measure import percentile  # noqa: E402
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http  # noqa: E402

from proctor.server.auth import service as auth  # noqa: E402
from proctor.server.db.base import utcnow  # noqa: E402
from proctor.server.db.models import Evaluation  # noqa: E402
from proctor.server.environments import service as environments  # noqa: E402
from proctor.server.environments.schemas import ResolveRequest  # noqa: E402
from proctor.server.evaluations import repository, tallies  # noqa: E402
from proctor.server.evaluations import service as evaluations  # noqa: E402
from proctor.server.evaluations import stats as evaluation_stats  # noqa: E402
from proctor.server.evaluations.schemas import CreateEvaluation, EnvironmentRef  # noqa: E402
from proctor.server.settings import Settings  # noqa: E402
from proctor.server.setup import open_database  # noqa: E402
from proctor.server.web import histograms  # noqa: E402

KEY = "pk-bench-dashboard-0123456789abcdef"
CHUNK = 5000


def _sample(index: int, rollouts: int, rng: random.Random) -> dict[str, Any]:
    example, rollout = divmod(index, rollouts)
    reward = 1.0 if rng.random() < 0.6 else round(rng.random() * 0.8, 3)
    call_id = f"call_{index}"
    return {
        "sample_id": f"b-{index}",
        "example_id": example,
        "rollout_number": rollout + 1,
        "task": {"index": example, "prompt": f"Sort these words: {' '.join(['delta'] * 8)}"},
        "prompt": [
            {"role": "system", "content": "You sort words alphabetically. Use the tool."},
            {"role": "user", "content": f"Sort: kiwi apple mango banana cherry #{example}"},
        ],
        "completion": [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "sort_words", "arguments": '{"words": ["kiwi"]}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": "apple banana cherry kiwi"},
            {"role": "assistant", "content": "apple banana cherry kiwi mango " * 4},
        ],
        "answer": "apple banana cherry kiwi mango",
        "reward": reward,
        "alphabet_sort": reward,
        "metrics": {"num_tool_calls": 1, "length": 5},
        "timing": {"generation_ms": rng.random() * 900, "scoring_ms": 0.4},
        "token_usage": {"prompt_tokens": 84, "completion_tokens": 41},
        "error": {"type": "ModelError", "message": "timed out"} if rng.random() < 0.03 else None,
        "num_turns": 2,
    }


def seed(
    settings: Settings, samples: int, rollouts: int, name: str, *, status: str = "COMPLETED"
) -> str:
    """Create one evaluation with `samples` samples in `status`; returns its id.

    Each chunk is inserted and folded into the running statistics in one transaction, as
    the samples endpoint does.
    """
    db = open_database(settings)
    rng = random.Random(name)
    with db.write() as session:
        auth.ensure_bootstrap_key(session, KEY)
    with db.write() as session:
        principal = auth.authenticate(session, KEY)
        env, _ = environments.resolve(
            session, principal, ResolveRequest(name="alphabet-sort"), settings
        )
        payload = CreateEvaluation(
            name=name, model_name="demo", environments=[EnvironmentRef(id=env.id)]
        )
        evaluation_id = evaluations.create_evaluation(session, principal, payload).id
    seq = 0
    for start in range(0, samples, CHUNK):
        rows, usages = [], []
        for index in range(start, min(start + CHUNK, samples)):
            sample = _sample(index, rollouts, rng)
            usages.append(tallies.usage_of(sample))
            seq += 1
            rows.append(
                {
                    "evaluation_id": evaluation_id,
                    "sample_id": sample["sample_id"],
                    "seq": seq,
                    "example_id": sample["example_id"],
                    "rollout_number": sample["rollout_number"],
                    "reward": sample["reward"],
                    "has_error": sample["error"] is not None,
                    "data": json.dumps(sample, separators=(",", ":")),
                    "created_at": utcnow(),
                }
            )
        with db.write() as session:
            repository.insert_samples(session, rows)
            evaluation = repository.get(session, evaluation_id)
            assert evaluation is not None
            kept = tallies.load(evaluation.tallies) or tallies.Tallies(mark=1.0)
            tallies.fold(session.connection(), evaluation_id, kept, rows, usages)
            evaluation.tallies = kept.to_json()
            # The counters count scored samples only, as the samples endpoint does.
            rewards = [r["reward"] for r in rows if not r["has_error"]]
            evaluation.total_samples = seq
            evaluation.reward_sum += sum(rewards)
            evaluation.reward_count += len(rewards)
            evaluation.min_score = min([*rewards, evaluation.min_score or 1.0])
            evaluation.max_score = max([*rewards, evaluation.max_score or 0.0])
            evaluation.avg_score = evaluation.reward_sum / evaluation.reward_count
    with db.write() as session:
        evaluation = repository.get(session, evaluation_id)
        assert evaluation is not None
        evaluation.status = status
        if status == "COMPLETED":
            evaluation.completed_at = utcnow()
            evaluation.metrics = {"avg_reward": evaluation.avg_score, "avg_metrics": {}}
        else:
            evaluation.started_at = utcnow()
    db.dispose()
    return evaluation_id


def seed_both(settings: Settings, args: argparse.Namespace) -> tuple[str, str]:
    """Seed the live evaluation (RUNNING, `--stream` samples short) and the completed one."""
    big = seed(settings, args.samples - args.stream, args.rollouts, "big", status="RUNNING")
    other = seed(settings, args.samples, args.rollouts, "big-b")
    return big, other


def seeded_copy(args: argparse.Namespace, data_dir: Path) -> tuple[str, str]:
    """A copy of the SQLite database seeded once in `--seed-dir` (seeded there first when
    absent or seeded with other sizes): a 1M-sample seed takes long, and each run streams
    into its live evaluation, so every run starts from a fresh copy of the same seed."""
    seed_dir: Path = args.seed_dir
    marker = seed_dir / "seed.json"
    wanted = {"samples": args.samples, "stream": args.stream, "rollouts": args.rollouts}
    known = json.loads(marker.read_text()) if marker.exists() else {}
    if {k: known.get(k) for k in wanted} != wanted:
        seed_dir.mkdir(parents=True, exist_ok=True)
        (seed_dir / "proctor.db").unlink(missing_ok=True)
        big, other = seed_both(Settings(data_dir=seed_dir, bootstrap_key=KEY), args)
        marker.write_text(json.dumps({**wanted, "ids": [big, other]}))
        known = json.loads(marker.read_text())
    shutil.copyfile(seed_dir / "proctor.db", data_dir / "proctor.db")
    return known["ids"][0], known["ids"][1]


def _percentiles(times: list[float]) -> tuple[float, float, float]:
    cold, warm = times[0], times[1:]
    return cold, statistics.median(warm), percentile(warm, 0.99)


def measure(
    client: httpx.Client, path: str, repeat: int, headers: dict[str, str] | None = None
) -> dict[str, float | None]:
    """Cold time and p50/p99 (ms) of GET `path` (`{i}` in it is replaced by the attempt).

    Both the client's wall time and the server's own time (its `Server-Timing` header).
    """
    wall, server = [], []
    for attempt in range(repeat + 1):
        started = time.perf_counter()
        response = client.get(path.replace("{i}", str(attempt)), headers=headers)
        wall.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"GET {path} answered {response.status_code}: {response.text[:300]}")
        timing = response.headers.get("server-timing")
        if timing:
            server.append(float(timing.partition("dur=")[2]))
    figures: dict[str, float | None] = dict(
        zip(("cold", "p50", "p99"), _percentiles(wall), strict=True)
    )
    server_figures = _percentiles(server) if server else (None, None, None)
    figures.update(zip(("s_cold", "s_p50", "s_p99"), server_figures, strict=True))
    return figures


def stream_and_poll(
    client: httpx.Client,
    evaluation_id: str,
    *,
    first: int,
    count: int,
    rollouts: int,
    batch: int,
    bearer: dict[str, str],
) -> tuple[dict[str, list[float]], list[float]]:
    """Post `count` samples to a RUNNING evaluation in batches of `batch` (a run streaming in)
    while polling its live page as the dashboard's script does; returns the server ms of
    each poll by page (wall ms for the API, which has no Server-Timing) and each batch's ms.
    """
    done = threading.Event()
    ingest: list[float] = []
    failures: list[str] = []

    def stream() -> None:
        rng = random.Random("stream")
        try:
            with httpx.Client(base_url=client.base_url, timeout=300, headers=bearer) as poster:
                for start in range(first, first + count, batch):
                    indices = range(start, min(start + batch, first + count))
                    body = {"samples": [_sample(i, rollouts, rng) for i in indices]}
                    started = time.perf_counter()
                    path = f"/api/v1/evaluations/{evaluation_id}/samples"
                    response = poster.post(path, json=body)
                    ingest.append((time.perf_counter() - started) * 1000)
                    if not response.is_success:
                        failures.append(response.text[:300])
                        return
        finally:
            done.set()

    polls = {
        "live page poll (JSON twin, what the page's script fetches)": (
            f"/evaluations/{evaluation_id}?format=json",
            None,
        ),
        "live page (HTML, fetched to redraw histograms, pass@k, samples)": (
            f"/evaluations/{evaluation_id}",
            None,
        ),
        "stats API (wall)": (f"/api/v1/evaluations/{evaluation_id}/stats", bearer),
    }
    times: dict[str, list[float]] = {name: [] for name in polls}
    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    while not done.is_set():
        for name, (path, headers) in polls.items():
            started = time.perf_counter()
            response = client.get(path, headers=headers)
            wall = (time.perf_counter() - started) * 1000
            if response.status_code != 200:
                raise SystemExit(f"GET {path} answered {response.status_code}")
            timing = response.headers.get("server-timing")
            times[name].append(float(timing.partition("dur=")[2]) if timing else wall)
        time.sleep(0.1)
    thread.join()
    if failures:
        raise SystemExit(f"streaming samples failed: {failures[0]}")
    return times, ingest


def server_cpu_ns(pid: int) -> int:
    """CPU time the process has used so far (ns): the sum over its threads' schedstat (finer
    than the clock ticks of /proc/PID/stat; the server's threads live as long as it does)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that just ended
    return total


def poll_cpu(
    client: httpx.Client,
    pid: int,
    evaluation_id: str,
    *,
    first: int,
    polls: int,
    rollouts: int,
    batch: int,
    bearer: dict[str, str],
) -> dict[str, list[float]]:
    """The server process's CPU ms per live poll: post a batch and wait for it (the cache
    misses, as after every batch of a live run), then poll as the page's script does (the
    JSON twin, then the HTML it redraws from), one request at a time, reading the process's
    CPU time around each request. Waiting for a core does not count, so a loaded machine
    does not inflate it (its wall time, also returned, it does)."""
    rng = random.Random("cpu")
    result: dict[str, list[float]] = {"json": [], "html": [], "poll": [], "poll wall": []}
    for index in range(polls):
        start = first + index * batch
        body = {"samples": [_sample(i, rollouts, rng) for i in range(start, start + batch)]}
        path = f"/api/v1/evaluations/{evaluation_id}/samples"
        response = client.post(path, json=body, headers=bearer)
        if not response.is_success:
            raise SystemExit(f"POST {path} answered {response.status_code}: {response.text[:300]}")
        time.sleep(0.05)  # let the server's threads settle after the write
        wall = time.perf_counter()
        before = server_cpu_ns(pid)
        for name, page in (("json", "?format=json"), ("html", "")):
            at = server_cpu_ns(pid)
            answer = client.get(f"/evaluations/{evaluation_id}{page}")
            if answer.status_code != 200:
                raise SystemExit(f"GET /evaluations/{evaluation_id}{page}: {answer.status_code}")
            result[name].append((server_cpu_ns(pid) - at) / 1e6)
        result["poll"].append((server_cpu_ns(pid) - before) / 1e6)
        result["poll wall"].append((time.perf_counter() - wall) * 1000)
    return result


def statistics_cost(settings: Settings, evaluation_id: str, repeat: int) -> dict[str, list[float]]:
    """CPU ms of one poll's statistics (headline, pass@k, both histograms, errored counts),
    computed in this process from the tallies and, once, recounted from the samples.

    The thread's CPU time is what a poll costs the server whatever else shares the machine
    (the wall time of a page on a loaded box is mostly waiting for a core).
    """
    db = open_database(settings)
    costs: dict[str, list[float]] = {}
    for label, recount, times in (("from the tallies", False, repeat), ("recounted", True, 1)):
        for _ in range(times):
            with db.read() as session:
                evaluation = session.get(Evaluation, evaluation_id)
                assert evaluation is not None
                if recount:
                    session.expunge(evaluation)
                    evaluation.tallies = None
                started = time.thread_time()
                evaluation_stats._compute(session, evaluation, 1.0, "default")
                histograms.reward_histogram(session, evaluation)
                histograms.example_summary(session, evaluation, threshold=1.0)
                service_counts = (
                    evaluations.count_errored(session, evaluation),
                    evaluations.errored_examples(session, evaluation),
                )
                assert service_counts[0] >= 0
                costs.setdefault(label, []).append((time.thread_time() - started) * 1000)
    db.dispose()
    return costs


def _spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), percentile(values, 0.99), max(values)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


THIS, BASELINE = "this checkout", "baseline"


def pages_and_api(
    client: httpx.Client,
    args: argparse.Namespace,
    big: str,
    other: str,
    middle: int,
    bearer: dict[str, str],
) -> dict[str, dict[str, float | None]]:
    """Cold time and p50/p99 of each page and statistics endpoint."""

    pages = {
        "evaluation page (HTML)": f"/evaluations/{big}",
        "evaluation page (JSON twin)": f"/evaluations/{big}?format=json",
        # A new pass threshold per request misses the statistics cache every time.
        "evaluation page, statistics uncached": (f"/evaluations/{big}?pass_threshold=0.9{{i}}"),
        "samples page 1": f"/evaluations/{big}/samples",
        "samples page 1000 (seq range)": f"/evaluations/{big}/samples?page=1000",
        "samples sorted by reward": f"/evaluations/{big}/samples?sort=-reward",
        "samples errored only": f"/evaluations/{big}/samples?errored=yes",
        "samples of one example": f"/evaluations/{big}/samples?example=777",
        "sample page": f"/evaluations/{big}/samples/b-{middle}",
        "evaluations list": "/evaluations",
        f"compare (2 x {args.samples:,}, page 1)": f"/compare?ids={big},{other}",
        "compare sorted by B - A over all examples": (f"/compare?ids={big},{other}&sort=diff"),
        "compare sorted by widest spread over all examples": (
            f"/compare?ids={big},{other}&sort=spread"
        ),
    }
    uncached = {"evaluation page, statistics uncached"}
    results = {
        name: measure(client, path, args.uncached_repeat if name in uncached else args.repeat)
        for name, path in pages.items()
    }
    api = {
        "stats API": f"/api/v1/evaluations/{big}/stats",
        "stats API, new pass threshold each time (uncached)": (
            f"/api/v1/evaluations/{big}/stats?pass_threshold=0.8{{i}}"
        ),
        f"compare API (2 x {args.samples:,}, paired)": (
            f"/api/v1/evaluations/compare?ids={big},{other}"
        ),
    }
    for name, path in api.items():
        repeat = args.uncached_repeat if "uncached" in name else args.repeat
        results[name] = measure(client, path, repeat, headers=bearer)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument(
        "--uncached-repeat", type=int, default=10, help="repeats of the cache-missing rows"
    )
    parser.add_argument(
        "--stream", type=int, default=20_000, help="samples posted while the live page is polled"
    )
    parser.add_argument("--batch", type=int, default=250, help="samples per streamed batch")
    parser.add_argument("--database-url", default=None)
    parser.add_argument(
        "--seed-dir",
        type=Path,
        default=None,
        help="seed the SQLite database once here and copy it for each run",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout (its src/): run the live phases against it too, interleaved",
    )
    parser.add_argument(
        "--rounds", type=int, default=4, help="live phase: alternate the servers this often"
    )
    parser.add_argument(
        "--cpu-polls", type=int, default=40, help="polls measured for the CPU per poll"
    )
    parser.add_argument(
        "--live-only", action="store_true", help="only the live poll (wall and CPU), no pages"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the report here too")
    parser.add_argument("--append", action="store_true", help="append to --out, not replace")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="proctor-dash-bench-") as tmp:
        data_dir = Path(tmp)
        settings = Settings(
            data_dir=data_dir,
            bootstrap_key=KEY,
            PROCTOR_DATABASE_URL=args.database_url,  # type: ignore[call-arg]
        )
        started = time.perf_counter()
        if args.seed_dir and not args.database_url:
            big, other = seeded_copy(args, data_dir)
        else:
            big, other = seed_both(settings, args)
        seed_s = time.perf_counter() - started
        if args.database_url:
            # What autovacuum does soon after a bulk load (PostgreSQL 13+ vacuums after
            # inserts too): planner statistics, and the visibility map that index-only scans
            # need to skip the table.
            db = open_database(settings)
            with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE samples"))
            db.dispose()
        print(f"seeded 2 x {args.samples:,} samples in {seed_s:.1f} s", file=sys.stderr)

        env = {"PROCTOR_BOOTSTRAP_KEY": KEY}
        if args.database_url:
            env["PROCTOR_DATABASE_URL"] = args.database_url
        bearer = {"Authorization": f"Bearer {KEY}", "Cookie": ""}
        directories = {THIS: data_dir}
        if args.baseline:
            if args.database_url:
                raise SystemExit("--baseline needs SQLite (each server gets its own copy)")
            directories[BASELINE] = data_dir / "baseline"
            directories[BASELINE].mkdir()
            shutil.copyfile(data_dir / "proctor.db", directories[BASELINE] / "proctor.db")

        def start_server(name: str) -> tuple[ManagedProcess, str]:
            port = free_port()
            source = {"PYTHONPATH": str(args.baseline / "src")} if name == BASELINE else {}
            directory = directories[name]
            where = ["--host", "127.0.0.1", "--port", str(port), "--data-dir", str(directory)]
            process = ManagedProcess(
                [*PROCTOR, "server", *where],
                directory / "server.log",
                env={**env, **source},
            )
            process.start()
            url = f"http://127.0.0.1:{port}"
            wait_http(f"{url}/healthz", proc=process.proc, timeout=300)
            return process, url

        def sign_in(client: httpx.Client) -> None:
            login = client.post("/login", data={"api_key": KEY}, follow_redirects=False)
            assert login.status_code == 303, login.text
            # The cookie is Secure (loopback), which httpx's jar only sends over HTTPS.
            client.headers["Cookie"] = login.headers["set-cookie"].split(";", 1)[0]

        servers = {name: start_server(name) for name in directories}
        live_polls: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
        ingest: dict[str, list[float]] = {name: [] for name in servers}
        poll_cpus: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
        results: dict[str, dict[str, float | None]] = {}
        cpu: dict[str, list[float]] = {}
        try:
            # A recount (a pass mark the tallies do not hold) of a 1M-sample run takes long.
            clients = {
                name: httpx.Client(base_url=url, timeout=1800) for name, (_, url) in servers.items()
            }
            for client in clients.values():
                sign_in(client)
                # Warm the server itself (templates compiled, pools open) on the other run,
                # so "cold" below is this evaluation's first view, not the server's.
                for path in (f"/evaluations/{other}", f"/evaluations/{other}/samples/b-1"):
                    assert client.get(path).status_code == 200
            # The live run streams in its last samples in `rounds` parts per server, the
            # servers taking turns, so a change of load hits both alike.
            per_round = max(args.batch, args.stream // args.rounds // args.batch * args.batch)
            first = args.samples - args.stream
            for round_index, start in enumerate(range(first, args.samples, per_round)):
                order = list(servers) if round_index % 2 == 0 else list(reversed(servers))
                for name in order:
                    times, batches = stream_and_poll(
                        clients[name],
                        big,
                        first=start,
                        count=min(per_round, args.samples - start),
                        rollouts=args.rollouts,
                        batch=args.batch,
                        bearer=bearer,
                    )
                    for label, values in times.items():
                        live_polls[name].setdefault(label, []).extend(values)
                    ingest[name].extend(batches)
            # CPU per poll, the servers taking turns every 5 polls.
            for block in range(0, args.cpu_polls, 5):
                for name in servers:
                    measured = poll_cpu(
                        clients[name],
                        servers[name][0].pid,
                        big,
                        first=args.samples + block * args.batch,
                        polls=min(5, args.cpu_polls - block),
                        rollouts=args.rollouts,
                        batch=args.batch,
                        bearer=bearer,
                    )
                    for label, values in measured.items():
                        poll_cpus[name].setdefault(label, []).extend(values)
            for client in clients.values():
                client.close()
            if not args.live_only:
                server, url = servers[THIS]
                middle = args.samples // 2
                with httpx.Client(base_url=url, timeout=1800) as client:
                    sign_in(client)
                    results.update(pages_and_api(client, args, big, other, middle, bearer))
                cpu = statistics_cost(settings, big, args.repeat)
                # A restart empties every in-process cache: the first view reads the tallies.
                server.stop()
                servers[THIS] = server, url = start_server(THIS)
                with httpx.Client(base_url=url, timeout=1800) as client:
                    sign_in(client)
                    after_restart = {
                        "evaluation page (HTML), after a restart": f"/evaluations/{big}",
                        "compare sorted by B - A, after a restart": (
                            f"/compare?ids={big},{other}&sort=diff"
                        ),
                    }
                    for name, path in after_restart.items():
                        results[name] = measure(client, path, args.repeat)
        finally:
            for process, _ in servers.values():
                process.stop()

    backend = "PostgreSQL" if args.database_url else "SQLite"
    flags = (
        f"--samples {args.samples} --rollouts {args.rollouts} --stream {args.stream} "
        f"--batch {args.batch} --cpu-polls {args.cpu_polls}"
        + (
            ""
            if args.live_only
            else f" --repeat {args.repeat} --uncached-repeat {args.uncached_repeat}"
        )
        + (" --live-only" if args.live_only else "")
        + (f" --baseline {args.baseline} --rounds {args.rounds}" if args.baseline else "")
        + (" --database-url ..." if args.database_url else "")
    )
    lines = [
        f"# Dashboard and statistics latency, {args.samples:,} samples per evaluation ({backend})",
        "",
        f"Command: `.venv/bin/python bench/dashboard.py {flags}`",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, "
        f"{platform.system()}; seeding through the repository (not timed here)"
        + ("; VACUUM ANALYZE after seeding." if args.database_url else "."),
        f"Load average when it ended: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
        "(other work shared the machine).",
    ]
    if args.baseline:
        lines.append(
            f"Baseline: the proctor in {args.baseline} (its src/ first on PYTHONPATH), served on "
            "its own copy of the same database, the two servers taking turns."
        )
    for name in live_polls:
        batches = ingest[name]
        lines += [
            "",
            f"Live poll, {name}: while the live run streamed in its last {args.stream:,} "
            f"samples ({args.batch} per batch through `POST /samples`, {len(batches)} batches; "
            f"batch wall p50 / p99 {_spread(batches)[0]:.1f} / {_spread(batches)[1]:.1f} ms), "
            "the page's requests one after the other (server time = `Server-Timing`; a poll "
            "after a new batch misses the statistics cache):",
            "",
            "| live poll | polls | server p50 ms | server p99 ms | max ms |",
            "|---|---:|---:|---:|---:|",
        ]
        for label, values in live_polls[name].items():
            p50, p99, worst = _spread(values)
            lines.append(f"| {label} | {len(values)} | {p50:.1f} | {p99:.1f} | {worst:.1f} |")
    lines += [
        "",
        "Server CPU per live poll: a batch is posted and stored, then the page polls as its "
        "script does (JSON twin, then the HTML it redraws from); the server process's CPU "
        "time (all its threads' schedstat) around each request. Waiting for a core is not "
        "CPU time, so this holds on a loaded machine; wall is the client's, which it is not.",
        "",
        "| server | polls | JSON CPU p50 / p99 ms | HTML CPU p50 / p99 ms | poll CPU p50 / p99 ms "
        "| poll wall p50 / p99 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, measured in poll_cpus.items():
        cells = [
            "{:.1f} / {:.1f}".format(*_spread(measured[key])[:2])
            for key in ("json", "html", "poll", "poll wall")
        ]
        lines.append(f"| {name} | {len(measured['poll'])} | " + " | ".join(cells) + " |")
    if results:
        lines += [
            "",
            "Pages, one request at a time (server time = the page's `Server-Timing` header, "
            "from routing to the rendered response; wall = the client's over loopback; cold = "
            f"first request of that page, p50/p99 over the next {args.repeat} "
            f"({args.uncached_repeat} for the uncached rows)):",
            "",
            "| page | server cold ms | server p50 ms | server p99 ms | wall cold ms "
            "| wall p50 ms | wall p99 ms |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for label, f in results.items():
            lines.append(
                f"| {label} | {_ms(f['s_cold'])} | {_ms(f['s_p50'])} | {_ms(f['s_p99'])} "
                f"| {_ms(f['cold'])} | {_ms(f['p50'])} | {_ms(f['p99'])} |"
            )
    if cpu:
        lines += [
            "",
            "CPU time of one poll's statistics (headline, pass@k, both histograms, errored "
            "counts), computed in the bench's process on the same database (a thread's CPU "
            "time):",
            "",
            "| statistics | runs | CPU p50 ms | CPU p99 ms | max ms |",
            "|---|---:|---:|---:|---:|",
        ]
        for label, values in cpu.items():
            p50, p99, worst = _spread(values)
            lines.append(f"| {label} | {len(values)} | {p50:.1f} | {p99:.1f} | {worst:.1f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        with args.out.open("a" if args.append else "w") as handle:
            handle.write(("\n" if args.append else "") + report)


if __name__ == "__main__":
    main()
