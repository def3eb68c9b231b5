"""The dashboard's pages as typed models: what each page shows, complete when it is built.

Each page has one model, built in one function of `views` (or `compare`); the HTML template
reads its fields and the JSON twin (`?format=json`, what live pages patch from) is the same
model serialized, so the two never differ and nothing is added to a page after it is built.

Pydantic (frozen models), not dataclasses: the pages hold the API's own response models
(`EvaluationRecord`, `EvaluationStats`, `PairedComparison`), so the dashboard and the API
share one definition of each, and the JSON twin is one `model_dump_json()` (which also
writes a non-finite number as null instead of failing). Pages carry data, never markup:
the histograms are drawn by the template (`histogram_svg`), and the one HTML field, a
message's rendered markdown, is `SafeHtml`, which escapes any text that is not already
`Markup`.

Fields a client sent as it liked (a sample's answer, stop condition, turn count, a
message's name) are `JsonValue`: a sample is stored as sent and shown as it is.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from markupsafe import Markup, escape
from pydantic import BaseModel, ConfigDict, JsonValue, PlainSerializer, PlainValidator

from proctor.contract import Status
from proctor.server.evaluations.schemas import (
    ComparedExample,
    EvaluationRecord,
    EvaluationStats,
    PairedComparison,
)
from proctor.server.hosted.sharding import ShardProgress
from proctor.server.traces.schemas import TraceSummary
from proctor.server.web.histograms import Bucket, ExampleSummary


def _safe_html(value: Any) -> Markup:
    return value if isinstance(value, Markup) else escape(str(value))


def _html_text(value: Markup) -> str:
    return str(value)


# A function of ours, not `str`: pydantic 2.7 (our floor) cannot read a builtin's signature.
SafeHtml = Annotated[
    Markup, PlainValidator(_safe_html), PlainSerializer(_html_text, return_type=str)
]
"""HTML that is safe to insert: `Markup` as given, any other text escaped."""

Number = int | float | bool
"""A run-summary value as the client wrote it (kept as int, float or bool)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# -- parts shared by pages -------------------------------------------------------------------


class MeanCell(_Model):
    """What a page shows of the headline mean: value, ± half-width, examples x rollouts."""

    mean: float | None
    half_width: float | None
    ci95: list[float] | None
    symmetric: bool
    """The interval is `mean ± half_width` (else it is shown as [low, high])."""
    no_interval: str | None
    """Why there is no interval."""
    n_examples: int
    n_samples: int
    n_errored: int
    rollouts: str
    headline: str


class EvaluationRow(_Model):
    """The summary of one evaluation (a list row, a compare column, a sample's crumbs)."""

    id: str
    name: str
    status: Status
    environment: str | None
    model: str | None
    samples: int
    mean_reward: MeanCell | None
    """None where the page does not compute it (a sample, a side-by-side column)."""
    is_hosted: bool
    team_id: str | None
    created_at: str | None
    viewer_url: str
    tags: list[str]
    description: str | None


class EvaluationHeader(EvaluationRecord):
    """An evaluation's header: the API's record, plus what the page derives from it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    duration_s: float | None
    live: bool
    """Whether it may still change (the page refreshes while it is)."""
    reward_means: dict[str, Any]
    """The run summary's `avg_metrics`."""


class _StoredSample(_Model):
    """What the server stores of every sample beside its data (its own columns)."""

    seq: int
    sample_id: str
    example_id: int | None
    rollout_number: int | None
    reward: float | None
    has_error: bool


class SampleListRow(_StoredSample):
    """One row of a samples table."""

    error: str | None
    num_turns: JsonValue
    preview: str
    """The start of the model's last answer."""


class SamplesTable(_Model):
    """One page of an evaluation's samples, with the query that chose them."""

    samples: list[SampleListRow]
    page: int
    limit: int
    sort: str
    errored: bool | None
    example: int | None
    has_more: bool


class ToolCall(_Model):
    """A tool call of a message, its arguments pretty-printed."""

    id: str
    name: str
    arguments: str


class ContentPart(_Model):
    """One part of a message's content: text, an image, or another kind of part."""

    kind: Literal["text", "image", "other"]
    text: str
    """The text; for an image not shown, why; for another part, its JSON (long strings cut)."""
    html: SafeHtml
    """A text part rendered as markdown (empty for the rest, and for a tool's output,
    which is shown as written)."""
    src: str | None
    """An image's data: URL (None when it is not shown)."""


class Folded(_Model):
    """How a long text is shown: its height capped until the reader asks for all of it."""

    long: bool
    """Capped, with a "show all" button."""
    lines: int


class StepOutput(Folded):
    """What a step printed or answered (stdout, stderr, a judge's reply or prompt)."""

    label: str
    text: str
    open: bool
    """Shown at once (else folded under its label)."""


class Step(_Model):
    """One entry of a sample's trajectory: a sandbox run, a judge call, a branch, an event."""

    kind: Literal["sandbox", "judge", "branch", "event"]
    title: str
    state: Literal["ok", "bad"] | None
    """ok: it succeeded (a sandbox run exited 0); bad: it failed; None: neither applies."""
    facts: list[tuple[str, str]]
    """(label, value) pairs: exit code, duration, model, score, token counts."""
    outputs: list[StepOutput]
    turn: int | None
    """The model call it followed (shown after that message), or None."""
    messages: list[Message]
    """A branch's messages."""


class Message(Folded):
    """One message of a transcript."""

    role: str
    name: JsonValue
    content: str
    """The text of the message (a placeholder for each part that is not text)."""
    parts: list[ContentPart]
    tool_calls: list[ToolCall]
    tool_call_id: JsonValue
    tool_name: str | None
    """For a tool's result: the name of the tool call it answers."""
    turn: int | None
    """The model call that wrote it (1 for the first), for the model's messages."""
    steps: list[Step]
    """The trajectory's steps that ran after this message (its code, run in a sandbox)."""


class SampleDetail(_StoredSample):
    """A sample as the sample page (and a side-by-side column) shows it."""

    rewards: dict[str, float]
    """Each reward function's score."""
    metrics: dict[str, Any]
    timing: dict[str, Any]
    token_usage: dict[str, Any]
    error: str | None
    stop_condition: JsonValue
    target: JsonValue
    """The task's answer: what the model should reach."""
    num_turns: JsonValue
    messages: list[Message]
    steps: list[Step]
    """The trajectory's steps not shown after a message (grading runs, judge calls)."""


# -- the evaluations list ----------------------------------------------------------------------


class ListFilters(_Model):
    """The evaluations list's filters (the form shows them again)."""

    status: str | None = None
    environment: str | None = None
    model: str | None = None
    hosted: bool | None = None
    tag: str | None = None
    """One of the evaluation's tags."""
    search: str | None = None
    """Text in the name or the description (any case)."""
    sort: str = "-created"
    """A column of `LIST_SORTS`, `-` first for descending."""


LIST_SORTS = {
    "name": "name",
    "status": "status",
    "environment": "environment",
    "model": "model",
    "samples": "samples",
    "mean": "mean reward (over scored samples)",
    "hosted": "hosted",
    "created": "created",
}
"""The columns the evaluations list sorts by, each over every matching evaluation."""


class EvaluationListPage(_Model):
    """`/evaluations`: the evaluations the key sees, filtered and paged."""

    evaluations: list[EvaluationRow]
    total: int
    skip: int
    limit: int
    filters: ListFilters
    live: bool
    """Whether any listed evaluation may still change."""
    refresh_s: int | None
    """How often the page refreshes (None: it does not)."""
    covers: str
    statuses: list[str]
    """The status filter's choices."""


# -- an evaluation -------------------------------------------------------------------------------


class Progress(_Model):
    """Samples so far of expected, time since start and, while running, an estimate to go."""

    done: int
    expected: int | None
    fraction: float | None
    elapsed_s: float | None
    eta_s: float | None


class MetricRow(_Model):
    """One value of the run summary the client wrote."""

    name: str
    value: JsonValue


class Manage(_Model):
    """The evaluation page's rename and delete controls, shown only to keys that may use them."""

    renamable: bool
    deletable: bool


class EvaluationPage(_Model):
    """`/evaluations/{id}`: header, mean, histograms, pass@k, hosted logs and samples."""

    evaluation: EvaluationHeader
    stats: EvaluationStats
    """The API's `/stats` answer."""
    mean: MeanCell
    covers: str
    progress: Progress
    metric_rows: list[MetricRow]
    errored: int
    errored_examples: int
    """Examples that errored in every rollout."""
    histogram: list[Bucket]
    examples: ExampleSummary | None
    """Per-example figures; None unless some example has several rollouts."""
    logs: str | None
    """The hosted log from `logs_from` on (whole when `logs_reset`); None unless hosted."""
    logs_reset: bool
    logs_from: int
    logs_length: int | None
    shards: list[ShardProgress]
    """Each shard of a sharded hosted evaluation, with the first line of its last failure
    (empty unless sharded)."""
    table: SamplesTable
    cancellable: bool
    manage: Manage
    """What this key may do to the evaluation from the page (rename, delete)."""
    refresh_s: int | None


class SamplesPage(_Model):
    """`/evaluations/{id}/samples`: the header and a samples table."""

    evaluation: EvaluationHeader
    table: SamplesTable


class SampleTrace(_Model):
    """A trace the traces service stored for a sample's episode."""

    summary: TraceSummary
    """As `GET /traces/{id}` answers it."""
    document: dict[str, Any] | None
    """The trace record as uploaded; None when too long to show inline (the page links it)."""


class SampleLink(_Model):
    """A link to another sample of the evaluation, with what tells it apart."""

    sample_id: str
    rollout_number: int | None
    reward: float | None
    """None for an errored sample (never a reward)."""
    has_error: bool


class SampleNav(_Model):
    """The samples one click away from a sample."""

    previous: SampleLink | None
    """The sample before it in `order` (None for the first)."""
    next: SampleLink | None
    order: str
    """The list previous and next follow: the samples table's sort and filter the user
    came from (carried in the URL), else upload order."""
    previous_query: str
    """What the previous link adds to its URL to keep following that list ("" in upload
    order)."""
    next_query: str
    list_query: str
    """The samples page of that list holding this sample (its query string)."""
    rollouts: list[SampleLink]
    """Its example's rollouts, itself included, in rollout order (empty without an example)."""
    more_rollouts: bool
    """The example has more rollouts than are listed (the samples page lists them all)."""


class SamplePage(_Model):
    """`/evaluations/{id}/samples/{sample_id}`: one sample, the sample as stored, its traces."""

    evaluation: EvaluationRow
    sample: SampleDetail
    nav: SampleNav
    raw: dict[str, Any]
    traces: list[SampleTrace]


# -- compare ---------------------------------------------------------------------------------------


class CompareMetric(_Model):
    """One row of the compare page's metric table: a value per evaluation."""

    name: str
    values: list[Number | None]
    differs: bool
    """Whether the values present are not all the same."""


COMPARE_SORTS = {
    "example": "example id",
    "diff": "largest regressions first (B - A, lowest first)",
    "-diff": "largest improvements first (B - A, highest first)",
    "spread": "most disagreement first",
}
COMPARE_FILTERS = {
    "all": "all examples",
    "regressions": "regressions (B below A)",
    "improvements": "improvements (B above A)",
    "ties": "ties",
    "errored": "errored in every rollout on a side",
    "one-sided": "held by one side only",
}


class ComparePage(_Model):
    """`/compare`: the paired difference of the first two, metrics, per-example means."""

    environment: str
    evaluations: list[EvaluationRow]
    paired: PairedComparison
    covers: str
    rule: str
    """The comparability rule these evaluations passed."""
    pass_threshold: float
    pass_threshold_source: str
    mean_difference: float | None
    """B's headline mean minus A's (over each one's own scored samples), for contrast."""
    metrics: list[CompareMetric]
    examples: list[ComparedExample]
    sort: str
    sorts: dict[str, str]
    show: str
    """Which examples are listed (`COMPARE_FILTERS`), filtered over all of them."""
    shows: dict[str, str]
    start: int
    limit: int
    total: int
    """Examples the evaluations hold that `show` keeps (the rows all pages show)."""
    next_start: int | None
    """`start` of the next page; None on the last."""
    ids: str
    """The compared ids, comma-separated, baseline first (for the page's links)."""
    swap_query: str
    """The query of this comparison with baseline and candidate swapped."""
    first_query: str
    next_query: str | None
    prev_query: str | None


class CompareColumn(_Model):
    """One evaluation's rollouts of the example."""

    evaluation: EvaluationRow
    samples: list[SampleDetail]


class ExamplePage(_Model):
    """`/compare/example`: one example's transcripts in each evaluation, side by side."""

    example_id: int
    columns: list[CompareColumn]
    ids: str
