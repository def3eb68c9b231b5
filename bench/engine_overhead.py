"""Engine overhead: `proctor eval` against its peers, side by side, in one invocation.

    .venv/bin/python bench/engine_overhead.py [--rollouts 2000] [--latency-ms 50]

Starts its own demo model (`proctor demo-model --latency-ms 50`) on loopback, then runs, each
in a fresh child process so CPU and memory are measured per row (`os.wait4`, children
included):

- `proctor eval` single-turn (`reverse-text`: request, scoring, trace write, platform hand-off
  with `--no-push`) at `-c 64 / 256 / 1024` with the default workers (one process on two
  cores), and at `-c 256` with two worker processes (`-w 2`);
- multi-turn (`alphabet-sort`, 1-3 model turns) and tool use (`tool-calc`, a tool call then
  an answer) at `-c 256`: CPU per model turn against the single-turn figure;
- start-up: process spawn to the first chat request of `proctor eval reverse-text`;
- the peers, each from PyPI in its own venv under `bench/.venvs/` (created on first use,
  git-ignored), running the same job: the same 2,000 reverse-text prompts, scored by the
  same `difflib` similarity: inspect-ai, verifiers, a bare `openai` loop (one `AsyncOpenAI`,
  a semaphore), and a raw asyncio floor (HTTP/1.1 over asyncio streams, stdlib only).

`--baseline DIR` adds the single-turn rows run with another checkout's proctor (DIR/src
first on PYTHONPATH; e.g. `git archive main src | tar -x -C DIR`), in the same run: a change's
before and after at the same load. `--peers NAME...` runs only some peers.

Per row: wall time of the rollouts against the latency floor ceil(N/c) x latency, CPU ms per
rollout (marginal: minus a small run of the same kind, which removes imports, start-up and
worker spawn), start-up, peak RSS. Results are printed and written to
bench/results/engine_overhead.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http  # noqa: E402

VENVS = ROOT / "bench" / ".venvs"
PEER_PACKAGES = {
    "openai": ["openai"],
    "inspect-ai": ["inspect-ai==0.3.285", "openai"],
    "verifiers": ["verifiers==0.4.0"],
}

# Each peer gets: base URL, tasks file (JSON list of {prompt, answer}), concurrency. It prints
# one JSON line: {"first": epoch of the first request, "last": of the last answer, "n": ...}.
RAW_FLOOR = r"""
import asyncio, json, sys, time
url, tasks_file, c = sys.argv[1], sys.argv[2], int(sys.argv[3])
tasks = json.load(open(tasks_file))
host, port = url.split("//")[1].split("/")[0].split(":")
path = "/" + url.split("//")[1].split("/", 1)[1].rstrip("/") + "/chat/completions"

async def main():
    pending = iter(tasks)
    first, last, done = [], [], [0]
    async def conn():
        reader, writer = await asyncio.open_connection(host, int(port))
        for task in pending:
            body = json.dumps({"model": "demo",
                               "messages": [{"role": "user", "content": task["prompt"]}]}).encode()
            first.append(time.time())
            head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json"
                    f"\r\nContent-Length: {len(body)}\r\n\r\n")
            writer.write(head.encode() + body)
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reply = json.loads(await reader.readexactly(length))
            reply["choices"][0]["message"]["content"]
            last.append(time.time())
            done[0] += 1
        writer.close()
    await asyncio.gather(*(conn() for _ in range(min(c, len(tasks)))))
    print(json.dumps({"first": min(first), "last": max(last), "n": done[0]}))

asyncio.run(main())
"""

BARE_OPENAI = r"""
import asyncio, difflib, json, sys, time
url, tasks_file, c = sys.argv[1], sys.argv[2], int(sys.argv[3])
tasks = json.load(open(tasks_file))
import openai

async def main():
    # The SDK's default pool keeps only 100 connections alive: at -c 256 the rest are
    # opened and closed per request, and under load their connects time out (5 s). A pool
    # that keeps all c alive is the fair comparison (proctor's keeps -c).
    import httpx2
    limits = httpx2.Limits(max_connections=c, max_keepalive_connections=c)
    client = openai.AsyncOpenAI(base_url=url, api_key="x",
                                http_client=openai.DefaultAsyncHttpxClient(limits=limits))
    sem = asyncio.Semaphore(c)
    starts, ends = [], []
    async def one(task):
        async with sem:
            starts.append(time.time())
            r = await client.chat.completions.create(
                model="demo", messages=[{"role": "user", "content": task["prompt"]}])
            ends.append(time.time())
            text = r.choices[0].message.content or ""
            return difflib.SequenceMatcher(None, text, task["answer"], autojunk=False).ratio()
    await asyncio.gather(*(one(t) for t in tasks))
    print(json.dumps({"first": min(starts), "last": max(ends), "n": len(ends)}))

asyncio.run(main())
"""

INSPECT = r"""
import difflib, json, os, sys, tempfile, time
url, tasks_file, c = sys.argv[1], sys.argv[2], int(sys.argv[3])
tasks = json.load(open(tasks_file))
from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.scorer import Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate

@scorer(metrics=[accuracy()])
def similarity():
    async def score(state: TaskState, target: Target) -> Score:
        got = state.output.completion or ""
        return Score(value=difflib.SequenceMatcher(None, got, target.text, autojunk=False).ratio())
    return score

task = Task(dataset=[Sample(input=t["prompt"], target=t["answer"]) for t in tasks],
            solver=generate(), scorer=similarity())
os.environ.setdefault("OPENAI_API_KEY", "x")
first = time.time()
logs = inspect_eval(task, model="openai/demo", model_base_url=url, max_connections=c,
                    max_samples=c, model_args={"responses_api": False}, display="none",
                    log_dir=tempfile.mkdtemp(), max_retries=0)
last = time.time()
assert logs[0].status == "success", logs[0].status
print(json.dumps({"first": first, "last": last, "n": len(logs[0].samples or tasks)}))
"""

VERIFIERS = r"""
import asyncio, difflib, json, os, sys, tempfile, time, types
url, tasks_file, c = sys.argv[1], sys.argv[2], int(sys.argv[3])
tasks = json.load(open(tasks_file))
import httpx
import verifiers.v1 as vf
from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig

class ReverseData(vf.TaskData):
    answer: str

class ReverseTask(vf.Task[ReverseData]):
    @vf.reward(weight=1.0)
    async def similarity(self, trace: vf.Trace) -> float:
        return difflib.SequenceMatcher(None, trace.last_reply, self.data.answer,
                                       autojunk=False).ratio()

class ReverseTaskset(vf.Taskset[ReverseTask, vf.TasksetConfig]):
    def load(self):
        return [ReverseTask(ReverseData(prompt=t["prompt"], answer=t["answer"]),
                            self.config.task) for t in tasks]

http = None

class InProcessHarness(vf.Harness[vf.HarnessConfig]):
    # verifiers.v1.harness.Harness.launch: "a harness may run its loop in-process instead of
    # launching a program, as long as every model call goes through `endpoint` + `secret`".
    # The stock single-turn harness (`null`) launches a PEP 723 chat program through `uv`
    # per rollout; this one makes its one chat call from here, through the interception.
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def setup(self, runtime):
        pass

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data):
        global http
        if http is None:  # a pool that keeps all c connections alive, as for the loops
            limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
            http = httpx.AsyncClient(limits=limits, timeout=60)
        reply = await http.post(
            endpoint.rstrip("/") + "/chat/completions",
            headers={"Authorization": f"Bearer {secret}"},
            json={"model": ctx.model, "messages": [{"role": "user", "content": data.prompt}]})
        reply.raise_for_status()
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")

# verifiers loads tasksets and harnesses as plugins by module name; a taskset module that
# also exports a Harness makes it the default harness of its agent.
plugin = types.ModuleType("proctor_bench")
plugin.ReverseTaskset, plugin.InProcessHarness = ReverseTaskset, InProcessHarness
plugin.__all__ = ["ReverseTaskset", "InProcessHarness"]
sys.modules["proctor_bench"] = plugin
config = EvalConfig.model_validate({
    "env": {"taskset": {"id": "proctor_bench"},
            "agent": {"runtime": {"type": "subprocess"}}},  # default: a Prime sandbox
    "model": "demo", "client": {"base_url": url, "api_key_var": "OPENAI_API_KEY"},
    "max_concurrent": c, "rich": None, "push": False, "output_dir": tempfile.mkdtemp()})
first = time.time()
episodes = asyncio.run(run_eval(config))  # what `vf-eval` runs: interception, trace, scoring
last = time.time()
traces = [t for e in episodes for t in e.traces]
failed = [t for t in traces if t.has_error]
assert not failed, failed[0].last_error
assert all(t.last_reply for t in traces), "a rollout's trace has no reply"
print(json.dumps({"first": first, "last": last, "n": len(traces)}))
"""

PEERS: dict[str, tuple[str, str | None]] = {
    "raw asyncio floor": (RAW_FLOOR, None),
    "bare openai loop": (BARE_OPENAI, "openai"),
    "inspect-ai": (INSPECT, "inspect-ai"),
    # verifiers 0.4.0 (`verifiers.v1`): its eval runner (`run_eval`, what `vf-eval` runs) with
    # an in-process single-turn harness on the subprocess runtime; see the script above.
    "verifiers": (VERIFIERS, "verifiers"),
}


BASELINE = "proctor single-turn, before"
"""The rows of `--baseline`: the same job with another checkout's proctor."""


@dataclass
class Measure:
    cpu_s: float
    peak_rss_mb: float
    startup_s: float
    wall_s: float
    episodes: int
    turns: int


@dataclass
class Row:
    name: str
    c: int
    m: Measure
    floor: float
    marginal_ms: float
    per_turn_ms: float


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
        raise RuntimeError(f"{args[:4]} exited {proc.returncode}:\n{errors[-3000:]}")
    return text, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure_proctor(
    url: str,
    env: str,
    n: int,
    c: int,
    workdir: Path,
    *,
    workers: int | None = None,
    source: Path | None = None,
) -> Measure:
    per_task = {"reverse-text": 1000, "tool-calc": 1000}.get(env, n)
    tasks, rollouts = min(n, per_task), max(1, math.ceil(n / per_task))
    name = f"bench-{env}-{n}-{c}-{time.monotonic_ns()}"
    args = [*PROCTOR, "eval", env, "-n", str(tasks), "-r", str(rollouts), "-c", str(c),
            "--no-push", "--no-rich", "-o", str(workdir), "--run.name", name,
            "--client.base-url", url]  # fmt: skip
    if workers is not None:
        args += ["-w", str(workers)]
    child_env = None
    if source is not None:  # another checkout's proctor (`--baseline`): its src/ goes first
        child_env = {**os.environ, "PYTHONPATH": str(source / "src")}
    spawned = time.time()
    _, cpu, rss = run_child(args, env=child_env)
    lines = (workdir / name / "traces.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    first = min(r["timing"]["start"] for r in records)
    last = max(r["timing"]["end"] for r in records)
    errors = sum(1 for r in records if r["error"])
    if errors:
        raise RuntimeError(f"{errors} episodes errored in the proctor run")
    turns = sum(r["num_turns"] for r in records)
    return Measure(cpu, rss, first - spawned, last - first, len(records), turns)


def ensure_venv(name: str) -> Path:
    """bench/.venvs/<name> with the peer's packages from PyPI (made once, then reused)."""
    venv = VENVS / name
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if not marker.exists():
        print(f"creating {venv} ({' '.join(PEER_PACKAGES[name])}) ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, *PEER_PACKAGES[name]], check=True)
        marker.write_text("\n".join(PEER_PACKAGES[name]) + "\n")
    return python


def peer_version(name: str, python: Path) -> str:
    package = {"inspect-ai": "inspect_ai"}.get(name, name)
    out = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def measure_peer(
    script: str, python: Path, url: str, tasks_file: Path, n: int, c: int, workdir: Path
) -> Measure:
    tasks = json.loads(tasks_file.read_text())[:n]
    subset = workdir / f"tasks-{n}.json"
    subset.write_text(json.dumps(tasks))
    env = {**os.environ, "OPENAI_API_KEY": "x", "INSPECT_LOG_DIR": str(workdir / "inspect")}
    spawned = time.time()
    out, cpu, rss = run_child([str(python), "-c", script, url, str(subset), str(c)], env=env)
    result = json.loads(out.strip().splitlines()[-1])
    return Measure(
        cpu, rss, result["first"] - spawned, result["last"] - result["first"], result["n"], n
    )


def write_tasks(path: Path, n: int) -> None:
    """The reverse-text prompts proctor runs (1,000 tasks x 2 rollouts for n = 2,000)."""
    from proctor.envs import load_environment

    tasks = load_environment("reverse-text").taskset.select(min(n, 1000))
    rows = [{"prompt": t.prompt, "answer": t.answer} for t in tasks]
    path.write_text(json.dumps((rows * math.ceil(n / len(rows)))[:n]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--peer-concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--no-peers", action="store_true", help="proctor rows only")
    parser.add_argument(
        "--peers", nargs="+", choices=list(PEERS), help="run only these peers (default: all)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also run the single-turn rows with the proctor of this source tree (a checkout "
        "or `git archive` of another commit), in the same run: before/after at the same load",
    )
    parser.add_argument("--base-url", help="use this endpoint instead of starting a demo model")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per row; the best of them is reported"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/engine_overhead.md")
    opts = parser.parse_args()

    demo: ManagedProcess | None = None
    tmp = Path(tempfile.mkdtemp(prefix="proctor-bench-"))
    tasks_file = tmp / "tasks.json"
    write_tasks(tasks_file, opts.rollouts)
    if opts.base_url:
        url = opts.base_url
    else:
        port = free_port()
        demo = ManagedProcess(
            [*PROCTOR, "demo-model", "--host", "127.0.0.1", "--port", str(port),
             "--latency-ms", str(opts.latency_ms)],
            tmp / "demo-model.log",
        ).start()  # fmt: skip
        url = f"http://127.0.0.1:{port}/v1"
        wait_http(f"{url}/models", proc=demo.proc)
    load_before = os.getloadavg()
    n, small = opts.rollouts, 8  # the small run: enough jobs that every worker starts
    rows: list[Row] = []
    versions: dict[str, str] = {}
    failures: list[str] = []

    def add(name: str, c: int, fn: Callable[[int, int], Measure], base: Measure) -> Row:
        m = best_of(fn, n, c, opts.repeat)
        floor = math.ceil(n / c) * opts.latency_ms / 1000
        marginal = (m.cpu_s - base.cpu_s) / max(1, m.episodes - base.episodes) * 1000
        per_turn = (m.cpu_s - base.cpu_s) / max(1, m.turns - base.turns) * 1000
        row = Row(name, c, m, floor, marginal, per_turn)
        rows.append(row)
        print(
            f"{name} -c {c}: wall {m.wall_s:.2f}s ({m.wall_s / floor:.1f}x floor), "
            f"{marginal:.2f} ms CPU/rollout, {per_turn:.2f} ms/turn, load "
            f"{os.getloadavg()[0]:.1f}",
            file=sys.stderr,
        )
        return row

    try:
        startup = best_of(
            lambda k, c: measure_proctor(url, "reverse-text", k, c, tmp), 1, 1, max(3, opts.repeat)
        )
        plan: list[tuple[str, str, list[int], int | None, Path | None]] = [
            ("reverse-text", "proctor single-turn", opts.concurrency, None, None),
            ("reverse-text", "proctor single-turn -w 2", [256], 2, None),
            ("alphabet-sort", "proctor multi-turn", [256], None, None),
            ("tool-calc", "proctor tool", [256], None, None),
        ]
        if opts.baseline:
            baseline = ("reverse-text", BASELINE, opts.concurrency, None, opts.baseline)
            plan.insert(1, baseline)
        for env, label, cs, workers, source in plan:
            for c in cs:

                def fn(
                    k: int,
                    c: int,
                    env: str = env,
                    workers: int | None = workers,
                    source: Path | None = source,
                ) -> Measure:
                    return measure_proctor(url, env, k, c, tmp, workers=workers, source=source)

                base = best_of(fn, small, c, opts.repeat)
                add(label, c, fn, base)
        if not opts.no_peers:
            for name, (script, venv) in PEERS.items():
                if opts.peers and name not in opts.peers:
                    continue
                python = ensure_venv(venv) if venv else Path(sys.executable)
                versions[name] = peer_version(venv, python) if venv else ""
                for c in opts.peer_concurrency:

                    def peer(
                        k: int, c: int, script: str = script, python: Path = python
                    ) -> Measure:
                        return measure_peer(script, python, url, tasks_file, k, c, tmp)

                    try:
                        add(name, c, peer, best_of(peer, small, c, opts.repeat))
                    except RuntimeError as e:  # a peer that fails is a finding, not a crash
                        last = str(e).strip().splitlines()[-1][:200]
                        failures.append(f"{name} at -c {c} failed: {last}")
                        print(failures[-1], file=sys.stderr)
    finally:
        if demo is not None:
            demo.stop()
    report = render(rows, startup, versions, opts, load_before, failures)
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
        turns=runs[0].turns,
    )


def render(
    rows: list[Row],
    startup: Measure,
    versions: dict[str, str],
    opts: argparse.Namespace,
    load_before: tuple[float, float, float],
    failures: list[str],
) -> str:
    def load(values: tuple[float, ...]) -> str:
        return ", ".join(f"{x:.1f}" for x in values)

    by_name = {(r.name, r.c): r for r in rows}
    lines = [
        "# Engine overhead",
        "",
        f"`{shlex.join(['.venv/bin/python', 'bench/engine_overhead.py', *sys.argv[1:]])}` — "
        f"best of {opts.repeat} run(s) per row; {opts.rollouts} rollouts per row, demo model at "
        f"{opts.latency_ms:g} ms latency, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}. Load average (1, 5, "
        f"15 min) before the run {load(load_before)}, after it {load(os.getloadavg())}: other "
        "work shares the cores, so absolute figures are noisy; compare within this run.",
        "",
        "| system | -c | wall s | floor s | wall / floor | CPU ms / rollout | CPU ms / model turn "
        "| start-up s | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        version = f" {versions[r.name]}" if versions.get(r.name) else ""
        lines.append(
            f"| {r.name}{version} | {r.c} | {r.m.wall_s:.2f} | {r.floor:.2f} | "
            f"{r.m.wall_s / r.floor:.1f}x | {r.marginal_ms:.2f} | {r.per_turn_ms:.2f} | "
            f"{r.m.startup_s:.2f} | {r.m.peak_rss_mb:.0f} |"
        )
    lines += [
        "",
        f"Start-up of `proctor eval reverse-text` (one rollout, process spawn to the first chat "
        f"request, best of {max(3, opts.repeat)}): {startup.startup_s:.2f} s.",
        "",
        "Ratios in this run:",
        "",
    ]
    single = by_name.get(("proctor single-turn", 256))
    for other, c in [
        ("proctor multi-turn", 256),
        ("proctor tool", 256),
    ]:
        row = by_name.get((other, c))
        if single and row:
            lines.append(
                f"- {other}: {row.per_turn_ms / single.per_turn_ms:.2f}x the single-turn CPU "
                f"per model turn ({row.per_turn_ms:.2f} vs {single.per_turn_ms:.2f} ms, -c {c})"
            )
    for c in opts.concurrency:
        ours, before = by_name.get(("proctor single-turn", c)), by_name.get((BASELINE, c))
        if ours and before:
            lines.append(
                f"- -c {c}: CPU per rollout {ours.marginal_ms:.2f} ms against "
                f"{before.marginal_ms:.2f} ms before ({ours.marginal_ms / before.marginal_ms:.2f}x"
                f"), wall {ours.m.wall_s:.2f} s against {before.m.wall_s:.2f} s"
            )
    two = by_name.get(("proctor single-turn -w 2", 256))
    if single and two:
        lines.append(
            f"- workers: -c 256 with two worker processes, wall {two.m.wall_s:.2f} s and "
            f"{two.marginal_ms:.2f} ms CPU per rollout, against {single.m.wall_s:.2f} s and "
            f"{single.marginal_ms:.2f} ms with the default ({os.cpu_count()} cores: "
            "one process)"
        )
    for c in opts.peer_concurrency:
        ours = by_name.get(("proctor single-turn", c))
        if not ours:
            continue
        for name in PEERS:
            peer = by_name.get((name, c))
            if peer:
                lines.append(
                    f"- -c {c}: {name} wall {peer.m.wall_s / ours.m.wall_s:.2f}x proctor's, "
                    f"CPU per rollout {peer.marginal_ms / ours.marginal_ms:.2f}x proctor's"
                )
    lines += [f"- {failure}" for failure in failures]
    lines += [
        "",
        "Wall: proctor and the loops from their first request to their last answer; inspect-ai "
        "and verifiers from the call of their eval function to its return. CPU per rollout: "
        "marginal, the whole process tree (workers included) minus an 8-rollout run of the "
        "same kind, divided by the extra rollouts; per model turn likewise by the extra turns.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
