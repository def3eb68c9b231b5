"""A pushed version keeps running when the server's data dir is given relatively, then moved
and given absolutely: package paths are stored relative to the data dir."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.e2e.hosted_helpers import hub_project
from tests.e2e.test_hub import make_key, proctor
from tests.support.platform import BOOTSTRAP_KEY, Platform
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http

from proctor.server.db.models import EnvironmentVersion
from proctor.server.db.session import Database

pytestmark = pytest.mark.e2e


def serve(data_dir: str, cwd: Path, log: Path, empty_index: Path) -> Platform:
    port = free_port()
    env = {
        "PROCTOR_BOOTSTRAP_KEY": BOOTSTRAP_KEY,
        "PROCTOR_HOSTED_POLL_SECONDS": "0.1",
        "PROCTOR_HOSTED_STOP_GRACE_SECONDS": "1",
        "PROCTOR_HOSTED_PACKAGE_INDEX": empty_index.as_uri(),
    }
    args = [*PROCTOR, "server", "--host", "127.0.0.1", "--port", str(port)]
    proc = ManagedProcess([*args, "--data-dir", data_dir], log, env=env, cwd=cwd).start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/healthz", proc=proc.proc, timeout=60)
    except Exception:
        proc.stop()
        raise RuntimeError(proc.output()) from None
    return Platform(url, BOOTSTRAP_KEY, (cwd / data_dir).resolve(), None, proc)


def test_a_moved_data_dir_keeps_pushed_versions_runnable(tmp_path: Path, demo_model: str) -> None:
    first_home = tmp_path / "first"
    first_home.mkdir()
    empty_index = tmp_path / "empty-index"
    empty_index.mkdir()
    plat = serve("data", first_home, tmp_path / "server-1.log", empty_index)
    try:
        alice = make_key(plat, "alice")
        pushed = proctor(plat, alice, "envs", "push", str(hub_project(tmp_path)))
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    finally:
        plat.process.stop()

    db = Database(f"sqlite:///{first_home / 'data' / 'proctor.db'}")
    try:
        with db.read() as session:
            stored = [v.wheel_path for v in session.query(EnvironmentVersion) if v.wheel_path]
    finally:
        db.dispose()
    assert stored and all(p and p.startswith("hub/wheels/") for p in stored), stored

    moved = tmp_path / "elsewhere" / "proctor-data"
    moved.parent.mkdir()
    shutil.move(str(first_home / "data"), moved)
    plat = serve(str(moved), tmp_path, tmp_path / "server-2.log", empty_index)
    try:
        run = ["hosted", "run", "alice/tiny-echo", "-m", "demo", "--api-base-url", demo_model]
        run += ["-n", "2", "-r", "1", "--follow", "--poll-seconds", "0.2"]
        done = proctor(plat, alice, *run)
        assert done.returncode == 0, done.stdout + done.stderr + plat.process.output()
        assert "COMPLETED" in done.stderr and "samples: 2" in done.stdout
        assert "installed alice/tiny-echo@0.1.0" in done.stdout
    finally:
        plat.process.stop()
