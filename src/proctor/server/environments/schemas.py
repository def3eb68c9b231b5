"""Request and response shapes of the environments hub (the public `prime` CLI's protocol)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from proctor.server.boundary import NoNul
from proctor.server.db.base import as_utc

# `owner/name` or `name`: each part fits its 200-character column, and the name is not blank.
NAME_PATTERN = r"^(?:[^\x00]{0,200}/)?[ \t\n\r\f\v]*[^\x00/ \t\n\r\f\v][^\x00/]{0,199}$"

# What `/resolve` takes (`service._split`, then `service._NAME`): an optional owner, the name
# with blanks around it, and an `@version` that resolve ignores.
RESOLVE_NAME_PATTERN = (
    r"^(?:[^\x00@]{0,200}/)?\s*[A-Za-z0-9][A-Za-z0-9._-]{0,199}\s*(?:@[^\x00]*)?$"
)
# A plain file name (`artifacts.check_filename`: 251 characters at most) with its suffix.
_FILE = "[A-Za-z0-9._+-]"
WHEEL_FILENAME_PATTERN = rf"^[A-Za-z0-9]{_FILE}{{0,246}}\.whl$"
SOURCE_FILENAME_PATTERN = (
    rf"^(?:[A-Za-z0-9](?:{_FILE}{{0,243}}\.tar\.gz|{_FILE}{{0,246}}\.(?:tgz|zip)))?$"
)
Slug = Annotated[str, Field(max_length=200), NoNul]
Short = Annotated[str, Field(max_length=64), NoNul]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")]
"""A SHA-256 in hex, as `artifacts.check_sha256` takes it (either case)."""

_PUBLIC_OR_PRIVATE = "[Pp][Uu][Bb][Ll][Ii][Cc]|[Pp][Rr][Ii][Vv][Aa][Tt][Ee]"
VISIBILITY_PATTERN = f"^(?:{_PUBLIC_OR_PRIVATE})$"
"""`PUBLIC` or `PRIVATE`, in any case (ASCII letters only: what `.upper()` maps to either)."""
SortBy = Literal["name", "created_at", "updated_at", "stars"]
SortOrder = Literal["asc", "desc"]
Timestamp = Annotated[datetime, AfterValidator(as_utc)]
"""A UTC timestamp, always sent with its offset (RFC 3339, as `format: date-time` says)."""


class ResolveRequest(BaseModel):
    """Body of `POST /environmentshub/resolve`."""

    model_config = ConfigDict(extra="ignore")

    name: Annotated[str, Field(min_length=1, max_length=401, pattern=RESOLVE_NAME_PATTERN)]
    """Environment name, optionally `owner/name`."""
    team_id: Slug | None = None
    """Team that owns a newly created environment; empty means personal."""
    team_slug: Slug | None = None
    """The same, by slug (a team's slug is its id)."""
    owner_slug: Slug | None = None
    """Owner (user name or team) of the environment."""
    visibility: (
        Annotated[str, Field(pattern=rf"^\s*(?:{_PUBLIC_OR_PRIVATE})?\s*$", max_length=32)] | None
    ) = None
    """`PUBLIC` or `PRIVATE` (the default) for a new environment, or to change an own one."""
    framework: Short | None = None
    """What ran the environment (a proctor extension): only `proctor` (proctor's own runs
    SDK) resolves a bare name to an environment installed with the server; any other caller
    (prime-runs, prime-evals, a verifiers run) gets its own entry of that name instead."""


class LookupRequest(BaseModel):
    """Body of `POST /environmentshub/lookup`."""

    id: Annotated[str, Field(min_length=1, max_length=64), NoNul]
    """Environment id."""


class PackageMetadata(BaseModel):
    """The `metadata` of a push: what the package's pyproject.toml says."""

    model_config = ConfigDict(extra="allow")

    description: Annotated[str, Field(max_length=10_000), NoNul] | None = None
    tags: list[Annotated[str, NoNul]] = Field(default_factory=list, max_length=100)
    requires_dist: list[Annotated[str, NoNul]] = Field(default_factory=list, max_length=1000)


class WheelRequest(BaseModel):
    """Body of `POST /environmentshub/{id}/wheels`: announce a wheel for a content hash."""

    model_config = ConfigDict(extra="ignore")

    content_hash: Sha256
    filename: Annotated[str, Field(pattern=WHEEL_FILENAME_PATTERN)]
    sha256: Sha256
    size: int = Field(ge=1, le=2**53)  # exact as a JSON number (a double)
    semantic_version: Short | None = None
    metadata: PackageMetadata = Field(default_factory=PackageMetadata)
    runtime_hint: Annotated[str, Field(max_length=32), NoNul] | None = None


class VersionRequest(BaseModel):
    """Body of `POST /environmentshub/{id}/versions`: announce the version (and its source)."""

    model_config = ConfigDict(extra="ignore")

    content_hash: Sha256
    filename: Annotated[str, Field(pattern=SOURCE_FILENAME_PATTERN)] | None = None
    """The source archive's name; without it (and `sha256`) no source is uploaded."""
    sha256: Sha256 | None = None
    semantic_version: Short | None = None
    metadata: PackageMetadata = Field(default_factory=PackageMetadata)
    runtime_hint: Annotated[str, Field(max_length=32), NoNul] | None = None


class OwnerOut(BaseModel):
    """Who owns an environment."""

    name: str
    type: str
    """`user`, `team` or `platform` (installed with the server)."""


class VersionOut(BaseModel):
    """One published version."""

    id: str | None
    semantic_version: str | None
    content_hash: str | None
    created_at: Timestamp | None = None


class EnvironmentOut(BaseModel):
    """One environment, as resolve, lookup and `@version` answer it."""

    id: str
    name: str
    owner: OwnerOut
    team_id: str | None
    visibility: str
    kind: str
    description: str | None
    tags: list[str]
    created: bool = False
    """True when this call created it (resolve only)."""
    latest_version: VersionOut | None
    semantic_version: str | None = None
    """Of the version asked for (`@latest` or `@<version>`)."""
    content_hash: str | None = None
    version_id: str | None = None
    entry_points: list[str] = Field(default_factory=list)
    """The `proctor.environments` names the version's package provides."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    wheel_url: str | None = None
    """`@version` only: where to download the wheel (signed for the asking key, a day)."""
    package_url: str | None = None
    """`@version` only: where to download the source archive (gzip tar), signed likewise."""


class EnvironmentResponse(BaseModel):
    """Every single-environment answer wraps it in `data`."""

    data: EnvironmentOut


class ListedEnvironment(BaseModel):
    """One row of `GET /environmentshub/` (`latest_version` is the version text)."""

    id: str
    name: str
    owner: OwnerOut
    description: str | None
    latest_version: str | None
    visibility: str
    kind: str
    tags: list[str]
    stars: int = 0
    created_at: Timestamp
    updated_at: Timestamp | None


class EnvironmentList(BaseModel):
    """Answer of `GET /environmentshub/`."""

    data: list[ListedEnvironment]
    total_count: int
    offset: int
    limit: int


class StatusOut(BaseModel):
    """Answer body of `GET /environmentshub/{owner}/{name}/status`."""

    id: str
    name: str
    owner: OwnerOut
    description: str | None
    visibility: str
    latest_version: VersionOut | None


class StatusResponse(BaseModel):
    data: StatusOut


class VersionRow(BaseModel):
    """One row of `GET /environmentshub/{owner}/{name}/versions`, newest first."""

    id: str
    version: str | None
    semantic_version: str | None
    content_hash: str
    sha256: str
    """The content hash again (the public CLI shows this column)."""
    wheel_sha256: str | None
    wheel_filename: str | None
    size: int
    """How many artifacts (wheel, source) the version holds."""
    created_at: Timestamp


class VersionList(BaseModel):
    versions: list[VersionRow]


class VersionListResponse(BaseModel):
    data: VersionList


class UploadSlot(BaseModel):
    """Where to PUT an artifact; `upload_url` is null when nothing needs uploading."""

    wheel_id: str | None = None
    version_id: str | None = None
    upload_url: str | None


class UploadSlotResponse(BaseModel):
    data: UploadSlot


class FinalizeOut(BaseModel):
    success: bool
    message: str
    version_id: str
    semantic_version: str | None
    content_hash: str


class FinalizeResponse(BaseModel):
    data: FinalizeOut


class Done(BaseModel):
    """A plain acknowledgement."""

    message: str
