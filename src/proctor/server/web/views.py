"""The dashboard's view models: one function per page, returning plain JSON-ready data.

The HTML page and its JSON twin (`?format=json`) are both rendered from the same call, and
each call goes through the evaluations service, so the dashboard sees exactly what the API
with the same key sees.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fastapi import FastAPI
from sqlalchemy.orm import Session

from proctor.contract import TERMINAL_STATUSES, Status
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import as_utc
from proctor.server.db.models import Evaluation, Sample
from proctor.server.errors import BadRequest, ServerError
from proctor.server.evaluations import render, service
from proctor.server.evaluations.repository import SampleOrder
from proctor.server.hosted import service as hosted
from proctor.server.web import stats, transcript

logger = logging.getLogger(__name__)

STATUSES: tuple[str, ...] = tuple(Status)
SORTS: dict[str, SampleOrder] = {"seq": "seq", "-reward": "reward_desc", "reward": "reward_asc"}
COMPARE_MAX = 6


def _time(value: datetime | None) -> str | None:
    value = as_utc(value)
    return None if value is None else value.isoformat()


def _duration(start: datetime | None, end: datetime | None) -> float | None:
    start, end = as_utc(start), as_utc(end)
    return None if start is None or end is None else (end - start).total_seconds()


def is_live(status: str) -> bool:
    """Whether an evaluation in `status` may still change (pages refresh while it is)."""
    return status not in TERMINAL_STATUSES


@dataclass(frozen=True)
class ListFilters:
    """Filters and paging of the evaluations list."""

    status: str | None = None
    environment: str | None = None
    model: str | None = None
    hosted: bool | None = None
    skip: int = 0
    limit: int = 25


@dataclass(frozen=True)
class SamplesQuery:
    """Which samples a samples table shows."""

    page: int = 1
    limit: int = 50
    sort: str = "seq"
    errored: bool | None = None
    example: int | None = None


def evaluation_row(evaluation: Evaluation, public_url: str) -> dict[str, Any]:
    """The list's summary of one evaluation."""
    return {
        "id": evaluation.id,
        "name": evaluation.name,
        "status": evaluation.status,
        "environment": ", ".join(str(n) for n in evaluation.environment_names)
        or evaluation.dataset,
        "model": evaluation.model_name,
        "samples": evaluation.total_samples,
        "avg_reward": evaluation.avg_score,
        "is_hosted": evaluation.is_hosted,
        "team_id": evaluation.team_id,
        "created_at": _time(evaluation.created_at),
        "viewer_url": render.viewer_url(public_url, evaluation.id),
    }


def evaluation_list(
    session: Session, principal: Principal, filters: ListFilters, public_url: str
) -> dict[str, Any]:
    """The evaluations list page."""
    if filters.status is not None and filters.status not in STATUSES:
        raise BadRequest(
            f"Unknown status {filters.status!r}; use one of {', '.join(STATUSES)}.",
            code="invalid_query",
        )
    evaluations, total = service.list_evaluations(
        session,
        principal,
        skip=filters.skip,
        limit=filters.limit,
        environment_name=filters.environment,
        status=filters.status,
        model_name=filters.model,
        is_hosted=filters.hosted,
    )
    rows = [evaluation_row(e, public_url) for e in evaluations]
    return {
        "evaluations": rows,
        "total": total,
        "skip": filters.skip,
        "limit": filters.limit,
        "filters": {
            "status": filters.status,
            "environment": filters.environment,
            "model": filters.model,
            "hosted": filters.hosted,
        },
        "live": any(is_live(row["status"]) for row in rows),
    }


def _header(evaluation: Evaluation, public_url: str) -> dict[str, Any]:
    fields = render.record_fields(evaluation, public_url)
    try:
        fields["metadata"] = json.loads(evaluation.metadata_raw)
    except ValueError:
        fields["metadata"] = {}
    fields["duration_s"] = _duration(
        evaluation.started_at or evaluation.created_at, evaluation.completed_at
    )
    fields["live"] = is_live(evaluation.status)
    metrics = evaluation.metrics if isinstance(evaluation.metrics, dict) else {}
    avg_metrics = metrics.get("avg_metrics")
    fields["reward_means"] = avg_metrics if isinstance(avg_metrics, dict) else {}
    return fields


def _sample_data(sample: Sample) -> dict[str, Any]:
    # Samples are stored as sent; anything but a JSON object shows as an empty one.
    try:
        data = json.loads(sample.data)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _sample_row(sample: Sample) -> dict[str, Any]:
    data = _sample_data(sample)
    return {
        "seq": sample.seq,
        "sample_id": sample.sample_id,
        "example_id": sample.example_id,
        "rollout_number": sample.rollout_number,
        "reward": sample.reward,
        "has_error": sample.has_error,
        "error": transcript.error_message(data.get("error")),
        "num_turns": data.get("num_turns"),
        "preview": transcript.preview(data),
    }


def samples_table(session: Session, evaluation: Evaluation, query: SamplesQuery) -> dict[str, Any]:
    """One page of a visible evaluation's samples, with whether another page follows."""
    order = SORTS.get(query.sort)
    if order is None:
        raise BadRequest(
            f"Unknown sort {query.sort!r}; use one of {', '.join(SORTS)}.", code="invalid_query"
        )
    rows = service.list_sample_rows(
        session,
        evaluation,
        # One row more than shown tells whether a next page exists without counting.
        limit=query.limit + 1,
        offset=(query.page - 1) * query.limit,
        order=order,
        errored=query.errored,
        example_id=query.example,
    )
    return {
        "samples": [_sample_row(s) for s in rows[: query.limit]],
        "page": query.page,
        "limit": query.limit,
        "sort": query.sort,
        "errored": query.errored,
        "example": query.example,
        "has_more": len(rows) > query.limit,
    }


def _hosted_logs(
    session: Session, principal: Principal, evaluation: Evaluation, app: FastAPI
) -> str | None:
    if not evaluation.is_hosted:
        return None
    try:
        return hosted.read_logs(session, principal, evaluation.id, app)
    except ServerError as exc:
        return f"(logs unavailable: {exc.message})"
    except Exception:  # a sandbox backend failing must not take the page down with it
        logger.warning("could not read the logs of %s", evaluation.id, exc_info=True)
        return "(logs unavailable: the sandbox backend failed; see the server log)"


def evaluation_page(
    session: Session,
    principal: Principal,
    evaluation_id: str,
    query: SamplesQuery,
    *,
    public_url: str,
    app: FastAPI,
    pass_threshold: float = 1.0,
) -> dict[str, Any]:
    """The evaluation page: header, metrics, histograms, pass@k, logs and a samples page."""
    evaluation = service.get_visible(session, principal, evaluation_id)
    figures = stats.evaluation_stats(session, evaluation, threshold=pass_threshold)
    examples = figures.examples
    return {
        "evaluation": _header(evaluation, public_url),
        "errored": figures.errored,
        "histogram": [b.__dict__ for b in figures.histogram],
        "histogram_svg": stats.histogram_svg(figures.histogram, label="reward histogram"),
        "examples": None if examples is None else examples.to_json(),
        "examples_svg": None
        if examples is None
        else stats.histogram_svg(examples.mean_histogram, label="mean reward per example"),
        "logs": _hosted_logs(session, principal, evaluation, app),
        "table": samples_table(session, evaluation, query),
    }


def samples_page(
    session: Session, principal: Principal, evaluation_id: str, query: SamplesQuery, public_url: str
) -> dict[str, Any]:
    """A samples page of an evaluation (no statistics: just the header and the table)."""
    evaluation = service.get_visible(session, principal, evaluation_id)
    return {
        "evaluation": _header(evaluation, public_url),
        "table": samples_table(session, evaluation, query),
    }


def sample_page(
    session: Session, principal: Principal, evaluation_id: str, sample_id: str, public_url: str
) -> dict[str, Any]:
    """One sample: transcript, rewards, metrics, timing, token usage and error."""
    evaluation, sample = service.get_sample(session, principal, evaluation_id, sample_id)
    data = _sample_data(sample)
    return {
        "evaluation": evaluation_row(evaluation, public_url),
        "sample": {
            "sample_id": sample.sample_id,
            "seq": sample.seq,
            "example_id": sample.example_id,
            "rollout_number": sample.rollout_number,
            "reward": sample.reward,
            "rewards": transcript.reward_scores(data),
            "metrics": transcript.numbers(data.get("metrics")),
            "timing": transcript.numbers(data.get("timing")),
            "token_usage": transcript.numbers(data.get("token_usage")),
            "error": transcript.error_message(data.get("error")),
            "stop_condition": data.get("stop_condition"),
            "answer": data.get("answer"),
            "num_turns": data.get("num_turns"),
            "messages": transcript.transcript(data),
        },
        "raw": data,
    }


def _environment_of(evaluation: Evaluation) -> str:
    names = [str(n) for n in evaluation.environment_names]
    return ", ".join(sorted(names)) if names else (evaluation.dataset or "")


def _metric_table(evaluations: list[Evaluation]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"name": "samples", "values": [e.total_samples for e in evaluations]},
        {"name": "avg reward", "values": [e.avg_score for e in evaluations]},
    ]
    names: list[str] = []
    for evaluation in evaluations:
        metrics = evaluation.metrics if isinstance(evaluation.metrics, dict) else {}
        for name, value in metrics.items():
            if name == "avg_metrics" and isinstance(value, dict):
                names.extend(f"avg_metrics.{k}" for k in value if f"avg_metrics.{k}" not in names)
            elif isinstance(value, int | float) and name not in names:
                names.append(name)
    for name in names:
        values = []
        for evaluation in evaluations:
            metrics = evaluation.metrics if isinstance(evaluation.metrics, dict) else {}
            if name.startswith("avg_metrics."):
                nested = metrics.get("avg_metrics")
                value = nested.get(name[12:]) if isinstance(nested, dict) else None
            else:
                value = metrics.get(name)
            values.append(value if isinstance(value, int | float) else None)
        rows.append({"name": name, "values": values})
    for row in rows:
        numbers = [v for v in row["values"] if v is not None]
        row["differs"] = len(set(numbers)) > 1
    return rows


def compare_page(
    session: Session,
    principal: Principal,
    evaluation_ids: list[str],
    *,
    after: int | None,
    limit: int,
    public_url: str,
) -> dict[str, Any]:
    """Two or more evaluations of one environment side by side, and per-example rewards.

    Examples are paged by id (`after` = the last id shown), so every page costs the same.
    """
    ids = list(dict.fromkeys(i for i in evaluation_ids if i))
    if not 2 <= len(ids) <= COMPARE_MAX:
        raise BadRequest(
            f"Compare needs 2 to {COMPARE_MAX} distinct evaluation ids, as ?ids=ID1,ID2.",
            code="invalid_query",
        )
    evaluations = [service.get_visible(session, principal, i) for i in ids]
    environments = {_environment_of(e) for e in evaluations}
    if len(environments) > 1:
        raise BadRequest(
            "Compare works on evaluations of one environment, but these are of "
            f"{', '.join(sorted(environments))}; pick evaluations of the same environment.",
            code="invalid_query",
        )
    # One example more than shown tells whether another page follows.
    rows = service.example_means(session, evaluations, after=after, limit=limit + 1)
    by_example: dict[int, dict[str, float | None]] = {}
    for example_id, evaluation_id, mean, _ in rows:
        by_example.setdefault(example_id, {})[evaluation_id] = mean
    examples = []
    for example_id in list(by_example)[:limit]:
        means = [by_example[example_id].get(e.id) for e in evaluations]
        present = [m for m in means if m is not None]
        spread = max(present) - min(present) if len(present) > 1 else 0.0
        examples.append({"example_id": example_id, "means": means, "spread": spread})
    has_more = len(by_example) > limit
    return {
        "environment": environments.pop(),
        "evaluations": [evaluation_row(e, public_url) for e in evaluations],
        "metrics": _metric_table(evaluations),
        "examples": examples,
        "after": after,
        "limit": limit,
        "next_after": examples[-1]["example_id"] if has_more and examples else None,
    }
