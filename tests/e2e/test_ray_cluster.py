"""Sharded hosted evaluations on a real three-node Ray cluster: a head node and two worker
nodes (`tests.support.ray`, each a `ray start` on loopback, in the suite's own network
namespace), and a real `proctor server` whose launcher submits each shard as a Ray job.
The cluster is the session's shared one (tests/sandboxes/test_ray_sandbox.py runs its jobs
on it too, on the same xdist worker, never at the same time): each test has its own
evaluation, and kills only its own job's processes.

Every node has one CPU and every job's entrypoint reserves one (`ray_entrypoint_cpus`), so
the three shards of an evaluation run on three different nodes. A job's processes are
found through Ray's state API (its supervisor actor's pid) and psutil, never by guessing;
a job's log is read with a bounded wait (Ray may serve it empty just after the job ends).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from tests.e2e.durability import demo_model as slow_demo_model
from tests.e2e.hosted_helpers import (
    LAUNCHER_ENV,
    cli_env,
    create_hosted,
    hosted_logs,
    hub_project,
    shard_rows,
    stored_pairs,
    wait_closed,
    wait_shard_storing,
    wait_status,
)
from tests.support.platform import Platform, start_platform
from tests.support.procs import PROCTOR, gone
from tests.support.ray import SHARED_GROUP, RayCluster, job_processes, shared_cluster
from tests.support.waiting import wait_until

# (The first test's limit covers starting three nodes, minutes on a loaded two-core machine.)
pytestmark = [
    pytest.mark.ray,
    pytest.mark.process,
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    pytest.mark.xdist_group(SHARED_GROUP),
]

SHARDS = 3


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[RayCluster]:
    """The session's shared cluster: a head node and two worker nodes, one CPU each."""
    with shared_cluster(request) as started:
        yield started


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A demo model that waits 300 ms before each answer, so a shard runs for seconds."""
    with slow_demo_model(tmp_path_factory.mktemp("slow-model"), latency_ms=300) as url:
        yield url


@pytest.fixture(scope="module")
def plat(cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """A platform server whose launcher runs every sandbox as a job on the cluster."""
    env = {
        **LAUNCHER_ENV,
        # Each tick asks Ray's job API about every running shard: a slower tick than the
        # other hosted tests' spends less of the dashboard's CPU (and sees an end later).
        "PROCTOR_HOSTED_POLL_SECONDS": "0.5",
        "PROCTOR_HOSTED_SANDBOX": "ray",
        "PROCTOR_HOSTED_RAY_ADDRESS": cluster.address,
        "PROCTOR_HOSTED_RAY_ENTRYPOINT_CPUS": "1",
        "PROCTOR_HOSTED_SHARD_ATTEMPTS": "2",
    }
    platform = start_platform(tmp_path_factory.mktemp("ray-cluster-platform"), extra_env=env)
    yield platform
    platform.process.stop()


def _failure(plat: Platform, evaluation_id: str) -> str:
    """What to show when a wait fails: the evaluation's shards and the server's log tail."""
    return f"{shard_rows(plat, evaluation_id)}\n{plat.process.output()[-3000:]}"


def _jobs(plat: Platform, evaluation_id: str) -> list[str]:
    """The Ray submission ids the shards run as now, by shard (after every shard started)."""

    def started() -> list[str] | None:
        rows = shard_rows(plat, evaluation_id)
        running = [r for r in rows if r["state"] == "running" and r["sandbox_handle"]]
        return [str(r["sandbox_handle"]) for r in rows] if len(running) == SHARDS else None

    return wait_until(
        started, timeout=120, what=lambda: f"every shard running: {_failure(plat, evaluation_id)}"
    )


def _running_eval(cluster: RayCluster, job: str) -> tuple[str, list[psutil.Process]]:
    """The node and process tree of a job once its `proctor eval` runs."""

    def found() -> tuple[str, list[psutil.Process]] | None:
        node, tree = job_processes(cluster, job)
        evals = [p for p in tree if _is_eval(p)]
        return (node, tree) if evals else None

    return wait_until(found, timeout=180, interval=0.5, what=f"Ray job {job} running its eval")


def _job_api(cluster: RayCluster) -> Any:
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(cluster.address)


def _is_eval(proc: psutil.Process) -> bool:
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return False
    return "eval" in cmdline and "--shard" in cmdline


def _exact(client: httpx.Client, evaluation_id: str, examples: int) -> None:
    pairs = stored_pairs(client, evaluation_id)
    assert pairs == Counter({(e, 1): 1 for e in range(examples)}), pairs


def test_shards_run_on_three_nodes_and_store_each_sample_once(
    cluster: RayCluster, plat: Platform, slow_model: str
) -> None:
    client = plat.client()
    evaluation_id = create_hosted(
        client,
        num_examples=12,
        rollouts_per_example=1,
        shards=SHARDS,
        max_concurrent=2,
        api_base_url=slow_model,
    )
    jobs = _jobs(plat, evaluation_id)
    done = wait_closed(client, plat, evaluation_id, timeout=300)
    assert done["status"] == "COMPLETED", (done["error_message"], _failure(plat, evaluation_id))
    assert done["total_samples"] == 12
    _exact(client, evaluation_id, 12)
    rows = shard_rows(plat, evaluation_id)
    assert [(r["state"], r["attempt"]) for r in rows] == [("done", 1)] * SHARDS
    # One CPU a node, one a job's entrypoint: the three shards ran on three nodes.
    ray_jobs = _job_api(cluster)
    nodes = {ray_jobs.get_job_info(job).driver_node_id for job in jobs}
    assert len(nodes) == SHARDS and None not in nodes, nodes
    # Each shard's run dir is in its own box, as a local sandbox's is; none where Ray runs.
    box = plat.data_dir / "sandboxes" / evaluation_id
    for index in range(SHARDS):
        runs = list((box / f"shard-{index}" / "work" / "outputs").iterdir())
        assert [run for run in runs if (run / "config.toml").is_file()], runs
    assert list(cluster.cwd.iterdir()) == []


def test_a_shard_killed_mid_run_is_retried_and_the_total_stays_exact(
    cluster: RayCluster, plat: Platform, slow_model: str
) -> None:
    client = plat.client()
    evaluation_id = create_hosted(
        client,
        num_examples=90,
        rollouts_per_example=1,
        shards=SHARDS,
        max_concurrent=1,
        api_base_url=slow_model,
    )
    job = _jobs(plat, evaluation_id)[1]
    _running_eval(cluster, job)
    wait_shard_storing(client, evaluation_id, 1, SHARDS, timeout=180)  # some of its 30 samples
    # A crash on its node: the whole tree of the job's entrypoint, SIGKILLed at once.
    _, tree = _running_eval(cluster, job)
    for proc in tree:
        with contextlib.suppress(psutil.NoSuchProcess):  # (a child may end with its parent)
            proc.send_signal(signal.SIGKILL)
    assert all(gone(p.pid, timeout=30) for p in tree)
    done = wait_closed(client, plat, evaluation_id, timeout=400)
    assert done["status"] == "COMPLETED", (done["error_message"], _failure(plat, evaluation_id))
    assert done["total_samples"] == 90
    _exact(client, evaluation_id, 90)
    rows = shard_rows(plat, evaluation_id)
    assert [(r["state"], r["attempt"]) for r in rows] == [("done", 1), ("done", 2), ("done", 1)]
    assert "137" in str(rows[1]["error"]) or "SIGKILL" in str(rows[1]["error"]), rows[1]


BROKEN_ENV = '''
"""tiny-echo whose task `broken` holds a value no record can hold: the shard that runs it
fails, every time, with the engine's one sentence."""

from proctor.envs import SingleTurnEnv, Task, Taskset, reward


@reward(weight=1.0)
def echoed(response: str, answer: str) -> float:
    return 1.0 if answer in response.lower() else 0.0


def load_environment(*, num_tasks: int = 6, broken: int = -1) -> SingleTurnEnv:
    tasks = [
        Task(
            index=i,
            prompt=f"Repeat this word: w{i}",
            answer=f"w{i}",
            info={"tags": {"a", "b"}} if i == broken else {},
        )
        for i in range(num_tasks)
    ]
    return SingleTurnEnv(name="tiny-echo", taskset=Taskset(tasks), rubric=[echoed])
'''


def test_a_shard_that_always_fails_fails_the_evaluation_with_its_log(
    cluster: RayCluster, plat: Platform, demo_model: str, tmp_path: Path
) -> None:
    project = hub_project(tmp_path)
    (project / "tiny_echo" / "__init__.py").write_text(BROKEN_ENV)
    pushed = subprocess.run(
        [*PROCTOR, "envs", "push", str(project), "--no-build-isolation"],
        env=cli_env(plat, tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    client = plat.client()
    # Pairs go to shards round robin: task 4 (of 6, one rollout each) is shard 1's.
    evaluation_id = create_hosted(
        client,
        "admin/tiny-echo",
        num_examples=6,
        rollouts_per_example=1,
        shards=SHARDS,
        env_args={"broken": 4},
        api_base_url=demo_model,
    )
    done = wait_closed(client, plat, evaluation_id, timeout=400)
    assert done["status"] == "FAILED", _failure(plat, evaluation_id)
    error = str(done["error_message"])
    assert error.startswith(f"shard 1/{SHARDS} failed 2 times"), error
    assert "its log (ray job proctor-" in error, error
    assert "Object of type set is not JSON serializable" in error, error
    rows = shard_rows(plat, evaluation_id)
    assert (rows[1]["state"], rows[1]["attempt"]) == ("failed", 2), rows
    assert "Object of type set is not JSON serializable" in hosted_logs(client, evaluation_id)


def test_cancel_stops_every_shards_process_tree(
    cluster: RayCluster, plat: Platform, slow_model: str
) -> None:
    client = plat.client()
    evaluation_id = create_hosted(
        client,
        num_examples=300,
        rollouts_per_example=1,
        shards=SHARDS,
        max_concurrent=1,
        api_base_url=slow_model,
    )
    jobs = _jobs(plat, evaluation_id)
    trees = [_running_eval(cluster, job)[1] for job in jobs]
    cancelled = client.patch(f"/hosted-evaluations/{evaluation_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    record = wait_status(client, evaluation_id, ("CANCELLED",), timeout=120)
    assert record["status"] == "CANCELLED"
    left = [p.pid for tree in trees for p in tree if not gone(p.pid, timeout=60)]
    assert left == [], left
    assert not [p for p in cluster.processes() if _is_eval(p)]
    ray_jobs = _job_api(cluster)
    statuses = {str(ray_jobs.get_job_status(job)) for job in jobs}
    assert statuses <= {"STOPPED", "FAILED"}, statuses
