"""Rendering evaluation records as JSON text, with `metadata` spliced in byte for byte."""

from __future__ import annotations

import json
import math
from typing import Any

from proctor.server.db.base import iso_utc
from proctor.server.db.models import Evaluation


def _finite(value: float | None) -> float | None:
    # JSON has no NaN or Infinity: an unrepresentable number is rendered as null.
    return value if value is not None and math.isfinite(value) else None


def viewer_url(public_url: str, evaluation_id: str) -> str:
    """The dashboard page of an evaluation."""
    return f"{public_url}/evaluations/{evaluation_id}"


def record_fields(evaluation: Evaluation, public_url: str) -> dict[str, Any]:
    """Every record field except `metadata`, as plain JSON values."""
    return {
        "evaluation_id": evaluation.id,
        "id": evaluation.id,
        "name": evaluation.name,
        "status": evaluation.status,
        "error_message": evaluation.error_message,
        "viewer_url": viewer_url(public_url, evaluation.id),
        "environments": evaluation.environments,
        "environment_ids": evaluation.environment_ids,
        "environment_names": evaluation.environment_names,
        "model_name": evaluation.model_name,
        "dataset": evaluation.dataset,
        "framework": evaluation.framework,
        "task_type": evaluation.task_type,
        "description": evaluation.description,
        "tags": evaluation.tags,
        "metrics": evaluation.metrics,
        "total_samples": evaluation.total_samples,
        "avg_score": _finite(evaluation.avg_score),
        "min_score": _finite(evaluation.min_score),
        "max_score": _finite(evaluation.max_score),
        "is_hosted": evaluation.is_hosted,
        "is_public": evaluation.is_public,
        "team_id": evaluation.team_id,
        "user_id": evaluation.user_id,
        "run_id": evaluation.run_id,
        "suite_id": evaluation.suite_id,
        "created_at": iso_utc(evaluation.created_at),
        "updated_at": iso_utc(evaluation.updated_at),
        "started_at": iso_utc(evaluation.started_at),
        "completed_at": iso_utc(evaluation.completed_at),
        "finalized_at": iso_utc(evaluation.finalized_at),
        "attempts": evaluation.attempts,
    }


def render_record(evaluation: Evaluation, public_url: str) -> str:
    """The record as JSON text; `metadata` is the stored text, inserted verbatim."""
    head = json.dumps(
        record_fields(evaluation, public_url), ensure_ascii=False, separators=(",", ":")
    )
    return f'{head[:-1]},"metadata":{evaluation.metadata_raw}}}'


def render_list(
    evaluations: list[Evaluation], total: int, skip: int, limit: int, public_url: str
) -> str:
    """The list answer as JSON text."""
    items = ",".join(render_record(e, public_url) for e in evaluations)
    return f'{{"evaluations":[{items}],"total":{total},"skip":{skip},"limit":{limit}}}'


def render_samples_page(rows: list[str], total: int, page: int, limit: int) -> str:
    """A samples page as JSON text; each sample is its stored text."""
    has_more = "true" if page * limit < total else "false"
    return (
        f'{{"samples":[{",".join(rows)}],"total":{total},"page":{page},'
        f'"limit":{limit},"has_more":{has_more}}}'
    )
