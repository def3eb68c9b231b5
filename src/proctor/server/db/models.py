"""The tables of the platform. Alembic's initial revision creates exactly these.

Evaluations keep running counters (`total_samples`, `reward_sum`, `reward_count`,
`min_score`, `max_score`) updated in the same transaction as each sample batch, so reading an
evaluation never scans its samples. Samples carry a dense 1-based `seq` per evaluation, so a
page is a range on `(evaluation_id, seq)` rather than an OFFSET scan.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from proctor.server.db.base import Base, new_id, utcnow

# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid), not BIGINT.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class User(Base):
    """A person or service that owns keys and evaluations."""

    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Team(Base):
    """A group of users sharing evaluations; `id` is what clients send as `team_id`."""

    __tablename__ = "teams"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TeamMember(Base):
    """Membership of one user in one team."""

    __tablename__ = "team_members"

    team_id: Mapped[str] = mapped_column(
        ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(String(32), default="member")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiKey(Base):
    """An API key; only the SHA-256 of the secret is stored."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    scope_evaluation_id: Mapped[str | None] = mapped_column(
        ForeignKey("evaluations.id", ondelete="CASCADE"), index=True
    )
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]


class WebSession(Base):
    """A dashboard sign-in; the cookie carries its signed id, this row its life.

    Only the SHA-256 of the id is stored. Signing out sets `revoked_at`, so the cookie stops
    working at once, on every worker, even if a copy of it is replayed.
    """

    __tablename__ = "web_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class Environment(Base):
    """An environment in the hub, unique per `(owner, name)`."""

    __tablename__ = "environments"
    __table_args__ = (UniqueConstraint("owner", "name", name="uq_environments_owner_name"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    owner: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(200), index=True)
    team_id: Mapped[str | None] = mapped_column(ForeignKey("teams.id", ondelete="SET NULL"))
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    latest_version_id: Mapped[str | None] = mapped_column(String(64))
    latest_semantic_version: Mapped[str | None] = mapped_column(String(64))
    latest_content_hash: Mapped[str | None] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16), default="named", server_default="named")
    """`installed` (with the server), `pushed` (has published packages) or `named` (a name only)."""
    visibility: Mapped[str] = mapped_column(String(16), default="PRIVATE", server_default="PRIVATE")
    """`PUBLIC` (every key sees it) or `PRIVATE` (its user, or its team's members)."""
    description: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[list[Any] | None] = mapped_column(JSON, default=list)
    updated_at: Mapped[datetime | None]


class EnvironmentVersion(Base):
    """One published package of a hub environment, unique per content hash.

    A push stages a `PENDING` row (wheel and source uploads go to the data dir), and its
    finalize makes it `READY`; only READY versions are listed, resolved or run.
    """

    __tablename__ = "environment_versions"
    __table_args__ = (
        UniqueConstraint(
            "environment_id", "content_hash", name="uq_environment_versions_environment_hash"
        ),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    environment_id: Mapped[str] = mapped_column(
        ForeignKey("environments.id", ondelete="CASCADE"), index=True
    )
    status: Mapped[str] = mapped_column(String(16), default="PENDING")
    semantic_version: Mapped[str | None] = mapped_column(String(64))
    content_hash: Mapped[str] = mapped_column(String(64))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """The push's metadata (description, tags, requires_dist, entry points, ...)."""
    wheel_filename: Mapped[str | None] = mapped_column(String(300))
    wheel_sha256: Mapped[str | None] = mapped_column(String(64))
    wheel_size: Mapped[int | None] = mapped_column(BigInteger)
    wheel_path: Mapped[str | None] = mapped_column(Text)
    source_filename: Mapped[str | None] = mapped_column(String(300))
    source_sha256: Mapped[str | None] = mapped_column(String(64))
    source_path: Mapped[str | None] = mapped_column(Text)
    upload_token_hash: Mapped[str | None] = mapped_column(String(64))
    """SHA-256 of the secret in this push's upload URLs; cleared once READY."""
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finalized_at: Mapped[datetime | None]


class Evaluation(Base):
    """One evaluation run: its record fields, status and sample counters."""

    __tablename__ = "evaluations"
    __table_args__ = (
        Index("ix_evaluations_user_created", "user_id", "created_at"),
        Index("ix_evaluations_team_created", "team_id", "created_at"),
        # A create replayed with the same Idempotency-Key finds the evaluation it made.
        UniqueConstraint("user_id", "create_key", name="uq_evaluations_user_create_key"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(512))
    status: Mapped[str] = mapped_column(String(16), index=True)
    error_message: Mapped[str | None] = mapped_column(Text)
    model_name: Mapped[str | None] = mapped_column(String(512))
    dataset: Mapped[str | None] = mapped_column(String(512))
    framework: Mapped[str | None] = mapped_column(String(200))
    task_type: Mapped[str | None] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    # The `metadata` object exactly as the client sent it (JSON text), returned verbatim.
    metadata_raw: Mapped[str] = mapped_column(Text, default="{}")
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    environments: Mapped[list[Any]] = mapped_column(JSON, default=list)
    environment_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)
    environment_names: Mapped[list[Any]] = mapped_column(JSON, default=list)
    run_id: Mapped[str | None] = mapped_column(String(200))
    suite_id: Mapped[str | None] = mapped_column(String(200))
    is_hosted: Mapped[bool] = mapped_column(Boolean, default=False)
    is_public: Mapped[bool] = mapped_column(Boolean, default=False)
    team_id: Mapped[str | None] = mapped_column(ForeignKey("teams.id", ondelete="SET NULL"))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    completed_at: Mapped[datetime | None]
    finalized_at: Mapped[datetime | None]
    total_samples: Mapped[int] = mapped_column(Integer, default=0)
    reward_sum: Mapped[float] = mapped_column(Float, default=0.0)
    reward_count: Mapped[int] = mapped_column(Integer, default=0)
    min_score: Mapped[float | None] = mapped_column(Float)
    max_score: Mapped[float | None] = mapped_column(Float)
    avg_score: Mapped[float | None] = mapped_column(Float)
    # How many times a run worked on it: 1 at creation, +1 per `reopen` (a resumed run).
    attempts: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    create_key: Mapped[str | None] = mapped_column(String(200))


class Sample(Base):
    """One sample (one episode); `data` is the whole sample JSON as sent."""

    __tablename__ = "samples"
    __table_args__ = (
        UniqueConstraint("evaluation_id", "sample_id", name="uq_samples_evaluation_sample"),
        UniqueConstraint("evaluation_id", "seq", name="uq_samples_evaluation_seq"),
        # The dashboard's statistics (pass@k, errored count, reward histogram and sort).
        Index(
            "ix_samples_evaluation_example", "evaluation_id", "example_id", "reward", "has_error"
        ),
        Index("ix_samples_evaluation_reward", "evaluation_id", "reward", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    evaluation_id: Mapped[str] = mapped_column(ForeignKey("evaluations.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    sample_id: Mapped[str] = mapped_column(String(200))
    example_id: Mapped[int | None] = mapped_column(BigInteger)
    rollout_number: Mapped[int | None] = mapped_column(Integer)
    reward: Mapped[float | None] = mapped_column(Float)
    has_error: Mapped[bool] = mapped_column(Boolean, default=False)
    data: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class HostedEvaluation(Base):
    """Launcher state of a hosted evaluation. `secrets` is never returned nor logged."""

    __tablename__ = "hosted_evaluations"

    evaluation_id: Mapped[str] = mapped_column(
        ForeignKey("evaluations.id", ondelete="CASCADE"), primary_key=True
    )
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Deleted (set to NULL) when the sandbox ends; no endpoint ever returns it.
    secrets: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    backend: Mapped[str] = mapped_column(String(32), default="local")
    sandbox_handle: Mapped[str | None] = mapped_column(String(200))
    pid: Mapped[int | None] = mapped_column(Integer)
    launcher_id: Mapped[str | None] = mapped_column(String(200), index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    log_path: Mapped[str | None] = mapped_column(Text)
    timeout_minutes: Mapped[float | None] = mapped_column(Float)
    expected_samples: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    claimed_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)


class TraceUpload(Base):
    """One committed `POST /traces` request, unique per user and content digest.

    A replay of the same bytes finds this row and answers its receipt again.
    """

    __tablename__ = "trace_uploads"
    __table_args__ = (UniqueConstraint("user_id", "digest", name="uq_trace_uploads_user_digest"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(64))
    """SHA-256 (64 lowercase hex) of the uncompressed JSONL: the receipt's `upload_id`."""
    line_format: Mapped[str] = mapped_column(String(16))
    """`trace` or `episode` (the `X-Prime-Line-Format` header)."""
    context: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """The `metadata` part's `context` (upload provenance, e.g. `source`, `model`)."""
    lines: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TraceRecord(Base):
    """One record of an upload: an episode line, a bare trace line or an episode's member
    trace, stored against the evaluation its `run.id` names.

    `data` is the line exactly as sent; a member trace's JSON lives inside its episode's
    `data` (null here), so an episode is stored once.
    """

    __tablename__ = "trace_records"
    __table_args__ = (
        UniqueConstraint(
            "evaluation_id", "kind", "record_id", name="uq_trace_records_evaluation_kind_record"
        ),
        Index("ix_trace_records_record", "record_id"),
        Index("ix_trace_records_evaluation_episode", "evaluation_id", "episode_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    evaluation_id: Mapped[str] = mapped_column(ForeignKey("evaluations.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    """`episode` or `trace`."""
    record_id: Mapped[str] = mapped_column(String(200))
    episode_id: Mapped[str | None] = mapped_column(String(200))
    upload_digest: Mapped[str] = mapped_column(String(64))
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """The columns a listing shows (reward, error, agent, model, tokens, ...), read at ingest."""
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
