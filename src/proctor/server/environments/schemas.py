"""Request and response shapes of the environments hub."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ResolveRequest(BaseModel):
    """Body of `POST /environmentshub/resolve`."""

    name: str = Field(min_length=1, max_length=401)
    """Environment name, optionally `owner/name`."""

    team_id: str | None = None
    """Team that owns a newly created environment; empty means personal."""


class LookupRequest(BaseModel):
    """Body of `POST /environmentshub/lookup`."""

    id: str = Field(min_length=1, max_length=200)
    """Environment id."""


class VersionOut(BaseModel):
    """The latest version of an environment, as far as the hub knows."""

    id: str | None
    semantic_version: str | None
    content_hash: str | None


class EnvironmentOut(BaseModel):
    """One environment."""

    id: str
    name: str
    owner: str
    team_id: str | None
    latest_version: VersionOut


class EnvironmentResponse(BaseModel):
    """Every hub answer wraps the environment in `data`."""

    data: EnvironmentOut
