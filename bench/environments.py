"""Environments: sandboxed code execution and judge-graded rollouts.

    .venv/bin/python bench/environments.py [--executions 200] [--rollouts 400]

Sandbox: runs a trivial program (`print(1)`) N times in fresh bubblewrap sandboxes, one at a
time (latency) and `--parallel` at once (throughput), and the same program as a plain,
unsandboxed `python3` subprocess one at a time: the difference is the per-execution overhead
of the sandbox (bwrap's namespaces and mounts, setpriv, prlimit). Then the 164 humaneval
canonical solutions graded in the sandbox (real unit tests).

Judge: serves the demo model in this process (a thread with its own event loop), then runs
the same rollouts of a dataset environment (arithmetic questions the demo model answers)
twice through `Environment.rollout` at concurrency `-c`: graded `exact` (no judge) and graded
`judge` (the demo model as the judge, one extra request per rollout). Reported as rollouts
per second and judge calls' latency. Written to bench/results/environments.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proctor.demo.server import DemoModelConfig, start_server  # noqa: E402
from proctor.envs import Judge, Sandbox, SandboxLimits, load_environment  # noqa: E402
from proctor.envs.builtin import humaneval  # noqa: E402
from proctor.models import ClientConfig, OpenAIChatClient, SamplingConfig  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "environments.md"
PROGRAM = "print(1)\n"


def serve_in_thread() -> str:
    """The demo model on a background event loop; returns its /v1 URL."""
    ready: list[str] = []
    started = threading.Event()

    def main() -> None:
        async def run() -> None:
            _, url = await start_server(DemoModelConfig(port=0))
            ready.append(url)
            started.set()
            await asyncio.Event().wait()

        asyncio.run(run())

    threading.Thread(target=main, daemon=True).start()
    started.wait(30)
    return ready[0]


async def sandbox_figures(executions: int, parallel: int) -> dict[str, Any]:
    sandbox = Sandbox(SandboxLimits(timeout_s=30.0), max_concurrent=parallel)
    sandbox.check()
    # Sequential, interleaved (so load swings hit both alike): latency, sandboxed and not.
    sandboxed, plain = [], []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "main.py"
        script.write_text(PROGRAM)
        for _ in range(executions // 4):
            t = time.perf_counter()
            result = await sandbox.run_python(PROGRAM)
            sandboxed.append(time.perf_counter() - t)
            assert result.ok and result.stdout == "1\n", result
            t = time.perf_counter()
            done = subprocess.run([sandbox.python, str(script)], capture_output=True, check=True)
            plain.append(time.perf_counter() - t)
            assert done.stdout == b"1\n"
    # The sandbox alone, without Python's start-up: /usr/bin/true inside and outside.
    true_sandboxed, true_plain = [], []
    for _ in range(executions // 2):
        t = time.perf_counter()
        result = await sandbox.run({}, ["/usr/bin/true"])
        true_sandboxed.append(time.perf_counter() - t)
        assert result.ok, result
        t = time.perf_counter()
        subprocess.run(["/usr/bin/true"], check=True)
        true_plain.append(time.perf_counter() - t)
    # Parallel: throughput.
    t = time.perf_counter()
    results = await asyncio.gather(*(sandbox.run_python(PROGRAM) for _ in range(executions)))
    wall = time.perf_counter() - t
    assert all(r.ok for r in results)
    # Real grading: every humaneval canonical solution against its unit tests.
    env = load_environment("humaneval", max_concurrent=parallel)
    grade = env.rubric[0].func
    problems = humaneval.read_problems()

    class _Episode:
        trajectory: list[Any] = []

    t = time.perf_counter()
    passed = await asyncio.gather(
        *(
            grade(
                response=p["prompt"] + p["canonical_solution"],
                info={"entry_point": p["entry_point"], "prompt": p["prompt"], "test": p["test"]},
                episode=_Episode(),
            )
            for p in problems
        )
    )
    grading_wall = time.perf_counter() - t
    return {
        "sandboxed_ms": statistics.median(sandboxed) * 1000,
        "sandboxed_p90_ms": statistics.quantiles(sandboxed, n=10)[-1] * 1000,
        "plain_ms": statistics.median(plain) * 1000,
        "true_sandboxed_ms": statistics.median(true_sandboxed) * 1000,
        "true_plain_ms": statistics.median(true_plain) * 1000,
        "parallel": parallel,
        "executions": executions,
        "parallel_per_s": executions / wall,
        "humaneval_passed": int(sum(passed)),
        "humaneval_per_s": len(problems) / grading_wall,
        "humaneval_wall_s": grading_wall,
    }


async def judge_figures(url: str, rollouts: int, concurrency: int) -> dict[str, Any]:
    arithmetic = load_environment("arithmetic").taskset.select(rollouts)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "qa.jsonl"
        data.write_text(
            "".join(json.dumps({"prompt": t.prompt, "answer": t.answer}) + "\n" for t in arithmetic)
        )
        exact = load_environment("dataset", path=str(data), reward="exact")
        judged = load_environment("dataset", path=str(data), reward="judge")
    client = OpenAIChatClient(
        model="demo", client=ClientConfig(base_url=url), max_connections=concurrency
    )
    judge_client = OpenAIChatClient(
        model="demo-judge",
        client=ClientConfig(base_url=url),
        sampling=SamplingConfig(temperature=0.0),
        max_connections=concurrency,
    )
    judged.judge = Judge(judge_client, model="demo-judge", max_concurrent=concurrency)
    figures: dict[str, Any] = {"rollouts": rollouts, "concurrency": concurrency}
    for name, env in [("exact", exact), ("judge", judged)]:
        tasks = env.taskset.select()
        slots = asyncio.Semaphore(concurrency)

        async def one(task: Any, env: Any = env, slots: asyncio.Semaphore = slots) -> Any:
            async with slots:
                return await env.rollout(task, client, episode_id="b", rollout_number=1)

        t = time.perf_counter()
        episodes = await asyncio.gather(*(one(task) for task in tasks))
        wall = time.perf_counter() - t
        assert all(e.ok for e in episodes), [e.error for e in episodes if e.error][:3]
        figures[f"{name}_per_s"] = len(episodes) / wall
        figures[f"{name}_mean_reward"] = sum(e.reward for e in episodes) / len(episodes)
        if name == "judge":
            latencies = [e.trajectory[0]["latency_s"] for e in episodes]
            figures["judge_latency_ms"] = statistics.median(latencies) * 1000
    await client.aclose()
    await judge_client.aclose()
    return figures


def report(command: str, sandbox: dict[str, Any], judge: dict[str, Any]) -> str:
    load = os.getloadavg()
    overhead = sandbox["true_sandboxed_ms"] - sandbox["true_plain_ms"]
    return f"""# Environments benchmark

Command: `{command}` ({platform.machine()}, {os.cpu_count()} cores, Python \
{platform.python_version()}, load average {load[0]:.1f} / {load[1]:.1f} at the end; the \
machine is shared, so compare figures within this report, not across reports).

## Sandboxed code execution (bubblewrap)

| measure | value |
|---|---:|
| one sandboxed execution of `print(1)`, median (sequential) | {sandbox["sandboxed_ms"]:.1f} ms |
| the same, p90 | {sandbox["sandboxed_p90_ms"]:.1f} ms |
| the same program as a plain `python3` subprocess, median | {sandbox["plain_ms"]:.1f} ms |
| `/usr/bin/true` in a sandbox, median | {sandbox["true_sandboxed_ms"]:.1f} ms |
| `/usr/bin/true` as a plain subprocess, median | {sandbox["true_plain_ms"]:.1f} ms |
| **per-execution overhead of the sandbox** (difference of the two `true` medians: bwrap's \
namespaces and mounts, setpriv, prlimit) | **{overhead:.1f} ms** |
| sandboxed executions per second, {sandbox["parallel"]} at once ({sandbox["executions"]} runs) \
| {sandbox["parallel_per_s"]:.1f} /s |
| humaneval: canonical solutions passing their unit tests | {sandbox["humaneval_passed"]} / 164 |
| humaneval: gradings per second, {sandbox["parallel"]} at once | \
{sandbox["humaneval_per_s"]:.1f} /s ({sandbox["humaneval_wall_s"]:.1f} s for 164) |

## Judge-graded rollouts (demo model as model and judge)

{judge["rollouts"]} rollouts of arithmetic questions through the `dataset` environment, \
concurrency {judge["concurrency"]}, the demo model served in this process.

| grading | rollouts per second | mean reward |
|---|---:|---:|
| `exact` (no judge) | {judge["exact_per_s"]:.0f} | {judge["exact_mean_reward"]:.3f} |
| `judge` (one judge request per rollout) | {judge["judge_per_s"]:.0f} | \
{judge["judge_mean_reward"]:.3f} |

Judge-graded throughput is {judge["judge_per_s"] / judge["exact_per_s"]:.2f}x the ungraded \
one (each rollout makes two requests instead of one); median judge call latency \
{judge["judge_latency_ms"]:.1f} ms.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--executions", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--rollouts", type=int, default=400)
    parser.add_argument("-c", "--concurrency", type=int, default=64)
    args = parser.parse_args()
    command = "bench/environments.py " + " ".join(sys.argv[1:])
    url = serve_in_thread()
    sandbox = asyncio.run(sandbox_figures(args.executions, args.parallel))
    judge = asyncio.run(judge_figures(url, args.rollouts, args.concurrency))
    text = report(f".venv/bin/python {command.strip()}", sandbox, judge)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
