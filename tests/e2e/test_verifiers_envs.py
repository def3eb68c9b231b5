"""Real verifiers environments (vendored from the verifiers repository) under `proctor eval`:
each on two workers, pushed to a real platform, with the same rewards and metrics as
`vf-eval` against the deterministic demo model (glossary's run is the docs' worked example);
and a run resumed after Ctrl-C without running an episode twice.

`vf-eval` and `proctor eval` run as their console scripts do (their entry point with its argv,
in its own session, working directory, environment and log), each in a fork of one process per
test worker that imported verifiers and proctor once (`tests/support/forks.py`): the import is
most of either run's CPU (~5 CPU-s)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from tests.envs.verifiers_fixtures import offline_env_args, python_path, write_datasets
from tests.eval.helpers import cli_env, start_demo_model
from tests.support import tools
from tests.support.forks import Forked, ForkServer
from tests.support.platform import Platform, start_platform
from tests.test_docs import ENV_DOC, code_block

from proctor.contract import Sample
from proctor.projection import project_episode

tools.package("verifiers")
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

VF_EVAL = str(Path(sys.executable).parent / "vf-eval")
PROCTOR = str(Path(sys.executable).parent / "proctor")
ENVS = (
    "glossary",
    "scratchpad",
    "reverse-text",
    "alphabet-sort",
    "proposer-solver",
    "kuhn-poker",
    "interception",
    "bash-interception",
    "grayscale-interception",
    "color-codeword",
    "code-golf",
)
"""Every environment of verifiers' `environments/` folder that runs offline (see
`tests/envs/verifiers_envs/README.md` for the others and why not)."""
DEADLINE_S = 600.0
"""Bound on one run: each prepares its harness programs, which is slow on a loaded machine."""


def _environ(**extra: str) -> dict[str, str]:
    return {**cli_env(), "PYTHONPATH": python_path(), "HF_DATASETS_OFFLINE": "1", **extra}


def _start(
    forks: ForkServer, entry: str, argv: list[str], cwd: Path, log: str, **extra: str
) -> Forked:
    """`argv` run by its console script's `entry` point, forked from `forks`."""
    env = {**os.environ, **_environ(**extra)}
    return forks.start(entry, argv, cwd=cwd, log=cwd / log, env=env)


def _vf_eval(forks: ForkServer, args: list[str], cwd: Path, log: str) -> Forked:
    """`vf-eval ARGS` as a user runs it: from the activated venv that installed verifiers,
    whose `bin` holds the `uv` vf-eval prepares its harness programs with. (The test's own
    PATH need not have it: `proctor eval` is checked to find that `uv` unactivated.)"""
    path = f"{Path(VF_EVAL).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return _start(forks, "verifiers.v1.cli.eval.main:main", [VF_EVAL, *args], cwd, log, PATH=path)


def _proctor(forks: ForkServer, args: list[str], cwd: Path, log: str, **extra: str) -> Forked:
    """`proctor ARGS`, as the `proctor` console script runs it."""
    return _start(forks, "proctor.cli.main:main", [PROCTOR, *args], cwd, log, **extra)


def _proctor_eval(
    forks: ForkServer, name: str, cwd: Path, model: str, *flags: str, **extra: str
) -> Forked:
    args = json.dumps(offline_env_args(name, model, write_datasets(cwd)))
    cmd = ["eval", name, "--env-args", args, "--client.base-url", model, "--no-rich"]
    return _proctor(forks, [*cmd, "-o", "out", *flags], cwd, f"proctor-{name}.log", **extra)


def _finish(proc: Forked, timeout: float = DEADLINE_S) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        proc.stop()


def _records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "traces.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


FEW_TASKS = {"grayscale-interception": 1}
"""Environments with fewer tasks than the two each run asks for (both runners run them all)."""
WALL_CLOCK = {"code-golf": {"latency", "fastest"}}
"""Scores that measure wall time (code_golf times each program and rewards the quickest):
never equal across two runs, so left out of the comparison, with the total they enter."""


def _scores(name: str, samples: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Per example: reward, metrics and each reward's score, in example order."""
    timed = WALL_CLOCK.get(name, set())
    rows = []
    for s in samples:
        metrics = {k: v for k, v in s["metrics"].items() if k not in timed}
        scores = {k: v for k, v in s.items() if k not in Sample.model_fields and k not in timed}
        reward = None if timed else s["reward"]
        rows.append((s["example_id"], reward, json.dumps([metrics, scores], sort_keys=True)))
    return sorted(rows)


PRELOAD = (
    "verifiers.v1.cli.eval.main",
    "verifiers.v1.utils.loaders",
    "datasets",
    "verifiers.v1.utils.version",
    "verifiers.v1.tasksets",
    "verifiers.v1.envs.isolated_verifier",
    "proctor.cli.main",
    "proctor.cli.eval_cmd",
    "proctor.eval.runner",
    "proctor.envs.verifiers",
    "proctor.models.openai_client",
    "proctor.runs",
    "proctor.trust",
    "mcp.client.streamable_http",
    "mcp.server.streamable_http_manager",
    "uvicorn.main",
    "anyio._backends._asyncio",
    "multiprocessing.connection",
    "logging.config",
    "logging.handlers",
)
"""What `vf-eval` and `proctor eval` of a verifiers environment import as they run: most of
either's CPU (~5 CPU-s), paid once per test worker by the fork server."""


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """Each `vf-eval` and `proctor eval` a test runs, as its console script runs
    (`verifiers.v1.cli.eval.main:main`, `proctor.cli.main:main`, with its argv, in its own
    session, working directory, environment and log), forked from one process per test
    worker that imported verifiers and proctor once."""
    server = ForkServer(PRELOAD, tmp_path_factory.mktemp("forks") / "server.log", _environ())
    yield server
    server.close()


@pytest.fixture(scope="module")
def plat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    platform = start_platform(tmp_path_factory.mktemp("platform"))
    yield platform
    platform.process.stop()


def _assert_on_platform(plat: Platform, run_dir: Path) -> list[dict[str, Any]]:
    """The run's evaluation is COMPLETED and holds each episode as the projection's sample;
    returns the run's records."""
    records = _records(run_dir)
    eid = tomllib.loads((run_dir / "config.toml").read_text())["run"]["id"]
    with plat.client() as client:
        stored = client.get(f"/evaluations/{eid}/samples", params={"limit": 100}).json()
        evaluation = client.get(f"/evaluations/{eid}").json()
    assert evaluation["status"] == "COMPLETED"
    # The package and version that ran (the vendored folder's pyproject.toml).
    name = records[0]["env"]
    ref = evaluation["environments"][0]["ref"]
    assert ref.endswith(f"/{name}@0.1.0"), ref
    by_id = {s["sample_id"]: s for s in stored["samples"]}
    assert len(by_id) == len(records)
    for record in records:
        expected = project_episode(record["native"], record["rollout_number"])[0]
        sample = by_id[record["id"]]
        for key in ("reward", "metrics", "completion", "stop_condition", "example_id"):
            assert sample[key] == expected[key], key
    return records


def _docs_example() -> list[str]:
    """The arguments of docs/environments.md's worked example after `proctor eval`."""
    command = code_block(ENV_DOC.read_text(), "sh", "proctor eval glossary")
    line = next(x for x in command.splitlines() if x.startswith("proctor eval glossary"))
    return shlex.split(line)[2:]


@pytest.mark.parametrize(
    "name",
    # Two halves, so that xdist's `--dist loadgroup` may run them on two workers, each with
    # its own `plat` (a module-scoped fixture keeps a module on one worker otherwise).
    [
        pytest.param(n, marks=pytest.mark.xdist_group(f"vf-envs-{i % 2}"))
        for i, n in enumerate(ENVS)
    ],
)
def test_proctor_eval_scores_as_vf_eval_does_on_two_workers_onto_the_platform(
    name: str, plat: Platform, forks: ForkServer, demo_model: str, tmp_path: Path
) -> None:
    """glossary runs the docs' worked example as written (two examples on two workers);
    the others two examples of two rollouts each: two examples, so that the comparison is per
    example, and two rollouts, so that each example's group has more than one, on two workers.
    (Fewer than they ran before, on purpose: each further example added harness programs,
    ~1 CPU-s each, and for glossary a tool server that imports verifiers, ~4 CPU-s, on both
    sides, and no behaviour to what the comparison proves.)"""
    ours, theirs = tmp_path / "proctor", tmp_path / "vf-eval"
    ours.mkdir()
    theirs.mkdir()
    data = write_datasets(theirs)
    env_block = offline_env_args(name, demo_model, data)
    env_block["taskset"] = {"id": name, **env_block.get("taskset", {})}
    config = {
        "model": "demo",
        "client": {"base_url": demo_model, "api_key_var": "OPENAI_API_KEY"},
        "env": env_block,
        "sampling": {"temperature": 0},
    }
    (theirs / "eval.toml").write_text(tomli_w.dumps(config))
    examples, rollouts = (2, 1) if name == "glossary" else (2, 2)
    # Both at once: each spends most of its time preparing its harness program.
    vf_flags = ["-n", str(examples), "-r", str(rollouts), "--no-push", "--no-rich", "-o", "out"]
    vf_args = ["@", "eval.toml", *vf_flags, "--run.name", "r"]
    vf_eval = _vf_eval(forks, vf_args, theirs, "vf-eval.log")
    # At temperature 0 the demo model's answer is a function of the request alone.
    pushed = {"PROCTOR_API_URL": plat.url, "PROCTOR_API_KEY": plat.api_key}
    if name == "glossary":
        args = _docs_example()
        assert args[args.index("-w") + 1] == "2" and args[args.index("-n") + 1] == "2"
        args += ["--client.base-url", demo_model, "--no-rich", "-o", "out", "--run.name", "r"]
        cmd = ["eval", *args, "--sampling.temperature", "0"]
        proctor = _proctor(forks, cmd, ours, "proctor.log", **pushed)
    else:
        flags = ["-n", "2", "-r", "2", "-w", "2", "-c", "4", "--sampling.temperature", "0"]
        proctor = _proctor_eval(
            forks, name, ours, demo_model, *flags, "--run.name", "r", "-v", **pushed
        )
    assert _finish(proctor) == 0, proctor.output()
    assert _finish(vf_eval) == 0, vf_eval.output()[-3000:]
    # vf-eval exits 0 with errored rollouts: a broken reference must not pass as a score.
    broken = [r["errors"] for r in _records(theirs / "out" / "r") if not r["ok"]]
    assert not broken, broken
    if name != "glossary":  # the workers are forks of the run, which loaded the environment
        log = (ours / "out" / "r" / "logs" / "eval.log").read_text()
        assert all(f"worker {n} (pid {pid}, forked)" in log for n, pid in _workers(log)), log
        assert len(_workers(log)) == 2, log
    records = _assert_on_platform(plat, ours / "out" / "r")
    examples = min(examples, FEW_TASKS.get(name, examples))
    pairs = [(e, r) for e in range(examples) for r in range(1, rollouts + 1)]
    assert sorted((r["example_id"], r["rollout_number"]) for r in records) == pairs
    ours_samples = [project_episode(r["native"], r["rollout_number"])[0] for r in records]
    theirs_samples = [project_episode(r, 1)[0] for r in _records(theirs / "out" / "r")]
    assert len(ours_samples) == len(theirs_samples) == rollouts * examples
    assert _scores(name, ours_samples) == _scores(name, theirs_samples)


def _workers(log: str) -> list[tuple[str, str]]:
    """(number, pid) of each worker a run's log names."""
    return re.findall(r"worker (\d+) \(pid (\d+)", log)


def _wait_for_lines(path: Path, n: int, proc: Forked) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists() or path.read_bytes().count(b"\n") < n:
        assert time.monotonic() < deadline, f"{path} never reached {n} lines: {proc.output()}"
        time.sleep(0.2)


@pytest.mark.parametrize("name", ["reverse-text", "kuhn-poker"])
def test_a_run_resumes_after_ctrl_c_without_running_an_episode_twice(
    name: str, forks: ForkServer, demo_model: str, tmp_path: Path
) -> None:
    """A single-agent and a two-agent environment (each hand is one episode of two seats)."""
    slow_model, slow = start_demo_model(tmp_path, "--latency-ms", "1500")
    flags = ["-n", "6", "-c", "1", "-w", "1", "--no-push", "--run.name", "r"]
    try:
        first = _proctor_eval(forks, name, tmp_path, slow_model, *flags)
        traces = tmp_path / "out" / "r" / "traces.jsonl"
        try:
            _wait_for_lines(traces, 2, first)
            first.signal(signal.SIGINT)
            assert _finish(first, timeout=60) == 130, first.output()
        finally:
            first.stop()
    finally:
        slow.stop()
    kept = _records(tmp_path / "out" / "r")
    assert 2 <= len(kept) < 6
    second = _proctor_eval(forks, name, tmp_path, demo_model, *flags, "--resume")
    assert _finish(second) == 0, second.output()
    records = _records(tmp_path / "out" / "r")
    pairs = [(r["example_id"], r["rollout_number"]) for r in records]
    assert sorted(pairs) == [(i, 1) for i in range(6)]
    assert {r["id"] for r in kept} <= {r["id"] for r in records}
    assert "Traceback" not in second.output() + os.linesep.join(first.output().splitlines()[-5:])


def test_a_killed_forked_worker_loses_nothing(
    forks: ForkServer, demo_model: str, tmp_path: Path
) -> None:
    """A worker forked from the run (it did not load the environment itself) that dies
    mid-run: its episode in flight runs again on a new worker, and each runs exactly once."""
    slow_model, slow = start_demo_model(tmp_path, "--latency-ms", "1500")
    flags = ["-n", "6", "-c", "2", "-w", "2", "-v", "--no-push", "--run.name", "r"]
    try:
        run = _proctor_eval(forks, "reverse-text", tmp_path, slow_model, *flags)
        try:
            _wait_for_lines(tmp_path / "out" / "r" / "traces.jsonl", 1, run)
            log = (tmp_path / "out" / "r" / "logs" / "eval.log").read_text()
            forked = re.findall(r"worker \d+ \(pid (\d+), forked\)", log)
            assert len(forked) == 2, log
            os.kill(int(forked[0]), signal.SIGKILL)
            assert _finish(run) == 0, run.output()
        finally:
            run.stop()
    finally:
        slow.stop()
    records = _records(tmp_path / "out" / "r")
    assert sorted((r["example_id"], r["rollout_number"]) for r in records) == [
        (i, 1) for i in range(6)
    ]
    assert len({r["id"] for r in records}) == 6
    output = run.output()
    assert "died (signal 9)" in output and "run again on a new worker" in output, output
    assert "run r completed: 6/6 episodes" in output and "Traceback" not in output, output
    log = (tmp_path / "out" / "r" / "logs" / "eval.log").read_text()
    assert len(_workers(log)) == 3, log  # the two it started and the one that replaced the dead
