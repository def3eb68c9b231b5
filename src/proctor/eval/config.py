"""`EvalConfig`: everything one `proctor eval` needs, filled from a TOML file, `PROCTOR_EVAL_*`
variables and flags."""

from __future__ import annotations

import json
import re
import types
import typing
import uuid
from pathlib import Path, PurePath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from proctor.models.config import ClientConfig, JudgeConfig, SamplingConfig

ENV_PREFIX = "PROCTOR_EVAL_"
"""The prefix of eval's own environment variables (`proctor.eval.variables`); no other part
of proctor reads a variable so named, and a hosted run's sandbox never holds one."""

SECRET_HEADER = re.compile(r"auth|key|token|secret|cookie", re.IGNORECASE)
"""Header names whose values are secrets: never saved, logged or put on a command line."""

INVOCATION_FIELDS = frozenset({"resume", "clean", "dry_run", "rich", "verbose"})
"""How this invocation behaves, not what the run is: left out of the saved config.toml."""

RESUME_FIELDS = (
    "env",
    "env_args",
    "num_examples",
    "rollouts_per_example",
    "model",
    "sampling",
    "judge",
    "shard",
)
"""What must match the saved config for `--resume` to continue a run."""


class RunConfig(BaseModel):
    """The run's identity and where it lives."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str | None = None
    """Name of the run (default: `<env>--<model>--<short id>`)."""
    dir: str | None = None
    """Directory of the run under the output directory (default: the run name)."""
    attach: str | None = None
    """Log to this existing platform evaluation instead of opening a new one."""
    finish_timeout: float = Field(default=120.0, gt=0, le=86_400)
    """Seconds the end of a pushed run waits for the platform to take every sample and the
    finalize (outages are ridden out); then exit 75 and `proctor runs sync` finishes it."""
    id: str | None = Field(default=None, json_schema_extra={"cli": False})
    """Set by the engine: the platform run's id (read-only)."""

    @field_validator("dir", "name")
    @classmethod
    def _inside_the_output_dir(cls, value: str | None) -> str | None:
        """The run directory is `<output_dir>/<dir or name>`: it must stay there."""
        if value is not None and (
            not value.strip() or PurePath(value).is_absolute() or ".." in PurePath(value).parts
        ):
            raise ValueError(
                f"must name a directory inside -o (a relative path without '..'), not {value!r}"
            )
        return value


class EvalConfig(BaseModel):
    """One evaluation: which environment, which model, how many rollouts, where results go."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    env: str
    """Name of the environment to evaluate (see `proctor envs list`)."""
    env_args: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the environment's loader (TOML table or JSON object)."""
    num_examples: int | None = Field(default=None, ge=1)
    """Number of tasks to evaluate; required for infinite tasksets (default: the whole taskset)."""
    rollouts_per_example: int = Field(default=1, ge=1)
    """Rollouts per task."""
    shard: str | None = None
    """Run only slice I of N (`I/N`, I from 0 to N-1) of the (example, rollout) pairs, into the
    evaluation `--run.attach` names; shards never finalize it (`proctor evals finalize` does)."""
    max_concurrent: int = Field(default=128, ge=1)
    """Episodes kept in flight at once."""
    workers: int | None = Field(default=None, ge=1)
    """Worker processes running the rollouts, each with its own event loop; 1 keeps them all
    in this process (default: one per core beyond the first, at most one per 32 in flight)."""
    model: str = "demo"
    """Model name sent to the endpoint."""
    output_dir: str = "outputs"
    """Directory holding run directories."""
    push: bool = True
    """Log episodes to the platform (`--no-push` keeps the run local)."""
    serve: bool = False
    """Run environments in a separate server process (not available yet: in-process only)."""
    rich: bool = True
    """Show the live progress view when stderr is a terminal (`--no-rich`: plain log lines)."""
    verbose: bool = False
    """Log debug detail (each retry, each episode)."""
    resume: bool = False
    """Continue the run in the run directory: re-run only missing or errored episodes."""
    clean: bool = False
    """Delete what the run directory holds before starting."""
    dry_run: bool = False
    """Print the resolved configuration as TOML and exit."""
    client: ClientConfig = Field(default_factory=ClientConfig)
    """The model endpoint."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    """Sampling parameters."""
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    """The judge model, for environments with judge rewards."""
    run: RunConfig = Field(default_factory=RunConfig)
    """Run identity and directory."""

    @field_validator("env_args", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        """A JSON object's text is that object: how a TOML file writes one holding a null."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError(f"must be a JSON object or a TOML table (got {value!r})") from None
        return value

    @field_validator("shard")
    @classmethod
    def _shard_form(cls, value: str | None) -> str | None:
        if value is not None:
            shard_slice(value)
        return value

    def resolved(self) -> EvalConfig:
        """A copy with the run name and directory filled in."""
        name = self.run.name or default_run_name(self.env, self.model)
        run = self.run.model_copy(update={"name": name, "dir": self.run.dir or name})
        return self.model_copy(update={"run": run})

    @property
    def run_dir(self) -> Path:
        """`<output_dir>/<run.dir>` (call on a `resolved()` config)."""
        return Path(self.output_dir) / (self.run.dir or self.run.name or "")

    def saved_form(self) -> dict[str, Any]:
        """The dict written to the run's config.toml (no invocation switches, no unset values).

        Header values that look like credentials are masked: run directories get shared.
        """
        data = self.model_dump(mode="json", exclude=set(INVOCATION_FIELDS), exclude_none=True)
        headers = data["client"]["headers"]
        for name in headers:
            if SECRET_HEADER.search(name):
                headers[name] = "<redacted>"
        return data

    def resume_key(self) -> dict[str, Any]:
        """The fields a resumed run must share with the original."""
        return self.model_dump(mode="json", include=set(RESUME_FIELDS), exclude_none=True)


def field_kind(annotation: Any) -> Any:
    """The base type of a field's annotation: of `X | None`, `dict[...]`, `list[...]` (of a
    union of several types: `str`, as a flag or variable gives it)."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return field_kind(args[0]) if len(args) == 1 else str
    return origin or annotation


def default_run_name(env: str, model: str, *, kind: str = "") -> str:
    """`<env>--<model>--<kind-><short id>`, safe as a directory name (`kind`: e.g. "hosted")."""
    safe_model = re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_")[:200] or "model"
    safe_env = env.replace("/", "--")  # `proctor/alphabet-sort`, `owner/name`: one directory
    return f"{safe_env}--{safe_model}--{kind + '-' if kind else ''}{uuid.uuid4().hex[:8]}"


def shard_slice(shard: str) -> tuple[int, int]:
    """`"I/N"` -> (I, N); a ValueError naming the form for anything else."""
    index, sep, count = shard.partition("/")
    if not (sep and index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise ValueError(
            f"{shard!r} is no shard: give I/N with 0 <= I < N, e.g. 0/4 for the first of four"
        )
    return int(index), int(count)


def in_shard(position: int, shard: str | None) -> bool:
    """Whether the pair at `position` in the run's plan belongs to `shard` (round robin)."""
    if shard is None:
        return True
    index, count = shard_slice(shard)
    return position % count == index
