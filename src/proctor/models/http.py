"""A lean HTTP/1.1 keep-alive client for the model endpoint's hot path.

Per rollout, aiohttp's client request pipeline (request and response objects, header
multidicts, tracing hooks, timers, the connector's bookkeeping) was about half the engine's
CPU. The chat-completions POST needs none of it: one request at a time per connection, JSON
bytes out, a whole body back. So this is an `asyncio.Protocol` per connection, parsing with
`httptools` (llhttp, the parser uvicorn uses), and a pool of idle connections.

What it does: plain http and https (the system's CA store, loaded on the first https
connection), Content-Length, chunked and read-to-close bodies, gzip/deflate bodies, a
total timeout per request (connect included), keep-alive with at most `max_connections`
open (the caller's limiter keeps the requests in flight within it). A pooled connection the
server had closed before answering anything is retried once on a fresh one (the server did
not process the request: it never answered a byte); every other failure is the caller's to
retry. No proxies, cookies or redirects (the aiohttp session it replaces used none either).

Errors: `TimeoutError` when the timeout passed, `HTTPConnectionError` for everything else
that kept an answer from arriving (refused, reset, closed mid-response, unparsable).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httptools

from proctor.errors import HTTPConnectionError

DNS_TTL_S = 300.0
"""How long a host's addresses are reused (as the aiohttp connector it replaced did)."""


@dataclass(slots=True)
class Response:
    status: int
    headers: list[tuple[str, str]]
    """In the order received; names as sent (look them up case-insensitively)."""
    content: bytes

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None


class _Disconnected(HTTPConnectionError):
    """The server closed the connection before sending any byte of an answer."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request at a time, its answer parsed as it arrives."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.open = False
        self.reused = False
        self._waiter: asyncio.Future[Response] | None = None
        self._parser: Any = None
        self._status = 0
        self._headers: list[tuple[str, str]] = []
        self._chunks: list[bytes] = []
        self._got_bytes = False
        self._headers_done = False
        self._framed = False  # Content-Length or chunked: the end is known without a close
        self._keep_alive = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.open = True

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            # Bytes nobody asked for: the connection's state is unknown, never reuse it.
            self.close()
            return
        self._got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(HTTPConnectionError("the server switched protocols"))
        except httptools.HttpParserError as e:
            self._fail(HTTPConnectionError(f"invalid HTTP answer: {e}"))

    def eof_received(self) -> bool:
        self.open = False  # never lent again, even before connection_lost
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if not self._got_bytes:
            self._fail(_Disconnected("the server closed the connection without answering"))
        elif self._headers_done and not self._framed:
            self._complete(keep_alive=False)  # a body delimited by the close
        else:
            reason = f": {exc}" if exc else ""
            self._fail(HTTPConnectionError(f"the server closed the connection mid-answer{reason}"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            self._headers = []
            return
        self._status = status
        self._headers_done = True
        for name, _ in self._headers:
            lowered = name.lower()
            if lowered == "content-length" or lowered == "transfer-encoding":
                self._framed = True
        if status in (204, 304):
            self._framed = True

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        if self._headers_done:
            self._complete(keep_alive=self._parser.should_keep_alive())

    # the caller's side
    def send(self, data: bytes) -> asyncio.Future[Response]:
        self._waiter = waiter = self._loop.create_future()
        self._parser = httptools.HttpResponseParser(self)
        self._status, self._headers, self._chunks = 0, [], []
        self._got_bytes = self._headers_done = self._framed = False
        transport = self.transport
        if transport is None or transport.is_closing():
            waiter.set_exception(_Disconnected("the connection was closed before the request"))
            return waiter
        transport.write(data)
        return waiter

    def close(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()

    def _complete(self, *, keep_alive: bool) -> None:
        self._keep_alive = keep_alive
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            content = b"".join(self._chunks)
            waiter.set_result(Response(self._status, self._headers, content))

    def _fail(self, error: Exception) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self.close()

    def reusable(self) -> bool:
        return self.open and self._keep_alive


class HTTPClient:
    """Requests to one origin over a pool of keep-alive connections.

    Args:
        base_url: `http://` or `https://` origin with an optional path prefix.
        headers: Sent with every request (besides Host and Content-Length).
        timeout: Seconds for a whole request, connecting included.
        max_connections: The most idle connections kept open.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str],
        timeout: float,
        max_connections: int,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._query = f"?{parts.query}" if parts.query else ""
        host = f"[{self._host}]" if ":" in self._host else self._host
        default_port = self._port == (443 if self._https else 80)
        authority = host if default_port else f"{host}:{self._port}"
        merged = {"host": ("Host", authority), "user-agent": ("User-Agent", "proctor")}
        for name, value in headers.items():
            if any(c in name + value for c in "\r\n\0") or ":" in name:
                raise ValueError(f"the HTTP header {name!r} holds a line break or a colon")
            merged[name.lower()] = (name, value)
        merged.pop("content-length", None)
        # Encoded once: every request's head is this block plus its request line and length.
        self._head = "".join(f"{n}: {v}\r\n" for n, v in merged.values()).encode("latin-1")
        self.timeout = timeout
        self._max_idle = max_connections
        self._idle: list[_Connection] = []
        self._ssl: ssl.SSLContext | None = None
        self._lookup: asyncio.Future[list[Any]] | None = None
        self._lookup_expires = 0.0
        self._closed = False

    def target(self, path: str) -> str:
        """The request target of `path` under the base URL (its path prefix and query kept)."""
        return self._prefix + path + self._query

    async def request(
        self, method: str, target: str, body: bytes = b"", *, timeout: float | None = None
    ) -> Response:
        """Send one request for `target` (see `target()`) and read its whole answer.

        Raises:
            TimeoutError: no whole answer within the timeout.
            HTTPConnectionError: the connection failed or the answer was not HTTP.
        """
        loop = asyncio.get_running_loop()
        wait = self.timeout if timeout is None else timeout
        deadline = loop.time() + wait
        head = b"%s %s HTTP/1.1\r\n" % (method.encode(), target.encode())
        length = b"Content-Length: %d\r\n\r\n" % len(body) if body or method != "GET" else b"\r\n"
        data = head + self._head + length + body
        try:
            return await self._send(loop, data, deadline)
        except _Disconnected:
            # A pooled connection the server had closed (its keep-alive ran out): once more.
            return await self._send(loop, data, deadline, fresh=True)

    async def _send(
        self, loop: asyncio.AbstractEventLoop, data: bytes, deadline: float, fresh: bool = False
    ) -> Response:
        conn = None if fresh else self._pooled()
        reused = conn is not None
        if conn is None:
            conn = await self._connect(loop, deadline)
        waiter = conn.send(data)
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            response = await waiter
        except _Disconnected as e:
            conn.close()
            if reused:
                raise  # the caller retries it once on a fresh connection
            raise HTTPConnectionError(str(e)) from None
        except BaseException:
            conn.close()  # timed out, failed or cancelled: the connection's state is unknown
            raise
        finally:
            timer.cancel()
        if conn.reusable() and len(self._idle) < self._max_idle and not self._closed:
            self._idle.append(conn)
        else:
            conn.close()
        encoding = response.header("content-encoding")
        if encoding and encoding.lower() in ("gzip", "deflate", "x-gzip"):
            try:
                response.content = zlib.decompress(response.content, 47)  # gzip or zlib
            except zlib.error as e:
                raise HTTPConnectionError(f"a {encoding} body that does not decompress: {e}") from e
        return response

    def _pooled(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.open and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def _connect(self, loop: asyncio.AbstractEventLoop, deadline: float) -> _Connection:
        ssl_context: ssl.SSLContext | None = None
        if self._https:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ssl_context = self._ssl
        error: OSError | None = None
        try:
            async with asyncio.timeout_at(deadline):
                for address in await self._addresses(loop):
                    try:
                        _, conn = await loop.create_connection(
                            lambda: _Connection(loop),
                            address,
                            self._port,
                            ssl=ssl_context,
                            server_hostname=self._host if ssl_context else None,
                        )
                        return conn
                    except TimeoutError:
                        raise
                    except OSError as e:
                        error = e  # the next address may answer
        except TimeoutError:
            raise
        except OSError as e:
            error = e
        raise HTTPConnectionError(f"cannot connect to {self._host}:{self._port}: {error}")

    async def _addresses(self, loop: asyncio.AbstractEventLoop) -> list[str]:
        """The host's addresses, looked up once per `DNS_TTL_S` (not once per connection:
        a run opening a thousand connections at once would queue a thousand lookups)."""
        if self._lookup is None or loop.time() > self._lookup_expires:
            self._lookup = asyncio.ensure_future(
                loop.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)
            )
            self._lookup_expires = loop.time() + DNS_TTL_S
        lookup = self._lookup
        try:
            infos = await asyncio.shield(lookup)
        except OSError:
            if self._lookup is lookup:
                self._lookup = None  # a failed lookup is not remembered
            raise
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    async def aclose(self) -> None:
        """Close the idle connections (those in use close when their request ends)."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _expire(waiter: asyncio.Future[Response]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())
