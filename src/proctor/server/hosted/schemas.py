"""Request and response shapes of the hosted-evaluation endpoints."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from proctor.hosted.command import HostedEvalConfig


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("text may not contain NUL characters")
    return value


# The expected sample count is stored in a 32-bit integer column (PostgreSQL's INTEGER).
_MAX_SAMPLES = 2**31 - 1

EnvironmentRef = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)]
ModelName = Annotated[str, Field(min_length=1, max_length=400), AfterValidator(_no_nul)]
EvaluationName = Annotated[str, Field(min_length=1, max_length=400), AfterValidator(_no_nul)]


class CreateHostedEvaluation(BaseModel):
    """Body of `POST /hosted-evaluations`."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    environment_ids: list[EnvironmentRef] = Field(min_length=1, max_length=100)
    """Environment hub ids (or names, resolved like `/environmentshub/resolve`); one each."""
    inference_model: ModelName
    """The model the sandbox evaluates."""
    eval_config: HostedEvalConfig = Field(default_factory=HostedEvalConfig)
    """How to run it (examples, rollouts, timeout, sampling, endpoint, secrets)."""
    name: EvaluationName | None = None
    """Name of the evaluation (default: derived from environment and model)."""
    team_id: Annotated[str, Field(max_length=200), AfterValidator(_no_nul)] | None = None
    """Team that owns the evaluations; empty means personal."""

    @field_validator("eval_config")
    @classmethod
    def _bounded(cls, value: HostedEvalConfig) -> HostedEvalConfig:
        if value.num_examples == 0:
            raise ValueError("num_examples must be at least 1, or -1 for the whole taskset")
        if (value.expected_samples or 0) > _MAX_SAMPLES:
            raise ValueError(
                f"num_examples x rollouts_per_example must be at most {_MAX_SAMPLES}; ask for fewer"
            )
        if "\\u0000" in value.model_dump_json():
            raise ValueError("eval_config may not contain NUL characters")
        return value


class CreatedHostedEvaluations(BaseModel):
    """Answer of `POST /hosted-evaluations`."""

    evaluation_id: str
    """The first (often only) evaluation created."""
    evaluation_ids: list[str]
    """One evaluation per environment, in the order sent."""


class HostedLogs(BaseModel):
    """Answer of `GET /hosted-evaluations/{id}/logs`."""

    logs: str
    """The sandbox's output so far (its tail, behind a marker line, when very long)."""


class CancelledHostedEvaluation(BaseModel):
    """Answer of `PATCH /hosted-evaluations/{id}/cancel`."""

    message: str
    """What happened."""
