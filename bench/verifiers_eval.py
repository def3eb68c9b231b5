"""A verifiers environment under `proctor eval` and under `vf-eval`, same model and rollouts.

    .venv-verifiers/bin/python bench/verifiers_eval.py [-n 64] [-r 4] [--concurrency 64 256]
        [--repeats 2] [--workers 1] [--vf-compiled] [--profile]

Runs verifiers' `reverse-text` (vendored in tests/envs/verifiers_envs, local data) on the
subprocess runtime against a demo model (`proctor demo-model`, started here). For each repeat
and each concurrency it runs the systems interleaved, `proctor eval` then `vf-eval` (through
its env-server pool, its default), the order swapped on every other repeat, so a change in
the machine's load falls on both. Every run starts from the same cold state: an empty `uv`
cache (`UV_CACHE_DIR`), so each prepares verifiers' harness environment itself, from the
local harness index. `--vf-compiled` adds a `vf-eval` row with `UV_COMPILE_BYTECODE=1` set by
hand, which is what proctor sets by default.

Reports wall time, rollouts per second and CPU per rollout of the runner and every process it
started (from `wait4`'s rusage), split into where it goes: the runner process itself, its
long-lived helper processes (vf-eval's env-server workers, proctor's `-w` workers), and the
rest, which is verifiers' per-rollout harness programs (the chat program: a Python process
per rollout, plus one `uv sync --script` per process that runs rollouts). The split polls the
process tree, so the runner's and helpers' shares are exact to a poll and the harness share is
the remainder. Then it takes one harness program apart: the interpreter's start, importing
its dependencies from source (as each program must where Python may not write bytecode,
`PYTHONDONTWRITEBYTECODE=1`) and from compiled bytecode, and the whole program against the
demo model both ways. `--profile` also runs `proctor eval -w 1` once under cProfile with a
CPU clock and prints where its own process spends it.

Needs `proctor[verifiers]` (run it with that venv's Python) and, offline, the harness index
(`UV_DEFAULT_INDEX`, see docs/environments.md). Appends to bench/results/verifiers_eval.md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.envs.verifiers_fixtures import python_path, write_datasets  # noqa: E402
from tests.support.procs import free_port, wait_http  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "verifiers_eval.md"
BIN = Path(sys.executable).parent
RUNTIME = {"agent": {"runtime": {"type": "subprocess"}}}
POLL_S = 0.2

PROFILE = """\
import cProfile, sys, time
from proctor.cli.main import main
sys.argv = ["proctor", *sys.argv[1:]]
profile = cProfile.Profile(time.process_time)
try:
    profile.runcall(main)
except SystemExit:
    pass
profile.dump_stats({out!r})
"""


class TreeCpu:
    """CPU seconds of a process and of its long-lived helper descendants, polled until it
    exits. A helper is a Python process the runner started itself that is not a harness
    program (whose script lives under verifiers' `runtimes/scripts`): vf-eval's env-server
    workers, proctor's `-w` workers. `uv` and what it starts count with the harness."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.own = 0.0
        self.helpers: dict[int, float] = {}
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while True:
            try:
                times = self.root.cpu_times()
                self.own = times.user + times.system
                children = self.root.children(recursive=True)
            except psutil.Error:
                return
            for child in children:
                try:
                    cmdline = " ".join(child.cmdline())
                    times = child.cpu_times()
                    parent = child.ppid()
                except psutil.Error:  # (it ended between the listing and the reading)
                    continue
                harness = "runtimes/scripts" in cmdline or "uv-script" in cmdline
                if parent == self.root.pid and "python" in cmdline and not harness:
                    self.helpers[child.pid] = times.user + times.system
            time.sleep(POLL_S)

    def join(self) -> None:
        self._thread.join(timeout=5)


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, float, float, int]:
    """(wall s, CPU s of everything, of the runner itself, of its helpers, exit code)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    tree = TreeCpu(proc.pid)
    code = proc.wait()
    wall = time.perf_counter() - t0
    tree.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, tree.own, sum(tree.helpers.values()), code


def cpu_of(cmd: list[str], env: dict[str, str], repeats: int = 5) -> float:
    """Median CPU seconds (user + system, the process and its children) of `cmd`."""
    samples = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True)  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        samples.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(samples)


def harness_breakdown(work: Path, url: str, environ: dict[str, str]) -> list[str]:
    """One harness program taken apart: verifiers' chat program (the `null`/`bash` harness),
    prepared with `uv` as verifiers prepares it, without and with compiled bytecode."""
    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

    from proctor.envs.verifiers._harness_index import script_dependencies

    uv = shutil.which("uv", path=f"{BIN}{os.pathsep}{environ.get('PATH', '')}") or "uv"
    modules = ["openai", "httpx", "certifi", "tenacity", "openai.lib.streaming.chat"]
    deps = ", ".join(script_dependencies(CHAT_PROGRAM_SOURCE))
    rows = []
    for compiled in (False, True):
        folder = work / f"breakdown-{int(compiled)}"
        folder.mkdir()
        script = folder / "chat.py"
        script.write_text(CHAT_PROGRAM_SOURCE)
        env = {**environ, "UV_CACHE_DIR": str(folder / "uv"), "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("UV_COMPILE_BYTECODE", None)
        if compiled:
            env["UV_COMPILE_BYTECODE"] = "1"
        sync = [uv, "sync", "--script", str(script), "-q", "--no-config"]
        subprocess.run(sync, env=env, check=True, capture_output=True)
        find = [uv, "python", "find", "--script", str(script), "--no-config"]
        python = subprocess.run(find, env=env, check=True, capture_output=True, text=True)
        interpreter = python.stdout.strip().splitlines()[-1]
        start = cpu_of([interpreter, "-c", "pass"], env)
        imports = cpu_of([interpreter, "-c", "import " + ", ".join(modules)], env)
        program = [interpreter, str(script), f"--base-url={url}", "--api-key=x",
                   "--model=demo", "--prompt=alpha bravo charlie delta"]  # fmt: skip
        whole = cpu_of(program, env)
        label = "compiled bytecode (`UV_COMPILE_BYTECODE=1`)" if compiled else "sources only"
        rows.append(
            f"| {label} | {1000 * start:.0f} | {1000 * imports:.0f} | {1000 * whole:.0f} | "
            f"{1000 * max(0.0, whole - imports):.0f} |"
        )
        print(rows[-1], flush=True)
    rows.append(f"\n(dependencies: {deps}; imported: {', '.join(modules)})")
    return rows


def profile_proctor(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Where `proctor eval`'s own process spends CPU: the top of a CPU-clock cProfile."""
    out = cwd / "proctor.prof"
    script = cwd / "profile_proctor.py"
    script.write_text(PROFILE.format(out=str(out)))
    subprocess.run([sys.executable, str(script), *cmd[1:]], cwd=cwd, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)  # fmt: skip
    text = io.StringIO()
    stats = pstats.Stats(str(out), stream=text)
    stats.sort_stats("cumulative").print_stats(
        r"proctor/|verifiers/v1/(env|interception|runtimes)", 25
    )
    return text.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=64, help="tasks")
    parser.add_argument("-r", type=int, default=4, help="rollouts per task")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats")
    parser.add_argument("--workers", type=int, nargs="+", default=[1], help="proctor's -w")
    parser.add_argument("--vf-compiled", action="store_true",
                        help="also run vf-eval with UV_COMPILE_BYTECODE=1 set by hand")  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="also profile proctor -w 1")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-verifiers-"))
    data = write_datasets(work, rows=args.n)
    env_args = {**RUNTIME, **data["reverse-text"]}
    port = free_port()
    demo = subprocess.Popen(
        [str(BIN / "proctor"), "demo-model", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    environ = {**os.environ, "PYTHONPATH": python_path(), "HF_DATASETS_OFFLINE": "1"}
    environ.setdefault("OPENAI_API_KEY", "x")
    environ.pop("UV_COMPILE_BYTECODE", None)
    profile = ""
    total = args.n * args.r
    try:
        wait_http(f"{url}/models", proc=demo)
        dataset = data["reverse-text"]["taskset"]["dataset_name"]
        (work / "eval.toml").write_text(
            f'model = "demo"\n[client]\nbase_url = "{url}"\napi_key_var = "OPENAI_API_KEY"\n'
            f'[env.taskset]\nid = "reverse-text"\ndataset_name = "{dataset}"\n'
            '[env.agent.runtime]\ntype = "subprocess"\n'
        )
        write_header(args)
        breakdown = harness_breakdown(work, url, environ)
        with RESULTS.open("a") as f:
            f.write(
                "\nOne harness program (verifiers' chat program), CPU ms, median of 5:\n\n"
                "| its environment | interpreter start | + importing its dependencies | "
                "whole program, one rollout | of which after the imports |\n"
                "|---|---|---|---|---|\n" + "\n".join(breakdown) + "\n\n" + TABLE
            )
        common = ["-n", str(args.n), "-r", str(args.r), "--no-push", "--no-rich", "-o", "out"]
        proctor = [str(BIN / "proctor"), "eval", "reverse-text", "--client.base-url", url]
        proctor += ["--env-args", json.dumps(env_args)]
        vf_eval = [str(BIN / "vf-eval"), "@", "eval.toml"]
        for repeat in range(args.repeats):
            for c in args.concurrency:
                runs: list[tuple[str, list[str], dict[str, str]]] = [
                    (f"proctor eval -w {w}", [*proctor, "-w", str(w)], {}) for w in args.workers
                ]
                vf = [("vf-eval", vf_eval, {})]
                if args.vf_compiled:
                    vf.append(("vf-eval, UV_COMPILE_BYTECODE=1", vf_eval,
                               {"UV_COMPILE_BYTECODE": "1"}))  # fmt: skip
                runs = [*runs, *vf] if repeat % 2 == 0 else [*vf, *runs]
                for label, cmd, extra in runs:
                    shutil.rmtree(work / "out", ignore_errors=True)
                    uv_cache = work / "uv-cache"
                    shutil.rmtree(uv_cache, ignore_errors=True)
                    env = {**environ, "UV_CACHE_DIR": str(uv_cache), **extra}
                    wall, cpu, own, helpers, code = timed([*cmd, *common, "-c", str(c)], work, env)
                    harness = max(0.0, cpu - own - helpers)
                    row = (
                        f"| {repeat + 1} | {label} | {c} | {total} | {wall:.1f} | "
                        f"{total / wall:.2f} | {1000 * cpu / total:.0f} | "
                        f"{1000 * own / total:.0f} | {1000 * helpers / total:.0f} | "
                        f"{1000 * harness / total:.0f} | {code} |"
                    )
                    print(row, flush=True)
                    with RESULTS.open("a") as f:
                        f.write(row + "\n")
        if args.profile:
            shutil.rmtree(work / "out", ignore_errors=True)
            c = args.concurrency[0]
            profile = profile_proctor([*proctor, "-w", "1", *common, "-c", str(c)], work, environ)
            print(profile, flush=True)
    finally:
        demo.terminate()
        demo.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    with RESULTS.open("a") as f:
        f.write(f"\nLoad {load[0]:.1f} at the end.\n")
        if profile:
            f.write("\n`proctor eval -w 1`'s own process (cProfile, CPU clock):\n\n```\n")
            f.write(profile.strip() + "\n```\n")


TABLE = (
    "| repeat | runner | -c | rollouts | wall s | rollouts/s | CPU ms per rollout | "
    "of which: runner process | its helpers | harness programs | exit |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|\n"
)


def write_header(args: argparse.Namespace) -> None:
    load = os.getloadavg()
    with RESULTS.open("a") as f:
        f.write(
            f"\n## {time.strftime('%Y-%m-%d %H:%M')} UTC, {platform.node()}, "
            f"{os.cpu_count()} cores, load {load[0]:.1f} at the start\n\n"
            f"`bench/verifiers_eval.py -n {args.n} -r {args.r} --concurrency "
            f"{' '.join(map(str, args.concurrency))} --repeats {args.repeats} --workers "
            f"{' '.join(map(str, args.workers))}{' --vf-compiled' if args.vf_compiled else ''}"
            f"{' --profile' if args.profile else ''}`, "
            f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '(unset)')}\n"
        )


if __name__ == "__main__":
    main()
