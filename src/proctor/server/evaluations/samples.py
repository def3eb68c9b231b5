"""Appending and paging samples: the ingest hot path.

One batch is one transaction: the evaluation row is locked (`FOR UPDATE` on PostgreSQL;
SQLite writers are serialised), the batch is inserted with one multi-row
`INSERT ... ON CONFLICT DO NOTHING RETURNING` with `seq` numbers taken from the evaluation's
counter, replays (the rare case) are closed up so `seq` stays dense, and the counters are
updated. Samples are validated with plain checks rather than a pydantic model per sample,
and stored as the exact JSON text sent.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from proctor.contract import INGEST_CLOSED_STATUSES, SAMPLE_ID_MAX
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import utcnow
from proctor.server.db.models import Evaluation
from proctor.server.errors import Conflict, InvalidInput
from proctor.server.evaluations import repository, tallies
from proctor.server.evaluations.service import get_visible
from proctor.server.request_body import JsonObjectBody

INT64 = 2**63
INT32 = 2**31
PAGE_LIMIT_MAX = 1000
ID_PAGE_LIMIT_MAX = 10_000


@dataclass(frozen=True)
class AppendResult:
    """Outcome of one samples batch."""

    received: int
    inserted: int
    duplicates: int
    total_samples: int


def _int_field(sample: dict[str, Any], key: str, index: int, bound: int) -> int | None:
    value = sample.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -bound < value < bound:
        raise InvalidInput(
            f"samples[{index}].{key} must be an integer or null; fix that sample and resend.",
        )
    return value


def _reward(value: Any, index: int) -> float | None:
    """The reward as a float; a non-number, or one no float can hold, is refused."""
    if value is None:
        return None
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer literal past 1.8e308
            number = None
    if number is None or not math.isfinite(number):
        raise InvalidInput(
            f"samples[{index}].reward must be a finite number or null; fix that sample."
        )
    return number


def _prepare(
    evaluation_id: str, body: JsonObjectBody
) -> tuple[list[dict[str, Any]], dict[str, tuple[float, ...]]]:
    """Validate the batch and build its rows (without `seq`), dropping in-batch repeats;
    with each row's usage numbers by sample id (for the tallies)."""
    samples = body.value.get("samples")
    if not isinstance(samples, list) or body.items_raw is None:
        raise InvalidInput(
            'The body must be {"samples": [...]} with a list of sample objects; fix the body.'
        )
    rows: list[dict[str, Any]] = []
    usages: dict[str, tuple[float, ...]] = {}
    seen: set[str] = set()
    now = utcnow()
    for index, (sample, raw) in enumerate(zip(samples, body.items_raw, strict=True)):
        if not isinstance(sample, dict):
            raise InvalidInput(
                f"samples[{index}] must be a JSON object; fix that sample and resend."
            )
        sample_id = sample.get("sample_id")
        if sample_id is None:
            # Without an id there is nothing to de-duplicate on: every row is new.
            sample_id = str(uuid.uuid4())
        elif isinstance(sample_id, bool) or not isinstance(sample_id, str | int):
            raise InvalidInput(f"samples[{index}].sample_id must be a string; fix that sample.")
        sample_id = str(sample_id)
        if not sample_id or len(sample_id) > SAMPLE_ID_MAX or "\x00" in sample_id:
            raise InvalidInput(
                f"samples[{index}].sample_id must be 1 to {SAMPLE_ID_MAX} characters; fix it."
            )
        reward = _reward(sample.get("reward"), index)
        example_id = _int_field(sample, "example_id", index, INT64)
        rollout_number = _int_field(sample, "rollout_number", index, INT32)
        if sample_id in seen:
            continue
        seen.add(sample_id)
        usages[sample_id] = tallies.usage_of(sample)
        rows.append(
            {
                "evaluation_id": evaluation_id,
                "sample_id": sample_id,
                "example_id": example_id,
                "rollout_number": rollout_number,
                "reward": reward,
                "has_error": sample.get("error") not in (None, {}, "", False),
                "data": raw,
                "created_at": now,
            }
        )
    return rows, usages


def append_samples(
    session: Session, principal: Principal, evaluation_id: str, body: JsonObjectBody
) -> AppendResult:
    """Append a batch of samples; replays of stored `sample_id`s are skipped, not errors.

    Raises:
        InvalidInput: The batch is malformed (nothing is stored).
        Conflict: The run is PROCESSING, COMPLETED, FAILED, CANCELLED or TIMEOUT and the
            batch holds a sample it does not have (a pure replay answers success).
    """
    principal.require_evaluation(evaluation_id)
    rows, usages = _prepare(evaluation_id, body)
    received = len(body.items_raw or [])
    evaluation = get_visible(session, principal, evaluation_id, write=True, for_update=True)
    if evaluation.status in INGEST_CLOSED_STATUSES:
        # A closed run's samples and statistics are final; a client replaying what it already
        # delivered (its ack was lost) is told so with success, anything new is refused.
        ids = [row["sample_id"] for row in rows]
        if len(repository.stored_sample_ids(session, evaluation_id, ids)) < len(ids):
            raise Conflict(
                f"Evaluation {evaluation_id} is {evaluation.status}; it takes no more samples.",
                code="evaluation_closed",
            )
        return AppendResult(
            received=received,
            inserted=0,
            duplicates=received,
            total_samples=evaluation.total_samples,
        )
    base = evaluation.total_samples
    for offset, row in enumerate(rows, start=1):
        row["seq"] = base + offset
    inserted = repository.insert_samples(session, rows)
    fresh = [row for row in rows if row["sample_id"] in inserted]
    if len(fresh) < len(rows):
        # Replays were skipped and left holes in `seq`: close them, keeping the order.
        moves = [
            (row["sample_id"], base + i)
            for i, row in enumerate(fresh, start=1)
            if row["seq"] != base + i
        ]
        repository.renumber_samples(session, evaluation_id, moves)
    if fresh:
        _tally(session, evaluation, fresh, usages, first=base == 0)
        # The counters follow the headline mean's rule (proctor.stats): scored samples only.
        rewards = [
            row["reward"]
            for row in fresh
            if row["reward"] is not None and not row["has_error"] and math.isfinite(row["reward"])
        ]
        evaluation.total_samples = base + len(fresh)
        if rewards:
            evaluation.reward_sum += sum(rewards)
            evaluation.reward_count += len(rewards)
            low, high = min(rewards), max(rewards)
            evaluation.min_score = (
                low if evaluation.min_score is None else min(low, evaluation.min_score)
            )
            evaluation.max_score = (
                high if evaluation.max_score is None else max(high, evaluation.max_score)
            )
            evaluation.avg_score = finite_or_none(evaluation.reward_sum / evaluation.reward_count)
        evaluation.updated_at = utcnow()
    return AppendResult(
        received=received,
        inserted=len(fresh),
        duplicates=received - len(fresh),
        total_samples=evaluation.total_samples,
    )


def _tally(
    session: Session,
    evaluation: Evaluation,
    fresh: list[dict[str, Any]],
    usages: dict[str, tuple[float, ...]],
    *,
    first: bool,
) -> None:
    """Fold the stored rows into the running statistics (none were built for an evaluation
    that had samples before them: its figures are recomputed)."""
    current = tallies.load(evaluation.tallies)
    if current is None and not first:
        return
    if current is None:
        current = tallies.Tallies(mark=tallies.default_mark(evaluation.metadata_raw))
    usage = [usages[row["sample_id"]] for row in fresh]
    tallies.fold(session.connection(), evaluation.id, current, fresh, usage)
    evaluation.tallies = current.to_json()


def finite_or_none(value: float | None) -> float | None:
    """`value`, or None when it is NaN or infinite (rewards near 1e308 overflow their sum)."""
    return value if value is not None and math.isfinite(value) else None


def samples_page(
    session: Session, principal: Principal, evaluation_id: str, *, page: int, limit: int
) -> tuple[list[str], int]:
    """Raw JSON of one page of samples (1-based `page`) and the total stored."""
    evaluation = get_visible(session, principal, evaluation_id)
    total = evaluation.total_samples
    first = (page - 1) * limit + 1
    if first > total:
        # Past the end: nothing to read (and no out-of-range number reaches the database).
        return [], total
    rows = repository.sample_page(session, evaluation_id, first, min(first + limit - 1, total))
    return rows, total


def sample_ids_page(
    session: Session, principal: Principal, evaluation_id: str, *, after: int, limit: int
) -> tuple[list[str], int | None, int]:
    """Sample ids with `seq` past `after`, the `after` of the next page (None at the end), total."""
    evaluation = get_visible(session, principal, evaluation_id)
    rows = repository.sample_id_page(session, evaluation_id, after_seq=after, limit=limit)
    last = rows[-1][0] if rows else after
    next_after = last if rows and last < evaluation.total_samples else None
    return [sid for _, sid in rows], next_after, evaluation.total_samples
