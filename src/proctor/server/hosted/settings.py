"""Settings of the hosted launcher, read from `PROCTOR_HOSTED_*` environment variables.

They are the `hosted` section of the server's `Settings` (`settings.hosted`); `proctor
launcher` reads them alone, with its flags on top.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from proctor.sandboxes.backends import backend_types, create_backend
from proctor.sandboxes.command import DEFAULT_COMMAND
from proctor.sandboxes.confine import DEFAULT_UIDS, uid_range
from proctor.sandboxes.local import Isolation
from proctor.sandboxes.sandbox import BackendName, SandboxBackend
from proctor.server.settings import invalid_setting


class LauncherSettings(BaseSettings):
    """How the launcher runs sandboxes; shared by the in-server launcher and `proctor launcher`."""

    model_config = SettingsConfigDict(
        env_prefix="PROCTOR_HOSTED_", extra="ignore", use_attribute_docstrings=True
    )

    command: str = DEFAULT_COMMAND
    """Template of the sandbox's command (placeholders: {proctor} {env} {model} {options}
    {num_examples} {rollouts}; `$EVALUATION_ID` comes from the sandbox's environment)."""
    sandbox: BackendName = "local"
    """Where sandboxes run: `local` processes or `ray` jobs."""
    ray_address: str | None = None
    """The Ray job API address (e.g. http://127.0.0.1:8265), for `sandbox = ray`."""
    ray_entrypoint_cpus: float | None = Field(default=None, ge=0)
    """CPUs each Ray job's entrypoint reserves, so Ray places it on any node with them free
    (unset: Ray runs every entrypoint on the head node)."""
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
            raise invalid_setting(e, env_prefix="PROCTOR_HOSTED_") from None

    @field_validator("uids")
    @classmethod
    def _uid_range(cls, value: str) -> str:
        uid_range(value)
        return value

    @field_validator("sandbox")
    @classmethod
    def _registered(cls, value: str) -> str:
        if value not in backend_types():
            raise ValueError(f"Input should be one of {', '.join(backend_types())}")
        return value

    def backend(self) -> SandboxBackend:
        """The sandbox backend `sandbox` names, with its options from these settings.

        Raises:
            ConfigError: its options are missing or wrong (e.g. `ray` without an address).
        """
        return create_backend(self.sandbox, self.model_dump())

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
