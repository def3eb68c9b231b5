"""A pushed verifiers package run hosted on the Ray backend: the seed's flow of
tests/e2e/test_verifiers_hosted.py, with the sandbox a Ray job on a cluster of this module's
own (`tests.support.ray`, stopped by PID). `prime env push` publishes verifiers'
`reverse-text` (vendored, sources unmodified), `prime eval run … --hosted` creates the
evaluation, and `proctor launcher --sandbox ray` runs `proctor eval owner/name@version …
--run.attach` as a Ray job, confined on the node by the guard, with the package directory
and verifiers' harness environment built once outside the sandbox and the harness index and
the local dataset read-only in it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e.hosted_helpers import wait_closed
from tests.e2e.test_hub import evaluation_id, make_key, prime
from tests.e2e.verifiers_hub import launcher_environment, project, share
from tests.envs.verifiers_fixtures import SUBPROCESS_RUNTIME, write_datasets
from tests.support import tools
from tests.support.platform import start_platform
from tests.support.procs import PROCTOR, ManagedProcess
from tests.support.ray import RayCluster, ray_cluster

tools.package("verifiers")
tools.package("ray")
pytestmark = [pytest.mark.e2e, pytest.mark.ray, pytest.mark.timeout(1800)]

DEADLINE_S = 900.0
"""Bound on the hosted run: a cold sandbox installs the package and prepares verifiers'
harness program before its first rollout."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    """A Ray head node of this module's own, bound to loopback."""
    with ray_cluster(head_cpus=2) as started:
        yield started


def test_prime_pushes_a_verifiers_package_and_runs_it_hosted_on_ray_to_completed(
    cluster: RayCluster, demo_model: str, tmp_path: Path
) -> None:
    shared = tmp_path / "shared-data"
    datasets = write_datasets(shared)
    share(shared)
    empty_index = tmp_path / "empty-index"
    empty_index.mkdir()
    data_dir = tmp_path / "platform"
    data_dir.mkdir()
    server_env = {
        "PROCTOR_HOSTED_IN_SERVER": "false",
        "PROCTOR_HOSTED_RAY_ADDRESS": cluster.address,
    }
    plat = start_platform(data_dir, extra_env=server_env)
    launcher_args = [*PROCTOR, "launcher", "--data-dir", str(data_dir), "--sandbox", "ray"]
    launcher_args += ["--ray-address", cluster.address, "--api-url", plat.url]
    launcher = ManagedProcess(
        launcher_args, tmp_path / "launcher.log", env=launcher_environment(shared, empty_index)
    ).start()
    try:
        user = "vf-ray"
        key = make_key(plat, user)
        home = tmp_path / "home"
        pushed = prime(plat, key, home, "env", "push", cwd=project(tmp_path, "reverse_text"))
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        assert f"Successfully pushed {user}/reverse-text" in pushed.stdout, pushed.stdout

        env_args = json.dumps({**SUBPROCESS_RUNTIME, **datasets["reverse-text"]})
        hosted = ["--hosted", "-m", "demo", "-n", "2", "-r", "2", "--api-base-url", demo_model]
        started = prime(
            plat, key, home, "eval", "run", f"{user}/reverse-text", *hosted, "--env-args", env_args
        )
        assert started.returncode == 0, started.stdout + started.stderr
        eid = evaluation_id(started.stdout)
        client = plat.client(key)
        record = wait_closed(client, plat, eid, timeout=DEADLINE_S)
        logs = client.get(f"/hosted-evaluations/{eid}/logs").json()["logs"]
        assert record["status"] == "COMPLETED", f"{record}\n{logs}\n{launcher.output()[-3000:]}"
        assert record["total_samples"] == 4, record
        ran = f"{user}/reverse-text@0.1.0"
        assert record["metadata"]["environment_ref"] == ran
        assert f"installed {ran}" in logs
        assert "prepared verifiers' harness environment" in logs  # on the node, outside the job
        samples = client.get(f"/evaluations/{eid}/samples", params={"limit": 100}).json()
        assert sorted((s["example_id"], s["rollout_number"]) for s in samples["samples"]) == [
            (0, 1),
            (0, 2),
            (1, 1),
            (1, 2),
        ]
        # A Ray job of this cluster ran it, and left nothing where Ray starts jobs.
        assert "(ray sandboxes)" in launcher.output()
        assert list(cluster.cwd.iterdir()) == []
    finally:
        launcher.stop()
        plat.process.stop()
