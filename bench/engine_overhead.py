"""Engine overhead: `proctor eval` against a bare `openai` loop, side by side, same invocation.

    .venv/bin/python bench/engine_overhead.py [--rollouts 2000] [--latency-ms 50]

Starts its own demo model (`proctor demo-model --latency-ms 50`) on loopback, then runs, each
in a fresh child process so CPU and memory are measured per row (`os.wait4`):

- `proctor eval reverse-text` (single-turn: request, scoring, trace write, platform hand-off
  with `--no-push`) at `-c 64` and `-c 256`;
- a bare loop: one `AsyncOpenAI` and a semaphore, nothing else, same concurrency, with the
  SDK's default transport and with its aiohttp transport.

Per row: wall time of the rollouts (first request to last answer) against the latency floor
ceil(N/c) x latency, CPU ms per rollout (marginal: minus a 1-rollout run of the same kind),
start-up time (process spawn to first chat request), peak RSS. Results are printed and
written to bench/results/engine_overhead.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.procs import PROCTOR, ManagedProcess, free_port, wait_http  # noqa: E402

BARE_LOOP = r"""
import asyncio, json, sys, time
url, n, c, transport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
import openai
http_client = openai.DefaultAioHttpClient() if transport == "aiohttp" else None
PROMPT = "Reverse the following text character by character: Always soldier brown white."

async def main():
    client = openai.AsyncOpenAI(base_url=url, api_key="x", http_client=http_client)
    sem = asyncio.Semaphore(c)
    starts, ends = [], []
    async def one(i):
        async with sem:
            starts.append(time.time())
            r = await client.chat.completions.create(
                model="demo", messages=[{"role": "user", "content": PROMPT}])
            ends.append(time.time())
            return r.choices[0].message.content
    await asyncio.gather(*(one(i) for i in range(n)))
    print(json.dumps({"first": min(starts), "last": max(ends), "n": len(ends)}))

asyncio.run(main())
"""


@dataclass
class Measure:
    cpu_s: float
    peak_rss_mb: float
    startup_s: float
    wall_s: float
    episodes: int


def run_child(args: list[str], *, env: dict[str, str] | None = None) -> tuple[str, float, float]:
    """Run a child to completion; its stdout, CPU seconds and peak RSS (MB) from wait4."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = out.read().decode(errors="replace")
        errors = err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{args[:4]} exited {proc.returncode}:\n{errors[-2000:]}")
    return text, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure_proctor(url: str, n: int, c: int, workdir: Path) -> Measure:
    tasks, rollouts = min(n, 1000), max(1, math.ceil(n / 1000))
    name = f"bench-{n}-{c}-{time.monotonic_ns()}"
    args = [
        *PROCTOR,
        "eval",
        "reverse-text",
        "-n",
        str(tasks),
        "-r",
        str(rollouts),
        "-c",
        str(c),
        "--no-push",
        "--no-rich",
        "-o",
        str(workdir),
        "--run.name",
        name,
        "--client.base-url",
        url,
    ]
    spawned = time.time()
    _, cpu, rss = run_child(args)
    lines = (workdir / name / "traces.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    first = min(r["timing"]["start"] for r in records)
    last = max(r["timing"]["end"] for r in records)
    errors = sum(1 for r in records if r["error"])
    if errors:
        raise RuntimeError(f"{errors} episodes errored in the proctor run")
    return Measure(cpu, rss, first - spawned, last - first, len(records))


def measure_bare(url: str, n: int, c: int, transport: str) -> Measure:
    spawned = time.time()
    out, cpu, rss = run_child([sys.executable, "-c", BARE_LOOP, url, str(n), str(c), transport])
    result = json.loads(out.strip().splitlines()[-1])
    return Measure(
        cpu, rss, result["first"] - spawned, result["last"] - result["first"], result["n"]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--base-url", help="use this endpoint instead of starting a demo model")
    parser.add_argument(
        "--repeat", type=int, default=2, help="runs per row; the best of them is reported"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/engine_overhead.md")
    opts = parser.parse_args()

    demo: ManagedProcess | None = None
    tmp = Path(tempfile.mkdtemp(prefix="proctor-bench-"))
    if opts.base_url:
        url = opts.base_url
    else:
        port = free_port()
        demo = ManagedProcess(
            [
                *PROCTOR,
                "demo-model",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--latency-ms",
                str(opts.latency_ms),
            ],
            tmp / "demo-model.log",
        ).start()
        url = f"http://127.0.0.1:{port}/v1"
        wait_http(f"{url}/models", proc=demo.proc)
    try:
        systems = {
            "proctor eval": lambda n, c: measure_proctor(url, n, c, tmp),
            "bare openai (default transport)": lambda n, c: measure_bare(url, n, c, "default"),
            "bare openai (aiohttp transport)": lambda n, c: measure_bare(url, n, c, "aiohttp"),
        }
        baselines = {name: best_of(fn, 1, 1, opts.repeat) for name, fn in systems.items()}
        rows = []
        for c in opts.concurrency:
            floor = math.ceil(opts.rollouts / c) * opts.latency_ms / 1000
            for name, fn in systems.items():
                m = best_of(fn, opts.rollouts, c, opts.repeat)
                marginal = (m.cpu_s - baselines[name].cpu_s) / max(1, m.episodes - 1) * 1000
                rows.append((name, c, m, floor, marginal))
                print(
                    f"{name} -c {c}: wall {m.wall_s:.2f}s ({m.wall_s / floor:.1f}x floor), "
                    f"{marginal:.2f} ms CPU/rollout",
                    file=sys.stderr,
                )
    finally:
        if demo is not None:
            demo.stop()
    report = render(rows, baselines, opts)
    print(report)
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(report)
    return 0


def best_of(fn: Callable[[int, int], Measure], n: int, c: int, repeat: int) -> Measure:
    """Each figure's minimum over `repeat` runs (peak RSS: maximum): noise only adds time."""
    runs = [fn(n, c) for _ in range(max(1, repeat))]
    return Measure(
        cpu_s=min(m.cpu_s for m in runs),
        peak_rss_mb=max(m.peak_rss_mb for m in runs),
        startup_s=min(m.startup_s for m in runs),
        wall_s=min(m.wall_s for m in runs),
        episodes=runs[0].episodes,
    )


def render(rows: list, baselines: dict[str, Measure], opts: argparse.Namespace) -> str:
    lines = [
        "# Engine overhead",
        "",
        f"`{' '.join(['.venv/bin/python', 'bench/engine_overhead.py', *sys.argv[1:]])}` — "
        f"best of {opts.repeat} runs per row; {opts.rollouts} single-turn rollouts "
        f"(`reverse-text`), demo model at "
        f"{opts.latency_ms:g} ms latency, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, load average after the "
        f"run {', '.join(f'{x:.1f}' for x in os.getloadavg())} (other work shares the cores), "
        f"niceness {os.nice(0)}.",
        "",
        "| system | -c | wall s | floor s | wall / floor | CPU ms / rollout | start-up s "
        "| peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c, m, floor, marginal in rows:
        lines.append(
            f"| {name} | {c} | {m.wall_s:.2f} | {floor:.2f} | {m.wall_s / floor:.1f}x | "
            f"{marginal:.2f} | {m.startup_s:.2f} | {m.peak_rss_mb:.0f} |"
        )
    lines += ["", "1-rollout baselines (subtracted for the marginal CPU):", ""]
    for name, m in baselines.items():
        lines.append(
            f"- {name}: {m.cpu_s * 1000:.0f} ms CPU, start-up {m.startup_s:.2f} s, "
            f"peak RSS {m.peak_rss_mb:.0f} MB"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
