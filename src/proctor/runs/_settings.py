"""Where the runs SDK finds the platform: arguments, then `PROCTOR_*` variables, then a file.

Precedence, highest first: keyword arguments to `init()`, the environment
(`PROCTOR_API_URL`, `PROCTOR_API_KEY`, `PROCTOR_TEAM_ID`, `PROCTOR_RUNS_MODE`), then
`~/.proctor/config.toml` (keys `api_url`, `api_key`, `team_id`, `runs_mode`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from proctor.errors import ConfigError
from proctor.toml_io import read_toml

DEFAULT_API_URL = "http://127.0.0.1:8000"
"""A `proctor server` started with its defaults."""

RunsMode = Literal["online", "disabled"]


def config_file_path() -> Path:
    """`~/.proctor/config.toml`, resolved against the current home directory."""
    return Path.home() / ".proctor" / "config.toml"


class _ConfigFileSource(PydanticBaseSettingsSource):
    """Reads the client keys of `~/.proctor/config.toml`; a missing file is empty."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns the whole mapping

    def __call__(self) -> dict[str, Any]:
        data = read_toml(config_file_path(), optional=True, fix="fix or delete the file")
        return {k: v for k, v in data.items() if k in self.settings_cls.model_fields}


class ClientSettings(BaseSettings):
    """How the runs SDK reaches the platform."""

    model_config = SettingsConfigDict(
        env_prefix="PROCTOR_", extra="ignore", use_attribute_docstrings=True
    )

    api_url: str = DEFAULT_API_URL
    """Origin of the platform (a trailing `/api/v1` is accepted and stripped)."""
    api_key: SecretStr | None = None
    """API key sent as a bearer token; without one, runs are disabled with a warning."""
    team_id: str | None = None
    """Team that owns created evaluations; unset or empty means personal."""
    runs_mode: RunsMode | None = None
    """`online` or `disabled` (the kill switch); unset means online when a key is set."""

    @field_validator("api_url")
    @classmethod
    def _normalize_url(cls, value: str) -> str:
        url = value.strip().rstrip("/")
        if url.endswith("/api/v1"):
            url = url[: -len("/api/v1")]
        if not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return url

    @field_validator("runs_mode", mode="before")
    @classmethod
    def _normalize_mode(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip().lower()
            return value or None
        return value

    @field_validator("api_key", mode="before")
    @classmethod
    def _blank_key_is_none(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _ConfigFileSource(settings_cls)

    def key(self) -> str | None:
        """The API key in clear text (never log it)."""
        return self.api_key.get_secret_value() if self.api_key else None


def load_settings(
    *,
    api_url: str | None = None,
    api_key: str | None = None,
    team_id: str | None = None,
    mode: str | None = None,
) -> ClientSettings:
    """Resolve the client settings; arguments left as None fall through to env and file.

    Raises:
        ConfigError: a setting is malformed (e.g. `PROCTOR_RUNS_MODE=sometimes`).
    """
    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "api_url": api_url,
            "api_key": api_key,
            "team_id": team_id,
            "runs_mode": mode,
        }.items()
        if v is not None
    }
    try:
        return ClientSettings(**overrides)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "settings"
        hint = {
            "runs_mode": "set PROCTOR_RUNS_MODE to online or disabled",
            "api_url": "set PROCTOR_API_URL to the platform's origin, e.g. http://127.0.0.1:8000",
        }.get(field, f"fix {field}")
        raise ConfigError(f"invalid client setting {field} ({err['msg']}); {hint}.") from None
