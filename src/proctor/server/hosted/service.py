"""Rules of hosted evaluations: queue them for the launcher, serve their logs, cancel them.

Creating one stores the evaluation (status `PENDING`, `is_hosted`, launcher metadata
without secrets) and a `hosted_evaluations` row the launcher claims. Secrets live only in
that row's `secrets` column until the sandbox ends; no answer ever includes them.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from proctor.contract import TERMINAL_STATUSES, Event
from proctor.errors import ConfigError
from proctor.eval.config import default_run_name
from proctor.sandboxes.sandbox import SandboxBackend, SandboxHandle
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import utcnow
from proctor.server.db.models import Evaluation, HostedEvaluation
from proctor.server.environments import service as environment_service
from proctor.server.errors import (
    BadRequest,
    Conflict,
    InvalidInput,
    NotVisible,
    describe_invalid,
    dotted,
)
from proctor.server.evaluations import service as evaluations
from proctor.server.evaluations.schemas import CreateEvaluation, EnvironmentRef
from proctor.server.hosted import repository, sharding
from proctor.server.hosted.schemas import CreateHostedEvaluation
from proctor.server.hosted.settings import LauncherSettings
from proctor.server.hosted.sharding import shard_count
from proctor.server.settings import Settings

logger = logging.getLogger(__name__)

LAUNCHER_NAME = "proctor"


# Backends that read logs, by type and settings (a Ray backend holds a client worth keeping).
_log_backends: dict[tuple[str, str], SandboxBackend] = {}


def create_hosted(
    session: Session,
    principal: Principal,
    body: CreateHostedEvaluation,
    settings: LauncherSettings,
    server_settings: Settings | None = None,
) -> list[str]:
    """Create one PENDING hosted evaluation per environment; returns their ids in order.

    Each reference (hub id, `owner/name[@version]` or a bare name) must be visible to the
    key; a pushed environment's exact package is recorded for the sandbox to install.
    """
    principal.require_unscoped()
    server_settings = server_settings or Settings()
    config = body.eval_config
    if (problem := config.shards_problem()) is not None:
        raise BadRequest(f"Invalid value for eval_config: {problem}.")
    public_config = config.public_form()
    ids: list[str] = []
    for ref in body.environment_ids:
        target = environment_service.runnable(
            session, principal, ref, body.team_id, server_settings
        )
        env, package = target.env, target.package
        metadata: dict[str, Any] = {
            "launcher": LAUNCHER_NAME,
            "environment": env.name,
            "inference_model": body.inference_model,
            **public_config,
        }
        if package is not None:
            metadata["environment_ref"] = package["ref"]
        elif (installed := environment_service.ran_ref(session, {"id": env.id})) is not None:
            metadata["environment_ref"] = installed
        name = body.name or default_run_name(env.name, body.inference_model, kind="hosted")
        if body.name and len(body.environment_ids) > 1:
            name = f"{body.name[:300]}--{env.name}"
        try:
            payload = CreateEvaluation(
                name=name,
                environments=[
                    EnvironmentRef(
                        id=env.id, version_id=target.version.id if target.version else None
                    )
                ],
                model_name=body.inference_model,
                dataset=env.name,
                framework="proctor",
                metadata=metadata,
                team_id=body.team_id,
                tags=["hosted"],
            )
        except ValidationError as e:
            message = describe_invalid(
                e.errors(include_url=False),
                where=lambda loc: dotted(loc) or "body",
                sentence="Invalid value for {where}: {problem}; fix it and send again.",
            )
            raise InvalidInput(message) from None

        evaluation = evaluations.create_evaluation(
            session, principal, payload, status="PENDING", is_hosted=True
        )
        hosted = HostedEvaluation(
            evaluation_id=evaluation.id,
            config={
                "environment": target.entry_point,
                "model": body.inference_model,
                "eval_config": public_config,
                **({"package": package} if package is not None else {}),
            },
            backend=settings.sandbox.type,
            timeout_minutes=config.timeout_minutes,
            expected_samples=config.expected_samples,
            created_at=utcnow(),
        )
        secrets: dict[str, Any] = {}
        if config.custom_secrets:
            secrets["custom_secrets"] = config.custom_secrets
        headers = config.runnable_form().get("headers")
        if headers != public_config.get("headers"):
            secrets["headers"] = headers  # the unmasked ones, for the sandbox's command only
        if secrets:  # left unset otherwise: SQL NULL rather than a JSON null
            hosted.secrets = secrets
        session.add(hosted)
        ids.append(evaluation.id)
    session.flush()
    logger.info("queued hosted evaluations %s", ", ".join(ids))
    return ids


def _hosted(session: Session, evaluation_id: str) -> HostedEvaluation:
    hosted = session.get(HostedEvaluation, evaluation_id)
    if hosted is None:
        raise NotVisible(
            f"Evaluation {evaluation_id!r} is not a hosted evaluation, so it has no sandbox; "
            "use /evaluations/{id} for its record.",
            code="not_hosted",
        )
    return hosted


def _log_backend(settings: LauncherSettings, name: str) -> SandboxBackend:
    key = (name, settings.model_dump_json())
    if key not in _log_backends:
        try:
            _log_backends[key] = settings.backend(name)
        except ConfigError as e:
            raise BadRequest(f"This server cannot read the {name} sandbox's logs: {e}") from None
    return _log_backends[key]


def expected_samples(session: Session, evaluation_id: str) -> int | None:
    """How many samples the hosted run of a visible evaluation will have, when known."""
    hosted = session.get(HostedEvaluation, evaluation_id)
    return None if hosted is None else hosted.expected_samples


def read_logs(
    session: Session,
    principal: Principal,
    evaluation_id: str,
    settings: LauncherSettings,
    *,
    shard: int | None = None,
) -> str:
    """The sandbox's output so far; empty before it starts.

    A sharded evaluation's answer is each shard's headline (state, attempt, samples) and
    log tail, under a line with the whole's progress; `shard` picks one shard's log alone.

    Raises:
        NotVisible: `shard` names no shard of this evaluation.
    """
    evaluation = evaluations.get_visible(session, principal, evaluation_id)
    hosted = _hosted(session, evaluation_id)
    count = shard_count(hosted.config)
    if shard is not None and not 0 <= shard < count:
        raise NotVisible(
            f"Evaluation {evaluation_id} has no shard {shard}; it runs in {count} "
            f"shard{'s' if count != 1 else ''} (0 to {count - 1}).",
            code="no_such_shard",
        )
    if count > 1:
        return _sharded_logs(session, evaluation, hosted, settings, shard)
    if hosted.sandbox_handle is None:
        return ""
    backend = _log_backend(settings, hosted.backend)
    handle = SandboxHandle.from_token(backend.name, hosted.sandbox_handle, log_path=hosted.log_path)
    return backend.logs(handle, settings.log_tail_bytes)


def has_ended(session: Session, evaluation_id: str) -> bool:
    """Whether the launcher has closed the hosted evaluation (read after `read_logs`, which
    checked that the caller may see it)."""
    return _hosted(session, evaluation_id).ended_at is not None


def shard_progress(session: Session, evaluation: Evaluation) -> list[sharding.ShardProgress]:
    """Each shard of a visible hosted evaluation (empty when it is not sharded)."""
    hosted = session.get(HostedEvaluation, evaluation.id)
    if hosted is None:
        return []
    return sharding.progress(session, evaluation.id, hosted.config, hosted.expected_samples)


def cancel(session: Session, principal: Principal, evaluation_id: str) -> str:
    """Mark the evaluation CANCELLED and ask its launcher to stop the sandbox.

    Raises:
        Conflict: The evaluation has already ended.
    """
    evaluation = evaluations.get_visible(
        session, principal, evaluation_id, write=True, for_update=True
    )
    hosted = _hosted(session, evaluation_id)
    if evaluation.status in TERMINAL_STATUSES:
        raise Conflict(
            f"Evaluation {evaluation_id} has already ended ({evaluation.status}); "
            "there is nothing to cancel."
        )
    now = utcnow()
    if not evaluations.transition(
        session, evaluation, Event.CANCEL, now=now, error_message="cancelled by the user"
    ):
        raise Conflict(
            f"Evaluation {evaluation_id} is already {evaluation.status}; its run finalized "
            "first, so there is nothing to cancel."
        )
    hosted.cancel_requested = True
    if hosted.launcher_id is None:
        # No launcher holds it yet, so none will stop it: close it here.
        hosted.ended_at = now
        repository.drop_secrets(session, evaluation_id)
    logger.info("cancel requested for hosted evaluation %s", evaluation_id)
    return f"Evaluation {evaluation_id} cancelled; its sandbox is being stopped."


def _sharded_logs(
    session: Session,
    evaluation: Evaluation,
    hosted: HostedEvaluation,
    settings: LauncherSettings,
    shard: int | None,
) -> str:
    shards = sharding.progress(session, evaluation.id, hosted.config, hosted.expected_samples)
    rows = {row.shard: row for row in repository.shards_of(session, evaluation.id)}
    backend = _log_backend(settings, hosted.backend)

    def log_of(index: int, tail_bytes: int) -> str:
        row = rows.get(index)
        handle = None if row is None else sharding.handle_of(row, backend.name)
        return "" if handle is None else backend.logs(handle, tail_bytes)

    if shard is not None:
        return log_of(shard, settings.log_tail_bytes)
    each = max(1024, settings.log_tail_bytes // len(shards))
    expected = hosted.expected_samples
    whole = f"{evaluation.total_samples} of {expected}" if expected else evaluation.total_samples
    parts = [f"== {len(shards)} shards: {whole} samples ==\n"]
    for item in shards:
        text = log_of(item.index, each)
        parts.append(f"== {item.headline()} ==\n{text}")
        if text and not text.endswith("\n"):
            parts.append("\n")
    return "".join(parts)
