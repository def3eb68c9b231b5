"""The model endpoint's HTTP transport: one tuned aiohttp session per client.

Chosen on evidence: a hand-written HTTP/1.1 client saved 0.1-0.35 ms of CPU per request
over aiohttp, invisible next to a real model's latency, and did not work on real networks
(bench/results/engine_overhead.md has the figures of both). aiohttp is tuned for an engine
keeping hundreds of requests in flight to one origin:

- a connector limited to the run's concurrency, with a DNS cache (a thousand connections
  opened at once make one lookup, not a thousand);
- keep-alive connections expire after `keepalive_expiry` idle seconds, so a firewall or
  NAT that silently forgets idle flows never costs a request its whole timeout;
- happy eyeballs (RFC 8305): a host's addresses are tried 0.25 s apart, so an unreachable
  first address (a dead IPv6 route) costs a quarter second, not the connect timeout;
- a connect timeout (`--client.connect-timeout`) separate from the request's;
- the proxy from `HTTP(S)_PROXY` / `NO_PROXY` resolved once, when the client is made;
- certificates checked against `proctor.trust`'s one policy;
- redirects are not followed (a POST redirected is no chat completion): the caller sees
  the 3xx and its `Location`;
- the transport never sends a request twice; retrying is the caller's (`proctor.retries`).

Errors are proctor's own: `HTTPTimeoutError` (connect or whole request) and
`HTTPConnectionError` for everything else that kept an answer from arriving, each one
sentence naming the cause (proxy, certificate, refused, reset).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from proctor.errors import HTTPConnectionError, HTTPTimeoutError
from proctor.trust import TRUST_FIX, ssl_context, ssl_error_in, tls_fix

if TYPE_CHECKING:
    from collections.abc import Mapping

    import aiohttp

logger = logging.getLogger(__name__)

DNS_TTL_S = 300
"""How long a host's addresses are reused."""

HAPPY_EYEBALLS_DELAY_S = 0.25
"""The head start one address gets before the next is tried in parallel (RFC 8305)."""


@dataclass(slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    """Case-insensitive."""
    content: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


def proxy_for(url: str) -> str | None:
    """The proxy a request to `url` goes through, from `HTTP(S)_PROXY`, `ALL_PROXY` and
    `NO_PROXY` (as curl and the `requests`/`httpx` stack read them), or None."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or not parts.hostname:
        return None
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    if urllib.request.proxy_bypass_environment(host, proxies):  # type: ignore[attr-defined]
        return None
    if "://" not in proxy:
        proxy = f"http://{proxy}"
    return proxy


class HTTPClient:
    """Requests to one origin through a pool of keep-alive connections.

    Args:
        base_url: `http://` or `https://` origin with an optional path prefix.
        headers: Sent with every request.
        timeout: Seconds for a whole request, connecting included.
        connect_timeout: Seconds to open a connection (TCP, proxy tunnel and TLS).
        max_connections: The most connections open at once.
        keepalive_expiry: Seconds an idle connection is kept for reuse.
        ca_bundle: A PEM file of CA certificates trusted on top of the system's.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str],
        timeout: float,
        connect_timeout: float,
        max_connections: int,
        keepalive_expiry: float = 4.0,
        ca_bundle: str | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url}")
        for name, value in headers.items():
            if any(c in name + value for c in "\r\n\0") or ":" in name:
                raise ValueError(f"the HTTP header {name!r} holds a line break or a colon")
        self._base = base_url.rstrip("/")
        self._host = parts.hostname
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._https = parts.scheme == "https"
        self._headers = {"User-Agent": "proctor", **headers}
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._max_connections = max_connections
        self._keepalive_expiry = keepalive_expiry
        self._ca_bundle = ca_bundle
        self._ssl = ssl_context(ca_bundle) if self._https else None
        self.proxy, self._proxy_headers = _split_credentials(proxy_for(base_url))
        """The proxy every request goes through (resolved once), or None."""
        if self.proxy is not None:
            logger.debug("model requests to %s go through the proxy %s", self._origin, self.proxy)
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, Any] = {}

    def target(self, path: str) -> str:
        """The URL of `path` under the base URL (its path prefix kept)."""
        return self._base + path

    def _open(self) -> aiohttp.ClientSession:
        import aiohttp

        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            limit_per_host=0,
            ttl_dns_cache=DNS_TTL_S,
            use_dns_cache=True,
            keepalive_timeout=self._keepalive_expiry,
            happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY_S,
            ssl=self._ssl if self._ssl is not None else True,
        )
        return aiohttp.ClientSession(
            connector=connector,
            headers=self._headers,
            trust_env=False,  # the proxy was resolved once, above; never per request
            timeout=self._timeout(self.timeout),
            raise_for_status=False,
        )

    def _timeout(self, total: float) -> Any:
        timeout = self._timeouts.get(total)
        if timeout is None:
            import aiohttp

            timeout = self._timeouts[total] = aiohttp.ClientTimeout(
                total=total, sock_connect=self.connect_timeout
            )
        return timeout

    async def request(
        self, method: str, url: str, body: bytes | None = None, *, timeout: float | None = None
    ) -> Response:
        """Send one request for `url` (see `target()`) and read its whole answer.

        Raises:
            HTTPTimeoutError: no connection within the connect timeout, or no whole answer
                within the timeout.
            HTTPConnectionError: the connection (or the proxy, or TLS) failed, or the answer
                was not HTTP.
        """
        session = self._session
        if session is None or session.closed:
            session = self._session = self._open()
        try:
            async with session.request(
                method,
                url,
                data=body,
                proxy=self.proxy,
                proxy_headers=self._proxy_headers,
                allow_redirects=False,
                timeout=self._timeout(self.timeout if timeout is None else timeout),
            ) as answer:
                content = await answer.read()
                return Response(answer.status, answer.headers, content)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise self._error(e, timeout if timeout is not None else self.timeout) from e

    def _error(self, error: Exception, timeout: float) -> HTTPConnectionError:
        """Our error for what aiohttp raised: one sentence naming the cause."""
        import aiohttp

        where = self._origin
        connect_timeout = getattr(aiohttp, "ConnectionTimeoutError", ())
        if isinstance(error, connect_timeout) or (
            isinstance(error, aiohttp.ServerTimeoutError) and "onnection timeout" in str(error)
        ):
            return HTTPTimeoutError(
                f"no connection to {where} within {self.connect_timeout:g} s "
                f"(--client.connect-timeout){self._via()}",
                connect=True,
            )
        if isinstance(error, TimeoutError):
            return HTTPTimeoutError(
                f"no answer from {where} within {timeout:g} s (--client.timeout)", connect=False
            )
        if isinstance(error, aiohttp.ClientConnectorCertificateError):
            cause = getattr(error.certificate_error, "verify_message", None) or str(
                error.certificate_error
            )
            return HTTPConnectionError(
                f"the certificate of {where} is not trusted ({cause}); {TRUST_FIX}", names_fix=True
            )
        if isinstance(error, aiohttp.ClientConnectorSSLError | aiohttp.ClientSSLError):
            if (fix := tls_fix(error, where)) is not None:
                return HTTPConnectionError(fix, names_fix=True)
            return HTTPConnectionError(
                f"TLS with {where} failed ({_reason(error)}); {TRUST_FIX}", names_fix=True
            )
        if isinstance(error, aiohttp.ClientHttpProxyError):
            return HTTPConnectionError(
                f"the proxy {self.proxy} refused to reach {where} (HTTP {error.status} "
                f"{error.message}); fix HTTPS_PROXY/HTTP_PROXY, or add {self._host} to NO_PROXY",
                names_fix=True,
            )
        if isinstance(error, aiohttp.ClientProxyConnectionError):
            return HTTPConnectionError(
                f"cannot connect to the proxy {self.proxy} ({_reason(error)}); fix "
                f"HTTPS_PROXY/HTTP_PROXY, or add {self._host} to NO_PROXY",
                names_fix=True,
            )
        if isinstance(error, aiohttp.ClientConnectorError):
            return HTTPConnectionError(f"cannot connect to {where}{self._via()} ({_reason(error)})")
        if isinstance(error, aiohttp.ServerDisconnectedError):
            return HTTPConnectionError(f"{where} closed the connection without a whole answer")
        return HTTPConnectionError(f"no whole answer from {where} ({_reason(error)})")

    def _via(self) -> str:
        return f" through the proxy {self.proxy}" if self.proxy else ""

    async def aclose(self) -> None:
        """Close the connections (a later request opens new ones)."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()


def _split_credentials(proxy: str | None) -> tuple[str | None, dict[str, str] | None]:
    """(the proxy URL without credentials, the `Proxy-Authorization` header of them or None)."""
    if proxy is None:
        return None, None
    parts = urlsplit(proxy)
    if parts.username is None:
        return proxy, None
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    token = base64.b64encode(credentials.encode()).decode("ascii")
    return parts._replace(netloc=netloc).geturl(), {"Proxy-Authorization": f"Basic {token}"}


def _reason(error: BaseException) -> str:
    if reason := getattr(ssl_error_in(error), "reason", None):
        return str(reason).replace("_", " ").lower()  # an SSL errno is not an OS errno
    os_error = getattr(error, "os_error", None)
    if isinstance(os_error, OSError):
        if os_error.errno:
            return os.strerror(os_error.errno)
        if os_error.strerror:
            return os_error.strerror
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
