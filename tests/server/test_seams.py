"""The seams, end to end in one process: `run_eval(config, client=..., platform=...)` with
`proctor.testing`'s scripted model and a run opened through `proctor.runs.init(http=...)`
on the in-process app (no server process, no model endpoint, no monkeypatching).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor import runs
from proctor.eval import EvalConfig, run_eval
from proctor.testing import ScriptedClient
from tests.server.conftest import PUBLIC_URL, Api
from tests.support.platform import BOOTSTRAP_KEY


@pytest.fixture(autouse=True)
def _no_client_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("PROCTOR_API_URL", "PROCTOR_API_KEY", "PROCTOR_TEAM_ID", "PROCTOR_RUNS_MODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_run_eval_with_a_scripted_model_and_an_in_process_platform(
    api: Api, tmp_path: Path
) -> None:
    run = runs.init(
        name="seams",
        environments=["reverse-text"],
        model="scripted",
        config={"env": "reverse-text"},
        api_url=PUBLIC_URL,
        api_key=BOOTSTRAP_KEY,
        run_dir=tmp_path / "run",
        http=api.client,
    )
    config = EvalConfig(
        env="reverse-text", model="scripted", num_examples=3, output_dir=str(tmp_path / "out")
    )
    model = ScriptedClient(lambda messages, tools: "olleh")

    result = run_eval(config, client=model, platform=run)

    assert result.status == "completed" and result.run_id == run.id
    assert len(model.requests) == 3
    record = api.get(f"/evaluations/{run.id}").json()
    assert record["total_samples"] == 3 and record["status"] != "RUNNING"
    samples = api.get(f"/evaluations/{run.id}/samples").json()["samples"]
    assert sorted(s["example_id"] for s in samples) == [0, 1, 2]
    assert {s["completion"][-1]["content"] for s in samples} == {"olleh"}
