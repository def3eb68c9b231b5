"""The compare pages: comparable evaluations side by side, and one example's rollouts in
each of them (their models are in `pages`, like every page's).

The first two evaluations are the baseline A and the candidate B, as the user ordered them
(or chose the baseline on the list; a swap link reverses them): the page leads with the
paired difference B - A (`evaluations.stats.paired`). Evaluations are first checked by the
one comparability rule the API and the CLI also apply (`evaluations.stats.check_comparable`).
Per-example rows are sorted over all examples on the server, then paged.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from sqlalchemy.orm import Session

from proctor.server.auth.schemas import Principal
from proctor.server.db.models import Evaluation
from proctor.server.evaluations import service
from proctor.server.evaluations import stats as evaluation_stats
from proctor.server.evaluations.schemas import ComparedExample, PairedComparison
from proctor.server.web import views
from proctor.server.web.pages import (
    COMPARE_FILTERS,
    COMPARE_SORTS,
    CompareColumn,
    CompareMetric,
    ComparePage,
    ExamplePage,
    Number,
)


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


def _metric_table(
    evaluations: list[Evaluation], figures: list[dict[str, Any]]
) -> list[CompareMetric]:
    def ci(f: dict[str, Any], end: int) -> Number | None:
        return None if f["reward"]["ci95"] is None else f["reward"]["ci95"][end]

    rows: list[tuple[str, list[Number | None]]] = [
        ("samples", [e.total_samples for e in evaluations]),
        ("scored samples", [f["reward"]["n_samples"] for f in figures]),
        ("errored samples", [f["reward"]["n_errored"] for f in figures]),
        (evaluation_stats.MEAN_LABEL, [f["reward"]["mean"] for f in figures]),
        ("95% CI low", [ci(f, 0) for f in figures]),
        ("95% CI high", [ci(f, 1) for f in figures]),
        ("examples scored", [f["reward"]["n_examples"] for f in figures]),
        (
            "examples errored in every rollout",
            [f["reward"]["n_errored_examples"] for f in figures],
        ),
        ("prompt tokens", [f["usage"]["prompt_tokens"] for f in figures]),
        ("completion tokens", [f["usage"]["completion_tokens"] for f in figures]),
        ("model time (s)", [f["usage"]["model_s"] for f in figures]),
    ]
    for row in figures[0]["pass_at_k"]:
        k = row["k"]
        values: list[Number | None] = []
        for f in figures:
            match = [r["value"] for r in f["pass_at_k"] if r["k"] == k]
            values.append(match[0] if match else None)
        rows.append((f"pass@{k}", values))
    rows += [
        (name, [_summary_value(e, name) for e in evaluations])
        for name in _summary_names(evaluations)
    ]
    return [_compare_metric(name, values) for name, values in rows]


def order_ids(
    session: Session, principal: Principal, ids: str, baseline: str | None, *, by_age: bool
) -> list[Evaluation]:
    """The evaluations of `ids`, baseline first: `baseline` when given, else the order of
    `ids`, or (`by_age`: ticked on the list, whose order is the list's) the oldest first."""
    parsed = evaluation_stats.parse_ids(
        ",".join([baseline, ids] if baseline and baseline not in ids.split(",") else [ids])
    )
    evaluations = [service.get_visible(session, principal, i) for i in parsed]
    if by_age and not baseline:
        evaluations.sort(key=lambda e: (e.created_at, e.id))
    if baseline:
        evaluations.sort(key=lambda e: e.id != baseline)
    return evaluations


def compare_page(
    session: Session,
    principal: Principal,
    evaluations: list[Evaluation],
    *,
    sort: str,
    show: str = "all",
    start: int,
    limit: int,
    pass_threshold: float | None,
    public_url: str,
) -> ComparePage:
    """Comparable evaluations (baseline first): the paired difference of the first two, then
    per-example mean rewards with B - A, sorted by `sort` over all examples and paged."""
    answer = evaluation_stats.compare(session, evaluations, threshold=pass_threshold)
    figures = answer["evaluations"]
    listed = evaluation_stats.compared_examples(
        session, evaluations, order=sort, show=show, start=start, limit=limit
    )
    next_start = listed["next_start"]
    ids = ",".join(e.id for e in evaluations)
    swapped = [evaluations[1], evaluations[0], *evaluations[2:]]
    common: dict[str, Any] = {"limit": limit, "sort": sort}
    if show != "all":
        common["show"] = show
    if pass_threshold is not None:
        common["pass_threshold"] = pass_threshold
    a_mean, b_mean = figures[0]["reward"]["mean"], figures[1]["reward"]["mean"]
    return ComparePage(
        environment=evaluation_stats.environment_of(evaluations[0]),
        evaluations=[views.evaluation_row(e, public_url, session) for e in evaluations],
        paired=PairedComparison.model_validate(
            evaluation_stats.paired(session, evaluations[0], evaluations[1], listed=50)
        ),
        covers=evaluation_stats.MEAN_COVERS,
        rule=evaluation_stats.COMPARABLE_RULE,
        pass_threshold=answer["pass_threshold"],
        pass_threshold_source=answer["pass_threshold_source"],
        mean_difference=None if a_mean is None or b_mean is None else b_mean - a_mean,
        metrics=_metric_table(evaluations, figures),
        examples=[ComparedExample.model_validate(row) for row in listed["rows"]],
        sort=sort,
        sorts=COMPARE_SORTS,
        show=show,
        shows=COMPARE_FILTERS,
        start=start,
        limit=limit,
        total=listed["total"],
        next_start=next_start,
        ids=ids,
        swap_query=urlencode({"ids": ",".join(e.id for e in swapped), **common}),
        first_query=urlencode({"ids": ids, **common}),
        next_query=None
        if next_start is None
        else urlencode({"ids": ids, "start": next_start, **common}),
        prev_query=None
        if start == 0
        else urlencode({"ids": ids, "start": max(start - limit, 0), **common}),
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
