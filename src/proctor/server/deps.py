"""FastAPI dependencies shared by every domain: the database and its sessions.

Both session dependencies use `scope="function"`, so the commit happens before the response
is sent: a failed commit becomes an error answer, never a success that did not persist.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from proctor.server.db.session import Database
from proctor.server.settings import Settings


async def get_database(request: Request) -> Database:
    """The app's `Database` (async: trivial dependencies skip the threadpool hop)."""
    db: Database = request.app.state.db
    return db


async def get_settings(request: Request) -> Settings:
    """The app's `Settings`."""
    settings: Settings = request.app.state.settings
    return settings


def read_session(db: Annotated[Database, Depends(get_database)]) -> Iterator[Session]:
    """A session for queries only."""
    with db.read() as session:
        yield session


def write_session(db: Annotated[Database, Depends(get_database)]) -> Iterator[Session]:
    """A session that commits when the endpoint succeeds and rolls back when it raises."""
    with db.write() as session:
        yield session


DatabaseDep = Annotated[Database, Depends(get_database)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
ReadSession = Annotated[Session, Depends(read_session, scope="function")]
WriteSession = Annotated[Session, Depends(write_session, scope="function")]
