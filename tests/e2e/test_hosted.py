"""Hosted evaluations end to end: a real server whose launcher runs `proctor eval` sandboxes
against the demo model, driven over HTTP and through the CLI."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e.durability import demo_model as serve_demo_model
from tests.e2e.hosted_helpers import (
    LAUNCHER_ENV,
    all_command_lines,
    create_hosted,
    group_alive,
    hosted_row,
    wait_closed,
    wait_logs,
    wait_status,
)
from tests.support.cli import Finished, cli_in_process
from tests.support.platform import Platform, start_platform
from tests.support.procs import wait_http

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A demo model that waits 300 ms before each answer, so runs last a few seconds."""
    with serve_demo_model(tmp_path_factory.mktemp("slow-model"), latency_ms=300) as url:
        yield url


@pytest.fixture(scope="module")
def hosted_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """One platform for the tests that do not restart it."""
    plat = start_platform(tmp_path_factory.mktemp("hosted-platform"), extra_env=LAUNCHER_ENV)
    yield plat
    plat.process.stop()


def test_hosted_run_completes_with_all_samples_and_intact_metadata(
    hosted_platform: Platform, demo_model: str
) -> None:
    client = hosted_platform.client()
    before = client.get("/evaluations/", params={"limit": 500}).json()["total"]
    evaluation_id = create_hosted(
        client,
        num_examples=5,
        rollouts_per_example=2,
        api_base_url=demo_model,
        sampling_args={"temperature": 0.5},
    )
    pending = client.get(f"/evaluations/{evaluation_id}").json()
    assert pending["is_hosted"] is True
    assert client.get(f"/hosted-evaluations/{evaluation_id}/logs").json()["ended"] is False
    assert pending["metadata"] == {
        "launcher": "proctor",
        "environment": "alphabet-sort",
        "inference_model": "demo",
        "num_examples": 5,
        "rollouts_per_example": 2,
        "sampling_args": {"temperature": 0.5},
        "env_args": {},
        "api_base_url": demo_model,
        "environment_ref": "proctor/alphabet-sort@0.1.0",  # the built-in's hub entry that ran
    }
    record = wait_closed(client, hosted_platform, evaluation_id)
    assert record["status"] == "COMPLETED", record
    assert record["total_samples"] == 10
    assert record["metadata"] == pending["metadata"]  # the attached run left it alone
    assert record["metrics"]["avg_reward"] > 0
    answer = client.get(f"/hosted-evaluations/{evaluation_id}/logs").json()
    assert "alphabet-sort" in answer["logs"] and "finalized" in answer["logs"]
    assert answer["ended"] is True  # closed by the launcher: the log whole, the status final
    after = client.get("/evaluations/", params={"limit": 500}).json()["total"]
    assert after == before + 1  # the sandbox attached; it opened no second evaluation
    assert hosted_row(hosted_platform, evaluation_id)["exit_code"] == 0


def test_cli_run_follow_logs_and_evals(
    hosted_platform: Platform, demo_model: str, tmp_path: Path
) -> None:
    # The CLI in this process (what it prints is the point); the sandboxes are processes.
    online = {"PROCTOR_API_URL": hosted_platform.url, "PROCTOR_API_KEY": hosted_platform.api_key}

    def proctor(*args: str) -> Finished:
        return cli_in_process(*args, home=tmp_path, env=online)

    follow = ("-m", "demo", "--follow", "--poll-seconds", "0.2")
    run = proctor("hosted", "run", "alphabet-sort", "-n", "3", "-r", "2", "--api-base-url",
                  demo_model, *follow)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    evaluation_id = run.stdout.splitlines()[0].strip()
    assert "finalized" in run.stdout and "COMPLETED" in run.stderr
    got = proctor("evals", "get", evaluation_id)
    assert got.returncode == 0 and json.loads(got.stdout)["total_samples"] == 6
    listed = proctor("evals", "list")
    assert listed.returncode == 0 and evaluation_id in listed.stdout
    logs = proctor("hosted", "logs", evaluation_id)
    assert logs.returncode == 0 and "alphabet-sort" in logs.stdout
    # A finished evaluation cannot be cancelled: one clear line, exit 1.
    cancel = proctor("hosted", "cancel", evaluation_id)
    assert cancel.returncode == 1 and "already ended" in cancel.stderr
    assert "Traceback" not in cancel.stderr


def test_unknown_environment_fails_with_the_exit_code(
    hosted_platform: Platform, demo_model: str
) -> None:
    client = hosted_platform.client()
    # A hub entry with no package and nothing installed under its name (an unknown name is a
    # 404 at create): the sandbox's `proctor eval` exits 2.
    assert client.post("/environmentshub/resolve", json={"name": "no-such-env"}).status_code == 200
    evaluation_id = create_hosted(
        client, "no-such-env", num_examples=2, rollouts_per_example=1, api_base_url=demo_model
    )
    record = wait_closed(client, hosted_platform, evaluation_id)
    assert record["status"] == "FAILED"
    assert "exited with code 2" in record["error_message"]
    assert "no-such-env" in record["error_message"]  # the log's tail names the problem


def test_timeout_kills_the_sandbox(hosted_platform: Platform, slow_model: str) -> None:
    client = hosted_platform.client()
    evaluation_id = create_hosted(
        client,
        num_examples=50,
        rollouts_per_example=1,
        max_concurrent=1,
        api_base_url=slow_model,
        timeout_minutes=0.05,
    )
    wait_status(client, evaluation_id, ("RUNNING",))
    pid = hosted_row(hosted_platform, evaluation_id)["pid"]
    record = wait_closed(client, hosted_platform, evaluation_id)
    assert record["status"] == "TIMEOUT" and "timed out" in record["error_message"]
    assert not group_alive(pid)


def test_cancel_stops_the_sandbox_and_secrets_stay_secret(
    hosted_platform: Platform, slow_model: str
) -> None:
    client = hosted_platform.client()
    secret = "sk-hosted-e2e-secret-5f1c2a"
    evaluation_id = create_hosted(
        client,
        num_examples=50,
        rollouts_per_example=1,
        max_concurrent=1,
        api_base_url=slow_model,
        api_key_var="DEMO_MODEL_KEY",
        custom_secrets={"DEMO_MODEL_KEY": secret},
    )
    wait_status(client, evaluation_id, ("RUNNING",))
    pid = hosted_row(hosted_platform, evaluation_id)["pid"]
    wait_logs(client, evaluation_id, "episodes to run")
    assert group_alive(pid)
    assert secret not in all_command_lines()
    answer = client.patch(f"/hosted-evaluations/{evaluation_id}/cancel")
    assert answer.status_code == 200 and "cancelled" in answer.json()["message"]
    record = wait_closed(client, hosted_platform, evaluation_id)
    assert record["status"] == "CANCELLED"
    assert not group_alive(pid)
    logs = client.get(f"/hosted-evaluations/{evaluation_id}/logs").json()["logs"]
    for text in (logs, json.dumps(record), hosted_platform.process.output()):
        assert secret not in text
    assert hosted_row(hosted_platform, evaluation_id)["secrets"] is None


def test_launcher_killed_and_restarted_mid_run_leaves_nothing_running(
    tmp_path: Path, slow_model: str
) -> None:
    data_dir = tmp_path / "platform-restart"
    data_dir.mkdir()
    plat = start_platform(data_dir, extra_env=LAUNCHER_ENV)
    try:
        client = plat.client()
        survivor = create_hosted(
            client,
            num_examples=12,
            rollouts_per_example=1,
            max_concurrent=1,
            api_base_url=slow_model,
        )
        victim = create_hosted(
            client,
            num_examples=50,
            rollouts_per_example=1,
            max_concurrent=1,
            api_base_url=slow_model,
        )
        for evaluation_id in (survivor, victim):
            wait_status(client, evaluation_id, ("RUNNING",))
            wait_logs(client, evaluation_id, "episodes to run")  # attached: rollouts under way
        # The server (and its launcher) dies; one sandbox dies while it is down.
        plat.process.kill()
        victim_pid = hosted_row(plat, victim)["pid"]
        os.killpg(victim_pid, 9)
        plat.process.start()
        wait_http(f"{plat.url}/healthz", proc=plat.process.proc, timeout=60)
        client = plat.client()
        done = wait_closed(client, plat, survivor, timeout=120)
        assert done["status"] == "COMPLETED" and done["total_samples"] == 12, (
            done["error_message"],
            plat.process.output()[-3000:],
        )
        lost = wait_closed(client, plat, victim, timeout=60)
        assert lost["status"] == "FAILED" and "without an exit code" in lost["error_message"]
        statuses = [e["status"] for e in client.get("/evaluations/").json()["evaluations"]]
        assert "RUNNING" not in statuses and "PENDING" not in statuses
    finally:
        plat.process.stop()
