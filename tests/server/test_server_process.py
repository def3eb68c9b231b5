"""`proctor server` as a real process over loopback HTTP, and what `proctor keys`, `proctor
teams` and a misconfigured command print and store (run in this process: `cli_in_process`)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.support.cli import Finished, cli_in_process
from tests.support.platform import Platform, start_platform
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


def here(*args: str, home: Path, env: dict[str, str] | None = None) -> Finished:
    """`proctor ARGS` in this process, with this process's `PROCTOR_*` variables and `env`."""
    own = {k: v for k, v in os.environ.items() if k.startswith("PROCTOR_")}
    return cli_in_process(*args, home=home, env={**own, **(env or {})})


def assert_graceful_stop(proc: ManagedProcess) -> None:
    """SIGTERM ends the server through its shutdown path (uvicorn re-raises the signal)."""
    assert proc.stop() in {0, -signal.SIGTERM}
    assert "Application shutdown complete" in proc.output()


def wait_completed(client: httpx.Client, evaluation_id: str) -> dict[str, object]:
    def completed() -> dict[str, object] | None:
        record: dict[str, object] = client.get(f"/evaluations/{evaluation_id}").json()
        return record if record["status"] == "COMPLETED" else None

    return wait_until(completed, timeout=15, what=f"{evaluation_id} COMPLETED")


def test_create_samples_finalize_over_http_on_each_backend(db_url: str, tmp_path: Path) -> None:
    platform = start_platform(tmp_path, database_url=db_url)
    try:
        assert httpx.get(f"{platform.url}/healthz").json()["status"] == "ok"
        assert httpx.get(f"{platform.url}/openapi.json").status_code == 200
        with platform.client() as client:
            env = client.post("/environmentshub/resolve", json={"name": "alphabet-sort"}).json()
            created = client.post(
                "/evaluations/",
                json={"name": "http", "environments": [{"id": env["data"]["id"]}], "tags": []},
            ).json()
            evaluation_id = created["evaluation_id"]
            samples = [{"sample_id": f"s{i}", "reward": i / 4} for i in range(5)]
            posted = client.post(f"/evaluations/{evaluation_id}/samples", json={"samples": samples})
            assert posted.status_code == 200
            oversized = b'{"samples": [{"sample_id": "big", "blob": "' + b"x" * (26 << 20) + b'"}]}'
            too_big = client.post(f"/evaluations/{evaluation_id}/samples", content=oversized)
            assert too_big.status_code == 413
            assert client.post(f"/evaluations/{evaluation_id}/finalize", json={}).is_success
            record = wait_completed(client, evaluation_id)
        assert record["status"] == "COMPLETED"
        assert record["total_samples"] == 5 and record["avg_score"] == 0.5
    finally:
        assert_graceful_stop(platform.process)


def test_processing_left_by_a_crash_completes_on_restart(platform: Platform) -> None:
    with platform.client() as client:
        evaluation_id = client.post("/evaluations/", json={"name": "crash"}).json()["evaluation_id"]
    platform.process.kill()
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{platform.data_dir / 'proctor.db'}")
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE evaluations SET status = 'PROCESSING' WHERE id = :id"),
            {"id": evaluation_id},
        )
    engine.dispose()
    platform.restart()
    with platform.client() as client:
        assert client.get(f"/evaluations/{evaluation_id}").json()["status"] == "COMPLETED"


def test_keys_and_teams_commands_act_on_the_servers_database(
    platform: Platform, tmp_path: Path
) -> None:
    data_dir = str(platform.data_dir)
    assert here("teams", "create", "red", "--data-dir", data_dir, home=tmp_path).returncode == 0
    created = here(
        "keys", "create", "--name", "alice", "--team", "red", "--data-dir", data_dir, home=tmp_path
    )
    assert created.returncode == 0, created.stderr
    secret = created.stdout.splitlines()[0]
    assert secret.startswith("pk_")
    assert (
        here("teams", "add-member", "red", "bob", "--data-dir", data_dir, home=tmp_path).returncode
        == 0
    )
    members = here("teams", "members", "red", "--data-dir", data_dir, home=tmp_path).stdout
    assert "alice" in members and "bob" in members

    with platform.client(secret) as alice:
        made = alice.post("/evaluations/", json={"name": "team-run", "team_id": "red"})
        assert made.status_code == 201
    listed = here("keys", "list", "--data-dir", data_dir, home=tmp_path)
    assert secret not in listed.stdout and "alice" in listed.stdout
    revoked = here("keys", "revoke", secret[:12], "--data-dir", data_dir, home=tmp_path)
    assert revoked.returncode == 0, revoked.stderr
    with platform.client(secret) as alice:
        assert alice.get("/evaluations/").status_code == 401
    bad = here(
        "keys", "create", "--name", "x", "--team", "nope", "--data-dir", data_dir, home=tmp_path
    )
    assert bad.returncode != 0 and "proctor teams create" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_server_without_keys_says_how_to_create_the_first(tmp_path: Path) -> None:
    migrated = here("server", "migrate", "--data-dir", str(tmp_path), home=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    port = free_port()
    args = [*PROCTOR, "server", "--port", str(port), "--data-dir", str(tmp_path)]
    proc = ManagedProcess(args, tmp_path / "server.log")
    saved = os.environ.pop("PROCTOR_BOOTSTRAP_KEY", None)
    try:
        proc.start()
    finally:
        if saved is not None:
            os.environ["PROCTOR_BOOTSTRAP_KEY"] = saved
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc.proc)
    finally:
        assert_graceful_stop(proc)
    assert "proctor keys create" in proc.output()
    # Said once, naming this data dir.
    assert proc.output().count("proctor keys create") == 1
    assert f"--data-dir {tmp_path}" in proc.output()


def test_an_unreachable_database_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    result = here(
        "server",
        "migrate",
        home=tmp_path,
        env={"PROCTOR_DATABASE_URL": f"postgresql://nobody:secret@127.0.0.1:{port}/x"},
    )
    assert result.returncode == 2
    assert "PROCTOR_DATABASE_URL" in result.stderr and "Traceback" not in result.stderr
    assert "secret" not in result.stderr


@pytest.mark.parametrize(
    ("command", "variable"),
    [
        (["keys", "list"], "PROCTOR_PORT"),
        (["teams", "list"], "PROCTOR_PORT"),
        (["launcher"], "PROCTOR_PORT"),
        (["server"], "PROCTOR_PORT"),
        (["launcher"], "PROCTOR_HOSTED_MAX_SANDBOXES"),
        (["server"], "PROCTOR_HOSTED_MAX_SANDBOXES"),
    ],
)
def test_an_invalid_setting_is_one_line_naming_its_variable(
    command: list[str], variable: str, tmp_path: Path
) -> None:
    result = here(*command, "--data-dir", str(tmp_path), home=tmp_path, env={variable: "abc"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and variable in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "command",
    [["keys", "list"], ["keys", "revoke", "x"], ["teams", "list"], ["teams", "members", "t"]],
)
def test_reading_a_data_dir_without_a_database_names_it_and_creates_nothing(
    command: list[str], tmp_path: Path
) -> None:
    missing = tmp_path / "typo"
    result = here(
        *command, "--data-dir", str(missing), home=tmp_path, env={"PROCTOR_DATABASE_URL": ""}
    )
    assert result.returncode == 2, result.stderr
    assert str(missing) in result.stderr and "--data-dir" in result.stderr
    assert not missing.exists()
