"""The command a sandbox runs: a configurable template filled with shell-quoted values, and
the `eval.toml` it reads its configuration from.

A hosted evaluation's `eval_config` (the wire's names, as public clients send them) is an
overlay on `EvalConfig`: `OVERLAY` is the one table between the two. The launcher turns an
`eval_config` into `EvalConfig` overrides (`HostedEvalConfig.overrides`), writes them as a
TOML file beside the sandbox (`eval_toml`, `SandboxSpec.files`), and the template runs
`proctor eval @ eval.toml --run.attach $EVALUATION_ID` (a shard adds `--shard I/N` through
`{options}`); `proctor hosted run` and `quickstart` go the other way (`wire_config`) from
eval's own flags.

The default template is the very CLI a researcher runs with a config file; the template is
configuration (`PROCTOR_HOSTED_COMMAND`). Secrets never enter the command or the file: they
reach the sandbox as environment variables only.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import sys
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from proctor.errors import ConfigError
from proctor.eval.args import config_toml
from proctor.eval.config import ENV_PREFIX, SECRET_HEADER, EvalConfig
from proctor.models.config import DEFAULT_BASE_URL, SamplingConfig

logger = logging.getLogger(__name__)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RESERVED_ENV = frozenset(
    {"EVALUATION_ID", "PROCTOR_API_URL", "PROCTOR_API_KEY", "PROCTOR_RUNS_MODE"}
)
"""Variables the launcher sets for every sandbox; a secret may not replace them."""
_EVAL_VARIABLE = "^" + "".join(f"[{c}{c.lower()}]" if c.isalpha() else c for c in ENV_PREFIX)
"""`PROCTOR_EVAL_*` in any case (JSON Schema has no flags): eval's settings, never a secret's
name (a sandbox runs from its eval.toml only)."""

# Header names whose values are credentials; the metadata shows them masked.

_PLACEHOLDER = re.compile(r"\{(proctor|config|env|model|options|num_examples|rollouts)\}")

_EVAL = re.compile(r"\{proctor\}\s+eval\b")

CONFIG_FILE = "eval.toml"
"""The file in the sandbox's working directory that holds its run's `EvalConfig`."""

DEFAULT_COMMAND = "{proctor} eval @ {config} {options} --run.attach $EVALUATION_ID"
"""The default template. Placeholders: {proctor}, {config} (the `eval.toml` in the working
directory), {options} (`--shard I/N` for a shard, else nothing), {env}, {model},
{num_examples}, {rollouts}; `$EVALUATION_ID` is expanded by the sandbox's shell from its
environment."""

OVERLAY: dict[str, str] = {
    "num_examples": "num_examples",  # -1 (the whole taskset) is eval's unset
    "rollouts_per_example": "rollouts_per_example",
    "max_concurrent": "max_concurrent",
    "sampling_args": "sampling",
    "env_args": "env_args",
    "api_base_url": "client.base_url",
    "api_key_var": "client.api_key_var",
    "max_retries": "client.max_retries",
    "verbose": "verbose",
}
"""`eval_config` key -> the `EvalConfig` field it sets. `headers` also overlays the config
(as `client.headers_var`, its values in the environment); the other keys are the launcher's
(`timeout_minutes`, `custom_secrets`) or public clients' that are accepted or refused."""

HOSTED_FIELDS = tuple(OVERLAY.values())
"""The `EvalConfig` fields a hosted run sets: the flags `proctor hosted run` takes from eval."""

# Sampling keys `proctor eval` has flags for; a hosted config with others is refused (422).
_SAMPLING_FLAGS = frozenset(SamplingConfig.model_fields)


def _not_a_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number; send an integer")
    return value


# An integer as JSON Schema has it: `5` or `5.0`, never `true`. (Bounds go before it in
# `Annotated`, or pydantic publishes them as `ge`/`le` instead of `minimum`/`maximum`.)
NotBool = BeforeValidator(_not_a_boolean)


MAX_SHARDS = 1_000
"""Most sandboxes one hosted evaluation is split into."""

_CLIENT_TYPES = {"openai", "openai_chat_completions", "chat_completions"}


class HostedEvalConfig(BaseModel):
    """The `eval_config` of a hosted evaluation, as public clients send it."""

    # An unknown key is refused, and the schema says so (`additionalProperties: false`).
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    # Bounded so that num_examples x rollouts_per_example, the expected sample count, always
    # fits the server's 32-bit column (1e6 x 2e3 < 2**31).
    num_examples: Annotated[int, NotBool] = Field(
        default=5, ge=-1, le=1_000_000, json_schema_extra={"not": {"const": 0}}
    )
    """Tasks to evaluate; -1 means the whole taskset."""
    rollouts_per_example: Annotated[int, NotBool] = Field(default=3, ge=1, le=2_000)
    """Rollouts per task."""
    timeout_minutes: float | None = Field(default=None, gt=0)
    """Wall-clock limit of the sandbox; past it the launcher kills it (TIMEOUT)."""
    shards: Annotated[int, Field(ge=1, le=MAX_SHARDS), NotBool] | None = None
    """Sandboxes that write this one evaluation at once, each a slice (`--shard I/N`)."""
    sampling_args: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra={"propertyNames": {"enum": list[Any](sorted(_SAMPLING_FLAGS))}},
    )
    """Sampling parameters (`temperature`, `max_tokens`, ...)."""
    max_concurrent: Annotated[int, Field(ge=1, le=1_000_000), NotBool] | None = None
    """Rollouts kept in flight at once."""
    max_retries: Annotated[int, Field(ge=0, le=1_000), NotBool] | None = None
    """Retries of a failed model request."""
    env_args: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the environment's loader."""
    api_base_url: str | None = Field(
        default=None,
        json_schema_extra={"pattern": "^https?://"},  # as `_has_scheme` checks
    )
    """The model endpoint (OpenAI-compatible, ending in /v1)."""
    api_key_var: str | None = None
    """Name of the environment variable that holds the model's API key in the sandbox."""
    headers: list[str] | dict[str, str] | None = None
    """Extra HTTP headers for the model endpoint (`"Name: Value"` strings or a mapping)."""
    custom_secrets: dict[str, str] = Field(
        default_factory=dict,
        json_schema_extra={
            "propertyNames": {
                "pattern": f"^{_ENV_NAME.pattern}$",
                "not": {
                    "anyOf": [
                        {"enum": list[Any](sorted(RESERVED_ENV))},
                        {"pattern": _EVAL_VARIABLE},
                    ]
                },
            }
        },
    )
    """Secret environment variables for the sandbox; never stored in metadata or logs."""
    verbose: StrictBool | None = None
    """Log debug detail in the sandbox (`proctor eval --verbose`)."""
    api_client_type: str | None = Field(
        default=None, json_schema_extra={"enum": [*sorted(_CLIENT_TYPES), "", None]}
    )
    """The model API's kind; proctor speaks OpenAI chat completions only."""
    state_columns: list[str] | None = Field(default=None, json_schema_extra={"maxItems": 0})
    """Extra state columns to save per sample; proctor has none, so only empty is accepted."""
    independent_scoring: StrictBool | None = Field(
        default=None, json_schema_extra={"not": {"const": True}}
    )
    """Score each rollout apart; proctor scores as it goes, so only false is accepted."""
    extra_env_kwargs: dict[str, Any] | None = Field(
        default=None, json_schema_extra={"maxProperties": 0}
    )
    """Extra keyword arguments for the environment object; only empty is accepted (use
    `env_args` for the loader's arguments)."""
    allow_sandbox_access: StrictBool | None = None
    """Public clients' permission flag; a proctor sandbox has no sandboxes to grant."""
    allow_instances_access: StrictBool | None = None
    """Public clients' permission flag; a proctor sandbox has no instances to grant."""
    allow_tunnel_access: StrictBool | None = None
    """Public clients' permission flag; a proctor sandbox has no tunnels to grant."""

    @model_validator(mode="after")
    def _applied_or_refused(self) -> HostedEvalConfig:
        # Every setting is either applied to the sandbox's command or refused here (unknown
        # keys by `extra="forbid"`): none is stored and silently ignored.
        unsupported = sorted(k for k in self.sampling_args if k not in _SAMPLING_FLAGS)
        if unsupported:
            raise ValueError(
                f"sampling_args.{unsupported[0]} is not supported by proctor's hosted runs "
                f"(supported: {', '.join(sorted(_SAMPLING_FLAGS))}); remove it"
            )
        if self.api_client_type and self.api_client_type not in _CLIENT_TYPES:
            raise ValueError(
                f"api_client_type {self.api_client_type!r} is not supported; proctor speaks "
                "OpenAI chat completions (openai_chat_completions)"
            )
        if self.state_columns:
            raise ValueError("state_columns is not supported by proctor's hosted runs; remove it")
        if self.independent_scoring:
            raise ValueError(
                "independent_scoring is not supported by proctor's hosted runs; remove it"
            )
        if self.extra_env_kwargs:
            raise ValueError(
                "extra_env_kwargs is not supported by proctor's hosted runs; pass the loader's "
                "arguments as env_args"
            )
        return self

    @field_validator("api_base_url")
    @classmethod
    def _has_scheme(cls, value: str | None) -> str | None:
        # Caught here, where the user's flag is known: the sandbox would only say "cannot reach".
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(
                f"api_base_url must start with http:// or https:// (got {value!r}); "
                f"pass --api-base-url http://{value}"
            )
        return value

    @field_validator("custom_secrets")
    @classmethod
    def _secret_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"secret name {name!r} is not a valid environment variable name")
            if name in RESERVED_ENV:
                raise ValueError(f"secret name {name!r} is set by the launcher; rename it")
            if re.match(_EVAL_VARIABLE, name):
                raise ValueError(
                    f"secret name {name!r} would be an eval setting ({ENV_PREFIX}*); rename it, "
                    "or give the setting in eval_config"
                )
        return value

    def overrides(self) -> dict[str, Any]:
        """The `EvalConfig` fields this config sets, nested as in a TOML file.

        `num_examples` and `rollouts_per_example` always (the wire's defaults, 5 and 3, are
        not eval's); the others when given. Headers become `client.headers_var`: their
        values travel in the sandbox's environment (`secret_environment`).
        """
        out: dict[str, Any] = {}
        for key, path in OVERLAY.items():
            value = getattr(self, key)
            if key == "sampling_args":
                value = {k: v for k, v in value.items() if v is not None}
            if (
                value is None
                or value == {}
                or value is False
                or (key == "num_examples" and value < 0)
            ):
                continue
            _set_path(out, path, value)
        if self.headers:
            _set_path(out, "client.headers_var", HEADERS_VAR)
        return out

    def shards_problem(self) -> str | None:
        """Why `shards` cannot split this run (more shards than samples), or None. Checked by
        the service, not the model: no schema relates two fields, so it is a 400."""
        expected = self.expected_samples
        if self.shards is not None and expected is not None and self.shards > expected:
            return (
                f"shards ({self.shards}) is more than the {expected} samples the run makes; "
                "use at most one shard per sample"
            )
        return None

    @property
    def expected_samples(self) -> int | None:
        """How many samples a complete run stores, when the number of tasks is bounded."""
        if self.num_examples < 0:
            return None
        return self.num_examples * self.rollouts_per_example

    def runnable_form(self) -> dict[str, Any]:
        """The config without `custom_secrets`, as the launcher needs it to build the command."""
        return self.model_dump(mode="json", exclude={"custom_secrets"}, exclude_none=True)

    def public_form(self) -> dict[str, Any]:
        """The config without secrets, for the evaluation's metadata.

        `custom_secrets` is left out and credential-like header values are masked: anyone
        who may read the evaluation sees its metadata.
        """
        data = self.runnable_form()
        headers = data.get("headers")
        if isinstance(headers, dict):
            data["headers"] = {
                name: "<redacted>" if SECRET_HEADER.search(name) else value
                for name, value in headers.items()
            }
        elif isinstance(headers, list):
            data["headers"] = [_masked_header_line(line) for line in headers]
        return data


def _masked_header_line(line: str) -> str:
    name, sep, _ = line.partition(":")
    return f"{name}: <redacted>" if sep and SECRET_HEADER.search(name) else line


HEADERS_VAR = "PROCTOR_CLIENT_HEADERS"
"""The sandbox variable holding `eval_config.headers` as JSON (read via --client.headers-var)."""


def proctor_executable() -> str:
    """How a sandbox on this machine runs the proctor CLI (this interpreter, so no PATH games)."""
    return f"{shlex.quote(sys.executable)} -m proctor.cli.main"


def sandbox_config(config: HostedEvalConfig, *, environment: str, model: str) -> EvalConfig:
    """The `EvalConfig` the sandbox's `proctor eval` runs: eval's defaults under the overlay,
    without the live view (a sandbox's output is a log).

    Raises:
        pydantic.ValidationError: a value the engine refuses (`wire_field` names it).
    """
    data: dict[str, Any] = {"env": environment, "model": model, **config.overrides()}
    data["rich"] = False
    client = data.setdefault("client", {})
    # The endpoint's default reads $PROCTOR_MODEL_BASE_URL, which is the sandbox's to decide,
    # not the launcher's: the built-in default stands in for it, left out of the file.
    unset = "base_url" not in client
    if unset:
        client["base_url"] = DEFAULT_BASE_URL
    overlay = EvalConfig.model_validate(data)
    if unset:
        overlay.client.model_fields_set.discard("base_url")
    return overlay


def eval_toml(config: HostedEvalConfig, *, environment: str, model: str) -> str:
    """The sandbox's `eval.toml`: the settings `sandbox_config` sets, and nothing else
    (`config_toml`); header values are never in it, only `client.headers_var`.

    Raises:
        pydantic.ValidationError: a value the engine refuses (`wire_field` names it).
    """
    return config_toml(sandbox_config(config, environment=environment, model=model))


def wire_field(loc: tuple[int | str, ...]) -> str:
    """The `eval_config` name of an `EvalConfig` location (`sampling_args.top_p`)."""
    dotted = ".".join(map(str, loc))
    for key, path in sorted(OVERLAY.items(), key=lambda kv: -len(kv[1])):
        if dotted == path or dotted.startswith(f"{path}."):
            return key + dotted.removeprefix(path)
    return "headers" if dotted.startswith("client.headers") else dotted


def wire_config(overrides: dict[str, Any]) -> dict[str, Any]:
    """The `eval_config` asking a sandbox for these `EvalConfig` overrides (the inverse of
    `HostedEvalConfig.overrides`), as `proctor hosted run` sends it.

    `num_examples` and `rollouts_per_example` are always sent, with eval's defaults (the
    whole taskset, 1) where not given: the wire's own defaults differ.

    Raises:
        ConfigError: an override no `eval_config` key carries.
    """
    rollouts = EvalConfig.model_fields["rollouts_per_example"].default
    out: dict[str, Any] = {"num_examples": -1, "rollouts_per_example": rollouts}
    paths = {path: key for key, path in OVERLAY.items()}
    for path, value in _leaves(overrides):
        root = next((p for p in paths if path == p or path.startswith(f"{p}.")), None)
        if root is None:
            raise ConfigError(f"a hosted run cannot set {path}; leave it out")
        key = paths[root]
        if path == root:
            out[key] = -1 if key == "num_examples" and value is None else value
        else:
            out.setdefault(key, {})[path.removeprefix(f"{root}.")] = value
    return out


def _leaves(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path in ("client", "sampling"):
            found += _leaves(value, f"{path}.")
        else:
            found.append((path, value))
    return found


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[last] = value


def secret_environment(config: HostedEvalConfig) -> dict[str, str]:
    """Variables the sandbox needs besides its command: the model endpoint's headers."""
    headers = _headers(config.headers)
    return {HEADERS_VAR: json.dumps(headers, sort_keys=True)} if headers else {}


def _headers(raw: list[str] | dict[str, str] | None) -> dict[str, str]:
    if not raw:
        return {}
    if isinstance(raw, dict):
        return dict(raw)
    out: dict[str, str] = {}
    for line in raw:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"Header {line!r} is not `Name: Value`; fix eval_config.headers.")
        out[name.strip()] = value.strip()
    return out


def build_command(
    template: str,
    *,
    environment: str,
    model: str,
    config: HostedEvalConfig,
    proctor: str | None = None,
    shard: str | None = None,
) -> str:
    """Fill the template; every substituted value is shell-quoted.

    Other text, `${VAR}` included, is left for the sandbox's shell. `proctor` replaces how
    the CLI is run (already shell words), e.g. through a published package's own venv.
    `shard` (`I/N`) is the `{options}`: `--shard I/N`. The settings themselves are in the
    sandbox's `{config}` file (`eval_toml`), not on the command line.

    Raises:
        ConfigError: a shard, and the template has no `{options}` to carry it; a template
            that runs `{proctor} eval` without its `{config}` file (as templates before it
            did, which would run every setting at eval's default).
    """
    if _EVAL.search(template) and "{config}" not in template:
        raise ConfigError(
            "PROCTOR_HOSTED_COMMAND runs `{proctor} eval` without `@ {config}`, the file that "
            "holds the run's settings; put `@ {config}` after `eval` (the default is "
            f"`{DEFAULT_COMMAND}`)"
        )
    if shard is not None and "{options}" not in template:
        raise ConfigError(
            "a sharded hosted run passes --shard I/N through the command template's "
            "{options}; add {options} to PROCTOR_HOSTED_COMMAND"
        )
    values = {
        "proctor": proctor or proctor_executable(),
        "env": shlex.quote(environment),
        "model": shlex.quote(model),
        "config": CONFIG_FILE,
        "options": "" if shard is None else f"--shard {shlex.quote(shard)}",
        "num_examples": shlex.quote(str(config.num_examples)),
        "rollouts": shlex.quote(str(config.rollouts_per_example)),
    }
    # Only the known placeholders are replaced, so shell syntax such as ${VAR} passes through.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
