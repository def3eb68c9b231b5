"""The server's one configuration object, read from `PROCTOR_*` environment variables."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from proctor.contract import MAX_REQUEST_BYTES
from proctor.errors import ConfigError
from proctor.server.errors import describe_invalid, dotted

if TYPE_CHECKING:
    from proctor.server.hosted.settings import LauncherSettings


DATABASE_SCHEMES = ("sqlite", "postgres", "postgresql")
"""The databases proctor runs on (a URL's scheme, before any `+driver`)."""


class Settings(BaseSettings):
    """Settings of `proctor server` and of the CLI commands that act on its database."""

    model_config = SettingsConfigDict(
        env_prefix="PROCTOR_", extra="ignore", use_attribute_docstrings=True, validate_by_name=True
    )

    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("PROCTOR_DATABASE_URL", "DATABASE_URL")
    )
    """SQLAlchemy URL of the database; unset means a SQLite file `proctor.db` in `data_dir`."""

    data_dir: Path = Path("~/.proctor")
    """Directory for the SQLite file and server-side files (logs of hosted runs)."""

    host: str = "127.0.0.1"
    """Address the HTTP server binds to."""

    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port the HTTP server listens on."""

    bootstrap_key: str | None = None
    """If set and no API key exists yet, an admin key with exactly this value is created."""

    public_url: str | None = None
    """Origin the dashboard is reached at, for `viewer_url`; defaults to http://host:port."""

    max_request_bytes: int = MAX_REQUEST_BYTES
    """Largest request body accepted; larger ones answer 413."""

    traces_max_upload_bytes: int = Field(default=128 * 1024 * 1024, ge=1)
    """Largest uncompressed JSONL one `POST /traces` may carry; larger ones answer 400."""

    traces_max_line_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    """Largest record (one JSONL line) `POST /traces` accepts; larger ones answer 400."""

    hub_owner: str = "proctor"
    """Owner on the environments hub of the environments installed with the server."""

    hub_max_artifact_bytes: int = Field(default=100 * 1024 * 1024, ge=1)
    """Largest package (wheel or source archive) a push may upload; larger ones answer 413."""

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, url: str | None) -> str | None:
        if url and url.split(":", 1)[0].split("+", 1)[0] not in DATABASE_SCHEMES:
            raise ValueError(
                "proctor runs on SQLite (sqlite:///PATH) or PostgreSQL "
                "(postgresql://USER:PASSWORD@HOST:PORT/DB), not "
                f"{url.split(':', 1)[0]}"
            )
        return url

    def hub_dir(self) -> Path:
        """Where the hub keeps uploaded packages, each under its SHA-256."""
        return self.resolved_data_dir() / "hub"

    @cached_property
    def hosted(self) -> LauncherSettings:
        """The hosted launcher's section (`PROCTOR_HOSTED_*`), read on first use.

        Raises:
            ConfigError: a `PROCTOR_HOSTED_*` variable holds an invalid value.
        """
        from proctor.server.hosted.settings import LauncherSettings

        return LauncherSettings.load()

    def resolved_data_dir(self) -> Path:
        """The data directory with `~` expanded."""
        return self.data_dir.expanduser()

    def resolved_database_url(self) -> str:
        """The database URL, normalised so PostgreSQL URLs use the psycopg 3 driver."""
        url = self.database_url
        if not url:
            return f"sqlite:///{self.resolved_data_dir() / 'proctor.db'}"
        for prefix in ("postgres://", "postgresql://"):
            if url.startswith(prefix):
                return "postgresql+psycopg://" + url[len(prefix) :]
        return url

    def local_url(self) -> str:
        """The server's origin as this machine reaches it (a wildcard bind becomes loopback)."""
        host = "127.0.0.1" if self.host in {"0.0.0.0", "::", ""} else self.host
        return f"http://{host}:{self.port}"

    def resolved_public_url(self) -> str:
        """Origin used to build links to the dashboard, without a trailing slash."""
        if self.public_url:
            return self.public_url.rstrip("/")
        return self.local_url()


def invalid_setting(error: ValidationError, *, env_prefix: str) -> ConfigError:
    """One line naming the first invalid setting and the variable that sets it.

    The offending value is left out on purpose: it may be a key or a database password.
    """
    problems = error.errors(include_url=False)
    field = dotted(tuple(problems[0]["loc"])) or "settings"
    variable = field.upper() if field.upper().startswith(env_prefix) else env_prefix + field.upper()
    sentence = f"Invalid setting {field} ({{problem}}); fix its flag or {variable}."
    return ConfigError(describe_invalid(problems, where=lambda _: field, sentence=sentence))
