"""A verifiers environment under `proctor eval` and under `vf-eval`, same model and rollouts.

    .venv-verifiers/bin/python bench/verifiers_eval.py [-n 64] [-r 4] [--concurrency 64 256]

Runs verifiers' `reverse-text` (vendored in tests/envs/verifiers_envs, local data) on the
subprocess runtime against a demo model (`proctor demo-model`, started here), once per
runner and concurrency, one after the other: `vf-eval` (through its env-server pool, its
default) and `proctor eval` (one worker and `-w 2`).
Reports wall time, rollouts per second and CPU seconds per rollout (the runner and every
process it started: harness programs, interception, workers), from `wait4`'s rusage.
Needs `proctor[verifiers]` (run it with that venv's Python). Appends to
bench/results/verifiers_eval.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.envs.verifiers_fixtures import python_path, write_datasets  # noqa: E402
from tests.procs import free_port, wait_http  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "verifiers_eval.md"
BIN = Path(sys.executable).parent
RUNTIME = {"agent": {"runtime": {"type": "subprocess"}}}


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s of the command and its children, exit code)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    code = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=64, help="tasks")
    parser.add_argument("-r", type=int, default=4, help="rollouts per task")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64])
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
    rows = []
    try:
        wait_http(f"{url}/models", proc=demo)
        (work / "eval.toml").write_text(
            f'model = "demo"\n[client]\nbase_url = "{url}"\napi_key_var = "OPENAI_API_KEY"\n'
            f'[env.taskset]\nid = "reverse-text"\ndataset_name = "{data["reverse-text"]["taskset"]["dataset_name"]}"\n'  # noqa: E501
            '[env.agent.runtime]\ntype = "subprocess"\n'
        )
        common = ["-n", str(args.n), "-r", str(args.r), "--no-push", "--no-rich", "-o", "out"]
        for c in args.concurrency:
            vf_eval = [str(BIN / "vf-eval"), "@", "eval.toml"]
            proctor = [str(BIN / "proctor"), "eval", "reverse-text", "--client.base-url", url]
            proctor += ["--env-args", json.dumps(env_args)]
            runs = {
                "vf-eval (its env-server pool)": vf_eval,
                "proctor eval -w 1": [*proctor, "-w", "1"],
                "proctor eval -w 2": [*proctor, "-w", "2"],
            }
            for label, cmd in runs.items():
                shutil.rmtree(work / "out", ignore_errors=True)
                wall, cpu, code = timed([*cmd, *common, "-c", str(c)], work, environ)
                total = args.n * args.r
                rows.append(
                    f"| {label} | {c} | {total} | {wall:.1f} | {total / wall:.2f} | "
                    f"{1000 * cpu / total:.0f} | {code} |"
                )
                print(rows[-1], flush=True)
    finally:
        demo.terminate()
        demo.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    header = (
        f"\n## {time.strftime('%Y-%m-%d %H:%M')} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, load {load[0]:.1f} at the end\n\n"
        f"`bench/verifiers_eval.py -n {args.n} -r {args.r} --concurrency "
        f"{' '.join(map(str, args.concurrency))}`\n\n"
        "| runner | -c | rollouts | wall s | rollouts/s | CPU ms per rollout | exit |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    with RESULTS.open("a") as f:
        f.write(header + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
