"""The compare pages: evaluations of one environment side by side, and one example's
rollouts in each of them (their models are in `pages`, like every page's).

The first two evaluations are the baseline A and the candidate B: the page leads with the
paired difference B - A over the examples both scored (`evaluations.stats.paired`).
"""

from __future__ import annotations

import bisect
from urllib.parse import urlencode

from sqlalchemy.orm import Session

from proctor.server.auth.schemas import Principal
from proctor.server.db.models import Evaluation
from proctor.server.errors import BadRequest
from proctor.server.evaluations import service
from proctor.server.evaluations import stats as evaluation_stats
from proctor.server.evaluations.schemas import PairedComparison
from proctor.server.web import views
from proctor.server.web.pages import (
    CompareColumn,
    CompareExample,
    CompareMetric,
    ComparePage,
    ExamplePage,
    Number,
)


def _environment_of(evaluation: Evaluation) -> str:
    names = [str(n) for n in evaluation.environment_names]
    return ", ".join(sorted(names)) if names else (evaluation.dataset or "")


def _compare_metric(name: str, values: list[Number | None]) -> CompareMetric:
    present = [v for v in values if v is not None]
    return CompareMetric(name=name, values=values, differs=len(set(present)) > 1)


def _summary_names(evaluations: list[Evaluation]) -> list[str]:
    """The numeric run-summary values any evaluation wrote (`avg_metrics.*` spelled out)."""
    names: list[str] = []
    for evaluation in evaluations:
        metrics = evaluation.metrics if isinstance(evaluation.metrics, dict) else {}
        for name, value in metrics.items():
            if name == "avg_metrics" and isinstance(value, dict):
                names.extend(f"avg_metrics.{k}" for k in value if f"avg_metrics.{k}" not in names)
            elif isinstance(value, int | float) and name not in names and name != "avg_reward":
                names.append(name)
    return names


def _summary_value(evaluation: Evaluation, name: str) -> Number | None:
    metrics = evaluation.metrics if isinstance(evaluation.metrics, dict) else {}
    if name.startswith("avg_metrics."):
        nested = metrics.get("avg_metrics")
        value = nested.get(name[12:]) if isinstance(nested, dict) else None
    else:
        value = metrics.get(name)
    return value if isinstance(value, int | float) else None


def _metric_table(session: Session, evaluations: list[Evaluation]) -> list[CompareMetric]:
    figures = [evaluation_stats.evaluation_stats(session, e) for e in evaluations]
    rows: list[tuple[str, list[Number | None]]] = [
        ("samples", [e.total_samples for e in evaluations]),
        ("errored samples", [f["reward"]["n_errored"] for f in figures]),
        (evaluation_stats.MEAN_LABEL, [f["reward"]["mean"] for f in figures]),
        ("± (95% CI)", [f["reward"]["half_width"] for f in figures]),
        ("examples", [f["reward"]["n_examples"] for f in figures]),
        ("prompt tokens", [f["usage"]["prompt_tokens"] for f in figures]),
        ("completion tokens", [f["usage"]["completion_tokens"] for f in figures]),
        ("model time (s)", [f["usage"]["model_s"] for f in figures]),
    ]
    rows += [
        (name, [_summary_value(e, name) for e in evaluations])
        for name in _summary_names(evaluations)
    ]
    return [_compare_metric(name, values) for name, values in rows]


def _compare_example(example_id: int, means: list[float | None]) -> CompareExample:
    a, b = means[0], means[1]
    present = [m for m in means if m is not None]
    return CompareExample(
        example_id=example_id,
        means=means,
        diff=None if a is None or b is None else b - a,
        spread=max(present) - min(present) if len(present) > 1 else None,
    )


def compare_page(
    session: Session,
    principal: Principal,
    ids: str,
    *,
    after: int | None,
    limit: int,
    public_url: str,
) -> ComparePage:
    """Evaluations of one environment (`ids`, comma-separated): the paired difference of the
    first two, then per-example mean rewards with B - A, paged by example id (`after` = the
    last shown).
    """
    evaluations = [
        service.get_visible(session, principal, i) for i in evaluation_stats.parse_ids(ids)
    ]
    environments = {_environment_of(e) for e in evaluations}
    if len(environments) > 1:
        raise BadRequest(
            "Compare works on evaluations of one environment, but these are of "
            f"{', '.join(sorted(environments))}; pick evaluations of the same environment.",
            code="invalid_query",
        )
    means = [evaluation_stats.example_means(session, e) for e in evaluations]
    all_ids = evaluation_stats.example_ids(session, evaluations)
    start = 0 if after is None else bisect.bisect_right(all_ids, after)
    page = all_ids[start : start + limit]
    has_more = start + limit < len(all_ids)
    next_after = page[-1] if has_more and page else None
    return ComparePage(
        environment=environments.pop(),
        evaluations=[views.evaluation_row(e, public_url, session) for e in evaluations],
        paired=PairedComparison.model_validate(
            evaluation_stats.paired(session, evaluations[0], evaluations[1], listed=50)
        ),
        covers=evaluation_stats.MEAN_COVERS,
        metrics=_metric_table(session, evaluations),
        examples=[_compare_example(i, [m.get(i) for m in means]) for i in page],
        after=after,
        limit=limit,
        next_after=next_after,
        ids=ids,
        first_query=urlencode({"ids": ids, "limit": limit}),
        next_query=None
        if next_after is None
        else urlencode({"ids": ids, "after": next_after, "limit": limit}),
    )


def example_side_by_side(
    session: Session,
    principal: Principal,
    ids: str,
    example_id: int,
    public_url: str,
) -> ExamplePage:
    """One example's rollouts in each evaluation (`ids`, comma-separated), side by side."""
    parsed = evaluation_stats.parse_ids(ids)
    evaluations = [service.get_visible(session, principal, i) for i in parsed]
    columns = []
    for evaluation in evaluations:
        rows = service.list_sample_rows(session, evaluation, limit=20, example_id=example_id)
        columns.append(
            CompareColumn(
                evaluation=views.evaluation_row(evaluation, public_url),
                samples=[views.sample_detail(s) for s in rows],
            )
        )
    return ExamplePage(example_id=example_id, columns=columns, ids=",".join(parsed))
