"""A hosted run's sandbox runs from its `eval.toml` and flags only: `PROCTOR_EVAL_*` variables
in the launcher's environment, on a Ray node, or sent as a secret never change its settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from proctor.eval.config import ENV_PREFIX
from proctor.sandboxes.command import HostedEvalConfig
from proctor.sandboxes.guard import RAY_JOB_CONFIG, sandbox_environment
from proctor.server.db.session import Database
from tests.server.hosted.test_launcher import _create, _launcher, _status, _tick_until


def test_a_stray_eval_variable_in_the_launchers_environment_changes_no_hosted_run(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCTOR_EVAL_NUM_EXAMPLES", "1")
    monkeypatch.setenv("PROCTOR_EVAL_MODEL", "stray-model")
    monkeypatch.setenv("PROCTOR_EVAL_SAMPLING__TEMPERATURE", "1.5")
    evaluation_id = _create(db, num_examples=2, sampling_args={"temperature": 0.25})
    # The sandbox resolves its settings as its `proctor eval` would, with their sources.
    command = (
        "{proctor} config --json eval @ {config} --run.attach $EVALUATION_ID > resolved.json; "
        "env > env.txt; exit 3"
    )
    launcher = _launcher(db, tmp_path, command)
    _tick_until(launcher, lambda: _status(db, evaluation_id) == "FAILED", timeout=60.0)
    work = tmp_path / "sandboxes" / evaluation_id / "work"
    resolved = json.loads((work / "resolved.json").read_text())
    rows = {r["name"]: (r["value"], r["source"]) for s in resolved for r in s["rows"]}
    assert rows["num_examples"] == ("2", "file eval.toml")
    assert rows["model"] == ("demo", "file eval.toml")
    assert rows["sampling.temperature"] == ("0.25", "file eval.toml")
    assert rows["run.attach"] == (evaluation_id, "flag --run.attach")
    assert ENV_PREFIX not in (work / "env.txt").read_text()


def test_a_ray_nodes_eval_variables_are_dropped_by_the_guard() -> None:
    config = {"metadata": {"proctor_env": json.dumps({"EVALUATION_ID": "ev-1"})}}
    node = {
        "PATH": "/usr/bin",
        "PROCTOR_EVAL_NUM_EXAMPLES": "1",
        "proctor_eval_model": "m",
        RAY_JOB_CONFIG: json.dumps(config),
    }
    env = sandbox_environment(node)
    assert env["EVALUATION_ID"] == "ev-1" and env["PATH"] == "/usr/bin"
    assert not [name for name in env if name.upper().startswith(ENV_PREFIX)]


@pytest.mark.parametrize("name", ["PROCTOR_EVAL_NUM_EXAMPLES", "proctor_eval_model"])
def test_a_secret_named_as_an_eval_setting_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="would be an eval setting"):
        HostedEvalConfig.model_validate({"custom_secrets": {name: "1"}})
