"""The guard every Ray sandbox runs under, as a real process tree (no Ray needed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from proctor.sandboxes.guard import (
    END_MARKER,
    ENV_METADATA_KEY,
    FILES_METADATA_KEY,
    RAY_JOB_CONFIG,
    WORKDIR_METADATA_KEY,
)
from tests.support import tools
from tests.support.procs import gone, read_pid

GUARD = [sys.executable, "-m", "proctor.sandboxes.guard"]


def _tree(tmp_path: Path) -> str:
    """A command whose grandchild lives on its own: an orphan `sleep` and a waiting child."""
    orphan, child = tmp_path / "orphan", tmp_path / "child"
    return (
        f"sh -c 'sleep 300 & echo $! > {orphan}'; sh -c 'echo $$ > {child}; exec sleep 300' & wait"
    )


def test_a_killed_guard_takes_its_whole_tree_with_it(tmp_path: Path) -> None:
    guard = subprocess.Popen([*GUARD, _tree(tmp_path)], start_new_session=True)
    orphan, child = read_pid(tmp_path / "orphan"), read_pid(tmp_path / "child")
    guard.kill()  # SIGKILL: nothing of the guard's own code runs
    guard.wait()
    assert gone(orphan) and gone(child)


def test_a_stopped_guard_stops_its_tree_and_exits_as_a_shell_would(tmp_path: Path) -> None:
    guard = subprocess.Popen([*GUARD, _tree(tmp_path)], start_new_session=True)
    orphan, child = read_pid(tmp_path / "orphan"), read_pid(tmp_path / "child")
    guard.send_signal(signal.SIGTERM)
    assert guard.wait(timeout=20) == 128 + signal.SIGTERM
    assert gone(orphan) and gone(child)


def test_what_the_command_leaves_behind_ends_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "left"
    done = subprocess.run(
        [*GUARD, f"sleep 300 & echo $! > {pid_file}; exit 3"], timeout=30, check=False
    )
    assert done.returncode == 3
    assert gone(read_pid(pid_file))


def test_the_environment_comes_from_the_job_metadata_and_stays_off_command_lines() -> None:
    metadata = {"launcher": "proctor", ENV_METADATA_KEY: json.dumps({"MODEL_KEY": "s3cret-9"})}
    env = {**os.environ, RAY_JOB_CONFIG: json.dumps({"runtime_env": {}, "metadata": metadata})}
    script = f'echo "key=$MODEL_KEY"; cat /proc/$$/cmdline; echo; echo "${RAY_JOB_CONFIG}"'
    done = subprocess.run(
        [*GUARD, script], env=env, capture_output=True, text=True, timeout=30, check=True
    )
    key, cmdline, config = done.stdout.splitlines()
    assert key == "key=s3cret-9"
    assert "s3cret" not in cmdline
    # Ray's own variable reaches the command without the secrets it carried.
    assert json.loads(config)["metadata"] == {"launcher": "proctor"}


def test_the_files_of_the_job_metadata_are_in_the_commands_working_directory(
    tmp_path: Path,
) -> None:
    metadata = {FILES_METADATA_KEY: json.dumps({"eval.toml": 'env = "reverse-text"\n'})}
    env = {**os.environ, RAY_JOB_CONFIG: json.dumps({"runtime_env": {}, "metadata": metadata})}
    done = subprocess.run(
        [*GUARD, "cat eval.toml"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout == 'env = "reverse-text"\n'


def test_a_ray_job_carries_the_sandbox_files_to_the_guard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Ray backend's half, with the job API stood in for: what it submits is what the
    # guard, started by Ray with that metadata, writes beside the command.
    tools.package("ray.job_submission")
    from proctor.sandboxes.ray_jobs import RaySandbox
    from proctor.sandboxes.sandbox import SandboxSpec

    submitted: dict[str, Any] = {}

    class JobApi:
        def __init__(self, address: str) -> None:
            pass

        def submit_job(self, **kwargs: Any) -> None:
            submitted.update(kwargs)

    monkeypatch.setattr("ray.job_submission.JobSubmissionClient", JobApi)
    files = {"eval.toml": 'env = "reverse-text"\nnum_examples = 2\n'}
    spec = SandboxSpec(evaluation_id="ev-1", command="cat eval.toml", files=files)
    RaySandbox("http://127.0.0.1:9", isolation="none").start(spec)
    job = {"runtime_env": {}, "metadata": submitted["metadata"]}
    done = subprocess.run(
        [*GUARD, "cat eval.toml"],
        env={**os.environ, RAY_JOB_CONFIG: json.dumps(job)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout == files["eval.toml"]


def test_the_command_runs_in_the_work_dir_the_metadata_names(tmp_path: Path) -> None:
    """Where `proctor eval` leaves its run dir: the sandbox's folder, made on the node, not
    the folder Ray started the job in; a folder the node cannot make gives a temporary one."""
    started_in = tmp_path / "ray-cwd"
    started_in.mkdir()
    blocker = tmp_path / "file"
    blocker.write_text("")
    box = tmp_path / "box" / "work"
    for named, expected in ((box, box), (blocker / "work", None)):
        files = json.dumps({"eval.toml": 'env = "reverse-text"\n'})
        metadata = {WORKDIR_METADATA_KEY: str(named), FILES_METADATA_KEY: files}
        env = {**os.environ, RAY_JOB_CONFIG: json.dumps({"metadata": metadata})}
        done = subprocess.run(
            [*GUARD, "pwd; mkdir -p outputs/run-1"],
            env=env,
            cwd=started_in,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        ran_in = Path(done.stdout.strip())
        assert done.stderr.endswith(f"{END_MARKER} 0\n")  # the log's last line
        assert (ran_in / "outputs" / "run-1").is_dir() and (ran_in / "eval.toml").is_file()
        assert list(started_in.iterdir()) == []
        if expected is not None:
            assert ran_in == expected
        else:
            assert "cannot create the work dir" in done.stderr and str(ran_in) in done.stderr
            shutil.rmtree(ran_in)
