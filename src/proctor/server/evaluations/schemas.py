"""Request and response shapes of the evaluation endpoints.

Request bodies are parsed by `proctor.server.request_body` (so `metadata` keeps its exact
text and non-finite numbers are refused) and then validated with these models. Responses
are rendered as JSON text with `metadata` spliced in verbatim; the response models here
document that shape in the OpenAPI spec.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from proctor.contract import SETTABLE_STATUSES, Status
from proctor.server.boundary import NoNul

# The column each is stored in holds these lengths (see db/models.py).
Name = Annotated[str, Field(min_length=1, max_length=512), NoNul]
Short = Annotated[str, Field(max_length=200), NoNul]
Long = Annotated[str, Field(max_length=512), NoNul]
Body = Annotated[str, Field(max_length=1_000_000), NoNul]
# Only these may be set with PUT; the service explains the others (COMPLETED: finalize).
SettableStatus = Annotated[
    str, Field(json_schema_extra={"enum": [str(status) for status in SETTABLE_STATUSES]})
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class EnvironmentRef(BaseModel):
    """An environment an evaluation ran, by hub id."""

    model_config = ConfigDict(extra="allow")

    id: Short
    version_id: Short | None = None


class CreateEvaluation(_Strict):
    """Body of `POST /evaluations/`."""

    name: Name
    environments: list[EnvironmentRef] = []
    tags: list[Short] = []
    model_name: Long | None = None
    dataset: Long | None = None
    framework: Short | None = None
    description: Body | None = None
    task_type: Short | None = None
    metadata: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    team_id: Short | None = None
    run_id: Short | None = None
    suite_id: Short | None = None
    is_public: bool | None = None


def _not_null(*names: str) -> Any:
    """`json_schema_extra` publishing these optional fields as present-or-absent, never null."""

    def edit(schema: dict[str, Any]) -> None:
        for name in names:
            prop = schema["properties"][name]
            kept = [s for s in prop.pop("anyOf", []) if s.get("type") != "null"]
            prop.update(kept[0] if len(kept) == 1 else {"anyOf": kept})
            prop.pop("default", None)

    return edit


class UpdateEvaluation(_Strict):
    """Body of `PUT /evaluations/{id}`; absent fields stay unchanged."""

    # The service refuses a null name or status (it could not mean "unchanged").
    model_config = ConfigDict(
        extra="ignore", allow_inf_nan=False, json_schema_extra=_not_null("name", "status")
    )

    name: Name | None = None
    description: Body | None = None
    tags: list[Short] | None = None
    model_name: Long | None = None
    dataset: Long | None = None
    framework: Short | None = None
    task_type: Short | None = None
    metadata: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    status: SettableStatus | None = None
    error_message: Body | None = None


class FinalizeEvaluation(_Strict):
    """Body of `POST /evaluations/{id}/finalize`."""

    metrics: dict[str, Any] | None = None


class SamplesBody(BaseModel):
    """Body of `POST /evaluations/{id}/samples` (each sample is stored as sent)."""

    samples: list[dict[str, Any]]


class CreatedEvaluation(BaseModel):
    """Answer of `POST /evaluations/`."""

    evaluation_id: str
    id: str
    name: str
    status: str
    viewer_url: str


class EvaluationRecord(BaseModel):
    """An evaluation as `GET /evaluations/{id}` returns it."""

    evaluation_id: str
    id: str
    name: str
    status: Status
    error_message: str | None
    viewer_url: str
    environments: list[dict[str, Any]]
    environment_ids: list[str]
    environment_names: list[str]
    model_name: str | None
    dataset: str | None
    framework: str | None
    task_type: str | None
    description: str | None
    tags: list[str]
    metadata: dict[str, Any]
    metrics: dict[str, Any]
    total_samples: int
    avg_score: float | None
    min_score: float | None
    max_score: float | None
    is_hosted: bool
    is_public: bool
    team_id: str | None
    user_id: str
    run_id: str | None
    suite_id: str | None
    created_at: str
    updated_at: str
    started_at: str | None
    completed_at: str | None
    finalized_at: str | None
    attempts: int = 1
    """How many runs worked on it (a resumed run reopens it: a proctor extension)."""


class EvaluationList(BaseModel):
    """Answer of `GET /evaluations/`."""

    evaluations: list[EvaluationRecord]
    total: int
    skip: int
    limit: int


class SamplesAppended(BaseModel):
    """Answer of `POST /evaluations/{id}/samples`."""

    evaluation_id: str
    received: int
    inserted: int
    duplicates: int
    total_samples: int


class SamplesPage(BaseModel):
    """Answer of `GET /evaluations/{id}/samples`: samples exactly as they were sent."""

    samples: list[dict[str, Any]]
    total: int
    page: int
    limit: int
    has_more: bool


class Finalized(BaseModel):
    """Answer of `POST /evaluations/{id}/finalize`."""

    evaluation_id: str
    status: str
    viewer_url: str
    message: str


class RewardStats(BaseModel):
    """The headline mean over scored samples, its clustered standard error and interval."""

    mean: float | None
    se: float | None
    ci95: list[float] | None
    ci_method: str | None
    """`student-t`, `student-t, kept in [0, 1]` or `wilson` (docs/statistics.md)."""
    df: int | None
    """Degrees of freedom of the t quantile: examples - 1."""
    no_interval: str | None
    """Why there is no interval (one example, a spread of 0, nothing scored)."""
    half_width: float | None
    naive_se: float | None
    n_samples: int
    """Scored samples (a reward and no error)."""
    n_errored: int
    """Errored samples: counted, never averaged, binned or passed."""
    n_examples: int
    """Examples with at least one scored sample."""
    n_errored_examples: int
    """Examples that errored in every rollout."""
    rollouts_per_example: int
    """Most scored rollouts any example has (a number, as in the run's config)."""
    min_rollouts_per_example: int
    """Fewest scored rollouts an example has (equal to the above unless some errored)."""


class PassAtK(BaseModel):
    """Unbiased pass@k over the examples with at least k scored rollouts."""

    k: int
    value: float
    n_examples: int


class UsageTotals(BaseModel):
    """Token usage and time summed over the samples (the numbers each sample reported)."""

    prompt_tokens: int
    completion_tokens: int
    model_s: float
    """Time spent waiting for the model."""
    duration_s: float
    """Rollout wall time (model, tools and scoring)."""


class EvaluationStats(BaseModel):
    """Answer of `GET /evaluations/{id}/stats`."""

    evaluation_id: str
    status: Status
    label: str
    covers: str
    headline: str
    reward: RewardStats
    pass_threshold: float
    """pass@k's pass mark: a scored reward at or above it passes."""
    pass_threshold_source: Literal["set", "declared", "default"]
    """The user's `pass_threshold`, the `max_reward` the metadata declares, or 1.0."""
    pass_at_k: list[PassAtK]
    usage: UsageTotals


class OneSided(BaseModel):
    """Examples of one kind in a comparison (ids capped at 1000; the count is exact)."""

    count: int
    example_ids: list[int]


class PairedComparison(BaseModel):
    """Candidate B against baseline A over the examples both hold (docs/statistics.md)."""

    baseline: str
    candidate: str
    n_common: int
    mean_diff: float | None
    se: float | None
    ci95: list[float] | None
    p_value: float | None
    wins: int
    ties: int
    losses: int
    mde80: float | None
    df: int | None
    """Degrees of freedom of the paired t: common examples - 1."""
    no_interval: str | None
    """Why there is no interval, p-value or MDE (under 2 common examples, or SE 0)."""
    mean_baseline: float | None
    """Mean of A's example means over the common examples."""
    mean_candidate: float | None
    errored_baseline: OneSided
    """Common examples that errored in every rollout of A (counted there as 0)."""
    errored_candidate: OneSided
    covers: str
    only_baseline: OneSided
    only_candidate: OneSided


class ComparedExample(BaseModel):
    """One example of a comparison: its mean scored reward in each evaluation."""

    example_id: int
    means: list[float | None]
    """None where the evaluation lacks the example or every rollout of it errored."""
    errored: list[bool]
    """Where the evaluation has the example but every rollout of it errored."""
    present: list[bool]
    """Where the evaluation has samples of the example."""
    diff: float | None
    """B - A (the first two) as the paired analysis counts it (an all-errored side as 0)."""
    spread: float | None
    """Highest minus lowest mean, when two or more scored it."""


class ComparedExamples(BaseModel):
    """A page of a comparison's examples, filtered and sorted over all of them (a proctor
    extension: `show`, `sort`, `start`, `limit` on `GET /evaluations/compare`)."""

    sort: Literal["example", "diff", "-diff", "spread"]
    show: Literal["all", "regressions", "improvements", "ties", "errored", "one-sided"]
    total: int
    """Examples `show` keeps, over every page."""
    start: int
    limit: int
    next_start: int | None
    """`start` of the next page; null on the last."""
    rows: list[ComparedExample]


class Comparison(BaseModel):
    """Answer of `GET /evaluations/compare`."""

    evaluations: list[EvaluationStats]
    paired: PairedComparison
    pass_threshold: float
    """The one pass mark every side's pass@k uses."""
    pass_threshold_source: Literal["set", "declared", "default"]
    examples: ComparedExamples | None = None
    """The examples `show`/`sort` asked for; absent when neither is given."""


class ReopenedEvaluation(BaseModel):
    """Answer of `POST /evaluations/{id}/reopen` (a proctor extension)."""

    evaluation_id: str
    status: str
    attempts: int


class SampleIdsPage(BaseModel):
    """Answer of `GET /evaluations/{id}/sample_ids` (a proctor extension)."""

    sample_ids: list[str]
    next_after: int | None
    """Pass as `after` for the next page; null on the last one."""
    total: int


class EvaluationDeleted(BaseModel):
    """The answer of `DELETE /evaluations/{id}` (a proctor extension)."""

    evaluation_id: str
    name: str
    """The name the deleted evaluation had."""
