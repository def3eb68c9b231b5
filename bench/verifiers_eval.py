"""A verifiers environment under `proctor eval` and under `vf-eval`, same model and rollouts.

    .venv-verifiers/bin/python bench/verifiers_eval.py [-n 32] [-r 8] [--concurrency 64 256]
        [--workers 1 2] [--profile]

Runs verifiers' `reverse-text` (vendored in tests/envs/verifiers_envs, local data) on the
subprocess runtime against a demo model (`proctor demo-model`, started here), for each
concurrency: `vf-eval` (through its env-server pool, its default) and `proctor eval` with
each `--workers` count, one after the other, all in one run so their ratios compare on the
same (shared, noisy) machine.

Reports wall time, rollouts per second and CPU per rollout of the runner and every process it
started (from `wait4`'s rusage), split into where it goes: the runner process itself, its
long-lived helper processes (vf-eval's env-server workers, proctor's `-w` workers), and the
rest, which is verifiers' per-rollout harness programs (`uv sync --script`, then the chat
program: a Python process per agent turn loop). The split polls the process tree, so the
runner's and helpers' shares are exact to a poll and the harness share is the remainder.
`--profile` also runs `proctor eval -w 1` once under cProfile with a CPU clock and prints
where its own process spends it.

Needs `proctor[verifiers]` (run it with that venv's Python). Appends to
bench/results/verifiers_eval.md.
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
from tests.procs import free_port, wait_http  # noqa: E402

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
    """CPU seconds of a process and of its long-lived descendants, polled until it exits."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.own = 0.0
        self.helpers: dict[int, float] = {}
        self._born: dict[int, float] = {}
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
            now = time.monotonic()
            for child in children:
                try:
                    name = " ".join(child.cmdline()[:3])
                    times = child.cpu_times()
                except psutil.Error:
                    continue
                born = self._born.setdefault(child.pid, now)
                # A helper lives for the run (workers, env servers); harness programs and
                # their `uv` steps live for a rollout or less.
                if now - born > 20 and "python" in name and "uv" not in name:
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
    parser.add_argument("-n", type=int, default=32, help="tasks")
    parser.add_argument("-r", type=int, default=8, help="rollouts per task")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--workers", type=int, nargs="+", default=[1], help="proctor's -w")
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
    rows: list[str] = []
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
        common = ["-n", str(args.n), "-r", str(args.r), "--no-push", "--no-rich", "-o", "out"]
        proctor = [str(BIN / "proctor"), "eval", "reverse-text", "--client.base-url", url]
        proctor += ["--env-args", json.dumps(env_args)]
        for c in args.concurrency:
            runs = {"vf-eval (its env-server pool)": [str(BIN / "vf-eval"), "@", "eval.toml"]}
            for w in args.workers:
                runs[f"proctor eval -w {w}"] = [*proctor, "-w", str(w)]
            for label, cmd in runs.items():
                shutil.rmtree(work / "out", ignore_errors=True)
                wall, cpu, own, helpers, code = timed([*cmd, *common, "-c", str(c)], work, environ)
                harness = max(0.0, cpu - own - helpers)
                rows.append(
                    f"| {label} | {c} | {total} | {wall:.1f} | {total / wall:.2f} | "
                    f"{1000 * cpu / total:.0f} | {1000 * own / total:.0f} | "
                    f"{1000 * helpers / total:.0f} | {1000 * harness / total:.0f} | {code} |"
                )
                print(rows[-1], flush=True)
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
    header = (
        f"\n## {time.strftime('%Y-%m-%d %H:%M')} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, load {load[0]:.1f} at the end\n\n"
        f"`bench/verifiers_eval.py -n {args.n} -r {args.r} --concurrency "
        f"{' '.join(map(str, args.concurrency))} --workers {' '.join(map(str, args.workers))}"
        f"{' --profile' if args.profile else ''}`\n\n"
        "| runner | -c | rollouts | wall s | rollouts/s | CPU ms per rollout | of which: "
        "runner process | its helpers | harness programs | exit |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    with RESULTS.open("a") as f:
        f.write(header + "\n".join(rows) + "\n")
        if profile:
            f.write("\n`proctor eval -w 1`'s own process (cProfile, CPU clock):\n\n```\n")
            f.write(profile.strip() + "\n```\n")


if __name__ == "__main__":
    main()
