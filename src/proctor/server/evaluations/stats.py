"""The statistics of evaluations: the one place the API, the dashboard and the CLI get them.

The arithmetic is `proctor.stats` (shared with the eval's closing line); this module reads
the aggregates it needs from the database and caches the answer per evaluation state. The
cache key holds the sample counter, the status and `updated_at`, which change with every
stored batch and status change, so an entry is never stale, and a finished run is computed
once (the finalize task warms it, so the first reader of a large run does not pay for it).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from cachetools import LRUCache
from sqlalchemy.orm import Session

from proctor import stats
from proctor.server.db.models import Evaluation
from proctor.server.errors import BadRequest
from proctor.server.evaluations import repository, tallies

CACHE_ENTRIES = 512
COMPARE_MAX = 6
MEAN_LABEL = "mean reward"
MEAN_COVERS = (
    "Mean reward over scored samples (a reward and no error); errored samples are counted, "
    "never averaged or binned. The 95% interval is clustered by example: Student's t on "
    "examples - 1 degrees of freedom, Wilson's for 0/1 rewards, kept in [0, 1] for rewards "
    "in [0, 1] (docs/statistics.md)."
)
PAIRED_COVERS = (
    "B - A is the mean over the examples both evaluations hold of (B's example mean - A's "
    "example mean). It differs from the difference of the two headline means because those "
    "average over different example sets and weigh examples by their scored rollouts; the "
    "paired figure compares like with like. An example that errored in every rollout of one "
    "side counts there as 0 (a failure)."
)
PASS_MARK_SOURCES = ("set", "declared", "default")
"""Where a pass mark came from: the user, the evaluation's declared `max_reward`, 1.0."""

T = TypeVar("T")
_MISSING = object()
_cache: LRUCache[tuple[Any, ...], Any] = LRUCache(maxsize=CACHE_ENTRIES)
_lock = threading.Lock()
"""The server's request threads share the cache; the lock guards it (not the computing)."""


def _state(evaluation: Evaluation) -> tuple[Any, ...]:
    return (evaluation.id, evaluation.total_samples, evaluation.status, evaluation.updated_at)


def _cached(key: tuple[Any, ...], compute: Callable[[], T]) -> T:
    with _lock:
        found = _cache.get(key, _MISSING)
    if found is not _MISSING:
        return cast(T, found)
    value = compute()
    with _lock:
        _cache[key] = value
    return value


def shape_rows(session: Session, evaluation: Evaluation) -> tallies.ShapeRows:
    """The evaluation's shape tallies, once per state (the headline, pass@k and the
    per-example histogram all come from them), from the copy in the evaluation's row when it
    keeps one: a live page's poll after a batch then runs no query for its statistics."""

    def read() -> tallies.ShapeRows:
        kept = tallies.load(evaluation.tallies)
        copied = None if kept is None else tallies.kept_shape_rows(kept)
        return tallies.shape_rows(session.connection(), evaluation.id) if copied is None else copied

    return _cached(("shapes", *_state(evaluation)), read)


def declared_max_reward(evaluation: Evaluation) -> float | None:
    """The maximum reward the evaluation's metadata declares (`max_reward`), if a number."""
    return tallies.declared_max_reward(evaluation.metadata_raw)


def pass_mark(evaluations: list[Evaluation], threshold: float | None) -> tuple[float, str]:
    """pass@k's mark for these evaluations, one for all, and where it came from.

    The user's `threshold`; else the `max_reward` every one of them declares (the same);
    else `proctor.stats.DEFAULT_PASS_MARK` (1.0). Never a reward the run happened to reach.
    """
    if threshold is not None:
        return threshold, "set"
    declared = {declared_max_reward(e) for e in evaluations}
    if len(declared) == 1 and None not in declared:
        return float(declared.pop()), "declared"  # type: ignore[arg-type]
    return stats.DEFAULT_PASS_MARK, "default"


def _moments(session: Session, evaluation: Evaluation, threshold: float) -> tuple[Any, Any]:
    kept = tallies.load(evaluation.tallies)
    if kept is not None and kept.mark == threshold:
        # The running tallies: a few shape rows, however many samples (tallies.py).
        rows = tallies.example_groups(shape_rows(session, evaluation), kept)
        low, high, binary = evaluation.min_score, evaluation.max_score, kept.nonbinary == 0
    else:
        rows = repository.example_groups(session, evaluation.id, threshold=threshold)
        low, high, binary = repository.scored_range(session, evaluation.id)
    moments = stats.Moments()
    shapes: dict[tuple[int, int], int] = {}
    for n, passed, examples, total, total_sq, cluster_sq in rows:
        moments.add_groups(n, examples, total, total_sq, cluster_sq)
        shapes[(n, passed)] = shapes.get((n, passed), 0) + examples
    if low is not None and high is not None:
        moments.observe_range(low, high, binary=binary)
    return moments, shapes


def _compute(
    session: Session, evaluation: Evaluation, threshold: float, source: str
) -> dict[str, Any]:
    moments, shapes = _moments(session, evaluation, threshold)
    estimate = stats.estimate(moments)
    reward = estimate.to_json()
    kept = tallies.load(evaluation.tallies)
    if kept is not None:
        reward["n_errored"] = kept.errored
        reward["n_errored_examples"] = kept.errored_examples
        usage = kept.usage_totals()
    else:
        reward["n_errored"] = repository.count_errored(session, evaluation.id)
        reward["n_errored_examples"] = repository.errored_examples(session, evaluation.id)
        usage = _cached(
            ("usage", *_state(evaluation)),
            lambda: repository.usage_totals(session, evaluation.id),
        )
    reward["half_width"] = estimate.half_width
    reward["naive_se"] = moments.naive_se()
    return {
        "evaluation_id": evaluation.id,
        "status": evaluation.status,
        "label": MEAN_LABEL,
        "covers": MEAN_COVERS,
        "headline": stats.headline(estimate),
        "reward": reward,
        "pass_threshold": threshold,
        "pass_threshold_source": source,
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
    session: Session,
    evaluation: Evaluation,
    *,
    threshold: float | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """The statistics of an evaluation already checked visible (JSON-ready, cached).

    `threshold` is pass@k's mark as the user set it (`source` says where it came from when
    a comparison chose it); None takes `pass_mark`'s.
    """
    if source is None:
        mark, source = pass_mark([evaluation], threshold)
    else:
        mark = stats.DEFAULT_PASS_MARK if threshold is None else threshold
    key = ("stats", *_state(evaluation), mark, source)
    return _cached(key, lambda: _compute(session, evaluation, mark, source))


def example_means(session: Session, evaluation: Evaluation) -> dict[int, float | None]:
    """Per-example mean scored reward of an evaluation already checked visible (cached);
    None for an example that errored in every rollout."""

    def compute() -> dict[int, float | None]:
        if evaluation.tallies is not None:
            return tallies.example_means(session.connection(), evaluation.id)
        return repository.scored_example_means(session, evaluation.id)

    return _cached(("means", *_state(evaluation)), compute)


def paired(
    session: Session, baseline: Evaluation, candidate: Evaluation, *, listed: int = 1000
) -> dict[str, Any]:
    """Candidate against baseline over the examples both hold (JSON-ready).

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
        "df": result.df,
        "no_interval": result.no_interval,
        "mean_baseline": result.mean_baseline,
        "mean_candidate": result.mean_candidate,
        "errored_baseline": {
            "count": len(result.errored_baseline),
            "example_ids": result.errored_baseline[:listed],
        },
        "errored_candidate": {
            "count": len(result.errored_candidate),
            "example_ids": result.errored_candidate[:listed],
        },
        "covers": PAIRED_COVERS,
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


def environment_of(evaluation: Evaluation) -> str:
    """The environment an evaluation ran: its environment names, else its dataset."""
    names = [str(n) for n in evaluation.environment_names]
    return ", ".join(sorted(names)) if names else (evaluation.dataset or "")


def _metadata(evaluation: Evaluation) -> dict[str, Any]:
    try:
        value = json.loads(evaluation.metadata_raw or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def environment_version(evaluation: Evaluation) -> str | None:
    """The environment's version, where the evaluation records one.

    From `environments[].version`, else the metadata's `env_version`, else the version in
    its `environment_ref` (`owner/name@version`); None when none is recorded.
    """
    versions = sorted(
        str(e["version"])
        for e in evaluation.environments
        if isinstance(e, dict) and e.get("version") not in (None, "")
    )
    if versions:
        return ", ".join(versions)
    metadata = _metadata(evaluation)
    if metadata.get("env_version") not in (None, ""):
        return str(metadata["env_version"])
    ref = metadata.get("environment_ref")
    if isinstance(ref, str) and "@" in ref:
        return ref.rpartition("@")[2] or None
    return None


def env_args(evaluation: Evaluation) -> dict[str, Any] | None:
    """The arguments the environment was loaded with (metadata `env_args`), if recorded."""
    value = _metadata(evaluation).get("env_args")
    return value if isinstance(value, dict) else None


COMPARABLE_RULE = (
    "Evaluations compare when they ran the same environment at the same version with the "
    "same env_args, and share at least one example id."
)


def check_comparable(session: Session, evaluations: list[Evaluation]) -> None:
    """Refuse evaluations that cannot be compared (the API, the CLI and the page all call it).

    A version or env_args that one side does not record is not held against it.

    Raises:
        BadRequest: `not_comparable`, one sentence naming the difference and the rule.
    """
    first = evaluations[0]

    def refuse(difference: str) -> BadRequest:
        return BadRequest(
            f"These evaluations cannot be compared: {difference}. {COMPARABLE_RULE} "
            "Pick evaluations that match.",
            code="not_comparable",
        )

    for other in evaluations[1:]:
        names = (first.name, other.name)
        if environment_of(first) != environment_of(other):
            raise refuse(
                f"{names[0]!r} ran {environment_of(first) or 'no named environment'} and "
                f"{names[1]!r} ran {environment_of(other) or 'no named environment'}"
            )
        versions = (environment_version(first), environment_version(other))
        if None not in versions and versions[0] != versions[1]:
            raise refuse(
                f"{names[0]!r} ran version {versions[0]} and {names[1]!r} version {versions[1]}"
            )
        args = (env_args(first), env_args(other))
        if args[0] is not None and args[1] is not None and args[0] != args[1]:
            raise refuse(
                f"{names[0]!r} ran with env_args {json.dumps(args[0], sort_keys=True)} and "
                f"{names[1]!r} with {json.dumps(args[1], sort_keys=True)}"
            )
        if not _share_an_example(session, first, other):
            raise refuse(f"{names[0]!r} and {names[1]!r} share no example id")


def _share_an_example(session: Session, first: Evaluation, other: Evaluation) -> bool:
    # From the per-example means (cached per state, read from the tallies when kept): a
    # query over both runs' samples costs seconds at 1M samples on every compare request.
    if first.tallies is None or other.tallies is None:
        return repository.shared_example(session, first.id, other.id)
    return _cached(
        ("shared", *_state(first), *_state(other)),
        lambda: not example_means(session, first).keys().isdisjoint(example_means(session, other)),
    )


def compare(
    session: Session, evaluations: list[Evaluation], *, threshold: float | None = None
) -> dict[str, Any]:
    """Each evaluation's statistics at one pass mark and the paired comparison of the first
    two (baseline A, candidate B); the evaluations are already checked visible.

    Raises:
        BadRequest: They are not comparable (`check_comparable`).
    """
    check_comparable(session, evaluations)
    mark, source = pass_mark(evaluations, threshold)
    return {
        "evaluations": [
            evaluation_stats(session, e, threshold=mark, source=source) for e in evaluations
        ],
        "paired": paired(session, evaluations[0], evaluations[1]),
        "pass_threshold": mark,
        "pass_threshold_source": source,
    }


COMPARE_EXAMPLES_MAX = 1000
"""The most example rows one compare answer lists (page with `start`)."""
COMPARE_ORDERS = ("example", "diff", "-diff", "spread")
COMPARE_FILTERS = ("all", "regressions", "improvements", "ties", "errored", "one-sided")
"""Which examples a comparison lists: all; where B - A is below, above or within
`stats.TIE_TOLERANCE` of 0; where a side errored in every rollout; held by one side only."""


def example_order(
    session: Session, evaluations: list[Evaluation], order: str, *, show: str = "all"
) -> list[int]:
    """The example ids any of the evaluations holds that `show` keeps, in `order` (cached
    per state): the filter and the sort run over every example, before any paging.

    `diff` is B - A as the paired analysis counts it (an all-errored side as
    `ERRORED_EXAMPLE_VALUE`), lowest first; `-diff` highest first; `spread` the widest range
    of example means first. Examples without a value for the key come last, by id.

    Raises:
        BadRequest: An unknown `order` or `show`.
    """
    if order not in COMPARE_ORDERS:
        raise BadRequest(
            f"Unknown sort {order!r}; use one of {', '.join(COMPARE_ORDERS)}.",
            code="invalid_query",
        )
    if show not in COMPARE_FILTERS:
        raise BadRequest(
            f"Unknown filter {show!r}; use one of {', '.join(COMPARE_FILTERS)}.",
            code="invalid_query",
        )
    key = ("order", order, show, *(part for e in evaluations for part in _state(e)))

    def compute() -> list[int]:
        ids = example_ids(session, evaluations)
        means = [example_means(session, e) for e in evaluations]
        a, b = means[0], means[1]
        missing = float("inf")

        def diff(example: int) -> float | None:
            if example not in a or example not in b:
                return None
            return _counted(b[example]) - _counted(a[example])

        def kept(example: int) -> bool:
            if show == "all":
                return True
            if show == "one-sided":
                return (example in a) != (example in b)
            if show == "errored":
                return any(example in m and m[example] is None for m in means)
            d = diff(example)
            if d is None:
                return False
            if show == "regressions":
                return d < -stats.TIE_TOLERANCE
            if show == "improvements":
                return d > stats.TIE_TOLERANCE
            return abs(d) <= stats.TIE_TOLERANCE

        shown = [example for example in ids if kept(example)]
        if order == "example":
            return shown

        def value(example: int) -> float:
            if order == "spread":
                present = [v for m in means if (v := m.get(example)) is not None]
                return -(max(present) - min(present)) if len(present) > 1 else missing
            d = diff(example)
            if d is None:
                return missing
            return d if order == "diff" else -d

        return sorted(shown, key=lambda example: (value(example), example))

    return _cached(key, compute)


def _counted(mean: float | None) -> float:
    return stats.ERRORED_EXAMPLE_VALUE if mean is None else mean


def example_row(example_id: int, means: list[dict[int, float | None]]) -> dict[str, Any]:
    """One example's row of a comparison: its mean scored reward in each evaluation (None
    where it is absent or errored in every rollout), where it errored, where it is present,
    B - A as the paired analysis counts it and the spread of the scored means."""
    present = [example_id in m for m in means]
    values = [m.get(example_id) for m in means]
    scored = [v for v in values if v is not None]
    diff = None
    if present[0] and present[1]:
        diff = _counted(values[1]) - _counted(values[0])
    return {
        "example_id": example_id,
        "means": values,
        "errored": [p and v is None for p, v in zip(present, values, strict=True)],
        "present": present,
        "diff": diff,
        "spread": max(scored) - min(scored) if len(scored) > 1 else None,
    }


def compared_examples(
    session: Session,
    evaluations: list[Evaluation],
    *,
    order: str = "example",
    show: str = "all",
    start: int = 0,
    limit: int = 100,
) -> dict[str, Any]:
    """A page of the per-example rows of a comparison, filtered (`show`) and sorted
    (`order`) over every example first (`example_order`): what the compare page lists, the
    API's `examples` and `proctor evals compare --show` print (JSON-ready).

    Raises:
        BadRequest: An unknown `order` or `show`.
    """
    ordered = example_order(session, evaluations, order, show=show)
    means = [example_means(session, e) for e in evaluations]
    end = start + limit
    return {
        "sort": order,
        "show": show,
        "total": len(ordered),
        "start": start,
        "limit": limit,
        "next_start": end if end < len(ordered) else None,
        "rows": [example_row(example, means) for example in ordered[start:end]],
    }


def warm(session: Session, evaluation: Evaluation) -> None:
    """Compute and cache an evaluation's statistics now (the finalize task calls this)."""
    evaluation_stats(session, evaluation)
    example_means(session, evaluation)
