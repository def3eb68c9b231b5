"""The launcher's rules, on a real SQLite database built by migrations and real local sandboxes.

The sandbox command is a template, so shell one-liners stand in for `proctor eval` here;
tests/e2e/test_hosted*.py run the real CLI against a real server.
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from proctor.server.auth import service as auth
from proctor.server.db.models import ApiKey, Evaluation, HostedEvaluation
from proctor.server.db.session import Database
from proctor.server.hosted import service
from proctor.server.hosted.launcher import Launcher
from proctor.server.hosted.schemas import CreateHostedEvaluation
from proctor.server.hosted.settings import LauncherSettings
from proctor.server.settings import Settings
from proctor.server.setup import prepare_database
from tests.server.hosted.conftest import ADMIN_KEY
from tests.support.procs import PROCTOR, ManagedProcess
from tests.support.waiting import wait_until


def _settings(**overrides: Any) -> LauncherSettings:
    base: dict[str, Any] = {"poll_seconds": 0.05, "stop_grace_seconds": 0.5, "stale_seconds": 60.0}
    return LauncherSettings(**{**base, **overrides})


def _create(db: Database, **eval_config: Any) -> str:
    body = CreateHostedEvaluation.model_validate(
        {
            "environment_ids": ["alphabet-sort"],
            "inference_model": "demo",
            "eval_config": {"num_examples": 2, "rollouts_per_example": 1, **eval_config},
        }
    )
    with db.write() as session:
        principal = auth.authenticate(session, ADMIN_KEY)
        return service.create_hosted(session, principal, body, LauncherSettings())[0]


def _record(db: Database, evaluation_id: str) -> tuple[Evaluation, HostedEvaluation]:
    with db.read() as session:
        evaluation = session.get(Evaluation, evaluation_id)
        hosted = session.get(HostedEvaluation, evaluation_id)
        assert evaluation is not None and hosted is not None
        session.expunge_all()  # keep the loaded values past the read session's rollback
        return evaluation, hosted


def _tick_until(launcher: Launcher, done: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        launcher.tick()
        if done():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def _status(db: Database, evaluation_id: str) -> str:
    return _record(db, evaluation_id)[0].status


def _launcher(
    db: Database, tmp_path: Path, command: str, *, launcher_id: str | None = None, **settings: Any
) -> Launcher:
    return Launcher(
        db,
        _settings(command=command, **settings),
        api_url="http://127.0.0.1:9",
        data_dir=tmp_path,
        launcher_id=launcher_id,
    )


def test_create_stores_pending_record_with_launcher_metadata_and_no_secrets(db: Database) -> None:
    evaluation_id = _create(db, custom_secrets={"MODEL_KEY": "top-s3cret"}, timeout_minutes=2.5)
    evaluation, hosted = _record(db, evaluation_id)
    assert evaluation.status == "PENDING" and evaluation.is_hosted
    metadata = json.loads(evaluation.metadata_raw)
    assert metadata["launcher"] == "proctor"
    assert metadata["num_examples"] == 2 and metadata["timeout_minutes"] == 2.5
    assert "top-s3cret" not in evaluation.metadata_raw and "custom_secrets" not in metadata
    assert hosted.secrets == {"custom_secrets": {"MODEL_KEY": "top-s3cret"}}
    assert hosted.expected_samples == 2 and hosted.timeout_minutes == 2.5


def test_credential_headers_are_masked_in_metadata_but_reach_the_command(
    db: Database, tmp_path: Path
) -> None:
    evaluation_id = _create(db, headers=["Authorization: Bearer hdr-s3cret", "X-Team: a"])
    assert "hdr-s3cret" not in _record(db, evaluation_id)[0].metadata_raw
    command = "echo {config}; printf '%s\\n' \"$PROCTOR_CLIENT_HEADERS\"; cat {config}; exit 3"
    launcher = _launcher(db, tmp_path, command)
    _tick_until(launcher, lambda: _status(db, evaluation_id) == "FAILED")
    name, headers, *config = (
        (tmp_path / "sandboxes" / evaluation_id / "sandbox.log").read_text().splitlines()
    )
    # The sandbox's eval.toml names the variable; the values travel in its environment.
    assert name == "eval.toml"
    settings = tomllib.loads("\n".join(config))
    assert settings["client"] == {"headers_var": "PROCTOR_CLIENT_HEADERS"}
    assert "s3cret" not in "\n".join(config)
    assert json.loads(headers) == {"Authorization": "Bearer hdr-s3cret", "X-Team": "a"}
    # Once the sandbox has ended, the database no longer holds the credential anywhere.
    hosted = _record(db, evaluation_id)[1]
    assert hosted.secrets is None and "hdr-s3cret" not in json.dumps(hosted.config)


def test_nonzero_exit_fails_with_code_and_log_tail(db: Database, tmp_path: Path) -> None:
    evaluation_id = _create(db)
    launcher = _launcher(db, tmp_path, "echo starting {env} {model}; echo broken >&2; exit 3")
    _tick_until(launcher, lambda: _status(db, evaluation_id) not in ("PENDING", "RUNNING"))
    evaluation, hosted = _record(db, evaluation_id)
    assert evaluation.status == "FAILED"
    assert evaluation.error_message is not None
    assert "code 3" in evaluation.error_message and "broken" in evaluation.error_message
    assert hosted.exit_code == 3 and hosted.ended_at is not None and hosted.secrets is None
    log = (tmp_path / "sandboxes" / evaluation_id / "sandbox.log").read_text()
    assert "starting alphabet-sort demo" in log


def test_exit_zero_without_finalizing_is_incomplete(db: Database, tmp_path: Path) -> None:
    evaluation_id = _create(db, num_examples=3, rollouts_per_example=2)
    launcher = _launcher(db, tmp_path, "true")
    _tick_until(launcher, lambda: _status(db, evaluation_id) == "FAILED")
    message = _record(db, evaluation_id)[0].error_message or ""
    assert message.startswith("incomplete: 0 of 6 samples")


def test_sandbox_gets_scoped_key_and_secrets_only_in_its_environment(
    db: Database, tmp_path: Path
) -> None:
    os.environ["PROCTOR_TEST_FORWARDED_KEY"] = "forwarded-s3cret"
    try:
        evaluation_id = _create(
            db,
            custom_secrets={"MY_SECRET": "custom-s3cret"},
            api_key_var="PROCTOR_TEST_FORWARDED_KEY",
        )
        # The command prints what the sandbox's environment holds, then lingers for `ps`.
        command = (
            'echo "url=$PROCTOR_API_URL id=$EVALUATION_ID"; '
            "printenv MY_SECRET PROCTOR_TEST_FORWARDED_KEY PROCTOR_API_KEY > env.txt; sleep 30"
        )
        launcher = _launcher(db, tmp_path, command, forward_env="PROCTOR_TEST_FORWARDED_KEY")
        _tick_until(launcher, lambda: _status(db, evaluation_id) == "RUNNING")
        env_file = tmp_path / "sandboxes" / evaluation_id / "work" / "env.txt"
        _tick_until(launcher, env_file.exists)
        time.sleep(0.2)
        custom, forwarded, key = env_file.read_text().split()
        assert (custom, forwarded) == ("custom-s3cret", "forwarded-s3cret")
        assert key.startswith("pk_")
        log = launcher.backend.logs(launcher._watched[evaluation_id].handle)
        assert f"url=http://127.0.0.1:9 id={evaluation_id}" in log
        _, hosted = _record(db, evaluation_id)
        group = [p for p in psutil.process_iter(["cmdline"]) if _pgid(p.pid) == hosted.pid]
        cmdlines = " ".join(" ".join(p.info["cmdline"] or []) for p in group)
        assert group and all(v not in cmdlines for v in (custom, forwarded, key))
        with db.read() as session:
            keys = session.query(ApiKey).filter(ApiKey.scope_evaluation_id == evaluation_id).all()
            session.expunge_all()
        assert len(keys) == 1 and keys[0].revoked_at is None
    finally:
        del os.environ["PROCTOR_TEST_FORWARDED_KEY"]
    with db.write() as session:
        service.cancel(session, auth.authenticate(session, ADMIN_KEY), evaluation_id)
    _tick_until(launcher, lambda: _record(db, evaluation_id)[1].ended_at is not None)
    evaluation, hosted = _record(db, evaluation_id)
    assert evaluation.status == "CANCELLED" and hosted.secrets is None
    with db.read() as session:
        key = session.query(ApiKey).filter(ApiKey.scope_evaluation_id == evaluation_id).one()
        session.expunge_all()
    assert key.revoked_at is not None
    assert not _group_alive(hosted.pid)


def test_timeout_kills_the_sandbox(db: Database, tmp_path: Path) -> None:
    evaluation_id = _create(db, timeout_minutes=0.01)  # 0.6 s
    launcher = _launcher(db, tmp_path, "sleep 60")
    _tick_until(launcher, lambda: _status(db, evaluation_id) == "TIMEOUT")
    evaluation, hosted = _record(db, evaluation_id)
    assert "timed out" in (evaluation.error_message or "")
    assert not _group_alive(hosted.pid)


@pytest.mark.parametrize("step_hours", [2, -2])
def test_a_wall_clock_step_neither_ends_a_run_early_nor_keeps_it_past_its_time(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step_hours: int
) -> None:
    from proctor.server.hosted import launcher as launcher_module

    real = launcher_module.utcnow
    patient = _create(db, timeout_minutes=30)
    hasty = _create(db, timeout_minutes=0.01)  # 0.6 s
    launcher = _launcher(db, tmp_path, "sleep 3; exit 1")
    _tick_until(launcher, lambda: _status(db, patient) != "PENDING")
    # The server's clock jumps (NTP, a VM resumed): the timeouts keep to the real time.
    monkeypatch.setattr(launcher_module, "utcnow", lambda: real() + timedelta(hours=step_hours))
    _tick_until(launcher, lambda: _status(db, patient) not in ("PENDING", "RUNNING"))
    evaluation, _ = _record(db, patient)
    assert evaluation.status == "FAILED"
    assert "exited with code 1" in (evaluation.error_message or "")
    _tick_until(launcher, lambda: _status(db, hasty) not in ("PENDING", "RUNNING"))
    assert _status(db, hasty) == "TIMEOUT"


def test_terminal_status_set_by_the_run_is_kept(db: Database, tmp_path: Path) -> None:
    evaluation_id = _create(db)
    launcher = _launcher(db, tmp_path, "sleep 1; exit 1")
    _tick_until(launcher, lambda: _status(db, evaluation_id) == "RUNNING")
    with db.write() as session:
        evaluation = session.get(Evaluation, evaluation_id)
        assert evaluation is not None
        evaluation.status, evaluation.error_message = "FAILED", "the run's own reason"
    _tick_until(launcher, lambda: _record(db, evaluation_id)[1].ended_at is not None)
    evaluation, _ = _record(db, evaluation_id)
    assert (evaluation.status, evaluation.error_message) == ("FAILED", "the run's own reason")


def test_launchers_sharing_the_queue_start_each_evaluation_once(
    db: Database, tmp_path: Path
) -> None:
    ids = [_create(db) for _ in range(12)]
    launchers = [
        _launcher(db, tmp_path, "echo started >> starts; sleep 0.3", launcher_id=f"L{i}")
        for i in range(3)
    ]
    for launcher in launchers:
        launcher.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(_record(db, i)[1].ended_at is not None for i in ids):
                break
            time.sleep(0.1)
    finally:
        for launcher in launchers:
            launcher.stop()
    for evaluation_id in ids:
        _, hosted = _record(db, evaluation_id)
        assert hosted.ended_at is not None and hosted.attempt == 1
        starts = (tmp_path / "sandboxes" / evaluation_id / "work" / "starts").read_text()
        assert starts == "started\n"  # one sandbox, not one per launcher
    with db.read() as session:
        minted = session.query(ApiKey).filter(ApiKey.scope_evaluation_id.in_(ids)).count()
    assert minted == len(ids)
    assert {_record(db, i)[1].launcher_id for i in ids} <= {"L0", "L1", "L2"}


def test_concurrency_limit_keeps_the_rest_pending(db: Database, tmp_path: Path) -> None:
    ids = [_create(db) for _ in range(3)]
    launcher = _launcher(db, tmp_path, "sleep 30", max_sandboxes=2)
    for _ in range(5):
        launcher.tick()
    assert sorted(_status(db, i) for i in ids) == ["PENDING", "RUNNING", "RUNNING"]
    for evaluation_id in ids:
        with db.write() as session:
            service.cancel(session, auth.authenticate(session, ADMIN_KEY), evaluation_id)
    _tick_until(launcher, lambda: launcher.running == 0)
    assert {_status(db, i) for i in ids} == {"CANCELLED"}


def test_restarted_launcher_adopts_live_sandbox_and_closes_dead_ones(
    db: Database, tmp_path: Path
) -> None:
    alive_id, dead_id = _create(db), _create(db)
    first = _launcher(db, tmp_path, "sleep 1.5; exit 5", launcher_id="L1")
    _tick_until(first, lambda: {_status(db, alive_id), _status(db, dead_id)} == {"RUNNING"})
    # The first launcher dies; one sandbox is killed with it, the other lives on.
    os.killpg(_record(db, dead_id)[1].pid or 0, 9)
    second = _launcher(db, tmp_path, "true", launcher_id="L2", stale_seconds=0.2)
    time.sleep(0.3)
    _tick_until(
        second,
        lambda: all(_record(db, i)[1].ended_at is not None for i in (alive_id, dead_id)),
    )
    alive, dead = _record(db, alive_id)[0], _record(db, dead_id)[0]
    assert alive.status == "FAILED" and "code 5" in (alive.error_message or "")
    # Killed with its wrapper, it left no exit code: it is closed with the reason.
    assert dead.status == "FAILED" and "without an exit code" in (dead.error_message or "")


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _group_alive(pgid: int | None) -> bool:
    return any(
        _pgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE for p in psutil.process_iter()
    )


class _Crash(BaseException):
    """Stands in for the launcher process dying at one exact point."""


class _DyingDatabase:
    """The launcher's database, until `die` is set: then every write "kills" the launcher."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.die = False

    def read(self) -> Any:
        return self.db.read()

    def write(self) -> Any:
        if self.die:
            raise _Crash
        return self.db.write()


def test_launcher_dying_between_start_and_record_does_not_orphan_the_sandbox(
    db: Database, tmp_path: Path
) -> None:
    evaluation_id = _create(db)
    dying_db = _DyingDatabase(db)
    dying = Launcher(
        dying_db,  # type: ignore[arg-type]
        _settings(command="echo started >> starts; sleep 1; exit 4"),
        api_url="http://127.0.0.1:9",
        data_dir=tmp_path,
        launcher_id="L1",
    )
    real_start = dying.backend.start

    def start_then_die(spec: Any) -> Any:
        handle = real_start(spec)
        dying_db.die = True  # the write that records the handle never happens
        return handle

    dying.backend.start = start_then_die  # type: ignore[method-assign]
    with pytest.raises(_Crash):
        dying.tick()
    assert _record(db, evaluation_id)[1].sandbox_handle is None
    restarted = _launcher(db, tmp_path, "echo started >> starts; exit 0", launcher_id="L1")
    _tick_until(restarted, lambda: _record(db, evaluation_id)[1].ended_at is not None)
    evaluation, hosted = _record(db, evaluation_id)
    assert evaluation.status == "FAILED" and "code 4" in (evaluation.error_message or "")
    assert hosted.sandbox_handle is not None
    starts = (tmp_path / "sandboxes" / evaluation_id / "work" / "starts").read_text()
    assert starts == "started\n"  # adopted, not started a second time


def test_launcher_command_hands_sandboxes_the_servers_own_address(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'proctor.db'}")  # the data dir's own database
    try:
        prepare_database(Settings(data_dir=tmp_path, bootstrap_key=ADMIN_KEY), db)
        evaluation_id = _create(db)
    finally:
        db.dispose()
    env = {
        "PROCTOR_PORT": "9123",  # where `proctor server` listens; no --api-url given
        "PROCTOR_HOSTED_COMMAND": 'echo "url=$PROCTOR_API_URL"',
        "PROCTOR_HOSTED_POLL_SECONDS": "0.05",
    }
    log = tmp_path / "sandboxes" / evaluation_id / "sandbox.log"
    proc = ManagedProcess(
        [*PROCTOR, "launcher", "--data-dir", str(tmp_path)], tmp_path / "launcher.log", env=env
    ).start()
    try:
        deadline = time.monotonic() + 30
        while "url=" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, proc.output()
            time.sleep(0.05)
    finally:
        proc.stop()
    assert "url=http://127.0.0.1:9123" in log.read_text()


def test_a_value_the_engine_refuses_fails_before_a_sandbox_starts(
    db: Database, tmp_path: Path
) -> None:
    # The request's schema checks each key's form; the engine's own rule on a value applies
    # when the overlay becomes an EvalConfig, named in the wire's words.
    evaluation_id = _create(db, sampling_args={"temperature": -1})
    launcher = _launcher(db, tmp_path, "echo started")
    _tick_until(launcher, lambda: _status(db, evaluation_id) == "FAILED")
    message = _record(db, evaluation_id)[0].error_message or ""
    assert message == (
        "the sandbox could not start: invalid value for eval_config.sampling_args.temperature: "
        "Input should be greater than or equal to 0; fix it and send again"
    )
    assert not (tmp_path / "sandboxes" / evaluation_id / "sandbox.log").exists()


def test_an_idle_launcher_polls_slowly_and_is_woken_for_new_work(
    db: Database, tmp_path: Path
) -> None:
    """Watching nothing, the launcher waits `idle_poll_seconds` between ticks (an idle server
    does not query its database four times a second); `wake()`, as its server calls on a
    create, starts new work at once, and while a sandbox runs it polls at `poll_seconds`."""
    launcher = _launcher(db, tmp_path, "sleep 30", idle_poll_seconds=600.0)
    assert launcher.pause() == 600.0
    launcher.start()
    try:
        time.sleep(0.5)  # its first tick has passed: it now sleeps for the idle period
        evaluation_id = _create(db)
        launcher.wake()
        wait_until(lambda: _status(db, evaluation_id) == "RUNNING", timeout=30)
        assert launcher.pause() == 0.05
        with db.write() as session:
            service.cancel(session, auth.authenticate(session, ADMIN_KEY), evaluation_id)
        wait_until(lambda: launcher.running == 0, timeout=30)
        assert _status(db, evaluation_id) == "CANCELLED"
    finally:
        launcher.stop()
