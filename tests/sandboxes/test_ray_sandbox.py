"""The Ray sandbox backend against a real local cluster (Ray starts slowly, and its daemons
spend CPU while it lives).

The cluster is the session's shared one (`tests.support.ray.shared_cluster`, which
tests/e2e/test_ray_cluster.py uses too, on the same xdist worker, one module after the
other): these jobs reserve no CPU, so they run on its head node. Stopped by PID, a cluster
leaves other clusters alone. Ray binds every interface; scripts/test runs the suite inside
`unshare --net`, so the nodes are only reachable on loopback.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from proctor.sandboxes.sandbox import SandboxHandle, SandboxSpec, SandboxState
from tests.support import tools
from tests.support.platform import Platform
from tests.support.procs import PROCTOR, ManagedProcess, gone, read_pid
from tests.support.ray import (
    SHARED_GROUP,
    RayCluster,
    ray_cluster,
    shared_cluster,
    wait_job_logs,
)

# (Whichever test comes first starts the shared cluster's three nodes: minutes on a loaded
# two-core machine.)
pytestmark = [pytest.mark.ray, pytest.mark.timeout(900), pytest.mark.xdist_group(SHARED_GROUP)]


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[RayCluster]:
    """The session's shared cluster, bound to loopback. No job here reserves a CPU
    (`entrypoint_cpus` is unset), so each runs on the head node."""
    with shared_cluster(request) as started:
        yield started


@pytest.fixture(scope="module")
def ray_address(cluster: RayCluster) -> str:
    """The job API address of the cluster's head node."""
    return cluster.address


@pytest.fixture(scope="module")
def backend(ray_address: str):  # type: ignore[no-untyped-def]
    from proctor.sandboxes.ray_jobs import RaySandbox

    return RaySandbox(ray_address, stop_grace_seconds=1)


@pytest.fixture(scope="module")
def plain(ray_address: str):  # type: ignore[no-untyped-def]
    """The guard's own process-tree rules, seen with the host's pids (a confined command
    has a pid namespace of its own, which dies with the sandbox)."""
    from proctor.sandboxes.ray_jobs import RaySandbox

    return RaySandbox(ray_address, stop_grace_seconds=1, isolation="none")


def _wait_exit(backend, handle: SandboxHandle, timeout: float = 120) -> SandboxState:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = backend.poll(handle)
        if not state.running:
            return state
        time.sleep(0.25)
    raise AssertionError("Ray job did not finish")


class CommandLineWatch:
    """Reads every process's command line (/proc/*/cmdline) over and over, for `secret`.

    A scan takes a few ms of CPU; between scans the watch waits `PAUSE` seconds, so it sees
    every process that lives longer than a scan and a pause (the ones that could leak a
    secret, Ray's workers, supervisors and jobs' commands, live for seconds) without
    spending a core on scans for the whole test."""

    PAUSE = 0.02

    def __init__(self, secret: str) -> None:
        self.secret = secret.encode()
        self.leaks: list[str] = []
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CommandLineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    text = cmdline.read_bytes()
                except OSError:
                    continue
                if self.secret in text:
                    self.leaks.append(text.replace(b"\0", b" ")[:300].decode(errors="replace"))
            self.scans += 1
            self._stop.wait(self.PAUSE)


def test_job_gets_env_and_reports_output_and_exit_code(backend) -> None:  # type: ignore[no-untyped-def]
    spec = SandboxSpec(
        evaluation_id="ev-ray",
        command='echo "id=$EVALUATION_ID key=$MODEL_KEY"; sleep 1; exit 4',
        env={"MODEL_KEY": "ray-s3cret-5f1e"},
    )
    # From submission to the end: Ray's worker set-up, its supervisor, the guard, the command.
    with CommandLineWatch("ray-s3cret-5f1e") as watch:
        handle = backend.start(spec)
        state = _wait_exit(backend, handle)
    assert watch.scans > 3 and watch.leaks == []
    assert "ray-s3cret" not in handle.ref
    assert state.exit_code == 4
    wait_job_logs(backend._client, handle.ref, "id=ev-ray key=ray-s3cret-5f1e")
    info = backend._client.get_job_info(handle.ref)
    assert "ray-s3cret" not in info.entrypoint and "ray-s3cret" not in str(info.runtime_env)


def test_stopping_another_cluster_leaves_this_one_running(cluster: RayCluster, backend) -> None:  # type: ignore[no-untyped-def]
    """Clusters stop by PID (`tests.support.ray`), so modules on xdist workers or the
    verifiers tier beside the main one never end each other's."""
    ours = {p.pid for p in cluster.daemons()}
    # Its daemons are what a stop could mistake for ours: no CPU (no idle workers), no job.
    with ray_cluster(head_cpus=0, jobs=False) as other:
        theirs = {p.pid for p in other.processes()}
        assert theirs and not theirs & {p.pid for p in cluster.processes()}
    assert all(gone(pid, timeout=30) for pid in theirs)
    assert {p.pid for p in cluster.daemons()} == ours  # (its GCS, raylet, dashboard...)
    handle = backend.start(SandboxSpec(evaluation_id="ev-after", command="echo still here"))
    assert _wait_exit(backend, handle).exit_code == 0
    assert "still here" in wait_job_logs(backend._client, handle.ref, "still here")


def test_successful_job_exits_zero_in_its_work_dir(  # type: ignore[no-untyped-def]
    plain, cluster: RayCluster, tmp_path: Path
) -> None:
    box = tmp_path / "box" / "work"
    spec = SandboxSpec(evaluation_id="ev-ok", command="pwd; echo fine", workdir=box)
    handle = plain.start(spec)
    state = _wait_exit(plain, handle)
    assert (state.running, state.exit_code) == (False, 0)
    assert str(box) in wait_job_logs(plain._client, handle.ref, "fine").splitlines()
    # Without a work dir a job runs where the nodes do (a clone's root, run from there).
    bare = plain.start(SandboxSpec(evaluation_id="ev-bare", command="pwd"))
    assert _wait_exit(plain, bare).exit_code == 0
    wait_job_logs(plain._client, bare.ref, str(cluster.cwd))


# A shell whose child starts `sleep 300` and exits at once: the sleep is an orphan,
# reparented away from the job's process tree before anything stops it.
def _orphan(pid_file: Path) -> str:
    return f"sh -c 'sleep 300 & echo $! > {pid_file}'"


def test_stop_ends_a_running_job_and_its_orphans(plain, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    backend = plain
    marker, orphan = tmp_path / "pid", tmp_path / "orphan"
    handle = backend.start(
        SandboxSpec(
            evaluation_id="ev-stop",
            # Deaf to SIGTERM, the command and all it starts: only the SIGKILL ends them.
            command=f"trap '' TERM; echo $$ > {marker}; {_orphan(orphan)}; sleep 300",
        )
    )
    pid, orphan_pid = read_pid(marker), read_pid(orphan)
    assert backend.poll(handle).running and backend.adoptable(handle)
    assert psutil.Process(orphan_pid).ppid() != pid  # out of the tree Ray's stop walks
    backend.stop(handle, grace_seconds=2)
    state = backend.poll(handle)
    assert not state.running
    assert not backend.adoptable(handle)
    assert gone(pid) and gone(orphan_pid)


def test_a_killed_entrypoint_takes_its_whole_process_tree_with_it(plain, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    backend = plain
    guard, child, orphan = tmp_path / "guard", tmp_path / "child", tmp_path / "orphan"
    # $PPID of the command's shell is the process Ray started for the job (the entrypoint).
    script = f"import os, time; open({str(child)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
    command = f'echo $PPID > {guard}; {_orphan(orphan)}; {sys.executable} -c "{script}" & wait'
    handle = backend.start(SandboxSpec(evaluation_id="ev-kill", command=command))
    entrypoint, child_pid, orphan_pid = read_pid(guard), read_pid(child), read_pid(orphan)
    os.kill(entrypoint, signal.SIGKILL)
    state = _wait_exit(backend, handle)
    assert (state.exit_code, state.detail) == (137, "killed by SIGKILL")
    assert gone(child_pid, timeout=10) and gone(orphan_pid, timeout=10)


def test_the_guard_confines_the_job_on_the_node(backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from proctor.sandboxes.confine import DEFAULT_UIDS, host_problem, uid_range

    problem = host_problem()
    tools.require(problem and f"this machine cannot confine sandboxes: {problem}")
    secret = tmp_path / "secret.txt"
    secret.write_text("host only")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    probe = (
        "import os, socket; print('uid', os.getuid())\n"
        f"for path in ('/etc/shadow', '/proc/1/environ', {str(secret)!r}):\n"
        "    try: open(path).read(); print('READ', path)\n"
        "    except OSError: print('refused', path)\n"
        f"try: socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')\n"
        "except OSError: print('refused port')\n"
    )
    command = f"python3 -c {shlex.quote(probe)}; echo key=$MODEL_KEY"
    try:
        spec = SandboxSpec(evaluation_id="ev-confined", command=command, env={"MODEL_KEY": "k1"})
        handle = backend.start(spec)
        state = _wait_exit(backend, handle)
    finally:
        listener.close()
    logs = wait_job_logs(backend._client, handle.ref, "key=k1")
    assert state.exit_code == 0, logs
    uid = int(logs.split("\nuid ")[1].split()[0])
    assert uid in uid_range(DEFAULT_UIDS)
    lines = logs.splitlines()  # (Ray's log starts with the entrypoint, the probe included)
    assert not [line for line in lines if line.startswith(("READ", "CONNECTED"))], logs
    assert len([line for line in lines if line.startswith("refused")]) == 4, logs
    assert "key=k1" in lines


@pytest.fixture(scope="module")
def ray_platform(ray_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """One platform server for the module's launcher tests, which each start a launcher of
    their own on it (and each make evaluations of their own): its sandboxes are Ray jobs."""
    from tests.support.platform import start_platform

    data_dir = tmp_path_factory.mktemp("ray-platform")
    env = {"PROCTOR_HOSTED_IN_SERVER": "false", "PROCTOR_HOSTED_RAY_ADDRESS": ray_address}
    plat = start_platform(data_dir, extra_env=env)
    try:
        yield plat
    finally:
        plat.process.stop()


@contextlib.contextmanager
def ray_launcher(
    plat: Platform, ray_address: str, tmp_path: Path, **settings: str
) -> Iterator[tuple[Platform, ManagedProcess]]:
    """`proctor launcher --sandbox ray` for the platform server, on the Ray cluster."""
    args = [*PROCTOR, "launcher", "--data-dir", str(plat.data_dir), "--sandbox", "ray"]
    args += ["--ray-address", ray_address, "--api-url", plat.url]
    # Each tick asks Ray's job API about every running job: a slower tick spends less of
    # the dashboard's CPU, and sees a job's end at most half a second later.
    launcher_env = {"PROCTOR_HOSTED_POLL_SECONDS": "0.5", **settings}
    launcher = ManagedProcess(args, tmp_path / "launcher.log", env=launcher_env).start()
    try:
        yield plat, launcher
    finally:
        launcher.stop()


@pytest.mark.e2e
def test_ray_launcher_runs_a_hosted_eval_end_to_end(
    cluster: RayCluster, ray_platform: Platform, demo_model: str, tmp_path: Path
) -> None:
    """`proctor launcher --sandbox ray` runs the real CLI as a Ray job for a real server;
    the run directory is left where a local sandbox's is, not where Ray starts jobs."""
    from tests.e2e.hosted_helpers import create_hosted, wait_closed

    with ray_launcher(ray_platform, cluster.address, tmp_path) as (plat, launcher):
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
        with CommandLineWatch(secret) as watch:
            record = wait_closed(client, plat, evaluation_id, timeout=180)
        assert watch.leaks == []  # on no command line: the job's, Ray's, the eval's
        assert record["status"] == "COMPLETED", (record, launcher.output()[-2000:])
        assert record["total_samples"] == 6
        logs = client.get(f"/hosted-evaluations/{evaluation_id}/logs").json()["logs"]
        assert "finalized" in logs and secret not in logs
        assert secret not in launcher.output() and secret not in plat.process.output()
    # Where the launcher's log says the job works: the run dir is there, and nothing is in
    # the folder the nodes (and so jobs without a working_dir) run in.
    work = Path(plat.data_dir) / "sandboxes" / evaluation_id / "work"
    assert f"for {evaluation_id} (work dir {work})" in launcher.output()
    runs = [run for run in (work / "outputs").iterdir() if (run / "config.toml").is_file()]
    assert len(runs) == 1, sorted((work / "outputs").iterdir())
    assert list(cluster.cwd.iterdir()) == []


@pytest.mark.e2e
def test_ray_launcher_runs_a_pushed_environment_in_its_own_venv(
    ray_address: str, ray_platform: Platform, demo_model: str, tmp_path: Path
) -> None:
    """A pushed package is installed in the Ray job's venv, then the same eval runs there."""
    from tests.e2e.hosted_helpers import create_hosted, wait_closed

    with ray_launcher(ray_platform, ray_address, tmp_path) as (plat, launcher):
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


@pytest.mark.e2e
def test_ray_launcher_contains_a_hostile_pushed_environment(
    ray_address: str, ray_platform: Platform, demo_model: str, tmp_path: Path
) -> None:
    """The hostile package of tests/e2e/test_containment.py, pushed by a plain user and run
    as a Ray job: the guard confines it on the node, and every probe fails there too."""
    from proctor.sandboxes.confine import host_problem
    from tests.e2e.hosted_helpers import wait_closed
    from tests.e2e.test_containment import (
        MEMORY_MB,
        UIDS,
        assert_contained,
        hostile_project,
        hostile_targets,
        probes_of,
    )
    from tests.e2e.test_hub import make_key, proctor

    problem = host_problem()
    tools.require(problem and f"this machine cannot confine sandboxes: {problem}")
    caps = {
        "PROCTOR_HOSTED_UIDS": UIDS,
        "PROCTOR_HOSTED_MEMORY_MB": str(MEMORY_MB),
        "PROCTOR_HOSTED_PIDS": "64",
    }
    with ray_launcher(ray_platform, ray_address, tmp_path, **caps) as (plat, launcher):
        data_dir = Path(plat.data_dir)
        (data_dir / "config.toml").write_text(f'api_key = "{plat.api_key}"\n')
        mallory = make_key(plat, "mallory")
        other_log = data_dir / "sandboxes" / "another" / "sandbox.log"
        other_log.parent.mkdir(parents=True)
        other_log.write_text("another tenant's log\n")
        with hostile_targets(data_dir, other_log, plat.api_key) as targets:
            folder = hostile_project(tmp_path, targets)
            pushed = proctor(plat, mallory, "envs", "push", str(folder))
            assert pushed.returncode == 0, pushed.stdout + pushed.stderr
            run = proctor(
                plat, mallory, "hosted", "run", "hostile-echo", "-m", "demo",
                "--api-base-url", demo_model, "-n", "1", "-r", "1",
            )  # fmt: skip
            assert run.returncode == 0, run.stderr
            evaluation_id = run.stdout.strip().splitlines()[-1]
            record = wait_closed(plat.client(mallory), plat, evaluation_id, timeout=240)
        answer = plat.client(mallory).get(f"/hosted-evaluations/{evaluation_id}/logs")
        logs = str(answer.json()["logs"])
        probes = probes_of(logs)
        assert probes is not None, (record, logs[-3000:], launcher.output()[-2000:])
        assert_contained(probes, record, UIDS)


def _evals_of(evaluation_id: str) -> list[psutil.Process]:
    """The live `proctor eval` processes working for the evaluation."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        live = proc.info["status"] != psutil.STATUS_ZOMBIE
        if live and "eval" in cmdline and evaluation_id in cmdline:
            found.append(proc)
    return found


@pytest.mark.e2e
def test_ray_launcher_fails_a_sandbox_whose_entrypoint_was_killed_and_leaves_no_eval(
    ray_address: str, ray_platform: Platform, tmp_path: Path
) -> None:
    """The job's entrypoint SIGKILLed mid-run: FAILED with why, no eval left calling the model."""
    from tests.e2e.durability import FaultProxy, demo_model
    from tests.e2e.hosted_helpers import create_hosted, wait_closed

    with (
        demo_model(tmp_path, latency_ms=200) as model,
        FaultProxy(model.removesuffix("/v1")) as calls,  # counts the model's requests
        ray_launcher(ray_platform, ray_address, tmp_path) as (plat, launcher),
    ):
        client = plat.client()
        evaluation_id = create_hosted(
            client, num_examples=300, rollouts_per_example=1, api_base_url=f"{calls.url}/v1"
        )
        deadline = time.monotonic() + 180
        while calls.forwarded < 3 or not _evals_of(evaluation_id):
            assert time.monotonic() < deadline, launcher.output()[-2000:]
            time.sleep(0.2)
        evals = _evals_of(evaluation_id)
        entrypoint = next(
            p for p in evals[0].parents() if "proctor.sandboxes.guard" in " ".join(p.cmdline())
        )
        entrypoint.kill()
        record = wait_closed(client, plat, evaluation_id, timeout=120)
        assert record["status"] == "FAILED", record
        assert "exited with code 137 (killed by SIGKILL)" in record["error_message"]
        assert all(gone(p.pid, timeout=10) for p in evals) and _evals_of(evaluation_id) == []
        # Answers to requests sent before the kill may still come back; then, silence. An
        # orphaned eval (300 tasks, 200 ms each) would never let the model go quiet.
        deadline, quiet_since, seen = time.monotonic() + 60, time.monotonic(), calls.forwarded
        while time.monotonic() - quiet_since < 3.0:
            assert time.monotonic() < deadline, "something still calls the model"
            if calls.forwarded != seen:
                quiet_since, seen = time.monotonic(), calls.forwarded
            time.sleep(0.1)
