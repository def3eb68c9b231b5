"""Rate limits: adaptive concurrency against fixed concurrency, same job, same limit.

    .venv/bin/python bench/rate_limit.py [--rate-limit 100] [--rollouts 1000] [-c 64]

Serves the demo model in this process (a thread with its own event loop) with
`rate_limit=RPS` and 50 ms latency, so its counters say exactly how many requests it
admitted and refused (HTTP 429 with `Retry-After`). Then runs the same
`proctor eval reverse-text` twice, each in a fresh child process: with adaptive concurrency
(the default) and with `--client.no-adaptive-concurrency` (always `-c` in flight).

Per run: throughput (episodes per second of rollouts, first request to last answer) against
the limit, the share of requests the endpoint refused, and episodes that failed for good
(retries spent). Written to bench/results/rate_limit.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.procs import PROCTOR, free_port  # noqa: E402

from proctor.demo.server import DemoModel, DemoModelConfig, start_server  # noqa: E402


@dataclass
class Outcome:
    name: str
    wall_s: float
    episodes: int
    failed: int
    admitted: int
    refused: int

    @property
    def throughput(self) -> float:
        return self.episodes / self.wall_s

    @property
    def refused_share(self) -> float:
        total = self.admitted + self.refused
        return self.refused / total if total else 0.0


def serve_in_thread(model: DemoModel) -> str:
    """Start the demo model on a background event loop; returns its /v1 URL."""
    ready: list[str] = []
    started = threading.Event()

    def main() -> None:
        loop = asyncio.new_event_loop()
        _, url = loop.run_until_complete(start_server(model.config, model=model))
        ready.append(url)
        started.set()
        loop.run_forever()

    threading.Thread(target=main, daemon=True).start()
    started.wait(30)
    return ready[0]


def run(
    name: str, model: DemoModel, url: str, opts: argparse.Namespace, extra: list[str]
) -> Outcome:
    bucket = model.bucket
    assert bucket is not None
    admitted, refused = bucket.admitted, bucket.refused
    workdir = Path(tempfile.mkdtemp(prefix="proctor-ratelimit-"))
    tasks, rollouts = min(opts.rollouts, 1000), max(1, -(-opts.rollouts // 1000))
    args = [*PROCTOR, "eval", "reverse-text", "-n", str(tasks), "-r", str(rollouts),
            "-c", str(opts.concurrency), "--no-push", "--no-rich", "-o", str(workdir),
            "--run.name", "r", "--client.base-url", url, *extra]  # fmt: skip
    if opts.workers is not None:
        args += ["-w", str(opts.workers)]
    subprocess.run(args, check=True, capture_output=True)
    records = [json.loads(line) for line in (workdir / "r" / "traces.jsonl").open()]
    first = min(r["timing"]["start"] for r in records)
    last = max(r["timing"]["end"] for r in records)
    return Outcome(
        name=name,
        wall_s=last - first,
        episodes=sum(1 for r in records if r["error"] is None),
        failed=sum(1 for r in records if r["error"] is not None),
        admitted=bucket.admitted - admitted,
        refused=bucket.refused - refused,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate-limit", type=float, default=100.0, help="requests per second")
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("-c", "--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("-w", "--workers", type=int, help="proctor's -w (default: its own)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/rate_limit.md")
    opts = parser.parse_args()

    model = DemoModel(
        DemoModelConfig(port=free_port(), latency_ms=opts.latency_ms, rate_limit=opts.rate_limit)
    )
    url = serve_in_thread(model)
    load_before = os.getloadavg()
    outcomes = []
    for name, extra in [
        ("adaptive (default)", []),
        ("fixed (--client.no-adaptive-concurrency)", ["--client.no-adaptive-concurrency"]),
    ]:
        time.sleep(1.5)  # let the bucket refill: each run starts from a full second's burst
        outcome = run(name, model, url, opts, extra)
        outcomes.append(outcome)
        print(
            f"{name}: {outcome.throughput:.1f}/s ({outcome.throughput / opts.rate_limit:.0%} "
            f"of the limit), {outcome.refused_share:.1%} refused, {outcome.failed} failed",
            file=sys.stderr,
        )
    report = render(outcomes, opts, load_before)
    print(report)
    opts.out.write_text(report)
    return 0


def render(
    outcomes: list[Outcome], opts: argparse.Namespace, load_before: tuple[float, ...]
) -> str:
    def load(values: tuple[float, ...]) -> str:
        return ", ".join(f"{x:.1f}" for x in values)

    lines = [
        "# Rate limits: adaptive against fixed concurrency",
        "",
        f"`{' '.join(['.venv/bin/python', 'bench/rate_limit.py', *sys.argv[1:]])}` — "
        f"{opts.rollouts} rollouts of `reverse-text` at `-c {opts.concurrency}` against the demo "
        f"model limited to {opts.rate_limit:g} requests/s (token bucket of one second's worth, "
        f"429 with `Retry-After` above it) and answering in {opts.latency_ms:g} ms, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average before {load(load_before)}, after "
        f"{load(os.getloadavg())}.",
        "",
        "| concurrency | episodes/s | of the limit | requests refused (429) | failed episodes "
        "| wall s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.name} | {o.throughput:.1f} | {o.throughput / opts.rate_limit:.0%} | "
            f"{o.refused_share:.1%} ({o.refused} of {o.admitted + o.refused}) | {o.failed} | "
            f"{o.wall_s:.1f} |"
        )
    lines += [
        "",
        "Throughput counts episodes that succeeded, per second from the first request to the "
        "last answer; the burst of the bucket's first second is included, so a long run "
        "approaches the limit from above. Refused: the share of all requests the endpoint "
        "answered 429, retries included.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
