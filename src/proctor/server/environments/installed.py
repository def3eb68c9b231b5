"""The environments installed with the server, put on the hub at start.

Each `proctor.environments` entry point (built-ins and plugins) becomes a PUBLIC hub entry
under one owner (`PROCTOR_HUB_OWNER`, default `proctor`) with one READY version: the
distribution's version and a hash of what is installed. Hosted runs of them use the server's
own install; nothing is imported at start (plugins load only in sandboxes).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import logging
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from proctor.server.db.base import utcnow
from proctor.server.db.models import Environment, EnvironmentVersion
from proctor.server.environments import repository
from proctor.server.environments.artifacts import ENTRY_POINT_GROUP

logger = logging.getLogger(__name__)

PUBLIC_CLIENT_OWNER = "primeintellect"
"""The owner the public `prime` CLI tries last for a bare name; the hub reads it as its own."""


@dataclass(frozen=True)
class InstalledEnvironment:
    """One entry point, as the hub records it."""

    name: str
    version: str
    content_hash: str
    description: str


def _describe(ep: EntryPoint) -> InstalledEnvironment:
    dist = ep.dist
    version = dist.version if dist is not None else "0"
    digest = hashlib.sha256(f"{ep.name}={ep.value}\n".encode())
    if dist is not None:
        digest.update(f"{dist.metadata['Name']}=={version}\n".encode())
        digest.update((dist.read_text("RECORD") or "").encode())
    summary = _module_summary(ep) or (str(dist.metadata["Summary"] or "") if dist else "")
    return InstalledEnvironment(ep.name, version, digest.hexdigest(), summary)


def _module_summary(ep: EntryPoint) -> str:
    """The first line of the loader module's docstring, read from its source (not imported)."""
    try:
        spec = importlib.util.find_spec(ep.module)
        origin = spec.origin if spec is not None else None
        if not origin or not origin.endswith(".py"):
            return ""
        doc = ast.get_docstring(ast.parse(Path(origin).read_text(encoding="utf-8"))) or ""
    except (ImportError, OSError, SyntaxError, ValueError):
        return ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    # Built-ins start with "name: what it does".
    return first.split(": ", 1)[1] if first.startswith(f"{ep.name}: ") else first


def installed_environments() -> list[InstalledEnvironment]:
    """Every environment entry point of this interpreter, by name."""
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return [_describe(found[name]) for name in sorted(found)]


def publish_installed(session: Session, owner: str) -> int:
    """Record the installed environments under `owner`; returns how many were new or changed."""
    changed = 0
    now = utcnow()
    for item in installed_environments():
        env = repository.by_owner_and_name(session, owner, item.name)
        if env is None:
            env = Environment(owner=owner, name=item.name, created_at=now)
            try:
                with session.begin_nested():
                    repository.add(session, env)
            except IntegrityError:  # another process starting on the same database won
                continue
        if env.kind != "installed" and env.user_id is not None:
            logger.warning("hub entry %s/%s belongs to a user; not replacing it", owner, item.name)
            continue
        if env.kind == "installed" and env.latest_content_hash == item.content_hash:
            continue
        env.kind, env.visibility = "installed", "PUBLIC"
        env.user_id = env.team_id = None
        env.description = item.description or env.description
        env.updated_at = now
        version = repository.version_by_hash(session, env.id, item.content_hash)
        if version is None:
            version = EnvironmentVersion(
                environment_id=env.id,
                status="READY",
                semantic_version=item.version,
                content_hash=item.content_hash,
                details={"entry_points": [item.name], "installed": True},
                created_at=now,
                finalized_at=now,
            )
            session.add(version)
            session.flush()
        env.latest_version_id = version.id
        env.latest_semantic_version = version.semantic_version
        env.latest_content_hash = version.content_hash
        changed += 1
    if changed:
        logger.info("put %d installed environment(s) on the hub under %r", changed, owner)
    return changed
