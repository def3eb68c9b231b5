"""A Ray cluster of its own for a test module: a head node and optional worker nodes on
loopback, stopped by PID, so clusters of several modules (or xdist workers) live side by side.

`ray stop --force` would kill every Ray process on the machine, another module's cluster
included. Here each node is a `ray start` with ports of its own and a `--temp-dir` under
the cluster's one short folder in /tmp (Ray's socket paths must stay short); `stop` ends
only the processes whose command line names that folder or a GCS address one of the
cluster's heads was given, and everything below them (Ray's workers rename themselves
`ray::...`, and jobs' entrypoints and their commands run under those workers): SIGTERM,
then SIGKILL after a bounded wait, and fails if any is left (by those, or by `MARK` in
its environment, which every node's processes inherit). A head's Ray client server
(`ray.util.client.server`, which `ray start --head` always starts while `grpc` is installed)
names only its GCS address, not the folder: a head that failed to start is ended by both,
and its address stays the cluster's, so that nothing it started outlives the cluster.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.support.procs import free_port, wait_http
from tests.support.waiting import wait_until

RAY = str(Path(sys.executable).with_name("ray"))
OBJECT_STORE_BYTES = 100 * 1024 * 1024
"""Each node's object store: tests move no objects, and Ray's default is 30% of memory."""
QUIET_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # No metrics: the raylets', GCS's and workers' own exporters, and each node agent's
    # sampling of every process's stats (every 5 s by default) for the dashboard's charts.
    "RAY_enable_metrics_collection": "0",
    "REPORTER_UPDATE_INTERVAL_MS": "600000",
    "RAY_event_stats": "0",
    # No idle Python worker kept per CPU (a job's supervisor starts its own worker anyway:
    # each job asks for a runtime_env): an idle worker polls as much as a raylet.
    "RAY_num_workers_soft_limit": "0",
    # Raylets: no memory monitor reading /proc every 250 ms (Ray's OOM killer: the tests'
    # memory caps are the guard's), resources reported each second instead of each 100 ms
    # (a job waits at most that long longer for a free node), no check for object-store GC
    # every 100 ms, no debug state dump every 10 s; the GCS checks each node's health every
    # 10 s instead of 3 (no test stops a node).
    "RAY_memory_monitor_refresh_ms": "0",
    "RAY_raylet_report_resources_period_milliseconds": "1000",
    "RAY_raylet_check_gc_period_milliseconds": "10000",
    "RAY_debug_dump_period_milliseconds": "600000",
    "RAY_health_check_period_ms": "10000",
}
"""Ray settings that cut what its daemons do while idle, none of which the tests use:
together, a third less CPU for an idle three-node cluster (0.057 to 0.041 CPU-s a second)."""
MARK = "PROCTOR_TEST_RAY_CLUSTER"
"""Set to the cluster's folder in every `ray start`'s environment: what its nodes' processes
inherit, whatever their command line, so `stop` can tell that none outlived the cluster."""


@dataclass
class RayNode:
    """One `ray start` of the cluster."""

    name: str
    """`head`, `worker1`, `worker2`..."""
    temp_dir: Path
    """Its `--temp-dir`: the node's session folder and logs lie below it."""
    node_manager_port: int
    """Its node manager's port (`--node-manager-port`), which names it in Ray's node table."""


@dataclass
class RayCluster:
    """A running cluster: its job API address, its GCS address, its nodes."""

    root: Path
    """The folder every node's `--temp-dir` lies in (`/tmp/ray-XXXXXX`)."""
    gcs_port: int
    dashboard_port: int
    cwd: Path
    """The folder every node runs in: where a job without a `working_dir` starts."""
    nodes: list[RayNode] = field(default_factory=list)
    gcs_addresses: list[str] = field(default_factory=list)
    """Every GCS address a head of the cluster was given (a retried head gets new ports):
    the only thing that names some of a head's processes (its Ray client server)."""

    @property
    def address(self) -> str:
        """The job API (dashboard) address, as `--ray-address` takes it."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def gcs_address(self) -> str:
        """The address worker nodes join (`ray start --address`)."""
        return f"127.0.0.1:{self.gcs_port}"

    def owns(self, cmdline: list[str]) -> bool:
        """Whether a process with this command line is one of this cluster's Ray processes."""
        return _names(cmdline, self.root, [self.gcs_address, *self.gcs_addresses])

    def daemons(self) -> list[psutil.Process]:
        """This cluster's Ray daemons (GCS, raylets, dashboard, monitors): the live processes
        whose command line names its folder or its GCS address."""
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if proc.pid != os.getpid() and self.owns(proc.info["cmdline"] or []):
                    found.append(proc)
        return [p for p in found if _alive(p)]

    def processes(self) -> list[psutil.Process]:
        """This cluster's live processes: its daemons and everything below them (workers,
        job supervisors, jobs' entrypoints and the commands they run)."""
        found: dict[int, psutil.Process] = {}
        for proc in self.daemons():
            found[proc.pid] = proc
            with contextlib.suppress(psutil.Error):
                for child in proc.children(recursive=True):
                    found[child.pid] = child
        found.pop(os.getpid(), None)  # (never the test process, whatever its arguments)
        return [p for p in found.values() if _alive(p)]

    def alive_nodes(self) -> int:
        """How many nodes the cluster's GCS counts as alive (0 while it cannot answer)."""
        try:
            answer = httpx.get(f"{self.address}/nodes", params={"view": "summary"}, timeout=5)
            summary = answer.json()["data"]["summary"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return 0
        return sum(1 for node in summary if node.get("raylet", {}).get("state") == "ALIVE")

    def stop(self, grace: float = 5.0) -> None:
        """End this cluster's processes (SIGTERM, then SIGKILL after `grace` seconds), and
        remove its folder. Other clusters on the machine are left alone. Raises if any of
        its processes is still alive afterwards (a process the cluster left behind)."""
        for _ in range(3):  # a process may start a child while the first ones are ending
            procs = self.processes()
            if not procs:
                break
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.terminate()
            _, alive = psutil.wait_procs(procs, timeout=grace)
            for proc in alive:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(alive, timeout=grace)
        left = {p.pid: p for p in self.processes()}
        left.update((p.pid, p) for p in self.marked())
        shutil.rmtree(self.root, ignore_errors=True)
        if left:
            named = _describe(list(left.values()))
            for proc in left.values():  # (ended, so the next test runs on a clean machine)
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            raise RuntimeError(f"the Ray cluster left processes behind: {named}")

    def marked(self) -> list[psutil.Process]:
        """The live processes whose environment holds this cluster's `MARK`."""
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.pid != os.getpid() and proc.environ().get(MARK) == str(self.root):
                    found.append(proc)
        return [p for p in found if _alive(p)]


def _names(cmdline: list[str], folder: Path, addresses: list[str]) -> bool:
    """Whether a command line names `folder` (or a path below it) or one of `addresses`, whole
    (`127.0.0.1:4000` is not in `127.0.0.1:40001`)."""
    root = str(folder)
    whole = [re.escape(address) + r"(?!\d)" for address in addresses]
    return any(
        arg == root or f"{root}/" in arg or any(re.search(w, arg) for w in whole) for arg in cmdline
    )


def _describe(procs: list[psutil.Process]) -> str:
    found = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            found.append(f"{proc.pid} {' '.join(proc.cmdline())[:200]}")
    return "; ".join(found)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _node_args(node: RayNode, cpus: int) -> list[str]:
    return [
        "--node-ip-address=127.0.0.1",
        f"--temp-dir={node.temp_dir}",
        f"--num-cpus={cpus}",
        f"--object-store-memory={OBJECT_STORE_BYTES}",
        f"--node-manager-port={node.node_manager_port}",
        f"--object-manager-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        "--min-worker-port=0",  # workers bind ports the kernel picks: no range to share
        "--max-worker-port=0",
        "--disable-usage-stats",
        # Nothing reads workers' logs through a driver (jobs' logs are files the job API
        # serves): no log monitor tailing every log file of the node.
        "--include-log-monitor=false",
    ]


def start_cluster(
    *,
    workers: int = 0,
    head_cpus: int = 2,
    worker_cpus: int = 1,
    cwd: Path | None = None,
    jobs: bool = True,
) -> RayCluster:
    """Start a head node and `workers` worker nodes on 127.0.0.1 and wait until every node
    is alive and (with `jobs`) the job API takes jobs and runs them.

    `cwd` is where the nodes run (what a job without a `working_dir` starts in); default a
    folder of the cluster's own, so nothing a job writes lands in the test's checkout.
    A node starts as many idle Python workers as it has CPUs; a job's entrypoint (and its
    supervisor) takes none unless it asks for them.
    """
    root = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    workdir = cwd or root / "cwd"
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = RayCluster(root, gcs_port=free_port(), dashboard_port=free_port(), cwd=workdir)
    env = {**os.environ, **QUIET_ENV, MARK: str(root)}
    env.pop("RAY_ADDRESS", None)
    try:
        for attempt in ("", "b"):
            head = RayNode(f"head{attempt}", root / f"head{attempt}", free_port())
            cluster.nodes.append(head)
            if attempt:  # ports of its own: the first head's may not be free again yet
                cluster.gcs_port, cluster.dashboard_port = free_port(), free_port()
            cluster.gcs_addresses.append(cluster.gcs_address)
            head_args = ["--head", *_head_args(cluster), *_node_args(head, head_cpus)]
            if _start_node(cluster, head, head_args, workdir, env, alive=1, retry=not attempt):
                break
        for i in range(1, workers + 1):
            for attempt in ("", "b"):
                node = RayNode(f"worker{i}{attempt}", root / f"worker{i}{attempt}", free_port())
                cluster.nodes.append(node)
                args = [f"--address={cluster.gcs_address}", *_node_args(node, worker_cpus)]
                if _start_node(cluster, node, args, workdir, env, alive=i + 1, retry=not attempt):
                    break
        wait_until(
            lambda: cluster.alive_nodes() == workers + 1,
            timeout=120,
            interval=0.5,
            what=f"{workers + 1} Ray nodes alive",
        )
        if jobs:
            _wait_for_jobs(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _start_node(
    cluster: RayCluster,
    node: RayNode,
    args: list[str],
    cwd: Path,
    env: dict[str, str],
    *,
    alive: int,
    retry: bool,
) -> bool:
    """`ray start` one node; whether it joined. `ray start` gives a raylet 30 s (fixed in
    Ray) to register with the GCS, which a loaded machine (CI's two cores) may outlast:
    then the node may still join, so it is waited for; a node that never does is ended
    (its processes, by its folder) and, with `retry`, started again by the caller (`ray
    start` usually ends what it started when it gives up)."""
    started = subprocess.run(
        [RAY, "start", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    if started.returncode == 0:
        if node.name.startswith("head"):
            wait_http(f"{cluster.address}/api/version", timeout=120)
        return True
    try:
        wait_until(lambda: cluster.alive_nodes() >= alive, timeout=20, interval=1.0)
        return True
    except TimeoutError:
        if not retry:
            raise RuntimeError(
                f"`ray start` failed for the {node.name} node:\n{started.stdout}{started.stderr}"
            ) from None
    # A head's Ray client server names only the head's GCS address, not its folder.
    head = node.name.startswith("head")
    _end(node.temp_dir, [cluster.gcs_address] if head else [])
    return False


def _end(folder: Path, addresses: list[str]) -> None:
    """SIGKILL the processes whose command line names `folder` (a node's own) or one of
    `addresses` (a head's GCS address), and below."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if _names(proc.info["cmdline"] or [], folder, addresses):
                found[proc.pid] = proc
                found.update((c.pid, c) for c in proc.children(recursive=True))
    found.pop(os.getpid(), None)
    for proc in found.values():
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(list(found.values()), timeout=10)


def _head_args(cluster: RayCluster) -> list[str]:
    return [
        f"--port={cluster.gcs_port}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={cluster.dashboard_port}",
        "--include-dashboard=true",
        "--no-monitor",  # no autoscaler: the nodes are fixed
        f"--ray-client-server-port={free_port()}",
    ]


def _wait_for_jobs(cluster: RayCluster) -> None:
    """Submit a trivial job until the job API takes it (its agent registers after the node),
    and wait until it has run."""
    from ray.job_submission import JobSubmissionClient

    client: Any = JobSubmissionClient(cluster.address)

    def submitted() -> str | None:
        try:
            return str(client.submit_job(entrypoint="true"))
        except Exception:  # "No available agent to submit job", until the agent registers
            return None

    job = wait_until(submitted, timeout=120, interval=1.0, what="the Ray job API taking a job")

    def finished() -> str | None:
        status = str(getattr(client.get_job_status(job), "value", ""))
        return status if status in ("SUCCEEDED", "FAILED", "STOPPED") else None

    status = wait_until(finished, timeout=120, interval=0.5, what="the probe job finishing")
    if status != "SUCCEEDED":
        raise RuntimeError(f"the Ray probe job ended {status}: {client.get_job_logs(job)}")


@contextlib.contextmanager
def ray_cluster(**options: Any) -> Iterator[RayCluster]:
    """`start_cluster(**options)`, stopped by PID on the way out."""
    cluster = start_cluster(**options)
    try:
        yield cluster
    finally:
        cluster.stop()


SHARED_GROUP = "ray-shared-cluster"
"""The `xdist_group` of the modules that share the session's cluster (`shared_cluster`):
`--dist loadgroup` runs them on one worker, one module after another."""
SHARED_OPTIONS: dict[str, Any] = {"workers": 2, "head_cpus": 1, "worker_cpus": 1}
"""The shared cluster: a head node and two worker nodes, one CPU each (what sharded jobs
that reserve a CPU each need to land on three nodes; jobs that reserve none run on the
head node)."""
_shared: dict[str, Any] = {"cluster": None, "done": set()}


def _shared_modules(session: pytest.Session) -> set[str]:
    """The selected modules that use the shared cluster (their tests carry its group)."""
    found = set()
    for item in session.items:
        marker = item.get_closest_marker("xdist_group")
        name = marker and (marker.args[0] if marker.args else marker.kwargs.get("name"))
        if name == SHARED_GROUP:
            found.add(item.nodeid.split("::")[0])
    return found


def _stop_shared() -> None:
    cluster, _shared["cluster"] = _shared["cluster"], None
    if cluster is not None:
        cluster.stop()


@contextlib.contextmanager
def shared_cluster(request: pytest.FixtureRequest) -> Iterator[RayCluster]:
    """The session's one test cluster (`SHARED_OPTIONS`), for a module-scoped fixture of a
    module marked `pytest.mark.xdist_group(SHARED_GROUP)`.

    Starting and idling a cluster costs CPU (its daemons poll while it lives), so the
    modules share one: the first to ask starts it, and it is stopped as the last selected
    module of the group ends (at the session's end, whatever happens). A module that uses
    it keeps to its own jobs, evaluations and processes, and leaves the nodes as it found
    them (no node stopped)."""
    if _shared["cluster"] is None:
        _shared["cluster"] = start_cluster(**SHARED_OPTIONS)
        request.config.add_cleanup(_stop_shared)
    try:
        yield _shared["cluster"]
    finally:
        done: set[str] = _shared["done"]
        done.add(request.node.nodeid.split("::")[0])
        if not _shared_modules(request.session) - done:
            _stop_shared()


def wait_job_logs(client: Any, submission_id: str, text: str, timeout: float = 60.0) -> str:
    """A Ray job's log once it holds `text`: Ray serves a job's log from the node's file,
    which may still be empty (or short) just after the job ends."""
    seen = [""]

    def holds() -> str | None:
        with contextlib.suppress(Exception):
            seen[0] = str(client.get_job_logs(submission_id))
        return seen[0] if text in seen[0] else None

    return wait_until(
        holds, timeout=timeout, interval=0.25, what=lambda: f"{text!r} in the job's log {seen[0]!r}"
    )


def job_processes(cluster: RayCluster, submission_id: str) -> tuple[str, list[psutil.Process]]:
    """Where a running Ray job runs and its processes: the node id and the whole tree below
    its supervisor actor (the entrypoint, the command, all they started), found through
    Ray's state API (the supervisor's pid), then psutil; empty while it has none yet."""
    from ray.dashboard.modules.job.common import JOB_ACTOR_NAME_TEMPLATE
    from ray.util.state import list_actors

    name = JOB_ACTOR_NAME_TEMPLATE.format(job_id=submission_id)
    try:
        actors = list_actors(address=cluster.address, filters=[("name", "=", name)], timeout=30)
    except Exception:  # the state API times out on a busy machine: the caller asks again
        return "", []
    for actor in actors:
        if actor.state != "ALIVE" or not actor.pid:
            continue
        with contextlib.suppress(psutil.Error):
            tree = psutil.Process(actor.pid).children(recursive=True)
            return str(actor.node_id), [p for p in tree if _alive(p)]
    return "", []


__all__ = [
    "RAY",
    "SHARED_GROUP",
    "RayCluster",
    "RayNode",
    "job_processes",
    "ray_cluster",
    "shared_cluster",
    "start_cluster",
    "wait_job_logs",
]
