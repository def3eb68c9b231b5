"""The running statistics (evaluations/tallies.py) give the figures a recount gives.

Designed data with hand-worked values, sent in batches with replays, errored samples, an
all-errored example and samples without an example id; each figure is checked against the
hand-worked value and against a recount from the samples, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import select

from proctor.server import migrations
from proctor.server.db.models import Evaluation, ExampleTally, ShapeTally
from proctor.server.evaluations import stats as evaluation_stats
from proctor.server.evaluations import tallies
from proctor.server.web import histograms
from tests.server.conftest import Api

ERROR = {"type": "Timeout", "message": "slow"}
USAGE = {
    "token_usage": {"prompt_tokens": 10, "completion_tokens": 5},
    "timing": {"duration_s": 0.5},
}


def _sample(sample_id: str, example: int | None, reward: float | None, **extra: Any) -> dict:
    return {"sample_id": sample_id, "example_id": example, "reward": reward, **USAGE, **extra}


FIRST = [
    _sample("a", 0, 1.0),
    _sample("b", 0, 0.5),
    _sample("c", 1, 0.0),
    _sample("d", 1, 1.0, error=ERROR),  # errored: counted, never averaged or binned
    _sample("e", None, 1.0),  # no example id: its own example
]
SECOND = [
    _sample("a", 0, 1.0),  # a replay: stored once, counted once
    _sample("f", 1, 0.25),
    _sample("g", 2, None, error=ERROR),  # example 2 errored in every rollout
    _sample("h", None, 0.5),
    _sample("c", 1, 0.0),  # another replay
]


def _post(api: Api, evaluation_id: str, samples: list[dict[str, Any]]) -> None:
    response = api.post(f"/evaluations/{evaluation_id}/samples", json={"samples": samples})
    assert response.is_success, response.text


def _figures(api: Api, evaluation_id: str, *, recount: bool) -> dict[str, Any]:
    """Every figure of the page and the API, from the tallies or (`recount`) the samples."""
    with api.db.read() as session:
        evaluation = session.get(Evaluation, evaluation_id)
        assert evaluation is not None
        if recount:
            session.expunge(evaluation)
            evaluation.tallies = None
        mark = 1.0
        summary = evaluation_stats._compute(session, evaluation, mark, "default")
        examples = histograms.example_summary(session, evaluation, threshold=mark)
        return {
            "stats": summary,
            "histogram": [b.count for b in histograms.reward_histogram(session, evaluation)],
            "examples": None
            if examples is None
            else (examples.examples, examples.mean_per_example, examples.mean_histogram),
            "means": tallies.example_means(session.connection(), evaluation_id)
            if not recount
            else evaluation_stats.repository.scored_example_means(session, evaluation_id),
        }


def test_tallies_equal_the_hand_worked_figures_and_a_recount(api: Api) -> None:
    evaluation_id = api.create()
    _post(api, evaluation_id, FIRST)
    _post(api, evaluation_id, SECOND)
    _post(api, evaluation_id, SECOND)  # the whole batch again: nothing new

    kept = _figures(api, evaluation_id, recount=False)
    recounted = _figures(api, evaluation_id, recount=True)
    # Scored: example 0 {1.0, 0.5}, example 1 {0.0, 0.25}, singles {1.0}, {0.5}.
    reward = kept["stats"]["reward"]
    mean = 3.25 / 6
    residuals = [1.5 - 2 * mean, 0.25 - 2 * mean, 1.0 - mean, 0.5 - mean]
    se = math.sqrt(4 / 3 * sum(r * r for r in residuals) / 36)
    assert reward["mean"] == pytest.approx(mean, abs=1e-15)
    assert reward["se"] == pytest.approx(se, rel=1e-12)
    assert (reward["n_samples"], reward["n_examples"], reward["n_errored"]) == (6, 4, 2)
    assert reward["n_errored_examples"] == 1
    assert (reward["min_rollouts_per_example"], reward["rollouts_per_example"]) == (1, 2)
    # pass@1 = (1/2 + 0 + 1 + 0) / 4; pass@2 over the two examples with two rollouts.
    assert kept["stats"]["pass_at_k"] == [
        {"k": 1, "value": 0.375, "n_examples": 4},
        {"k": 2, "value": 0.5, "n_examples": 2},
    ]
    usage = kept["stats"]["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (80, 40)
    assert usage["duration_s"] == pytest.approx(4.0)
    histogram = [0] * 20
    for value in (1.0, 1.0, 0.5, 0.5, 0.0, 0.25):
        histogram[min(int(value / 0.05), 19)] += 1
    assert kept["histogram"] == histogram
    count, per_example, bars = kept["examples"]
    assert (count, per_example) == (2, pytest.approx((0.75 + 0.125) / 2))
    assert [b.count for b in bars][15] == 1 and [b.count for b in bars][2] == 1
    assert kept["means"] == {0: 0.75, 1: 0.125, 2: None}

    # The recount from the samples agrees on every figure.
    assert kept["histogram"] == recounted["histogram"]
    assert kept["examples"] == recounted["examples"]
    assert kept["means"] == recounted["means"]
    _assert_same(kept["stats"], recounted["stats"])


def _assert_same(kept: Any, recounted: Any) -> None:
    if isinstance(kept, dict):
        assert kept.keys() == recounted.keys()
        for key in kept:
            _assert_same(kept[key], recounted[key])
    elif isinstance(kept, list):
        assert len(kept) == len(recounted)
        for a, b in zip(kept, recounted, strict=True):
            _assert_same(a, b)
    elif isinstance(kept, float):
        assert kept == pytest.approx(recounted, rel=1e-12, abs=1e-15)
    else:
        assert kept == recounted


def test_a_rebuild_from_the_samples_holds_what_the_batches_folded(api: Api) -> None:
    evaluation_id = api.create(metadata={"max_reward": 0.5})
    _post(api, evaluation_id, FIRST)
    _post(api, evaluation_id, SECOND)
    with api.db.read() as session:
        evaluation = session.get(Evaluation, evaluation_id)
        assert evaluation is not None and evaluation.tallies is not None
        folded = tallies.Tallies.from_json(evaluation.tallies)
        assert folded.mark == 0.5  # the declared maximum
        before = _rows(session, evaluation_id)
        # The evaluation row keeps a copy of the shape rows (a poll reads no other row).
        table = tallies.shape_rows(session.connection(), evaluation_id)
        assert sorted(table) == tallies.kept_shape_rows(folded) and len(table) == 2
        rebuilt = tallies.rebuild(session.connection(), evaluation_id, folded.mark)
        after = _rows(session, evaluation_id)
        session.rollback()
    assert rebuilt == folded
    assert before == after
    # Example 0 passes twice at 0.5; the shapes hold examples 0 and 1 (2 is all errored).
    assert before[0][0] == (0, 2, 2, 2, 1.5, 1.25)
    assert [shape[:4] for shape in before[1]] == [(2, 0, 2, 1), (2, 2, 15, 1)]


def _rows(session: Any, evaluation_id: str) -> tuple[list[tuple], list[tuple]]:
    examples = session.execute(
        select(
            ExampleTally.example_id,
            ExampleTally.samples,
            ExampleTally.scored,
            ExampleTally.passed,
            ExampleTally.total,
            ExampleTally.total_sq,
        )
        .where(ExampleTally.evaluation_id == evaluation_id)
        .order_by(ExampleTally.example_id)
    ).all()
    shapes = session.execute(
        select(
            ShapeTally.scored,
            ShapeTally.passed,
            ShapeTally.mean_bin,
            ShapeTally.examples,
            ShapeTally.total,
            ShapeTally.cluster_sq,
        )
        .where(ShapeTally.evaluation_id == evaluation_id)
        .order_by(ShapeTally.scored, ShapeTally.passed, ShapeTally.mean_bin)
    ).all()
    return [tuple(r) for r in examples], [tuple(r) for r in shapes]


def test_a_pass_mark_or_range_the_tallies_do_not_hold_is_recounted(api: Api) -> None:
    evaluation_id = api.create()
    _post(api, evaluation_id, [*FIRST, _sample("x", 3, 2.0)])  # widens the range to [0, 2]
    body = api.get(f"/evaluations/{evaluation_id}/stats?pass_threshold=0.5").json()
    # At 0.5: example 0 passes twice, 1 never, 3 once; singles: "e" passes.
    assert body["pass_at_k"][0]["value"] == pytest.approx((1 + 0 + 1 + 1) / 4)
    kept = _figures(api, evaluation_id, recount=False)
    recounted = _figures(api, evaluation_id, recount=True)
    assert kept["histogram"] == recounted["histogram"]
    assert sum(kept["histogram"]) == 5
    _assert_same(kept["stats"], recounted["stats"])


def test_the_migration_builds_the_tallies_of_evaluations_stored_before_it(api: Api) -> None:
    evaluation_id = api.create()
    _post(api, evaluation_id, FIRST)
    _post(api, evaluation_id, SECOND)
    with api.db.read() as session:
        evaluation = session.get(Evaluation, evaluation_id)
        assert evaluation is not None
        folded, rows = evaluation.tallies, _rows(session, evaluation_id)
    script = ScriptDirectory.from_config(migrations.alembic_config(api.db.write_engine))
    revision = next(r for r in script.walk_revisions() if r.path.endswith("_running_statistics.py"))
    # Back to before the tallies existed (the samples stay), then forward: the backfill.
    migrations.downgrade(api.db.write_engine, str(revision.down_revision))
    migrations.upgrade(api.db.write_engine)
    with api.db.read() as session:
        evaluation = session.get(Evaluation, evaluation_id)
        assert evaluation is not None and evaluation.tallies is not None
        assert tallies.Tallies.from_json(evaluation.tallies) == tallies.Tallies.from_json(folded)
        assert _rows(session, evaluation_id) == rows


def test_tallies_kept_before_the_copy_of_the_shapes_read_the_table(api: Api) -> None:
    evaluation_id = api.create()
    _post(api, evaluation_id, FIRST)
    copied = _figures(api, evaluation_id, recount=False)
    with api.db.write() as session:
        evaluation = session.get(Evaluation, evaluation_id)
        assert evaluation is not None and evaluation.tallies is not None
        older = tallies.Tallies.from_json(evaluation.tallies)
        assert older.shapes is not None
        older.shapes = None  # as migration 0010 and the folds before this copy left them
        evaluation.tallies = older.to_json()
    assert "shapes" not in json.loads(older.to_json())
    evaluation_stats._cache.clear()  # the shape rows of this state were read from the copy
    _assert_same(_figures(api, evaluation_id, recount=False), copied)
    # The next batch writes the copy again, equal to the table.
    _post(api, evaluation_id, SECOND)
    with api.db.read() as session:
        evaluation = session.get(Evaluation, evaluation_id)
        assert evaluation is not None and evaluation.tallies is not None
        kept = tallies.kept_shape_rows(tallies.Tallies.from_json(evaluation.tallies))
        assert kept == sorted(tallies.shape_rows(session.connection(), evaluation_id))
