"""`proctor hosted run --follow` as a user sees it: the order of what it prints, the whole
failure reason, the hint naming the hosted user's flag, and Ctrl-C leaving the run alone."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.e2e.durability import demo_model as serve_demo_model
from tests.e2e.hosted_helpers import LAUNCHER_ENV, cli_env, hosted_run, wait_closed, wait_status
from tests.support.cli import Finished, cli_in_process
from tests.support.platform import Platform, start_platform
from tests.support.procs import ManagedProcess, free_port

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def platform_for_follow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    plat = start_platform(tmp_path_factory.mktemp("follow-platform"), extra_env=LAUNCHER_ENV)
    yield plat
    plat.process.stop()


FOLLOW = ("-m", "demo", "--follow", "--poll-seconds", "0.2")
"""`hosted_run`'s flags after the environment's."""


def online(platform: Platform) -> dict[str, str]:
    return {"PROCTOR_API_URL": platform.url, "PROCTOR_API_KEY": platform.api_key}


def proctor(platform: Platform, home: Path, *args: str) -> Finished:
    """`proctor hosted run ARGS` in this process (`cli_in_process`), where what it prints is
    the point; where the order of its two streams is, or Ctrl-C, it runs as a process."""
    return cli_in_process("hosted", "run", *args, home=home, env=online(platform))


def test_completed_comes_after_the_sandbox_last_lines_and_paths_open(
    platform_for_follow: Platform, demo_model: str, tmp_path: Path
) -> None:
    run = subprocess.run(
        hosted_run("alphabet-sort", "-n", "2", "-r", "1", "--api-base-url", demo_model),
        env=cli_env(platform_for_follow, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream: the order is what a terminal shows
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout
    evaluation_id = run.stdout.splitlines()[0]
    sandbox, status_and_after = run.stdout.split(f"[COMPLETED] {evaluation_id}\n")
    assert "finalized" in sandbox and "results: " in sandbox
    assert status_and_after.startswith(f"evaluation {evaluation_id}: COMPLETED\n")
    assert "dashboard: http://127.0.0.1:" in status_and_after
    # The sandbox's "results:" path is absolute and there (not relative to its work folder).
    results = Path(re.search(r"^  results: (.+)$", sandbox, re.M).group(1))  # type: ignore[union-attr]
    assert results.is_absolute() and (results / "traces.jsonl").is_file()


def test_a_failure_shows_its_whole_reason_and_the_hosted_flag(
    platform_for_follow: Platform, tmp_path: Path
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    run = proctor(
        platform_for_follow, tmp_path, "reverse-text", "-n", "2", "-r", "1", "--api-base-url",
        nowhere, *FOLLOW,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    evaluation_id = run.stdout.splitlines()[0]
    reason = run.stderr.split(f"evaluation {evaluation_id}: FAILED\n")[1]
    assert reason.startswith("  reason: the sandbox exited with code 1; last output:\n")
    # The lines after the first, where the cause is, are shown too (they were cut before);
    # the hint names the flag a hosted user has.
    assert (
        f"cannot reach the model at {nowhere}: start it or pass --client.base-url "
        "(`proctor hosted run --api-base-url`)"
    ) in reason
    assert "Traceback" not in run.stderr


def test_a_model_url_without_a_scheme_is_refused_before_a_sandbox_starts(
    platform_for_follow: Platform, tmp_path: Path
) -> None:
    client = platform_for_follow.client()
    before = client.get("/evaluations/", params={"limit": 500}).json()["total"]
    run = proctor(
        platform_for_follow, tmp_path, "reverse-text", "--api-base-url", "127.0.0.1:8001/v1",
        *FOLLOW,
    )  # fmt: skip
    assert run.returncode == 1 and run.stdout == ""
    assert "api_base_url must start with http:// or https:// (got '127.0.0.1:8001/v1'); " in (
        run.stderr
    )
    assert "pass --api-base-url http://127.0.0.1:8001/v1" in run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert client.get("/evaluations/", params={"limit": 500}).json()["total"] == before


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A demo model that waits 300 ms before each answer, so a run lasts while it is followed."""
    with serve_demo_model(tmp_path_factory.mktemp("slow-model"), latency_ms=300) as url:
        yield url


@pytest.mark.parametrize("started_ignoring_sigint", [False, True])
def test_ctrl_c_stops_following_only(
    platform_for_follow: Platform, slow_model: str, tmp_path: Path, started_ignoring_sigint: bool
) -> None:
    args = ("reverse-text", "-n", "60", "-r", "1", "-c", "1", "--api-base-url", slow_model)
    command = hosted_run(*args)
    if started_ignoring_sigint:  # as a shell starts a background job (`&`)
        command = ["bash", "-c", 'trap "" INT; exec "$@"', "--", *command]
    follower = ManagedProcess(
        command, tmp_path / "follow.out", env=cli_env(platform_for_follow, tmp_path)
    ).start()
    client = platform_for_follow.client()
    try:
        wait_for(lambda: follower.output().count("\n") >= 1, follower)
        evaluation_id = follower.output().splitlines()[0]
        wait_status(client, evaluation_id, ("RUNNING",))
        follower.signal(signal.SIGINT)  # what Ctrl-C sends the terminal's process group
        assert follower.proc is not None
        assert follower.proc.wait(timeout=30) == 130
        assert follower.output().endswith(
            f"proctor hosted: stopped following; the evaluation goes on — "
            f"`proctor hosted cancel {evaluation_id}` to stop it.\n"
        )
        assert "Traceback" not in follower.output()
        # Nothing was lost: the evaluation still runs, and the command named stops it.
        assert client.get(f"/evaluations/{evaluation_id}").json()["status"] == "RUNNING"
        cancel = cli_in_process(
            "hosted", "cancel", evaluation_id, home=tmp_path, env=online(platform_for_follow)
        )
        assert cancel.returncode == 0, cancel.stderr
        assert wait_closed(client, platform_for_follow, evaluation_id)["status"] == "CANCELLED"
    finally:
        follower.stop()


def wait_for(condition: Callable[[], bool], process: ManagedProcess, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.proc is not None and process.proc.poll() is None, process.output()
        assert time.monotonic() < deadline, process.output()
        time.sleep(0.1)
