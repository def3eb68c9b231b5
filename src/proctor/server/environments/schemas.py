"""Request and response shapes of the environments hub."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from proctor.server.boundary import NoNul

# `owner/name` or `name`: each part fits its 200-character column, and the name is not blank.
NAME_PATTERN = r"^(?:[^\x00]{0,200}/)?[ \t\n\r\f\v]*[^\x00/ \t\n\r\f\v][^\x00/]{0,199}$"


class ResolveRequest(BaseModel):
    """Body of `POST /environmentshub/resolve`."""

    name: Annotated[str, Field(min_length=1, max_length=401, pattern=NAME_PATTERN), NoNul]
    """Environment name, optionally `owner/name`."""

    team_id: Annotated[str, Field(max_length=200), NoNul] | None = None
    """Team that owns a newly created environment; empty means personal."""


class LookupRequest(BaseModel):
    """Body of `POST /environmentshub/lookup`."""

    id: Annotated[str, Field(min_length=1, max_length=64), NoNul]
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
