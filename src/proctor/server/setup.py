"""Bringing a database up to date before serving: migrations, bootstrap key, stuck runs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from proctor.errors import ConfigError
from proctor.server import migrations
from proctor.server.auth import service as auth
from proctor.server.db.session import Database, make_session_factory
from proctor.server.environments.installed import publish_installed
from proctor.server.evaluations.service import complete_pending_statistics
from proctor.server.settings import Settings, invalid_setting

logger = logging.getLogger(__name__)


def prepare_database(settings: Settings, db: Database) -> None:
    """Apply migrations, create the bootstrap key if due, and complete runs left PROCESSING."""
    migrations.upgrade(db.write_engine)
    with db.write() as session:
        if settings.bootstrap_key and auth.ensure_bootstrap_key(session, settings.bootstrap_key):
            logger.info("created the admin key from PROCTOR_BOOTSTRAP_KEY")
        has_keys = auth.has_keys(session)
        publish_installed(session, settings.hub_owner)
    if not has_keys:
        data_dir = "" if settings.database_url else f" --data-dir {settings.data_dir}"
        logger.warning(
            "no API key exists yet; create one with "
            "`proctor keys create --name admin --admin%s` (or set PROCTOR_BOOTSTRAP_KEY)",
            data_dir,
        )
    completed = complete_pending_statistics(db)
    if completed:
        logger.info("completed %d evaluation(s) left PROCESSING by an earlier run", completed)


def describe_url(url: str) -> str:
    """A database URL fit to print: the password hidden."""
    return make_url(url).render_as_string(hide_password=True)


def _first_line(error: BaseException) -> str:
    cause = getattr(error, "orig", None) or error
    lines = str(cause).strip().splitlines()
    return lines[0] if lines else type(cause).__name__


def open_database(settings: Settings) -> Database:
    """The settings' database, migrated to the latest schema.

    Raises:
        ConfigError: The database cannot be reached, created or migrated.
    """
    url = settings.resolved_database_url()
    try:
        db = make_session_factory(settings)
        migrations.upgrade(db.write_engine)
    except (OSError, SQLAlchemyError) as e:
        raise ConfigError(
            f"Cannot open the database {describe_url(url)} ({_first_line(e)}); "
            "check PROCTOR_DATABASE_URL or --data-dir."
        ) from e
    return db


def settings_from(data_dir: str | None = None, **overrides: object) -> Settings:
    """`Settings` from the environment, with the CLI's flags (when given) taking precedence.

    Raises:
        ConfigError: A flag or `PROCTOR_*` variable holds an invalid value.
    """
    values = {k: v for k, v in overrides.items() if v is not None}
    if data_dir is not None:
        values["data_dir"] = data_dir
    try:
        return Settings(**values)  # type: ignore[arg-type]
    except ValidationError as e:
        raise invalid_setting(e, env_prefix="PROCTOR_") from None


@contextmanager
def database_of(data_dir: str | None, *, create: bool = True) -> Iterator[Database]:
    """The server's database for a CLI command (`--data-dir` or `PROCTOR_DATABASE_URL`),
    migrated, and disposed of when the block ends.

    Args:
        data_dir: The `--data-dir` flag, if given.
        create: Create a missing SQLite file; off for commands that only read, so a
            mistyped `--data-dir` is reported instead of silently created empty.

    Raises:
        ConfigError: A setting is invalid, or the database cannot be opened (or, without
            `create`, its SQLite file does not exist).
    """
    settings = settings_from(data_dir)
    if not create and not settings.database_url:
        path = settings.resolved_data_dir() / "proctor.db"
        if not path.is_file():
            raise ConfigError(
                f"There is no database at {path}; check --data-dir (or PROCTOR_DATA_DIR)."
            )
    db = open_database(settings)
    try:
        yield db
    finally:
        db.dispose()
