"""The attach contract of `open_platform_run`, one test per rule, against a real platform."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest

from proctor.errors import AttachError, ConfigError
from proctor.eval.platform_run import open_platform_run
from tests.runs.support import (
    create_launcher_evaluation,
    evaluation_count,
    get_evaluation,
    make_record,
)
from tests.support.platform import Platform
from tests.support.procs import PROCTOR, free_port


def _open(tmp_path: Path, *, push: bool = True, attach: str | None = None, **config: Any):
    cfg: dict[str, Any] = {"env": "alphabet-sort", "run": {"name": "r1"}, **config}
    run = open_platform_run(
        push=push,
        attach=attach,
        name="r1",
        environment="alphabet-sort",
        model="demo",
        config=cfg,
        run_dir=tmp_path / "run",
    )
    return run, cfg


def test_attach_needs_push(tmp_path: Path, online: Platform) -> None:
    eid = create_launcher_evaluation(online)
    with pytest.raises(ConfigError, match="needs push; drop --no-push") as exc:
        _open(tmp_path, push=False, attach=eid)
    assert exc.value.exit_code == 2


def test_no_attach_creates_a_run_whose_id_the_platform_assigns(
    tmp_path: Path, online: Platform
) -> None:
    before = evaluation_count(online)
    run, cfg = _open(tmp_path)
    try:
        assert not run.attached
        assert evaluation_count(online) == before + 1
        record = get_evaluation(online, run.id)
        assert record["status"] == "RUNNING"
        assert run.url == record["viewer_url"]
        assert cfg["run"]["id"] == run.id
    finally:
        run.finish(status="cancelled", error="test over")


def test_attach_uses_that_id_and_the_config_carries_it(tmp_path: Path, online: Platform) -> None:
    eid = create_launcher_evaluation(online, launcher="unit")
    before = evaluation_count(online)
    run, cfg = _open(tmp_path, attach=eid)
    run.log_episodes([make_record(0, run_id=run.id)])
    run.finish()
    assert run.id == eid and run.attached
    assert cfg["run"]["id"] == eid
    assert evaluation_count(online) == before  # nothing created
    assert get_evaluation(online, eid)["total_samples"] == 1


def test_attach_to_unknown_id_raises(tmp_path: Path, online: Platform) -> None:
    with pytest.raises(AttachError, match="has no evaluation with this id"):
        _open(tmp_path, attach="00000000-0000-0000-0000-000000000000")


def test_attach_to_finalized_evaluation_raises(tmp_path: Path, online: Platform) -> None:
    eid = create_launcher_evaluation(online)
    with online.client() as c:
        c.post(f"/evaluations/{eid}/finalize", json={}).raise_for_status()
    with pytest.raises(AttachError, match=r"already (PROCESSING|COMPLETED)"):
        _open(tmp_path, attach=eid)


def test_attach_to_cancelled_evaluation_raises(tmp_path: Path, online: Platform) -> None:
    eid = create_launcher_evaluation(online)
    with online.client() as c:
        c.put(f"/evaluations/{eid}", json={"status": "CANCELLED"}).raise_for_status()
    with pytest.raises(AttachError, match="already CANCELLED"):
        _open(tmp_path, attach=eid)


def test_attach_with_an_invalid_key_raises(
    tmp_path: Path, online: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    eid = create_launcher_evaluation(online)
    monkeypatch.setenv("PROCTOR_API_KEY", "pk-not-a-real-key")
    with pytest.raises(AttachError, match="PROCTOR_API_KEY"):
        _open(tmp_path, attach=eid)


def test_attach_to_unreachable_platform_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("proctor.runs._evaluations.ATTACH_WAIT_S", 0.5)
    monkeypatch.setenv("PROCTOR_API_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("PROCTOR_API_KEY", "pk-anything")
    with pytest.raises(AttachError, match="unreachable"):
        _open(tmp_path, attach="some-id")


def test_an_unreachable_platform_makes_an_offline_run_to_sync_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PROCTOR_API_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("PROCTOR_API_KEY", "pk-anything")
    with caplog.at_level(logging.WARNING, logger="proctor"):
        run, cfg = _open(tmp_path)
    assert run.id.startswith("offline-") and run.url is None
    assert cfg["run"]["id"] == run.id
    assert "goes on offline" in caplog.text
    run.log_episodes([make_record(0)])
    run.finish()
    assert run.unsynced and run.sync_command() == f"proctor runs sync {tmp_path / 'run'}"
    state = json.loads((tmp_path / "run" / "platform" / run.id / "run.json").read_text())
    assert state["pending_create"]["key"] and state["phase"] == "finish_pending"


def test_a_refused_key_makes_an_offline_run_to_sync_later(
    tmp_path: Path, online: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The model calls are paid for: a wrong key must not make them local-only for good.
    monkeypatch.setenv("PROCTOR_API_KEY", "pk-not-a-key")
    run, _ = _open(tmp_path)
    assert run.id.startswith("offline-")
    run.log_episodes([make_record(0)])
    run.finish()
    assert run.unsynced and run.sync_command() == f"proctor runs sync {tmp_path / 'run'}"
    state = json.loads((tmp_path / "run" / "platform" / run.id / "run.json").read_text())
    assert "401" in state["pending_create"]["reason"]


def test_kill_switch_refuses_an_attach(
    tmp_path: Path, online: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    eid = create_launcher_evaluation(online)
    monkeypatch.setenv("PROCTOR_RUNS_MODE", "disabled")
    with pytest.raises(AttachError, match="PROCTOR_RUNS_MODE=disabled"):
        _open(tmp_path, attach=eid)


def test_kill_switch_without_attach_keeps_the_run_local(
    tmp_path: Path, online: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCTOR_RUNS_MODE", "disabled")
    before = evaluation_count(online)
    run, _ = _open(tmp_path)
    assert run.id.startswith("local-")
    assert evaluation_count(online) == before


def test_no_push_is_local_and_silent(tmp_path: Path, online: Platform) -> None:
    before = evaluation_count(online)
    run, cfg = _open(tmp_path, push=False)
    assert run.id.startswith("local-") and cfg["run"]["id"] == run.id
    assert evaluation_count(online) == before


def _mint_key(plat: Platform, *args: str) -> str:
    """A new key made with `proctor keys create` on the platform's database."""
    out = subprocess.run(
        [*PROCTOR, "keys", "create", "--data-dir", str(plat.data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.split()[0]


def test_a_key_scoped_to_the_evaluation_may_attach(
    tmp_path: Path, online: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    eid = create_launcher_evaluation(online)
    monkeypatch.setenv(
        "PROCTOR_API_KEY",
        _mint_key(online, "--name", "sbx", "--user", "admin", "--evaluation", eid),
    )
    run, _ = _open(tmp_path, attach=eid)
    run.log_episodes([make_record(0, run_id=eid)])
    run.finish()
    assert get_evaluation(online, eid)["total_samples"] == 1


@pytest.mark.parametrize("key_kind", ["scoped-to-another", "another-user"])
def test_a_key_that_may_not_write_the_evaluation_cannot_attach(
    tmp_path: Path, online: Platform, monkeypatch: pytest.MonkeyPatch, key_kind: str
) -> None:
    eid = create_launcher_evaluation(online)
    if key_kind == "scoped-to-another":
        other = create_launcher_evaluation(online)
        key = _mint_key(online, "--name", "sbx2", "--user", "admin", "--evaluation", other)
    else:
        key = _mint_key(online, "--name", f"stranger-{tmp_path.name}")
    monkeypatch.setenv("PROCTOR_API_KEY", key)
    with pytest.raises(AttachError, match=f"cannot attach to evaluation {eid}"):
        _open(tmp_path, attach=eid)
