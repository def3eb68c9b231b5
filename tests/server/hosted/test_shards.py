"""The launcher's sharded evaluations (`eval_config.shards`), with real local sandboxes.

Shell one-liners stand in for `proctor eval` (the template's `{options}` carry `--shard
I/N`); tests/e2e/test_hosted_shards.py runs the real CLI against a real server, and
tests/e2e/test_ray_cluster.py on a three-node Ray cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor.server.auth import service as auth
from proctor.server.db.models import HostedShard
from proctor.server.db.session import Database
from proctor.server.errors import BadRequest
from proctor.server.hosted import service
from proctor.server.hosted.schemas import CreateHostedEvaluation
from proctor.server.hosted.settings import LauncherSettings
from tests.server.hosted.conftest import ADMIN_KEY
from tests.server.hosted.test_launcher import (
    _create,
    _group_alive,
    _launcher,
    _record,
    _status,
    _tick_until,
)

# Shard 1 of 2 fails at once; shard 0 runs until it is stopped.
ONE_FAILS = (
    'case " {options} " in *" --shard 1/2 "*) echo "shard one is broken"; exit 7;; esac; sleep 60'
)


def _shards(db: Database, evaluation_id: str) -> list[HostedShard]:
    with db.read() as session:
        rows = (
            session.query(HostedShard)
            .filter(HostedShard.evaluation_id == evaluation_id)
            .order_by(HostedShard.shard)
            .all()
        )
        session.expunge_all()
        return rows


def _logs(db: Database, evaluation_id: str, shard: int | None = None) -> str:
    with db.read() as session:
        principal = auth.authenticate(session, ADMIN_KEY)
        return service.read_logs(session, principal, evaluation_id, LauncherSettings(), shard=shard)


def _group(row: HostedShard) -> int:
    """The process group of a shard's local sandbox (its handle is `pid@start time`)."""
    return int((row.sandbox_handle or "0").partition("@")[0])


def test_each_shard_runs_its_own_slice_and_exit_zero_without_samples_is_incomplete(
    db: Database, tmp_path: Path
) -> None:
    evaluation_id = _create(db, num_examples=3, rollouts_per_example=2, shards=3)
    launcher = _launcher(db, tmp_path, "echo options: {options}")
    _tick_until(launcher, lambda: _status(db, evaluation_id) not in ("PENDING", "RUNNING"))
    evaluation, hosted = _record(db, evaluation_id)
    assert evaluation.status == "FAILED"
    assert (evaluation.error_message or "").startswith("incomplete: 0 of 6 samples")
    assert hosted.ended_at is not None and hosted.secrets is None
    rows = _shards(db, evaluation_id)
    assert [(r.shard, r.state, r.attempt, r.exit_code) for r in rows] == [
        (i, "done", 1, 0) for i in range(3)
    ]
    for index in range(3):
        log = _logs(db, evaluation_id, shard=index)
        assert f"--shard {index}/3" in log and "--run.attach" not in log  # the template's own
    whole = _logs(db, evaluation_id)
    assert whole.startswith("== 3 shards: 0 of 6 samples ==")
    assert "== shard 2/3: done, attempt 1, 0 of 2 samples ==\noptions: " in whole


def test_a_shard_out_of_attempts_fails_the_evaluation_naming_it_and_stops_the_others(
    db: Database, tmp_path: Path
) -> None:
    evaluation_id = _create(db, num_examples=2, rollouts_per_example=1, shards=2)
    launcher = _launcher(db, tmp_path, ONE_FAILS, shard_attempts=3)
    _tick_until(launcher, lambda: _status(db, evaluation_id) not in ("PENDING", "RUNNING"))
    evaluation, hosted = _record(db, evaluation_id)
    message = evaluation.error_message or ""
    assert evaluation.status == "FAILED" and hosted.ended_at is not None
    assert message.startswith("shard 1/2 failed 3 times; its last attempt ended with exit code 7")
    assert "shard-1/sandbox.log" in message and "shard one is broken" in message
    first, second = _shards(db, evaluation_id)
    assert (second.state, second.attempt, second.exit_code) == ("failed", 3, 7)
    assert first.state == "stopped" and first.attempt == 1
    assert not _group_alive(_group(first))
    # Every attempt's output stays in the shard's log.
    assert _logs(db, evaluation_id, shard=1).count("shard one is broken") == 3


def test_a_failed_shard_is_started_again_in_its_own_work_dir(db: Database, tmp_path: Path) -> None:
    # Each shard fails its first attempt and succeeds on the second (it finds its marker).
    command = "if [ -e tried ]; then echo second try; exit 0; fi; touch tried; exit 9"
    evaluation_id = _create(db, num_examples=2, rollouts_per_example=1, shards=2)
    launcher = _launcher(db, tmp_path, command + " # {options}")
    _tick_until(launcher, lambda: _status(db, evaluation_id) not in ("PENDING", "RUNNING"))
    rows = _shards(db, evaluation_id)
    assert [(r.state, r.attempt, r.exit_code) for r in rows] == [("done", 2, 0)] * 2
    assert all((r.error or "").startswith("exit code 9") for r in rows)
    # No sample was stored, so the whole is incomplete; tests/e2e store real ones.
    assert (_record(db, evaluation_id)[0].error_message or "").startswith("incomplete: 0 of 2")


def test_cancel_stops_every_shard(db: Database, tmp_path: Path) -> None:
    evaluation_id = _create(db, num_examples=3, rollouts_per_example=1, shards=3)
    launcher = _launcher(db, tmp_path, "sleep 60 # {options}")
    _tick_until(launcher, lambda: {r.state for r in _shards(db, evaluation_id)} == {"running"})
    groups = [_group(row) for row in _shards(db, evaluation_id)]
    assert all(_group_alive(group) for group in groups)
    with db.write() as session:
        service.cancel(session, auth.authenticate(session, ADMIN_KEY), evaluation_id)
    _tick_until(launcher, lambda: _record(db, evaluation_id)[1].ended_at is not None)
    assert _status(db, evaluation_id) == "CANCELLED"
    assert not any(_group_alive(group) for group in groups)
    assert {r.state for r in _shards(db, evaluation_id)} == {"stopped"}


def test_timeout_stops_every_shard(db: Database, tmp_path: Path) -> None:
    evaluation_id = _create(
        db, num_examples=2, rollouts_per_example=1, shards=2, timeout_minutes=0.01
    )
    launcher = _launcher(db, tmp_path, "sleep 60 # {options}")
    _tick_until(launcher, lambda: _status(db, evaluation_id) not in ("PENDING", "RUNNING"))
    assert _status(db, evaluation_id) == "TIMEOUT"
    assert {r.state for r in _shards(db, evaluation_id)} == {"stopped"}


def test_a_restarted_launcher_adopts_running_shards(db: Database, tmp_path: Path) -> None:
    evaluation_id = _create(db, num_examples=2, rollouts_per_example=1, shards=2)
    command = "sleep 1.5; exit 4 # {options}"
    first = _launcher(db, tmp_path, command, launcher_id="L1", shard_attempts=1)
    _tick_until(first, lambda: {r.state for r in _shards(db, evaluation_id)} == {"running"})
    handles = [r.sandbox_handle for r in _shards(db, evaluation_id)]
    # The first launcher stops ticking; another takes its work over and sees it end.
    second = _launcher(db, tmp_path, command, launcher_id="L2", stale_seconds=0.2, shard_attempts=1)
    _tick_until(second, lambda: _record(db, evaluation_id)[1].ended_at is not None)
    evaluation, hosted = _record(db, evaluation_id)
    assert hosted.launcher_id == "L2" and evaluation.status == "FAILED"
    assert "failed 1 time;" in (evaluation.error_message or "")
    # Adopted, not started again: the same sandboxes ran to their end.
    assert [r.sandbox_handle for r in _shards(db, evaluation_id)] == handles


def test_a_template_without_options_is_refused_before_any_shard_starts(
    db: Database, tmp_path: Path
) -> None:
    evaluation_id = _create(db, num_examples=2, rollouts_per_example=1, shards=2)
    launcher = _launcher(db, tmp_path, "echo {env}")
    _tick_until(launcher, lambda: _status(db, evaluation_id) == "FAILED")
    message = _record(db, evaluation_id)[0].error_message or ""
    assert "add {options} to PROCTOR_HOSTED_COMMAND" in message
    assert _shards(db, evaluation_id) == []


@pytest.mark.parametrize(
    ("eval_config", "refusal"),
    [
        ({"shards": 0}, "greater than or equal to 1"),
        ({"shards": True}, "a boolean is not a number"),
    ],
)
def test_shards_are_bounded_by_the_samples(eval_config: dict[str, object], refusal: str) -> None:
    body = {"environment_ids": ["alphabet-sort"], "inference_model": "demo"}
    with pytest.raises(ValueError, match=refusal):
        CreateHostedEvaluation.model_validate({**body, "eval_config": eval_config})


def test_more_shards_than_samples_is_refused_with_a_400(db: Database) -> None:
    # No schema relates two fields, so a schema-valid body gets a 400 (the fuzz run's rule).
    with pytest.raises(BadRequest, match="more than the 2 samples the run makes"):
        _create(db, shards=3)
