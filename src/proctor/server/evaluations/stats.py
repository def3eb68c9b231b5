"""The statistics of evaluations: the one place the API, the dashboard and the CLI get them.

The arithmetic is `proctor.stats` (shared with the eval's closing line); this module reads
the aggregates it needs from the database and caches the answer per evaluation state. The
cache key holds the sample counter, the status and `updated_at`, which change with every
stored batch and status change, so an entry is never stale, and a finished run is computed
once (the finalize task warms it, so the first reader of a large run does not pay for it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from proctor import stats
from proctor.server.db.models import Evaluation
from proctor.server.errors import BadRequest
from proctor.server.evaluations import repository

CACHE_ENTRIES = 512
COMPARE_MAX = 6
MEAN_LABEL = "mean reward"
MEAN_COVERS = (
    "Mean reward over scored samples (a reward and no error); errored samples are counted, "
    "not averaged. ± is the 95% interval, clustered by example."
)

T = TypeVar("T")
_cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_lock = threading.Lock()


def _state(evaluation: Evaluation) -> tuple[Any, ...]:
    return (evaluation.id, evaluation.total_samples, evaluation.status, evaluation.updated_at)


def _cached(key: tuple[Any, ...], compute: Callable[[], T]) -> T:
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    value = compute()
    with _lock:
        _cache[key] = value
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    return value


def default_threshold(evaluation: Evaluation) -> float:
    """pass@k's default pass mark: the highest reward any rollout reached (1.0 before any).

    The server does not know the rubric, so the best observed reward stands for its maximum.
    """
    return evaluation.max_score if evaluation.max_score is not None else 1.0


def _compute(session: Session, evaluation: Evaluation, threshold: float) -> dict[str, Any]:
    rows = repository.example_groups(session, evaluation.id, threshold=threshold)
    moments = stats.Moments()
    shapes: dict[tuple[int, int], int] = {}
    for n, passed, examples, total, total_sq, cluster_sq in rows:
        moments.add_groups(n, examples, total, total_sq, cluster_sq)
        shapes[(n, passed)] = shapes.get((n, passed), 0) + examples
    estimate = stats.estimate(moments)
    reward = estimate.to_json()
    reward["n_errored"] = repository.count_errored(session, evaluation.id)
    reward["half_width"] = estimate.half_width
    reward["naive_se"] = moments.naive_se()
    usage = _cached(
        ("usage", *_state(evaluation)), lambda: repository.usage_totals(session, evaluation.id)
    )
    return {
        "evaluation_id": evaluation.id,
        "status": evaluation.status,
        "label": MEAN_LABEL,
        "covers": MEAN_COVERS,
        "headline": stats.headline(estimate),
        "reward": reward,
        "pass_threshold": threshold,
        "pass_at_k": [
            {"k": k, "value": value, "n_examples": count}
            for k, value, count in stats.pass_at_k_table(shapes)
        ],
        "usage": {
            "prompt_tokens": int(usage["prompt_tokens"]),
            "completion_tokens": int(usage["completion_tokens"]),
            "model_s": usage["model_s"],
            "duration_s": usage["duration_s"],
        },
    }


def evaluation_stats(
    session: Session, evaluation: Evaluation, *, threshold: float | None = None
) -> dict[str, Any]:
    """The statistics of an evaluation already checked visible (JSON-ready, cached)."""
    mark = default_threshold(evaluation) if threshold is None else threshold
    return _cached(
        ("stats", *_state(evaluation), mark), lambda: _compute(session, evaluation, mark)
    )


def example_means(session: Session, evaluation: Evaluation) -> dict[int, float]:
    """Per-example mean scored reward of an evaluation already checked visible (cached)."""
    return _cached(
        ("means", *_state(evaluation)),
        lambda: repository.scored_example_means(session, evaluation.id),
    )


def paired(
    session: Session, baseline: Evaluation, candidate: Evaluation, *, listed: int = 1000
) -> dict[str, Any]:
    """Candidate against baseline over the examples both scored (JSON-ready).

    `listed` caps the one-sided example ids returned (their counts are always exact).
    """
    result = _cached(
        ("paired", *_state(baseline), *_state(candidate)),
        lambda: stats.paired(example_means(session, baseline), example_means(session, candidate)),
    )
    return {
        "baseline": baseline.id,
        "candidate": candidate.id,
        "n_common": result.n_common,
        "mean_diff": result.mean_diff,
        "se": result.se,
        "ci95": None if result.ci95 is None else list(result.ci95),
        "p_value": result.p_value,
        "wins": result.wins,
        "ties": result.ties,
        "losses": result.losses,
        "mde80": result.mde80,
        "only_baseline": {
            "count": len(result.only_baseline),
            "example_ids": result.only_baseline[:listed],
        },
        "only_candidate": {
            "count": len(result.only_candidate),
            "example_ids": result.only_candidate[:listed],
        },
    }


def example_ids(session: Session, evaluations: list[Evaluation]) -> list[int]:
    """The sorted ids of the examples any of these evaluations scored (cached)."""
    key = ("ids", *(part for e in evaluations for part in _state(e)))
    return _cached(
        key, lambda: sorted(set().union(*(example_means(session, e) for e in evaluations)))
    )


def parse_ids(text: str) -> list[str]:
    """The distinct ids of `?ids=A,B,...`, in order.

    Raises:
        BadRequest: Fewer than 2 or more than `COMPARE_MAX` distinct ids.
    """
    ids = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not 2 <= len(ids) <= COMPARE_MAX:
        raise BadRequest(
            f"Compare needs 2 to {COMPARE_MAX} distinct evaluation ids, as ?ids=ID1,ID2.",
            code="invalid_query",
        )
    return ids


def compare(session: Session, evaluations: list[Evaluation]) -> dict[str, Any]:
    """Each evaluation's statistics and the paired comparison of the first two (baseline A,
    candidate B); the evaluations are already checked visible."""
    return {
        "evaluations": [evaluation_stats(session, e) for e in evaluations],
        "paired": paired(session, evaluations[0], evaluations[1]),
    }


def warm(session: Session, evaluation: Evaluation) -> None:
    """Compute and cache an evaluation's statistics now (the finalize task calls this)."""
    evaluation_stats(session, evaluation)
    example_means(session, evaluation)
