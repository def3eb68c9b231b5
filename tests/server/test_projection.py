"""One projection, two paths: the runs SDK and the traces service both build their samples
with `proctor.projection`, so a field added there reaches both (docs/architecture.md, "Add
a sample field").
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import proctor.runs
from proctor import projection
from tests.runs.support import make_record
from tests.server.conftest import PUBLIC_URL, Api
from tests.server.test_traces import episode, jsonl, upload


def _samples(api: Api, eid: str) -> list[dict[str, Any]]:
    page = api.get(f"/evaluations/{eid}/samples", params={"limit": 100})
    assert page.status_code == 200, page.text
    return list(page.json()["samples"])


def test_a_field_added_to_the_projection_reaches_the_runs_sdk_and_the_traces_service(
    api: Api, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assemble = projection.finish_sample

    def with_canary(fields: dict[str, Any], scores: Any) -> dict[str, Any]:
        return {**assemble(fields, scores), "canary": f"seen {fields['episode_id']}"}

    monkeypatch.setattr(projection, "finish_sample", with_canary)

    # The runs SDK (what `proctor eval` pushes through), in-process against the app.
    run = proctor.runs.init(
        name="sdk",
        environments=["alphabet-sort"],
        model="m",
        config={},
        mode="online",
        api_url=PUBLIC_URL,
        api_key=api.headers()["Authorization"].removeprefix("Bearer "),
        run_dir=tmp_path / "run",
        http=api.client,
    )
    record = make_record(0)
    run.log_episodes([record])
    run.finish()
    (sdk_sample,) = _samples(api, run.id)
    assert sdk_sample["canary"] == f"seen {record['id']}"

    # The traces service (what prime-runs and the verifiers driver upload), same app.
    eid = api.create(name="traced")
    base = api.client.base_url
    api.client.base_url = base.join("/api/v1")
    try:
        sent = upload(api.client, jsonl([episode("ep-0", eid, 0, 1.0)]), headers=api.headers())
    finally:
        api.client.base_url = base
    assert sent.status_code == 201, sent.text
    (traced,) = _samples(api, eid)
    assert traced["canary"] == "seen ep-0"


def test_both_wire_forms_give_the_contract_fields_and_the_raw_scores() -> None:
    record = make_record(3)
    ours = projection.project_record(record)
    (theirs,) = projection.project_episode(episode("ep-3", "e", 3, 0.5), rollout_number=2)
    shared = {"sample_id", "example_id", "rollout_number", "episode_id", "reward", "answer"}
    assert shared <= ours.keys() and shared <= theirs.keys()
    assert (ours["example_id"], theirs["example_id"]) == (3, 3)
    assert ours["alphabet_sort"] == 1.0 and theirs["exact"] == 0.5
    assert theirs["reward"] == 1.0  # the weighted sum: 0.5 x 2.0


def test_the_projection_imports_nothing_of_proctor_but_the_contract() -> None:
    tree = ast.parse(Path(projection.__file__).read_text(encoding="utf-8"))
    imported = {
        name
        for node in ast.walk(tree)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }
    assert {m for m in imported if m.startswith("proctor")} == {"proctor.contract"}
