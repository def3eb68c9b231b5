"""The dashboard's pages: one function per page, returning its model (`pages`) complete
(the compare pages are `compare`).

The HTML page and its JSON twin (`?format=json`) are both rendered from the same model,
and each call goes through the evaluations service, so the dashboard sees exactly what the
API with the same key sees.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast
from urllib.parse import urlencode

from cachetools import LRUCache
from fastapi import FastAPI
from markupsafe import Markup
from sqlalchemy.orm import Session

from proctor.contract import TERMINAL_STATUSES, Status
from proctor.server.auth.schemas import Principal
from proctor.server.body_deps import validate
from proctor.server.db.base import as_utc, iso_utc, utcnow
from proctor.server.db.models import Evaluation, SampleRow
from proctor.server.errors import BadRequest, ServerError
from proctor.server.evaluations import removal, render, service
from proctor.server.evaluations import stats as evaluation_stats
from proctor.server.evaluations.removal import may_delete
from proctor.server.evaluations.repository import EvaluationOrder, SampleOrder
from proctor.server.evaluations.schemas import EvaluationStats, UpdateEvaluation
from proctor.server.evaluations.service import may_manage
from proctor.server.hosted import service as hosted
from proctor.server.hosted.sharding import ShardProgress
from proctor.server.traces import service as traces
from proctor.server.traces.schemas import TraceSummary
from proctor.server.web import histograms, markdown, trajectory, transcript
from proctor.server.web.pages import (
    LIST_SORTS,
    ContentPart,
    EvaluationHeader,
    EvaluationListPage,
    EvaluationPage,
    EvaluationRow,
    ListFilters,
    Manage,
    MeanCell,
    Message,
    MetricRow,
    Progress,
    SampleDetail,
    SampleLink,
    SampleListRow,
    SampleNav,
    SamplePage,
    SamplesPage,
    SamplesTable,
    SampleTrace,
    Step,
    StepOutput,
    ToolCall,
)
from proctor.stats import rollouts_label

logger = logging.getLogger(__name__)

STATUSES: tuple[str, ...] = tuple(Status)
SORTS: dict[str, SampleOrder] = {"seq": "seq", "-reward": "reward_desc", "reward": "reward_asc"}
REFRESH_S = 5
"""How often a page showing a live evaluation refreshes (seconds)."""


def _duration(start: datetime | None, end: datetime | None) -> float | None:
    start, end = as_utc(start), as_utc(end)
    return None if start is None or end is None else (end - start).total_seconds()


def is_live(status: str) -> bool:
    """Whether an evaluation in `status` may still change (pages refresh while it is)."""
    return status not in TERMINAL_STATUSES


@dataclass(frozen=True)
class SamplesQuery:
    """Which samples a samples table shows."""

    page: int = 1
    limit: int = 50
    sort: str = "seq"
    errored: bool | None = None
    example: int | None = None


def mean_cell(figures: dict[str, Any]) -> MeanCell:
    """What a page shows of the headline mean: value, ± half-width, examples x rollouts."""
    reward = figures["reward"]
    return MeanCell(
        mean=reward["mean"],
        half_width=reward["half_width"],
        ci95=reward["ci95"],
        symmetric=reward["ci_method"] == "student-t",
        no_interval=reward["no_interval"],
        n_examples=reward["n_examples"],
        n_samples=reward["n_samples"],
        n_errored=reward["n_errored"],
        rollouts=rollouts_label(reward["min_rollouts_per_example"], reward["rollouts_per_example"]),
        headline=figures["headline"],
    )


def evaluation_row(
    evaluation: Evaluation, public_url: str, session: Session | None = None
) -> EvaluationRow:
    """The list's summary of one evaluation (with its mean when `session` is given)."""
    figures = None if session is None else evaluation_stats.evaluation_stats(session, evaluation)
    return EvaluationRow(
        id=evaluation.id,
        name=evaluation.name,
        status=Status(evaluation.status),
        environment=", ".join(str(n) for n in evaluation.environment_names) or evaluation.dataset,
        model=evaluation.model_name,
        samples=evaluation.total_samples,
        mean_reward=None if figures is None else mean_cell(figures),
        is_hosted=evaluation.is_hosted,
        team_id=evaluation.team_id,
        created_at=iso_utc(evaluation.created_at),
        viewer_url=render.viewer_url(public_url, evaluation.id),
        tags=[str(tag) for tag in evaluation.tags or []],
        description=evaluation.description or None,
    )


def evaluation_list(
    session: Session,
    principal: Principal,
    filters: ListFilters,
    *,
    skip: int,
    limit: int,
    public_url: str,
) -> EvaluationListPage:
    """The evaluations list page."""
    if filters.status is not None and filters.status not in STATUSES:
        raise BadRequest(
            f"Unknown status {filters.status!r}; use one of {', '.join(STATUSES)}.",
            code="invalid_query",
        )
    column = filters.sort.removeprefix("-")
    if column not in LIST_SORTS:
        raise BadRequest(
            f"Unknown sort {filters.sort!r}; use one of {', '.join(LIST_SORTS)}, "
            "with - first for descending.",
            code="invalid_query",
        )
    evaluations, total = service.list_evaluations(
        session,
        principal,
        skip=skip,
        limit=limit,
        environment_name=filters.environment,
        status=filters.status,
        model_name=filters.model,
        is_hosted=filters.hosted,
        tag=filters.tag,
        search=filters.search,
        order=cast(EvaluationOrder, column),
        descending=filters.sort.startswith("-"),
    )
    rows = [evaluation_row(e, public_url, session) for e in evaluations]
    live = any(is_live(row.status) for row in rows)
    return EvaluationListPage(
        evaluations=rows,
        total=total,
        skip=skip,
        limit=limit,
        filters=filters,
        live=live,
        # The newest page polls even when nothing runs, so a new evaluation shows up.
        refresh_s=REFRESH_S if live or skip == 0 else None,
        covers=evaluation_stats.MEAN_COVERS,
        statuses=list(STATUSES),
    )


def _header(evaluation: Evaluation, public_url: str) -> EvaluationHeader:
    try:
        metadata = json.loads(evaluation.metadata_raw)
    except ValueError:
        metadata = {}
    metrics = evaluation.metrics if isinstance(evaluation.metrics, dict) else {}
    avg_metrics = metrics.get("avg_metrics")
    return EvaluationHeader(
        **render.record_fields(evaluation, public_url),
        metadata=metadata if isinstance(metadata, dict) else {},
        duration_s=_duration(
            evaluation.started_at or evaluation.created_at, evaluation.completed_at
        ),
        live=is_live(evaluation.status),
        reward_means=avg_metrics if isinstance(avg_metrics, dict) else {},
    )


def _sample_data(sample: SampleRow) -> dict[str, Any]:
    # Samples are stored as sent; anything but a JSON object shows as an empty one.
    try:
        data = json.loads(sample.data)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _stored(sample: SampleRow) -> dict[str, Any]:
    """The sample's own columns (`pages._StoredSample`'s fields)."""
    return {
        "seq": sample.seq,
        "sample_id": sample.sample_id,
        "example_id": sample.example_id,
        "rollout_number": sample.rollout_number,
        # An errored sample has no reward, whatever number its client stored with it.
        "reward": None if sample.has_error else sample.reward,
        "has_error": sample.has_error,
    }


def _sample_row(sample: SampleRow) -> SampleListRow:
    data = _sample_data(sample)
    return SampleListRow(
        **_stored(sample),
        error=transcript.error_message(data.get("error")),
        num_turns=data.get("num_turns"),
        preview=transcript.preview(data),
    )


TABLE_CACHE_ENTRIES = 256
_tables: LRUCache[tuple[Any, ...], SamplesTable] = LRUCache(maxsize=TABLE_CACHE_ENTRIES)
_tables_lock = threading.Lock()
"""The server's request threads share the cache; the lock guards it (not the computing)."""


def _table_key(evaluation: Evaluation, query: SamplesQuery) -> tuple[Any, ...]:
    if query.sort == "seq" and query.errored is None and query.example is None:
        # Upload order holds `seq` offset+1 .. offset+limit (and one more, for "next"). A
        # stored sample never changes and `seq` counts 1..N without holes, so once the run
        # has that many samples the page is final: a live page's poll reads no sample.
        offset = (query.page - 1) * query.limit
        return (evaluation.id, query, min(evaluation.total_samples, offset + query.limit + 1))
    return (evaluation.id, query, evaluation.total_samples, evaluation.updated_at)


def samples_table(session: Session, evaluation: Evaluation, query: SamplesQuery) -> SamplesTable:
    """One page of a visible evaluation's samples, with whether another page follows
    (cached while the samples it shows stay the same)."""
    key = _table_key(evaluation, query)
    with _tables_lock:
        found = _tables.get(key)
    if found is not None:
        return found
    table = _samples_table(session, evaluation, query)
    with _tables_lock:
        _tables[key] = table
    return table


def _samples_table(session: Session, evaluation: Evaluation, query: SamplesQuery) -> SamplesTable:
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
    return SamplesTable(
        samples=[_sample_row(s) for s in rows[: query.limit]],
        page=query.page,
        limit=query.limit,
        sort=query.sort,
        errored=query.errored,
        example=query.example,
        has_more=len(rows) > query.limit,
    )


def _shard_rows(session: Session, evaluation: Evaluation) -> list[ShardProgress]:
    """The shards of a sharded hosted evaluation, each with the first line of its failure."""
    if not evaluation.is_hosted:
        return []
    return [
        replace(item, error=(item.error or "").split("\n", 1)[0] or None)
        for item in hosted.shard_progress(session, evaluation)
    ]


def _hosted_logs(
    session: Session, principal: Principal, evaluation: Evaluation, app: FastAPI
) -> str | None:
    if not evaluation.is_hosted:
        return None
    try:
        return hosted.read_logs(session, principal, evaluation.id, app.state.settings.hosted)
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
    pass_threshold: float | None = None,
    logs_from: int = 0,
) -> EvaluationPage:
    """The evaluation page: header, mean, histograms, pass@k, logs and a samples page.

    `logs_from` skips that many characters of the hosted log (a live page asks only for
    what it has not shown yet).
    """
    evaluation = service.get_visible(session, principal, evaluation_id)
    summary = evaluation_stats.evaluation_stats(session, evaluation, threshold=pass_threshold)
    threshold = summary["pass_threshold"]
    figures = histograms.evaluation_stats(session, evaluation, threshold=threshold)
    logs = _hosted_logs(session, principal, evaluation, app)
    shards = _shard_rows(session, evaluation)
    header = _header(evaluation, public_url)
    return EvaluationPage(
        evaluation=header,
        stats=EvaluationStats.model_validate(summary),
        mean=mean_cell(summary),
        covers=summary["covers"],
        progress=_progress(session, evaluation, header.live),
        metric_rows=_metric_rows(evaluation),
        errored=figures.errored,
        errored_examples=figures.errored_examples,
        histogram=figures.histogram,
        examples=figures.examples,
        # A log shorter than what the page has shown was restarted or cut, and a sharded
        # run's changes in the middle (each shard's part grows): send it whole.
        logs=None
        if logs is None
        else logs[logs_from if len(logs) >= logs_from and not shards else 0 :],
        logs_reset=logs is not None and (len(logs) < logs_from or bool(shards)),
        logs_from=logs_from,
        logs_length=None if logs is None else len(logs),
        shards=shards,
        table=samples_table(session, evaluation, query),
        cancellable=header.is_hosted and header.live,
        manage=Manage(
            renamable=principal.scope_evaluation_id is None
            and may_manage(session, principal, evaluation),
            deletable=may_delete(session, principal, evaluation)
            and not (header.is_hosted and header.live),
        ),
        refresh_s=REFRESH_S if header.live else None,
    )


def _expected(session: Session, evaluation: Evaluation) -> int | None:
    """How many samples a complete run has, when known (hosted runs, or the run's config)."""
    if evaluation.is_hosted:
        expected = hosted.expected_samples(session, evaluation.id)
        if expected:
            return expected
    try:
        metadata = json.loads(evaluation.metadata_raw)
    except ValueError:
        return None
    for place in (metadata, metadata.get("config") if isinstance(metadata, dict) else None):
        if isinstance(place, dict):
            n, r = place.get("num_examples"), place.get("rollouts_per_example", 1)
            if isinstance(n, int) and isinstance(r, int) and n > 0 and r > 0:
                return n * r
    return None


def _progress(session: Session, evaluation: Evaluation, live: bool) -> Progress:
    """Samples so far of expected, time since start and, while running, an estimate to go."""
    expected = _expected(session, evaluation)
    done = evaluation.total_samples
    elapsed = _duration(evaluation.started_at, utcnow() if live else evaluation.completed_at)
    eta = None
    if live and expected and elapsed and 0 < done < expected:
        eta = elapsed / done * (expected - done)
    return Progress(
        done=done,
        expected=expected,
        fraction=min(done / expected, 1.0) if expected else None,
        elapsed_s=elapsed,
        eta_s=eta,
    )


def _metric_rows(evaluation: Evaluation) -> list[MetricRow]:
    """The run summary the client wrote, except `avg_reward`: the headline mean replaces it
    (a client's average may count errored rollouts as 0; the page shows one mean)."""
    metrics = evaluation.metrics if isinstance(evaluation.metrics, dict) else {}
    return [
        MetricRow(name=name, value=value)
        for name, value in metrics.items()
        if name not in ("avg_metrics", "avg_reward")
    ]


def rename(session: Session, principal: Principal, evaluation_id: str, name: str) -> None:
    """Rename an evaluation (its owner, a team admin or a platform admin, as `PUT`'s rule)."""
    payload = validate(UpdateEvaluation, {"name": name})
    service.update_evaluation(session, principal, evaluation_id, payload)


def delete(session: Session, principal: Principal, evaluation_id: str) -> None:
    """Delete an evaluation (its owner, a team admin or a platform admin)."""
    removal.delete_evaluation(session, principal, evaluation_id)


def cancel_hosted(session: Session, principal: Principal, evaluation_id: str) -> None:
    """Cancel a hosted evaluation the principal may change (409 once it has ended)."""
    hosted.cancel(session, principal, evaluation_id)


def samples_page(
    session: Session, principal: Principal, evaluation_id: str, query: SamplesQuery, public_url: str
) -> SamplesPage:
    """A samples page of an evaluation (no statistics: just the header and the table)."""
    evaluation = service.get_visible(session, principal, evaluation_id)
    return SamplesPage(
        evaluation=_header(evaluation, public_url),
        table=samples_table(session, evaluation, query),
    )


LONG_LINES = 40
"""A message or output longer than this many lines (or `LONG_CHARS`) is shown capped."""
LONG_CHARS = 4_000


def _folded(text: str) -> dict[str, Any]:
    lines = len(text.splitlines())
    return {"long": lines > LONG_LINES or len(text) > LONG_CHARS, "lines": lines}


def _part(part: dict[str, Any], *, as_written: bool) -> ContentPart:
    markup = part["kind"] == "text" and not as_written and part["text"]
    return ContentPart(
        kind=part["kind"],
        text=part["text"],
        html=markdown.render(part["text"]) if markup else Markup(""),
        src=part["src"],
    )


def _step(step: dict[str, Any]) -> Step:
    return Step(
        kind=step["kind"],
        title=step["title"],
        state=step["state"],
        facts=step["facts"],
        outputs=[
            StepOutput(label=o["label"], text=o["text"], open=o["open"], **_folded(o["text"]))
            for o in step["outputs"]
        ],
        turn=step["turn"],
        messages=[_message(m, []) for m in transcript.transcript({"messages": step["messages"]})],
    )


def _message(message: dict[str, Any], steps: list[Step]) -> Message:
    content = message["content"]
    # A tool's output is shown as written (whitespace kept), not as markdown.
    as_written = message["role"] == "tool"
    return Message(
        role=message["role"],
        name=message["name"],
        content=content,
        parts=[_part(part, as_written=as_written) for part in message["parts"]],
        tool_calls=[ToolCall(**call) for call in message["tool_calls"]],
        tool_call_id=message["tool_call_id"],
        tool_name=message["tool_name"],
        turn=message["turn"],
        steps=[step for step in steps if step.turn == message["turn"]] if message["turn"] else [],
        **_folded(content),
    )


def sample_detail(sample: SampleRow) -> SampleDetail:
    """A sample as the sample page and a side-by-side column show it."""
    data = _sample_data(sample)
    messages = transcript.transcript(data)
    steps = [_step(step) for step in trajectory.steps(data)]
    turns = {message["turn"] for message in messages if message["turn"]}
    return SampleDetail(
        **_stored(sample),
        rewards=transcript.reward_scores(data),
        metrics=transcript.numbers(data.get("metrics")),
        timing=transcript.numbers(data.get("timing")),
        token_usage=transcript.numbers(data.get("token_usage")),
        error=transcript.error_message(data.get("error")),
        stop_condition=data.get("stop_condition"),
        # The task's answer is what the model should reach: the page calls it the target.
        target=data.get("answer"),
        num_turns=data.get("num_turns"),
        messages=[_message(m, steps) for m in messages],
        steps=[step for step in steps if step.turn not in turns],
    )


ROLLOUTS_LISTED = 64
"""Rollouts of its example a sample page links (more: the samples page, filtered)."""


def _link(row: SampleRow) -> SampleLink:
    stored = _stored(row)
    return SampleLink(
        sample_id=row.sample_id,
        rollout_number=row.rollout_number,
        reward=stored["reward"],
        has_error=row.has_error,
    )


ORDER_LABELS = {
    "seq": "upload order",
    "-reward": "reward, high first",
    "reward": "reward, low first",
}
NAV_WINDOW = 50
"""How far from where the table showed it a sample is looked for (a live list moves)."""


@dataclass(frozen=True)
class SampleListing:
    """The samples table a sample was opened from: its query, and the sample's position in
    the whole filtered, sorted list (0-based; the table's links carry both)."""

    query: SamplesQuery
    at: int

    def params(self, at: int | None = None) -> dict[str, Any]:
        """The list's query parameters (with `at`, the position, when given)."""
        query = self.query
        params: dict[str, Any] = {"sort": query.sort}
        if query.errored is not None:
            params["errored"] = "yes" if query.errored else "no"
        if query.example is not None:
            params["example"] = query.example
        if query.limit != SamplesQuery.limit:
            params["limit"] = query.limit
        return params if at is None else {**params, "at": at}

    def label(self) -> str:
        query = self.query
        parts = [ORDER_LABELS.get(query.sort, query.sort)]
        if query.errored is not None:
            parts.append("errored only" if query.errored else "without errors")
        if query.example is not None:
            parts.append(f"example {query.example}")
        return ", ".join(parts)


def _rows(
    session: Session, evaluation: Evaluation, query: SamplesQuery, offset: int, limit: int
) -> list[SampleRow]:
    # The very query the samples table pages with, so the neighbours are the table's.
    order = SORTS.get(query.sort)
    if order is None:
        raise BadRequest(
            f"Unknown sort {query.sort!r}; use one of {', '.join(SORTS)}.", code="invalid_query"
        )
    return service.list_sample_rows(
        session,
        evaluation,
        limit=limit,
        offset=offset,
        order=order,
        errored=query.errored,
        example_id=query.example,
    )


def _neighbours(
    session: Session, evaluation: Evaluation, sample: SampleRow, listing: SampleListing
) -> tuple[int, SampleRow | None, SampleRow | None] | None:
    """The sample's position in the listing and the rows before and after it there; None
    when it is not within `NAV_WINDOW` of where the table showed it."""
    for start, limit in (
        (max(listing.at - 1, 0), 3),
        (max(listing.at - NAV_WINDOW, 0), 2 * NAV_WINDOW + 2),
    ):
        rows = _rows(session, evaluation, listing.query, start, limit)
        index = next((i for i, row in enumerate(rows) if row.id == sample.id), None)
        if index is None:
            continue
        if index == 0 and start > 0:
            before = _rows(session, evaluation, listing.query, start - 1, 1)
            previous = before[0] if before else None
        else:
            previous = rows[index - 1] if index > 0 else None
        following = rows[index + 1] if index + 1 < len(rows) else None
        if following is None and index + 1 == limit:
            after = _rows(session, evaluation, listing.query, start + limit, 1)
            following = after[0] if after else None
        return start + index, previous, following
    return None


def sample_nav(
    session: Session,
    evaluation: Evaluation,
    sample: SampleRow,
    listing: SampleListing | None = None,
) -> SampleNav:
    """The samples before and after it, in the samples table's order and filter it was
    opened from (`listing`), else in upload order; and its example's rollouts."""
    found = None
    default = SamplesQuery()
    if listing is not None and (
        listing.query.sort,
        listing.query.errored,
        listing.query.example,
    ) != (default.sort, default.errored, default.example):
        found = _neighbours(session, evaluation, sample, listing)
    if found is not None and listing is not None:
        position, previous, following = found
        order = listing.label()
        previous_query = urlencode(listing.params(position - 1))
        next_query = urlencode(listing.params(position + 1))
        page = position // listing.query.limit + 1
        list_query = urlencode({**listing.params(), "page": page})
    else:
        # `seq` numbers an evaluation's samples 1..N without holes: the neighbours are
        # seq ± 1 (a range on the (evaluation, seq) key, not an offset scan).
        around = service.list_sample_rows(session, evaluation, limit=3, offset=sample.seq - 2)
        by_seq = {row.seq: row for row in around}
        previous, following = by_seq.get(sample.seq - 1), by_seq.get(sample.seq + 1)
        order = ORDER_LABELS["seq"]
        if listing is not None and found is None and listing.query != default:
            order += " (the sample has left the list it was opened from)"
        previous_query = next_query = ""
        limit = default.limit
        list_query = urlencode({"page": (sample.seq - 1) // limit + 1})
    keys = []
    if sample.example_id is not None:
        keys = service.example_sample_keys(
            session, evaluation, sample.example_id, limit=ROLLOUTS_LISTED + 1
        )
    return SampleNav(
        previous=None if previous is None else _link(previous),
        next=None if following is None else _link(following),
        order=order,
        previous_query=previous_query,
        next_query=next_query,
        list_query=list_query,
        rollouts=[
            SampleLink(
                sample_id=sample_id,
                rollout_number=rollout,
                reward=None if errored else reward,
                has_error=errored,
            )
            for sample_id, rollout, reward, errored in keys[:ROLLOUTS_LISTED]
        ],
        more_rollouts=len(keys) > ROLLOUTS_LISTED,
    )


TRACE_INLINE_MAX = 200_000
"""Characters of a trace's document the sample page shows inline (longer ones: a link)."""


def sample_page(
    session: Session,
    principal: Principal,
    evaluation_id: str,
    sample_id: str,
    public_url: str,
    listing: SampleListing | None = None,
) -> SamplePage:
    """One sample: transcript, rewards, metrics, timing, token usage and error; previous
    and next follow `listing`, the samples table it was opened from."""
    evaluation, sample = service.get_sample(session, principal, evaluation_id, sample_id)
    raw = _sample_data(sample)
    episode_id = raw.get("episode_id")
    return SamplePage(
        evaluation=evaluation_row(evaluation, public_url),
        sample=sample_detail(sample),
        nav=sample_nav(session, evaluation, sample, listing),
        raw=raw,
        # The records the traces service stored for this sample's episode, if any.
        traces=[
            # A long trace is linked, not inlined: the page stays light.
            SampleTrace(
                summary=TraceSummary.model_validate(summary),
                document=json.loads(document) if len(document) <= TRACE_INLINE_MAX else None,
            )
            for summary, document in traces.sample_traces(
                session, evaluation.id, episode_id if isinstance(episode_id, str) else sample_id
            )
        ],
    )
