"""The runner's contract with the platform seam, in process against the demo model.

A recording `PlatformRun` stands in for `open_platform_run` so the order of calls can be
checked: open before the first rollout, each record on disk before it is handed over,
exactly one `finish` with the right status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import proctor.envs
from proctor.errors import AttachError
from proctor.eval import EvalConfig, run_eval
from proctor.eval import runner as runner_module
from tests.eval.helpers import read_config, read_traces


class RecordingRun:
    def __init__(self, traces: Path, events: list[Any]) -> None:
        self.id = "ev-123"
        self.url = "http://platform.test/evaluations/ev-123"
        self.attached = False
        self.unsynced = False
        self.refused: str | None = None
        self.traces = traces
        self.events = events

    def log_episodes(self, records: list[dict[str, Any]]) -> None:
        on_disk = {r["id"] for r in read_traces(self.traces.parent)}
        assert all(r["id"] in on_disk for r in records), "handed over before it was written"
        self.events.append(("log", [r["id"] for r in records]))

    def finish(self, *, status: str = "completed", error: str | None = None, **_: Any) -> None:
        self.events.append(("finish", status, error))

    def sync_command(self) -> str:
        return "proctor runs sync ..."


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    recorded: list[Any] = []

    def fake_open(**kwargs: Any) -> RecordingRun:
        recorded.append(("open", kwargs["name"], kwargs["environment"], kwargs["push"]))
        return RecordingRun(kwargs["run_dir"] / "traces.jsonl", recorded)

    monkeypatch.setattr(runner_module, "open_platform_run", fake_open)
    return recorded


def config(demo_model: str, tmp_path: Path, **overrides: Any) -> EvalConfig:
    data: dict[str, Any] = {
        "env": "arithmetic",
        "num_examples": 4,
        "output_dir": str(tmp_path / "out"),
        "run": {"name": "r"},
        "client": {"base_url": demo_model},
        **overrides,
    }
    return EvalConfig.model_validate(data)


def test_open_log_finish_in_order(demo_model: str, tmp_path: Path, events: list[Any]) -> None:
    result = run_eval(config(demo_model, tmp_path))
    assert (result.status, result.exit_code, result.run_id) == ("completed", 0, "ev-123")
    assert result.url == "http://platform.test/evaluations/ev-123"
    assert events[0] == ("open", "r", "arithmetic", True)
    logged = [e[1] for e in events[1:-1]]
    assert all(e[0] == "log" for e in events[1:-1]) and len(logged) == 4
    assert events[-1] == ("finish", "completed", None)
    run_dir = tmp_path / "out" / "r"
    assert read_config(run_dir)["run"]["id"] == "ev-123"
    assert sorted(i for ids in logged for i in ids) == sorted(r["id"] for r in read_traces(run_dir))


def test_resume_relogs_kept_episodes(demo_model: str, tmp_path: Path, events: list[Any]) -> None:
    run_eval(config(demo_model, tmp_path, num_examples=3))
    kept = [r["id"] for r in read_traces(tmp_path / "out" / "r")]
    events.clear()
    result = run_eval(config(demo_model, tmp_path, num_examples=3, resume=True))
    assert result.status == "completed" and result.stats.done == 3
    # Nothing left to run, yet the new platform run receives every kept episode.
    assert events == [
        ("open", "r", "arithmetic", True),
        ("log", kept),
        ("finish", "completed", None),
    ]


def test_open_failure_runs_and_writes_nothing(
    demo_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(**_: Any) -> None:
        raise AttachError("evaluation ev-9 is already finalized; start a new one")

    monkeypatch.setattr(runner_module, "open_platform_run", refuse)
    with pytest.raises(AttachError, match="already finalized"):
        run_eval(config(demo_model, tmp_path, run={"name": "r", "attach": "ev-9"}))
    assert not (tmp_path / "out").exists()


def test_a_crash_in_the_loop_fails_the_run(
    demo_model: str, tmp_path: Path, events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_load = proctor.envs.load_environment

    def load_broken(name: str, **kwargs: Any) -> Any:
        env = real_load(name, **kwargs)
        calls = {"n": 0}
        real_rollout = env.rollout

        async def rollout(*args: Any, **kw: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("boom")  # an environment breaking its contract
            return await real_rollout(*args, **kw)

        env.rollout = rollout  # type: ignore[method-assign]
        return env

    monkeypatch.setattr(proctor.envs, "load_environment", load_broken)
    result = run_eval(config(demo_model, tmp_path, max_concurrent=1))
    assert (result.status, result.exit_code) == ("failed", 1)
    assert result.error == "RuntimeError: boom"
    assert events[-1] == ("finish", "failed", "RuntimeError: boom")
    assert len(read_traces(tmp_path / "out" / "r")) == 2  # what finished is kept


def test_a_finalize_the_platform_refused_fails_the_run(
    demo_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusal = "the platform refused to close evaluation ev-123: it is CANCELLED and closed"

    def refusing_open(**kwargs: Any) -> RecordingRun:
        run = RecordingRun(kwargs["run_dir"] / "traces.jsonl", [])

        def finish(*, status: str = "completed", error: str | None = None, **_: Any) -> None:
            run.refused = refusal  # a cancel won the race against this run's finalize

        run.finish = finish  # type: ignore[method-assign]
        return run

    monkeypatch.setattr(runner_module, "open_platform_run", refusing_open)
    result = run_eval(config(demo_model, tmp_path))
    assert (result.status, result.exit_code, result.error) == ("failed", 1, refusal)
