"""The platform's HTTP API as the runs SDK uses it: one `httpx.Client`, errors mapped to ours.

Failures split in two: *transient* ones (connection errors, timeouts, 408, 429, 5xx) may
succeed if tried again later; everything else is an answer that will not change. Sample
uploads are idempotent on the server (`sample_id` is the key), so unlike the public client
the uploader may replay even an ambiguous failure. Retries go through `proctor.retries`
(the model client's loop, backoff and `Retry-After` parser); certificates are checked
against `proctor.trust`'s policy, as model calls are.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx

from proctor.errors import APIError, PlatformUnreachable, RetryableAPIError
from proctor.retries import RetryPolicy, parse_retry_after
from proctor.trust import ssl_context, tls_fix

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
UPLOAD_TIMEOUT_S = 300.0
MAX_RETRY_AFTER_S = 60.0


def is_transient(exc: BaseException) -> bool:
    """True for failures worth trying again later."""
    return isinstance(exc, PlatformUnreachable | RetryableAPIError)


def retry_policy(
    *, retry_if: Any = is_transient, cap: float, attempts: int | None, what: str
) -> RetryPolicy:
    """The platform calls' retries: from 0.25 s, doubling up to `cap`; `Retry-After` up to a
    minute."""
    return RetryPolicy(
        retry_if=retry_if,
        max_retries=None if attempts is None else attempts - 1,
        base_delay=0.25,
        max_delay=cap,
        max_retry_after=MAX_RETRY_AFTER_S,
        what=what,
    )


def backoff_delay(attempt: int, exc: BaseException | None, *, cap: float = 5.0) -> float:
    """Seconds before attempt `attempt + 1` of a loop that waits its own way (the uploader's,
    which an abort cuts short): the shared policy's backoff and `Retry-After`."""
    return retry_policy(cap=cap, attempts=None, what="").delay(attempt, exc)


def _origin(url: str) -> str:
    """`scheme://host:port` of `url`."""
    parts = httpx.URL(url)
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{parts.host}{port}"


def _error_text(response: httpx.Response) -> tuple[str | None, str]:
    """(code, message) from the contract's error body, or the raw text."""
    try:
        body = response.json()
    except ValueError:
        return None, response.text[:300].strip()
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return err.get("code"), str(err.get("message") or body.get("detail") or "")
        if body.get("detail") is not None:
            return None, str(body["detail"])
    return None, response.text[:300].strip()


def _once(data: bytes) -> Iterator[bytes]:
    yield data


class PlatformClient:
    """A thin, typed client of `/api/v1` on one platform with one key.

    Args:
        api_url: the platform's origin, e.g. `http://127.0.0.1:8000`.
        api_key: the API key every request carries.
        http: the HTTP client to send through, e.g. a FastAPI `TestClient` or an
            `httpx.Client(transport=httpx.MockTransport(...))`, with its own timeouts; the
            caller closes it. By default the client makes (and `close()` closes) a pooled one.
    """

    def __init__(self, api_url: str, api_key: str, *, http: httpx.Client | None = None) -> None:
        from proctor import __version__

        self.api_url = api_url
        self._base = f"{api_url}/api/v1"
        # Sent with each request rather than set on the client, so a client passed in works too.
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "User-Agent": f"proctor-runs/{__version__}",
        }
        self._owns_http = http is None
        self._http = (
            http
            if http is not None
            else httpx.Client(
                timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
                verify=ssl_context(),
            )
        )

    def close(self) -> None:
        """Release the connection pool (one passed in as `http` is the caller's to close)."""
        if self._owns_http:
            self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Send one request; return the JSON object answered (`{}` when empty).

        Raises:
            PlatformUnreachable: no answer (connection refused, timeout, reset).
            RetryableAPIError: 408, 429 or 5xx.
            APIError: any other error status, or a 2xx that is not a JSON object.
        """
        kwargs: dict[str, Any] = {"json": json_body, "headers": self._headers}
        if content is not None:
            # httpx's response and its stream refer to each other, and the response keeps the
            # request: a plain `bytes` body would live until the cyclic GC runs (tens of MiB
            # for a backlog of 2.4 MiB batches). A one-shot generator lets it go once sent;
            # the explicit length keeps the upload un-chunked.
            kwargs["content"] = _once(content)
            kwargs["headers"] = {
                **self._headers,
                "Content-Type": "application/json",
                "Content-Length": str(len(content)),
            }
        if headers:
            kwargs["headers"] = {**kwargs.get("headers", {}), **headers}
        if timeout is not None and self._owns_http:  # a client passed in keeps its own
            kwargs["timeout"] = httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S)
        try:
            response = self._http.request(method, self._base + path, **kwargs)
        except httpx.ConnectError as e:
            if (fix := tls_fix(e, _origin(self.api_url))) is not None:
                raise PlatformUnreachable(
                    f"cannot connect to the platform at {self.api_url}: {fix}", connected=False
                ) from e
            raise PlatformUnreachable(
                f"cannot connect to the platform at {self.api_url} ({e}); start it "
                "(`proctor server`) or set PROCTOR_API_URL to where it runs",
                connected=False,
            ) from e
        except httpx.TransportError as e:
            connected = not isinstance(e, httpx.ConnectTimeout | httpx.PoolTimeout)
            raise PlatformUnreachable(
                f"no answer from the platform at {self.api_url} ({type(e).__name__}: {e})",
                connected=connected,
            ) from e
        if response.status_code >= 400:
            code, message = _error_text(response)
            text = f"{method} {path} answered HTTP {response.status_code}: {message}"
            status = response.status_code
            if status in (408, 429) or status >= 500:
                raise RetryableAPIError(
                    text,
                    status_code=status,
                    code=code,
                    retry_after=parse_retry_after(response.headers),
                )
            raise APIError(text, status_code=status, code=code)
        if not response.content:
            return {}
        try:
            body = response.json()
        except json.JSONDecodeError as e:
            raise APIError(
                f"{method} {path} answered a non-JSON body", status_code=response.status_code
            ) from e
        if not isinstance(body, dict):
            raise APIError(
                f"{method} {path} answered JSON that is not an object",
                status_code=response.status_code,
            )
        return body

    def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        attempts: int = 4,
        replayable: bool = True,
    ) -> dict[str, Any]:
        """`request` with a few retries of transient failures.

        A call that is not `replayable` (it creates something) is retried only when the
        request provably did not take effect: the connection never opened, or a 429.
        """

        def should_retry(exc: BaseException) -> bool:
            if not is_transient(exc):
                return False
            if replayable:
                return True
            if isinstance(exc, PlatformUnreachable):
                return not exc.connected
            return isinstance(exc, RetryableAPIError) and exc.status_code == 429

        policy = retry_policy(
            retry_if=should_retry, cap=2.0, attempts=attempts, what=f"{method} {path}"
        )
        return policy.call(lambda: self.request(method, path, json_body=json_body))

    def call_until(
        self,
        method: str,
        path: str,
        *,
        deadline: float,
        json_body: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        retry_cap: float = 5.0,
    ) -> dict[str, Any]:
        """`request`, retrying transient failures with backoff until `deadline` (monotonic).

        The upload policy, for calls that are safe to replay (PUT, finalize, a create that
        carries an Idempotency-Key): an outage shorter than the time left is ridden out.

        Raises:
            PlatformError: a refusal, or the last transient failure once time is up.
        """
        warned = False

        def warn(error: BaseException, wait: float) -> None:
            nonlocal warned
            if not warned:
                warned = True
                log.warning("%s %s failed, retrying: %s", method, path, error)

        policy = retry_policy(cap=retry_cap, attempts=None, what=f"{method} {path}")
        return policy.call(
            lambda: self.request(
                method, path, json_body=json_body, content=content, headers=headers
            ),
            deadline=deadline,
            on_retry=warn,
        )

    def post_samples(self, evaluation_id: str, body: bytes) -> dict[str, Any]:
        """POST an already-encoded `{"samples": [...]}` body (one attempt)."""
        return self.request(
            "POST", f"/evaluations/{evaluation_id}/samples", content=body, timeout=UPLOAD_TIMEOUT_S
        )
