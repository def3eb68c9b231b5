"""FastAPI dependencies shared by every domain: the database and its sessions.

Both session dependencies use `scope="function"`, so the commit happens before the response
is sent: a failed commit becomes an error answer, never a success that did not persist.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

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


async def read_session(db: Annotated[Database, Depends(get_database)]) -> AsyncIterator[Session]:
    """A session for queries only.

    Async on purpose: creating a session does no I/O, so only closing it takes a trip to the
    threadpool; each trip adds latency to every read.
    """
    session = db.new_read_session()
    try:
        yield session
    finally:
        await run_in_threadpool(session.close)


def write_session(db: Annotated[Database, Depends(get_database)]) -> Iterator[Session]:
    """A session that commits when the endpoint succeeds and rolls back when it raises."""
    with db.write() as session:
        yield session


DatabaseDep = Annotated[Database, Depends(get_database)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
ReadSession = Annotated[Session, Depends(read_session, scope="function")]
WriteSession = Annotated[Session, Depends(write_session, scope="function")]
