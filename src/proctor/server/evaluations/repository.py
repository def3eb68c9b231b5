"""Queries on evaluations and samples; the only place that builds them."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    Integer,
    SQLColumnExpression,
    String,
    and_,
    bindparam,
    case,
    cast,
    false,
    func,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy import (
    delete as sql_delete,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from proctor.server.auth.schemas import Principal
from proctor.server.db.models import Environment, Evaluation, SampleRow

# Built once: these run on every request (building a statement costs about as much as running it).
_GET = select(Evaluation).where(Evaluation.id == bindparam("evaluation_id"))
_GET_FOR_UPDATE = _GET.with_for_update()
_PAGE = (
    select(SampleRow.data)
    .where(
        SampleRow.evaluation_id == bindparam("evaluation_id"),
        SampleRow.seq >= bindparam("first_seq"),
        SampleRow.seq <= bindparam("last_seq"),
    )
    .order_by(SampleRow.seq)
)


def readable(principal: Principal) -> ColumnElement[bool]:
    """Which evaluations the principal may read: its user's, its teams', public ones (admins:
    all). The one statement of the rule: every read, listed or by id, filters with it."""
    if principal.is_admin:
        return true()
    clauses: list[ColumnElement[bool]] = [
        Evaluation.user_id == principal.user_id,
        Evaluation.is_public.is_(True),
    ]
    if principal.team_ids:
        clauses.append(Evaluation.team_id.in_(sorted(principal.team_ids)))
    return or_(*clauses)


def update_status(
    session: Session,
    evaluation_id: str,
    values: dict[str, object],
    *,
    only_from: Collection[str],
) -> bool:
    """One conditional UPDATE of a status change (`service.transition` builds `values`):
    only from `only_from`; returns whether the row changed."""
    result = session.execute(
        update(Evaluation)
        .where(Evaluation.id == evaluation_id, Evaluation.status.in_(sorted(only_from)))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def get_readable(
    session: Session, principal: Principal, evaluation_id: str, *, for_update: bool = False
) -> Evaluation | None:
    """The evaluation with this id if the principal may read it (else None, as if absent)."""
    query = select(Evaluation).where(Evaluation.id == evaluation_id, readable(principal))
    return session.scalar(query.with_for_update() if for_update else query)


def get(session: Session, evaluation_id: str, *, for_update: bool = False) -> Evaluation | None:
    """The evaluation with this id; `for_update` locks the row (PostgreSQL) until commit."""
    query = _GET_FOR_UPDATE if for_update else _GET
    return session.scalar(query, {"evaluation_id": evaluation_id})


def delete(session: Session, evaluation: Evaluation) -> None:
    """Delete the evaluation; the database's cascades remove its samples, tallies, hosted
    state, traces and scoped keys."""
    session.execute(sql_delete(Evaluation).where(Evaluation.id == evaluation.id))
    session.expunge(evaluation)


def add(session: Session, evaluation: Evaluation) -> Evaluation:
    """Insert an evaluation.

    One created with an Idempotency-Key (`create_key`) is inserted at most once per user:
    when a concurrent request with the same key committed first (the unique constraint
    refuses this row, on PostgreSQL after waiting for that commit), that evaluation is
    returned instead, so every such request answers the same.
    """
    if evaluation.create_key is None:
        session.add(evaluation)
        session.flush()
        return evaluation
    try:
        with session.begin_nested():
            session.add(evaluation)
            session.flush()
    except IntegrityError:
        earlier = find_created(session, evaluation.user_id, evaluation.create_key)
        if earlier is None:
            raise
        return earlier
    return evaluation


def list_visible(
    session: Session,
    principal: Principal,
    *,
    skip: int,
    limit: int,
    team_id: str | None = None,
    environment_name: str | None = None,
    suite_id: str | None = None,
    status: str | None = None,
    model_name: str | None = None,
    is_hosted: bool | None = None,
    tag: str | None = None,
    search: str | None = None,
    order: EvaluationOrder = "created",
    descending: bool = True,
) -> tuple[list[Evaluation], int]:
    """A page of visible evaluations and the total matching, newest first unless `order`
    names another column (ties: newest first). `tag` is one of the evaluation's tags;
    `search` is found in the name or the description (case-insensitively)."""
    conditions: list[ColumnElement[bool]] = [readable(principal)]
    if team_id is not None:
        conditions.append(Evaluation.team_id == team_id)
    if environment_name and "/" in environment_name:
        # `owner/name`: the evaluations of that hub entry, by its id.
        owner, _, name = environment_name.partition("/")
        env_ids = session.scalars(
            select(Environment.id).where(Environment.owner == owner, Environment.name == name)
        ).all()
        ids = cast(Evaluation.environment_ids, String)
        matches = [ids.contains(json.dumps(env_id), autoescape=True) for env_id in env_ids]
        conditions.append(or_(*matches) if matches else false())
    elif environment_name:
        names = cast(Evaluation.environment_names, String)
        conditions.append(names.contains(json.dumps(environment_name), autoescape=True))
    if suite_id:
        conditions.append(Evaluation.suite_id == suite_id)
    if status:
        conditions.append(Evaluation.status == status)
    if model_name:
        conditions.append(Evaluation.model_name == model_name)
    if is_hosted is not None:
        conditions.append(Evaluation.is_hosted.is_(is_hosted))
    if tag:
        conditions.append(cast(Evaluation.tags, String).contains(json.dumps(tag), autoescape=True))
    if search:
        conditions.append(
            or_(
                Evaluation.name.icontains(search, autoescape=True),
                Evaluation.description.icontains(search, autoescape=True),
            )
        )
    total = session.scalar(select(func.count()).select_from(Evaluation).where(*conditions)) or 0
    column = _ORDER_COLUMNS[order]
    # Evaluations without a value (no mean yet, no model) come last in both directions.
    key = (column.desc() if descending else column.asc()).nulls_last()
    rows = session.scalars(
        select(Evaluation)
        .where(*conditions)
        .order_by(key, Evaluation.created_at.desc(), Evaluation.id.desc())
        .offset(skip)
        .limit(limit)
    )
    return list(rows), int(total)


EvaluationOrder = Literal[
    "created", "name", "status", "environment", "model", "samples", "mean", "hosted"
]
"""The columns the evaluations list sorts by."""

_ORDER_COLUMNS: dict[str, SQLColumnExpression[Any]] = {
    "created": Evaluation.created_at,
    "name": func.lower(Evaluation.name),
    "status": Evaluation.status,
    # The names' JSON text: by the first environment's name.
    "environment": func.nullif(cast(Evaluation.environment_names, String), "[]"),
    "model": func.lower(Evaluation.model_name),
    "samples": Evaluation.total_samples,
    # The running mean over scored samples: the headline mean (`proctor.stats`) kept as
    # samples arrive, so sorting needs no statistics.
    "mean": Evaluation.avg_score,
    "hosted": Evaluation.is_hosted,
}


def ids_with_status(session: Session, status: str) -> list[str]:
    """Ids of every evaluation in `status`."""
    return list(session.scalars(select(Evaluation.id).where(Evaluation.status == status)))


def processing_before(session: Session, finalized_before: datetime) -> list[str]:
    """Ids of the evaluations PROCESSING since before `finalized_before`."""
    return list(
        session.scalars(
            select(Evaluation.id).where(
                Evaluation.status == "PROCESSING", Evaluation.finalized_at < finalized_before
            )
        )
    )


def insert_samples(session: Session, rows: list[dict[str, Any]]) -> set[str]:
    """Insert sample rows, skipping any `(evaluation_id, sample_id)` already stored.

    One `INSERT ... ON CONFLICT DO NOTHING RETURNING sample_id` for the batch (SQLAlchemy
    sends it as multi-row VALUES); returns the ids actually inserted.
    """
    if not rows:
        return set()
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    table = SampleRow.metadata.tables["samples"]
    statement = (
        insert(table)
        .on_conflict_do_nothing(index_elements=["evaluation_id", "sample_id"])
        .returning(table.c.sample_id)
    )
    # Core, not the ORM: the rows are plain dicts and this is the ingest hot path.
    result = session.connection().execute(statement, rows)
    return set(result.scalars())


def stored_sample_ids(session: Session, evaluation_id: str, ids: Sequence[str]) -> set[str]:
    """Which of `ids` the evaluation already holds."""
    found: set[str] = set()
    # Chunks keep the IN list within every database's parameter limit.
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        found.update(
            session.scalars(
                select(SampleRow.sample_id).where(
                    SampleRow.evaluation_id == evaluation_id, SampleRow.sample_id.in_(chunk)
                )
            )
        )
    return found


def sample_id_page(
    session: Session, evaluation_id: str, *, after_seq: int, limit: int
) -> list[tuple[int, str]]:
    """`(seq, sample_id)` of up to `limit` samples past `after_seq`, in order."""
    rows = session.execute(
        select(SampleRow.seq, SampleRow.sample_id)
        .where(SampleRow.evaluation_id == evaluation_id, SampleRow.seq > after_seq)
        .order_by(SampleRow.seq)
        .limit(limit)
    )
    return [(int(seq), str(sid)) for seq, sid in rows]


def find_created(session: Session, user_id: str, create_key: str) -> Evaluation | None:
    """The evaluation this user created with this Idempotency-Key, if any."""
    return session.scalars(
        select(Evaluation).where(Evaluation.user_id == user_id, Evaluation.create_key == create_key)
    ).first()


def renumber_samples(session: Session, evaluation_id: str, moves: list[tuple[str, int]]) -> None:
    """Give samples new `seq` numbers; `moves` must be in ascending order of new number.

    Used when a batch had replays: the rows after a skipped one move down to close the gap.
    Moving in ascending order never collides with the `(evaluation_id, seq)` uniqueness.
    """
    table = SampleRow.metadata.tables["samples"]
    statement = (
        update(table)
        .where(table.c.evaluation_id == evaluation_id, table.c.sample_id == bindparam("sid"))
        .values(seq=bindparam("new_seq"))
    )
    connection = session.connection()
    for sample_id, seq in moves:
        connection.execute(statement, {"sid": sample_id, "new_seq": seq})


def sample_page(session: Session, evaluation_id: str, first_seq: int, last_seq: int) -> list[str]:
    """Raw JSON of the samples with `first_seq <= seq <= last_seq`, in order."""
    params = {"evaluation_id": evaluation_id, "first_seq": first_seq, "last_seq": last_seq}
    return list(session.scalars(_PAGE, params))


def all_samples(session: Session, evaluation_id: str) -> Iterable[SampleRow]:
    """Every sample of an evaluation in order (for exports; streams rows)."""
    return session.scalars(
        select(SampleRow).where(SampleRow.evaluation_id == evaluation_id).order_by(SampleRow.seq)
    )


# Dashboard queries: each reads one evaluation's samples with a single statement, so a page
# never loads samples it does not show.

SampleOrder = Literal["seq", "reward_desc", "reward_asc"]


def get_sample(session: Session, evaluation_id: str, sample_id: str) -> SampleRow | None:
    """The sample with this `sample_id` in the evaluation, or None."""
    return session.scalar(
        select(SampleRow).where(
            SampleRow.evaluation_id == evaluation_id, SampleRow.sample_id == sample_id
        )
    )


def sample_rows(
    session: Session,
    evaluation_id: str,
    *,
    limit: int,
    offset: int = 0,
    order: SampleOrder = "seq",
    errored: bool | None = None,
    example_id: int | None = None,
) -> list[SampleRow]:
    """Samples of an evaluation, filtered and ordered, `limit` from `offset`.

    Unfiltered in `seq` order this is a range on `(evaluation_id, seq)`, not an OFFSET scan.
    Ordered by reward, samples without a reward or with an error are left out (so the order
    can come from `ix_samples_evaluation_reward` on every backend, whatever its NULL
    ordering, and an errored sample is never ranked by a reward).
    """
    conditions: list[ColumnElement[bool]] = [SampleRow.evaluation_id == evaluation_id]
    if errored is not None:
        conditions.append(SampleRow.has_error.is_(errored))
    if example_id is not None:
        conditions.append(SampleRow.example_id == example_id)
    query = select(SampleRow).where(*conditions)
    if order == "seq" and errored is None and example_id is None:
        query = query.where(SampleRow.seq > offset, SampleRow.seq <= offset + limit)
        return list(session.scalars(query.order_by(SampleRow.seq)))
    if order == "seq" and example_id is not None:
        # Rollout order; also keeps the planner on the example index, not a walk of `seq`.
        query = query.order_by(SampleRow.rollout_number, SampleRow.seq)
    elif order == "seq" and errored is not None:
        # By example: `has_error` is read from the example index, so a run with few errors
        # is not a walk over every sample row.
        query = query.order_by(SampleRow.example_id, SampleRow.id)
    elif order == "seq":
        query = query.order_by(SampleRow.seq)
    elif order == "reward_desc":
        # Ties by row id in the same direction: exactly the index's order, so no sort.
        # Only scored samples are ranked by reward: an errored one's stored reward is none.
        query = query.where(SampleRow.reward.is_not(None), SampleRow.has_error.is_(False))
        query = query.order_by(SampleRow.reward.desc(), SampleRow.id.desc())
    else:
        query = query.where(SampleRow.reward.is_not(None), SampleRow.has_error.is_(False))
        query = query.order_by(SampleRow.reward.asc(), SampleRow.id.asc())
    return list(session.scalars(query.offset(offset).limit(limit)))


def sample_keys(
    session: Session, evaluation_id: str, *, example_id: int, limit: int
) -> list[tuple[str, int | None, float | None, bool]]:
    """`(sample_id, rollout_number, reward, has_error)` of an example's samples in rollout
    order, without their data (a page links them)."""
    query = (
        select(SampleRow.sample_id, SampleRow.rollout_number, SampleRow.reward, SampleRow.has_error)
        .where(SampleRow.evaluation_id == evaluation_id, SampleRow.example_id == example_id)
        .order_by(SampleRow.rollout_number, SampleRow.seq)
        .limit(limit)
    )
    return [(row[0], row[1], row[2], row[3]) for row in session.execute(query)]


def reward_histogram(session: Session, evaluation_id: str, *, edges: Sequence[float]) -> list[int]:
    """How many scored rewards fall in each `[edges[i], edges[i+1])` (the last bin is closed).

    One counted range per bin on `ix_samples_evaluation_reward`: no grouping, no sort.
    Errored samples are never binned, whatever reward they were stored with.
    """
    counts = []
    last = len(edges) - 2
    for index, (low, high) in enumerate(itertools.pairwise(edges)):
        upper = SampleRow.reward <= high if index == last else SampleRow.reward < high
        counts.append(
            int(
                session.scalar(
                    select(func.count())
                    .select_from(SampleRow)
                    .where(*_scored(evaluation_id), SampleRow.reward >= low, upper)
                )
                or 0
            )
        )
    return counts


def count_errored(session: Session, evaluation_id: str) -> int:
    """How many of the evaluation's samples carry an error."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(SampleRow)
            .where(SampleRow.evaluation_id == evaluation_id, SampleRow.has_error.is_(True))
        )
        or 0
    )


def example_shapes(
    session: Session, evaluation_id: str, *, threshold: float, low: float, width: float
) -> list[tuple[int, int, int, int, float]]:
    """Examples grouped by shape: `(rollouts, passed, mean bucket, examples, sum of means)`.

    Per example (one pass over `ix_samples_evaluation_example`): its scored rollouts, how
    many reached `threshold`, and its mean scored reward (examples with none are left out:
    `errored_examples` counts them); then examples sharing the same
    rollouts, passes and mean bucket (`floor((mean - low) / width)`) are counted together,
    so the answer has a few rows however many examples there are.
    """
    per_example = (
        select(
            func.count(SampleRow.reward).label("n"),
            func.sum(case((SampleRow.reward >= threshold, 1), else_=0)).label("c"),
            func.avg(SampleRow.reward).label("m"),
        )
        .where(*_scored(evaluation_id), SampleRow.example_id.is_not(None))
        .group_by(SampleRow.example_id)
        .subquery()
    )
    scaled = (per_example.c.m - low) / width
    dialect = session.get_bind().dialect.name
    # PostgreSQL's CAST rounds; SQLite's truncates, which is floor for non-negative values.
    bucket = func.floor(scaled) if dialect == "postgresql" else cast(scaled, Integer)
    rows = session.execute(
        select(
            per_example.c.n,
            per_example.c.c,
            bucket.label("bucket"),
            func.count(),
            func.sum(per_example.c.m),
        )
        .where(per_example.c.n > 0)
        .group_by(per_example.c.n, per_example.c.c, "bucket")
    )
    return [(int(n), int(c or 0), int(b or 0), int(k), float(m or 0.0)) for n, c, b, k, m in rows]


def example_ids_after(
    session: Session, evaluation_id: str, *, after: int | None, limit: int
) -> list[int]:
    """The evaluation's first `limit` distinct example ids above `after`, ascending.

    Walks `ix_samples_evaluation_example` from `after` and stops early: the cost follows the
    page size, not the run's size.
    """
    query = select(SampleRow.example_id).where(
        SampleRow.evaluation_id == evaluation_id, SampleRow.example_id.is_not(None)
    )
    if after is not None:
        query = query.where(SampleRow.example_id > after)
    ordered = query.distinct().order_by(SampleRow.example_id).limit(limit)
    return [e for e in session.scalars(ordered) if e is not None]


def example_means(
    session: Session, evaluation_ids: Sequence[str], example_ids: Sequence[int]
) -> list[tuple[int, str, float | None, int]]:
    """`(example_id, evaluation_id, mean scored reward, rollouts)` for these examples and runs
    (the mean is None where every rollout errored)."""
    if not example_ids:
        return []
    rows = session.execute(
        select(
            SampleRow.example_id, SampleRow.evaluation_id, func.avg(_scored_reward()), func.count()
        )
        .where(SampleRow.evaluation_id.in_(evaluation_ids), SampleRow.example_id.in_(example_ids))
        .group_by(SampleRow.example_id, SampleRow.evaluation_id)
        .order_by(SampleRow.example_id)
    )
    return [(int(e), str(ev), None if m is None else float(m), int(n)) for e, ev, m, n in rows]


# Statistics (proctor.server.evaluations.stats): a sample is scored when it has a reward and
# no error; each query reads the example index once and returns a few grouped rows.


def _scored(evaluation_id: str) -> list[ColumnElement[bool]]:
    return [
        SampleRow.evaluation_id == evaluation_id,
        SampleRow.reward.is_not(None),
        SampleRow.has_error.is_(False),
    ]


def example_groups(
    session: Session, evaluation_id: str, *, threshold: float
) -> list[tuple[int, int, int, float, float, float]]:
    """Scored examples grouped by shape: `(rollouts, passed, examples, sum, sum_sq, sum_ex_sq)`.

    Per example: its scored rollouts, how many reached `threshold`, the sum and the sum of
    squares of its rewards; then, per `(rollouts, passed)`, how many examples, the sums of
    those and the sum of each example's squared sum (what the clustered error needs).
    Samples without an `example_id` are each their own example (rows with rollouts 1).
    """
    per_example = (
        select(
            func.count().label("n"),
            func.sum(case((SampleRow.reward >= threshold, 1), else_=0)).label("c"),
            func.sum(SampleRow.reward).label("s"),
            func.sum(SampleRow.reward * SampleRow.reward).label("ss"),
        )
        .where(*_scored(evaluation_id), SampleRow.example_id.is_not(None))
        .group_by(SampleRow.example_id)
        .subquery()
    )
    grouped = session.execute(
        select(
            per_example.c.n,
            per_example.c.c,
            func.count(),
            func.sum(per_example.c.s),
            func.sum(per_example.c.ss),
            func.sum(per_example.c.s * per_example.c.s),
        ).group_by(per_example.c.n, per_example.c.c)
    )
    rows = [
        (int(n), int(c or 0), int(k), float(s or 0), float(ss or 0), float(cs or 0))
        for n, c, k, s, ss, cs in grouped
    ]
    passed = case((SampleRow.reward >= threshold, 1), else_=0)
    singles = session.execute(
        select(
            func.count(),
            func.sum(passed),
            func.sum(SampleRow.reward),
            func.sum(SampleRow.reward * SampleRow.reward),
        ).where(*_scored(evaluation_id), SampleRow.example_id.is_(None))
    ).one()
    count, passes, total, total_sq = singles
    if count:
        # Each is one example of one rollout: its squared sum is its squared reward.
        # The sums are additive, so they ride on one of the two rows (whichever is non-empty).
        passes, sums = int(passes or 0), (float(total or 0), float(total_sq or 0))
        fails = int(count) - passes
        rows.append((1, 0, fails, *sums, sums[1]) if fails else (1, 1, passes, *sums, sums[1]))
        if fails and passes:
            rows.append((1, 1, passes, 0.0, 0.0, 0.0))
    return rows


def _scored_reward() -> ColumnElement[Any]:
    # The reward of a scored sample, NULL for an errored one (which AVG and COUNT skip).
    return case(
        (and_(SampleRow.reward.is_not(None), SampleRow.has_error.is_(False)), SampleRow.reward),
        else_=None,
    )


def scored_example_means(session: Session, evaluation_id: str) -> dict[int, float | None]:
    """Mean scored reward of each example; None for one that errored in every rollout."""
    rows = session.execute(
        select(SampleRow.example_id, func.avg(_scored_reward()))
        .where(SampleRow.evaluation_id == evaluation_id, SampleRow.example_id.is_not(None))
        .group_by(SampleRow.example_id)
    )
    return {int(e): None if m is None else float(m) for e, m in rows}


def errored_examples(session: Session, evaluation_id: str) -> int:
    """How many examples have samples but not one scored (errored in every rollout)."""
    per_example = (
        select(func.count(_scored_reward()).label("scored"))
        .where(SampleRow.evaluation_id == evaluation_id, SampleRow.example_id.is_not(None))
        .group_by(SampleRow.example_id)
        .subquery()
    )
    return int(
        session.scalar(
            select(func.count()).select_from(per_example).where(per_example.c.scored == 0)
        )
        or 0
    )


def scored_range(session: Session, evaluation_id: str) -> tuple[float | None, float | None, bool]:
    """The lowest and highest scored reward, and whether every scored reward is 0 or 1."""
    low, high, other = session.execute(
        select(
            func.min(SampleRow.reward),
            func.max(SampleRow.reward),
            func.sum(case((SampleRow.reward.in_((0.0, 1.0)), 0), else_=1)),
        ).where(*_scored(evaluation_id))
    ).one()
    return (
        None if low is None else float(low),
        None if high is None else float(high),
        not other,
    )


def shared_example(session: Session, first_id: str, second_id: str) -> bool:
    """Whether two evaluations hold samples of at least one same example id."""
    other = select(SampleRow.example_id).where(
        SampleRow.evaluation_id == second_id, SampleRow.example_id.is_not(None)
    )
    return (
        session.scalar(
            select(SampleRow.example_id)
            .where(SampleRow.evaluation_id == first_id, SampleRow.example_id.in_(other))
            .limit(1)
        )
        is not None
    )


USAGE_FIELDS = {
    "prompt_tokens": ("token_usage", "prompt_tokens"),
    "completion_tokens": ("token_usage", "completion_tokens"),
    "duration_s": ("timing", "duration_s"),
    "model_s": ("timing", "model_s"),
}


# A sample is stored as sent, and a completion may hold U+0000, escaped `\u0000` in the JSON
# text; PostgreSQL's json and jsonb parsers both refuse that escape, so it is dropped before
# the cast (only the numbers are read here). Escaped backslashes become `\u005c` first, so
# the `\\u0000` of a literal backslash-u0000 is left alone; rows without one are cast as is.
_JSONB_SAFE = (
    "CASE WHEN strpos(data, '\\u0000') = 0 THEN data "
    "ELSE replace(replace(data, '\\\\', '\\u005c'), '\\u0000', '') END"
)


def usage_totals(session: Session, evaluation_id: str) -> dict[str, float]:
    """Sums of token usage and timings over the samples, reading each sample's JSON once.

    Only JSON numbers count (samples are stored as sent; a string there is skipped). One
    pass, done when the statistics are computed (and then cached).
    """
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        columns = ", ".join(
            f"sum(CASE WHEN jsonb_typeof(j #> '{{{a},{b}}}') = 'number' "
            f"THEN (j #>> '{{{a},{b}}}')::numeric END) AS {name}"
            for name, (a, b) in USAGE_FIELDS.items()
        )
        sql = (
            f"SELECT {columns} FROM (SELECT ({_JSONB_SAFE})::jsonb AS j FROM samples "
            "WHERE evaluation_id = :evaluation_id) AS s"
        )
    else:
        columns = ", ".join(
            f"sum(CASE WHEN json_type(data, '$.{a}.{b}') IN ('integer', 'real') "
            f"THEN json_extract(data, '$.{a}.{b}') END) AS {name}"
            for name, (a, b) in USAGE_FIELDS.items()
        )
        sql = f"SELECT {columns} FROM samples WHERE evaluation_id = :evaluation_id"
    row = session.execute(text(sql), {"evaluation_id": evaluation_id}).one()
    totals = {}
    for name, value in zip(USAGE_FIELDS, row, strict=True):
        number = float(value) if value is not None else 0.0
        totals[name] = number if math.isfinite(number) else 0.0
    return totals


def example_counts(
    session: Session, evaluation_id: str, example_ids: Sequence[int]
) -> dict[int, int]:
    """How many samples the evaluation holds per example id (for numbering rollouts)."""
    counts: dict[int, int] = {}
    ids = sorted(set(example_ids))
    for start in range(0, len(ids), 500):
        rows = session.execute(
            select(SampleRow.example_id, func.count())
            .where(
                SampleRow.evaluation_id == evaluation_id,
                SampleRow.example_id.in_(ids[start : start + 500]),
            )
            .group_by(SampleRow.example_id)
        )
        counts.update({int(example): int(count) for example, count in rows if example is not None})
    return counts
