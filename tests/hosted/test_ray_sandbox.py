"""The Ray sandbox backend against a real local head node (one per module: Ray starts slowly).

Ray binds every interface; scripts/test runs the suite inside `unshare --net`, so the head
node is only reachable on loopback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.hosted.sandbox import SandboxHandle, SandboxSpec, SandboxState
from tests.procs import PROCTOR, ManagedProcess, free_port, wait_http

pytestmark = pytest.mark.ray

RAY = str(Path(sys.executable).with_name("ray"))


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """The job API address of a Ray head node bound to loopback."""
    dashboard_port = free_port()
    # Ray's socket paths must stay short, so its temp dir lives directly under /tmp.
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    args = [
        RAY,
        "start",
        "--head",
        "--node-ip-address=127.0.0.1",
        f"--port={free_port()}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        "--include-dashboard=true",
        "--disable-usage-stats",
        "--num-cpus=2",
        f"--temp-dir={temp_dir}",
    ]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    started = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    address = f"http://127.0.0.1:{dashboard_port}"
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        wait_http(f"{address}/api/version", timeout=120)
        yield address
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def backend(ray_address: str):  # type: ignore[no-untyped-def]
    from proctor.hosted.ray_jobs import RaySandbox

    return RaySandbox(ray_address)


def _wait_exit(backend, handle: SandboxHandle, timeout: float = 120) -> SandboxState:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = backend.poll(handle)
        if not state.running:
            return state
        time.sleep(0.25)
    raise AssertionError("Ray job did not finish")


def test_job_gets_env_and_reports_output_and_exit_code(backend) -> None:  # type: ignore[no-untyped-def]
    spec = SandboxSpec(
        evaluation_id="ev-ray",
        command='echo "id=$EVALUATION_ID key=$MODEL_KEY"; exit 4',
        env={"MODEL_KEY": "ray-s3cret"},
    )
    handle = backend.start(spec)
    assert "ray-s3cret" not in handle.ref
    state = _wait_exit(backend, handle)
    assert state.exit_code == 4
    assert "id=ev-ray key=ray-s3cret" in backend.logs(handle)
    info = backend._client.get_job_info(handle.ref)
    assert "ray-s3cret" not in info.entrypoint and "ray-s3cret" not in str(info.metadata)


def test_successful_job_exits_zero(backend) -> None:  # type: ignore[no-untyped-def]
    handle = backend.start(SandboxSpec(evaluation_id="ev-ok", command="echo fine"))
    state = _wait_exit(backend, handle)
    assert (state.running, state.exit_code) == (False, 0)
    assert "fine" in backend.logs(handle)


def test_stop_ends_a_running_job(backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "pid"  # pytest's tmp_path is cleaned up; a mkdtemp() folder was not
    handle = backend.start(
        SandboxSpec(evaluation_id="ev-stop", command=f"echo $$ > {marker}; sleep 300")
    )
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.25)
    assert backend.poll(handle).running and backend.adoptable(handle)
    pid = int(marker.read_text().split()[0])
    backend.stop(handle, grace_seconds=2)
    state = backend.poll(handle)
    assert not state.running
    assert not backend.adoptable(handle)
    deadline = time.monotonic() + 30
    while _exists(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _exists(pid)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.e2e
def test_ray_launcher_runs_a_hosted_eval_end_to_end(
    ray_address: str, demo_model: str, tmp_path: Path
) -> None:
    """`proctor launcher --sandbox ray` runs the real CLI as a Ray job for a real server."""
    from tests.conftest import start_platform
    from tests.e2e.hosted_helpers import create_hosted, wait_closed

    data_dir = tmp_path / "platform"
    data_dir.mkdir()
    env = {"PROCTOR_HOSTED_IN_SERVER": "false", "PROCTOR_HOSTED_RAY_ADDRESS": ray_address}
    plat = start_platform(data_dir, extra_env=env)
    launcher = ManagedProcess(
        [
            *PROCTOR,
            "launcher",
            "--data-dir",
            str(data_dir),
            "--sandbox",
            "ray",
            "--ray-address",
            ray_address,
            "--api-url",
            plat.url,
        ],
        tmp_path / "launcher.log",
        env={"PROCTOR_HOSTED_POLL_SECONDS": "0.2"},
    ).start()
    try:
        client = plat.client()
        secret = "ray-e2e-secret-91d2"
        evaluation_id = create_hosted(
            client,
            num_examples=3,
            rollouts_per_example=2,
            api_base_url=demo_model,
            api_key_var="DEMO_KEY",
            custom_secrets={"DEMO_KEY": secret},
        )
        record = wait_closed(client, plat, evaluation_id, timeout=180)
        assert record["status"] == "COMPLETED", (record, launcher.output()[-2000:])
        assert record["total_samples"] == 6
        logs = client.get(f"/hosted-evaluations/{evaluation_id}/logs").json()["logs"]
        assert "finalized" in logs and secret not in logs
        assert secret not in launcher.output() and secret not in plat.process.output()
    finally:
        launcher.stop()
        plat.process.stop()


@pytest.mark.e2e
def test_ray_launcher_runs_a_pushed_environment_in_its_own_venv(
    ray_address: str, demo_model: str, tmp_path: Path
) -> None:
    """A pushed package is installed in the Ray job's venv, then the same eval runs there."""
    from tests.conftest import start_platform
    from tests.e2e.hosted_helpers import create_hosted, wait_closed

    data_dir = tmp_path / "platform"
    data_dir.mkdir()
    env = {"PROCTOR_HOSTED_IN_SERVER": "false", "PROCTOR_HOSTED_RAY_ADDRESS": ray_address}
    plat = start_platform(data_dir, extra_env=env)
    launcher = ManagedProcess(
        [
            *PROCTOR,
            "launcher",
            "--data-dir",
            str(data_dir),
            "--sandbox",
            "ray",
            "--ray-address",
            ray_address,
            "--api-url",
            plat.url,
        ],
        tmp_path / "launcher.log",
        env={"PROCTOR_HOSTED_POLL_SECONDS": "0.2"},
    ).start()
    try:
        project = tmp_path / "tiny-echo"
        shutil.copytree(Path(__file__).parents[1] / "e2e" / "hub_env", project)
        cli_env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
        cli_env.update(PROCTOR_API_URL=plat.url, PROCTOR_API_KEY=plat.api_key)
        pushed = subprocess.run(
            [*PROCTOR, "envs", "push", str(project), "--no-build-isolation"],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        client = plat.client()
        evaluation_id = create_hosted(
            client,
            "admin/tiny-echo",
            num_examples=3,
            rollouts_per_example=1,
            api_base_url=demo_model,
        )
        record = wait_closed(client, plat, evaluation_id, timeout=180)
        assert record["status"] == "COMPLETED", (record, launcher.output()[-2000:])
        assert record["total_samples"] == 3
        logs = client.get(f"/hosted-evaluations/{evaluation_id}/logs").json()["logs"]
        assert "installed admin/tiny-echo@0.1.0" in logs and "finalized" in logs
    finally:
        launcher.stop()
        plat.process.stop()
