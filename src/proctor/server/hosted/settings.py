"""Settings of the hosted launcher, read from `PROCTOR_HOSTED_*` environment variables.

They are the `hosted` section of the server's `Settings` (`settings.hosted`); `proctor
launcher` reads them alone, with its flags on top. The sandbox backend's settings are one
member of `SandboxConfig` (a union told apart by `type`), validated with the rest at
start-up: `PROCTOR_HOSTED_SANDBOX` names the backend, settings it shares with the launcher
(`isolation`, `uids`, the limits, `stop_grace_seconds`) come from those variables, and its
own options from `PROCTOR_HOSTED_<TYPE>_<OPTION>` (or the keyword `<type>_<option>`, as a
flag passes it: `ray_address`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from proctor.errors import ConfigError
from proctor.sandboxes import local
from proctor.sandboxes.backends import SandboxConfig, backend_config, backend_types, create_backend
from proctor.sandboxes.command import DEFAULT_COMMAND
from proctor.sandboxes.confine import DEFAULT_UIDS, Limits, uid_range
from proctor.sandboxes.local import Isolation
from proctor.sandboxes.sandbox import SandboxBackend
from proctor.server.settings import invalid_setting

PREFIX = "PROCTOR_HOSTED_"


class LauncherSettings(BaseSettings):
    """How the launcher runs sandboxes; shared by the in-server launcher and `proctor launcher`."""

    model_config = SettingsConfigDict(
        env_prefix="PROCTOR_HOSTED_", extra="ignore", use_attribute_docstrings=True
    )

    command: str = DEFAULT_COMMAND
    """Template of the sandbox's command (placeholders: {proctor} {config} {options} {env}
    {model} {num_examples} {rollouts}; `{config}` is the run's `eval.toml` in the working
    directory; `$EVALUATION_ID` comes from the sandbox's environment)."""
    sandbox: SandboxConfig = Field(default_factory=local.Config)
    """Where sandboxes run: `local` processes or `ray` jobs (`PROCTOR_HOSTED_SANDBOX` names
    the backend; its own options are `PROCTOR_HOSTED_<TYPE>_*`, e.g. `_RAY_ADDRESS`)."""
    isolation: Isolation = "bwrap"
    """How sandboxes are confined: `bwrap` (their own uid, root, network and cgroup; see
    docs/security.md) or `none` (the server's own user: refused once the server has more
    than one user)."""
    uids: str = DEFAULT_UIDS
    """The uid range confined sandboxes take their own uid from (`LOW-HIGH`; never 0)."""
    memory_mb: int = Field(default=2048, ge=64)
    """Memory cap of one confined sandbox, `/tmp` and `/dev/shm` included (MiB)."""
    pids: int = Field(default=256, ge=16)
    """Most processes and threads one confined sandbox runs at once."""
    cpus: float = Field(default=2.0, gt=0)
    """CPU cap of one confined sandbox, in cores."""
    tmpfs_mb: int = Field(default=256, ge=1)
    """Size of a confined sandbox's `/tmp` and of its `/dev/shm` (MiB)."""
    allow_urls: str = ""
    """Comma-separated URLs every confined sandbox may reach besides the platform and the
    model and judge endpoints its run names."""
    max_sandboxes: int = Field(default=8, ge=1)
    """Most sandboxes one launcher runs at once; the rest wait as PENDING."""
    in_server: bool = True
    """Run the launcher inside `proctor server` (turn off when `proctor launcher` runs)."""
    poll_seconds: float = Field(default=0.25, gt=0)
    """How often the launcher looks for new work and polls its sandboxes."""
    idle_poll_seconds: float = Field(default=2.0, gt=0)
    """How often a launcher that watches no sandbox looks for new work (never more often than
    `poll_seconds`). Work created through its own server wakes it at once; this bounds how
    long work queued through another server waits."""
    stale_seconds: float = Field(default=15.0, gt=0)
    """A claimed evaluation whose launcher has not heartbeated for this long is taken over."""
    stop_grace_seconds: float = Field(default=5.0, ge=0)
    """Time between SIGTERM and SIGKILL when a sandbox is stopped."""
    max_attempts: int = Field(default=3, ge=1)
    """Times an evaluation is claimed before the launcher gives up on starting it."""
    shard_attempts: int = Field(default=3, ge=1)
    """Times one shard of a sharded evaluation is started before the evaluation is FAILED
    (a retried shard stores only the samples it lacks)."""
    forward_env: str = ""
    """Comma-separated names of the launcher's own variables a sandbox may receive through
    `api_key_var` (e.g. `OPENAI_API_KEY`); others never leave the launcher."""
    api_url: str | None = None
    """The platform URL handed to sandboxes (default: the server's own address)."""
    log_tail_bytes: int = Field(default=1 << 20, ge=1024)
    """The logs endpoint returns at most this much of a sandbox's output (its tail)."""
    package_index: str | None = None
    """Index URL pip installs a published environment's dependencies from (`--index-url`);
    unset means pip's own configuration."""
    venv_cache: bool = True
    """Keep a published environment's venv per content hash for later runs (false: build a
    fresh one in each sandbox)."""
    harness_index: Path | None = None
    """A local package index (`proctor envs harness-index DIR`) that sandboxes install
    verifiers' harness programs from (`UV_DEFAULT_INDEX`, and pip's index for `uv` itself)
    instead of PyPI; confined sandboxes see it read-only."""
    shared_paths: str = ""
    """Comma-separated host folders every confined sandbox sees read-only at the same path
    (e.g. local datasets an environment's `env_args` point at)."""

    @classmethod
    def load(cls, **overrides: Any) -> LauncherSettings:
        """The settings from `PROCTOR_HOSTED_*`, with the flags given (not None) taking precedence.

        Raises:
            ConfigError: A flag or variable holds an invalid value.
        """
        values = {k: v for k, v in overrides.items() if v is not None}
        try:
            return cls(**values)
        except ValidationError as e:
            raise _invalid(e) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _Variables(settings_cls), dotenv_settings, file_secret_settings)

    @model_validator(mode="before")
    @classmethod
    def _sandbox_config(cls, data: Any) -> Any:
        """`sandbox` as its backend's config, from the backend's name and the options it takes."""
        if not isinstance(data, dict) or not isinstance(data.get("sandbox") or "local", str):
            return data  # a config given whole
        type_ = data.get("sandbox") or "local"
        if type_ not in backend_types():
            return {**data, "sandbox": {"type": type_}}  # the union's error names the known ones
        config: dict[str, Any] = {"type": type_}
        for option in backend_config(type_).model_fields:
            if option == "limits":
                value: Any = {k: data[k] for k in Limits.model_fields if data.get(k) is not None}
            else:
                value = data.get(option if option in cls.model_fields else f"{type_}_{option}")
            if value is not None and option != "type":
                config[option] = value
        return {**data, "sandbox": config}

    @field_validator("uids")
    @classmethod
    def _uid_range(cls, value: str) -> str:
        uid_range(value)
        return value

    def backend(self, type_: str | None = None) -> SandboxBackend:
        """The sandbox backend `sandbox` configures; or, for `type_` naming another backend
        (reading the logs of a sandbox another launcher ran), one configured from these
        settings and that backend's own variables.

        Raises:
            ConfigError: `type_` is unknown, or its options are missing or wrong.
        """
        if type_ is None or type_ == self.sandbox.type:
            return create_backend(self.sandbox)
        shared = self.model_dump(exclude={"sandbox"}, exclude_defaults=True)
        return create_backend(LauncherSettings.load(**shared, sandbox=type_).sandbox)

    def sandbox_variables(self) -> dict[str, Any]:
        """The backend's name and own options by the variables that set them, e.g.
        `{"PROCTOR_HOSTED_SANDBOX": "ray", "PROCTOR_HOSTED_RAY_ADDRESS": "http://..."}`."""
        type_ = self.sandbox.type
        own = {backend_variable(type_, o): getattr(self.sandbox, o) for o in _own_options(type_)}
        return {f"{PREFIX}SANDBOX": type_, **own}

    def sandbox_environment(self) -> dict[str, str]:
        """Variables every sandbox gets from these settings (the harness index's URL)."""
        if self.harness_index is None:
            return {}
        url = (self.harness_index.resolve() / "simple").as_uri()
        return {"UV_DEFAULT_INDEX": url, "PIP_INDEX_URL": url}

    def readonly_paths(self) -> tuple[Path, ...]:
        """The host folders confined sandboxes see read-only (`harness_index`, `shared_paths`)."""
        paths = [Path(p.strip()) for p in self.shared_paths.split(",") if p.strip()]
        if self.harness_index is not None:
            paths.append(self.harness_index)
        return tuple(p.resolve() for p in paths)

    def forwarded_names(self) -> set[str]:
        """The variable names in `forward_env`."""
        return {n.strip() for n in self.forward_env.split(",") if n.strip()}


class _Variables(EnvSettingsSource):
    """`PROCTOR_HOSTED_*`, where `PROCTOR_HOSTED_SANDBOX` is a backend's name (not JSON) and
    each backend's own options are `PROCTOR_HOSTED_<TYPE>_<OPTION>` (read as `<type>_<option>`)."""

    def prepare_field_value(
        self, field_name: str, field: FieldInfo, value: Any, value_is_complex: bool
    ) -> Any:
        if field_name == "sandbox":
            return value
        return super().prepare_field_value(field_name, field, value, value_is_complex)

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        for type_ in backend_types():
            for option in _own_options(type_):
                name = backend_variable(type_, option)
                value = self.env_vars.get(name if self.case_sensitive else name.lower())
                if value is not None:
                    data[f"{type_}_{option}"] = value
        return data


def backend_variables(type_: str) -> list[str]:
    """The variables of a backend's own options, e.g. `["PROCTOR_HOSTED_RAY_ADDRESS", ...]`."""
    return [backend_variable(type_, option) for option in _own_options(type_)]


def backend_variable(type_: str, option: str) -> str:
    """`PROCTOR_HOSTED_<TYPE>_<OPTION>`: the variable of one of a backend's own options."""
    return f"{PREFIX}{type_}_{option}".upper()


def _own_options(type_: str) -> list[str]:
    """The options of a backend that are not launcher settings (`ray`: `address`...)."""
    shared = {"type", "limits", *LauncherSettings.model_fields}
    return [o for o in backend_config(type_).model_fields if o not in shared]


def _invalid(error: ValidationError) -> ConfigError:
    """One line naming the invalid setting and its variable (a backend's option included)."""
    problem = error.errors(include_url=False)[0]
    loc = tuple(str(part) for part in problem["loc"])
    if len(loc) < 3 or loc[0] != "sandbox":
        return invalid_setting(error, env_prefix=PREFIX)
    type_, option = loc[1], loc[-1]  # ("sandbox", "local", "limits", "memory_mb")
    shared = option in LauncherSettings.model_fields
    name = option if shared else f"{type_}_{loc[2]}"
    whose = "" if shared else f" of the {type_} sandbox"
    return ConfigError(
        f"Invalid setting {name}{whose} ({problem['msg']}); fix its flag or {PREFIX}{name.upper()}."
    )
