"""Fixtures shared by the model client's tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.models.test_http import RawServer


@pytest.fixture
async def raw() -> AsyncIterator[RawServer]:
    """A scripted raw HTTP server on 127.0.0.1 (its `url` ends in /v1)."""
    server = RawServer()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    server.url = f"http://127.0.0.1:{port}/v1"
    yield server
    listener.close()
