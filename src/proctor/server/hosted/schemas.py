"""Request and response shapes of the hosted-evaluation endpoints."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from proctor.sandboxes.command import HostedEvalConfig
from proctor.server.boundary import NoNul
from proctor.server.environments.schemas import NAME_PATTERN

# A hub id, or a name resolved like `/environmentshub/resolve` does.
EnvironmentRef = Annotated[str, Field(min_length=1, max_length=401, pattern=NAME_PATTERN), NoNul]
ModelName = Annotated[str, Field(min_length=1, max_length=400), NoNul]
EvaluationName = Annotated[str, Field(min_length=1, max_length=400), NoNul]
TeamId = Annotated[str, Field(max_length=200), NoNul]


class CreateHostedEvaluation(BaseModel):
    """Body of `POST /hosted-evaluations`."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, strict=True)

    environment_ids: list[EnvironmentRef] = Field(min_length=1, max_length=100)
    """Environment hub ids (or names, resolved like `/environmentshub/resolve`); one each."""
    inference_model: ModelName
    """The model the sandbox evaluates."""
    eval_config: HostedEvalConfig = Field(default_factory=HostedEvalConfig)
    """How to run it (examples, rollouts, timeout, sampling, endpoint, secrets)."""
    name: EvaluationName | None = None
    """Name of the evaluation (default: derived from environment and model)."""
    team_id: TeamId | None = None
    """Team that owns the evaluations; empty means personal."""

    @field_validator("eval_config")
    @classmethod
    def _bounded(cls, value: HostedEvalConfig) -> HostedEvalConfig:
        if value.num_examples == 0:
            raise ValueError("num_examples must be at least 1, or -1 for the whole taskset")
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
    ended: bool = False
    """Whether the launcher has closed the run (its sandboxes ended, its status set): the log
    is whole and the evaluation's status final (a proctor extension)."""


class CancelledHostedEvaluation(BaseModel):
    """Answer of `PATCH /hosted-evaluations/{id}/cancel`."""

    message: str
    """What happened."""
