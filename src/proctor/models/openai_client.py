"""The OpenAI-compatible chat client: chat completions as JSON over a tuned aiohttp pool.

A request is a POST of JSON bytes on `proctor.models.http`'s keep-alive pool, read back as
a dict: the `openai` SDK is not on the engine's path (its request pipeline cost about as
much CPU per rollout as everything else, and its error path pulled in private methods of
whichever HTTP library it was built on). Failures are proctor's own errors
(`HTTPStatusError` with the status, body and `Retry-After`; `HTTPConnectionError`;
`HTTPTimeoutError`), retried by `proctor.retries`' one loop: exponential backoff with
jitter on 408/409/429/5xx, timeouts and connection errors, honouring `Retry-After`. Each
attempt takes a slot of the `AdaptiveLimiter`, which lowers the requests in flight on
sustained 429s. The preflight (`GET /models` must list models) is a GET on the same pool.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from proctor.errors import (
    ConfigError,
    HTTPConnectionError,
    HTTPStatusError,
    ModelError,
)
from proctor.models.config import ClientConfig, SamplingConfig
from proctor.models.http import HTTPClient, Response
from proctor.models.limiter import AdaptiveLimiter
from proctor.models.types import Completion, TokenUsage
from proctor.retries import RETRYABLE_STATUS, RetryPolicy, parse_retry_after

logger = logging.getLogger(__name__)

PLACEHOLDER_API_KEY = "proctor-no-key"
"""Sent when the key variable is unset: local endpoints such as the demo model need none."""


class OpenAIChatClient:
    """A `ChatClient` for any OpenAI-compatible `/chat/completions` endpoint.

    Args:
        model: Model name sent with every request.
        client: Endpoint, key, headers, timeout and retry settings.
        sampling: Sampling parameters sent with every request.
        max_connections: Upper bound of open HTTP connections and of requests in flight
            (the run's concurrency).
    """

    def __init__(
        self,
        *,
        model: str,
        client: ClientConfig | None = None,
        sampling: SamplingConfig | None = None,
        max_connections: int = 1000,
    ) -> None:
        self.model = model
        self.config = client or ClientConfig()
        self.sampling = sampling or SamplingConfig()
        """The sampling parameters every request carries."""
        self._request_args = self.sampling.request_args()
        self._retry = RetryPolicy(
            retry_if=is_retryable,
            max_retries=self.config.max_retries,
            base_delay=self.config.retry_base_delay,
            max_delay=self.config.retry_max_delay,
            what="model request",
        )
        self.limiter = AdaptiveLimiter(max_connections, adaptive=self.config.adaptive_concurrency)
        """The requests in flight and their current cap (see `proctor.models.limiter`)."""
        self._headers = {
            "Authorization": f"Bearer {self.config.api_key() or PLACEHOLDER_API_KEY}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            **self.config.all_headers(),
        }
        try:
            self._http = HTTPClient(
                self.config.base_url,
                headers=self._headers,
                timeout=self.config.timeout,
                connect_timeout=self.config.connect_timeout,
                max_connections=max_connections,
                keepalive_expiry=self.config.keepalive_expiry,
                ca_bundle=self.config.ca_bundle,
            )
        except ValueError as e:
            raise ConfigError(f"{e}; fix --client.headers or ${self.config.headers_var}") from e
        self._chat_url = self._http.target("/chat/completions")

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        """Request one assistant turn, retrying transient failures.

        Raises:
            ModelError: the request failed for good (a non-retryable status, or retries spent).
        """
        started = time.perf_counter()
        body = await self._retry.acall(lambda: self._attempt(messages, tools), wrap=_model_error)
        return _completion(body, latency_s=time.perf_counter() - started)

    async def _attempt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        # A slot per attempt, not per call: a request waiting out its backoff holds none.
        sent_at = await self.limiter.acquire()
        rate_limited, retry_after = False, None
        try:
            return await self._request(messages, tools)
        except HTTPStatusError as e:
            if e.status_code == 429:
                rate_limited, retry_after = True, e.retry_after
                if retry_after is not None:
                    retry_after = min(retry_after, self._retry.max_delay)
            raise
        finally:
            self.limiter.release(sent_at, rate_limited=rate_limited, retry_after=retry_after)

    async def _request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "messages": messages, **self._request_args}
        if tools is not None:
            payload["tools"] = tools
        response = await self._http.request("POST", self._chat_url, json.dumps(payload).encode())
        if response.status >= 300:
            raise self._status_error(response)
        try:
            body = json.loads(response.content)
        except ValueError as e:
            raise ModelError(f"the model endpoint returned invalid JSON: {e}") from e
        if not isinstance(body, dict) or not body.get("choices"):
            raise ModelError(f"the model endpoint returned no choices: {str(body)[:200]}")
        return body

    def _status_error(self, answer: Response) -> HTTPStatusError:
        """Our error for an error status (or a redirect, never followed: a redirected POST is
        no chat completion, and the right base URL is the user's to set)."""
        status = answer.status
        if status < 400:
            location = answer.header("location") or "nowhere"
            return HTTPStatusError(
                f"the model endpoint redirects (HTTP {status}) to {location}; "
                "pass the URL it should be as --client.base-url",
                status_code=status,
                body=_text(answer.content),
            )
        return HTTPStatusError(
            _detail(answer.content) or f"HTTP {status}",
            status_code=status,
            body=_text(answer.content),
            retry_after=parse_retry_after(answer.headers),
        )

    async def preflight(self, *, timeout: float = 5.0, fix: str = "--client.base-url") -> None:
        """Fail fast unless the endpoint speaks the API: `GET {base}/models` lists models.

        A 401/403 or a 429/5xx only warns (some endpoints guard `/models` differently from
        chat completions; the rollouts retry transient errors). When `base_url` lacks `/v1`
        and `{base}/v1/models` answers, the error says so. Plain GETs on the chat pool:
        the SDK's import alone would cost more than half the start-up budget of a run
        (docs/engine.md).

        Args:
            fix: The setting that changes the base URL, named in the messages (a hosted
                user's flag differs from `proctor eval`'s).

        Raises:
            ModelError: nothing answered at `base_url`.
            ConfigError: something answered, but not with an OpenAI-compatible model list.
        """
        url = self.config.base_url.rstrip("/")
        try:
            problem = await self._model_list_problem("/models", timeout)
        except HTTPConnectionError as e:
            cause = str(e) if e.names_fix else f"start it or pass {fix}"
            raise ModelError(f"cannot reach the model at {self.config.base_url}: {cause}") from e
        if problem is None:
            return
        if not url.endswith("/v1"):
            with_v1 = url + "/v1"
            try:
                guess_works = await self._model_list_problem("/v1/models", timeout) is None
            except HTTPConnectionError:
                guess_works = False  # no better guess: report the first problem
            if guess_works:
                raise ConfigError(
                    f"the endpoint at {self.config.base_url} does not speak the OpenAI API "
                    f"({problem}); did you mean {with_v1}? pass {fix} {with_v1}"
                )
        raise ConfigError(
            f"the endpoint at {self.config.base_url} does not speak the OpenAI API ({problem}); "
            f"pass {fix} with its OpenAI-compatible base URL (usually ending in /v1), "
            "or --client.no-preflight if it has no /models"
        )

    async def _model_list_problem(self, path: str, timeout: float) -> str | None:
        """None when `GET base + path` answers a JSON model list, else what was wrong with it."""
        answer = await self._http.request("GET", self._http.target(path), timeout=timeout)
        status, content = answer.status, answer.content
        if 300 <= status < 400:
            location = answer.header("location") or "nowhere"
            return f"GET /models answered a redirect (HTTP {status}) to {location}"
        if status in (401, 403):
            logger.warning(
                "the model at %s answered HTTP %s; is $%s set to a valid key?",
                self.config.base_url,
                status,
                self.config.api_key_var,
            )
            return None
        if status == 429 or status >= 500:
            logger.warning(
                "the model at %s answered GET /models with HTTP %s; going on",
                self.config.base_url,
                status,
            )
            return None
        if status >= 400:
            return f"GET /models answered HTTP {status}"
        try:
            body = json.loads(content)
        except ValueError:
            return "GET /models answered something other than JSON"
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            return "GET /models answered JSON that is not a model list"
        return None

    async def aclose(self) -> None:
        """Close the HTTP connections (a closed client may still be used: it reconnects)."""
        await self._http.aclose()


def is_retryable(error: BaseException) -> bool:
    """Whether a failed model request may succeed when sent again."""
    if isinstance(error, HTTPStatusError):
        return error.status_code in RETRYABLE_STATUS
    return isinstance(error, HTTPConnectionError)  # timeouts included


def _text(content: bytes) -> str:
    return content[:2000].decode("utf-8", errors="replace")


def _detail(content: bytes) -> str:
    """The message of an OpenAI-style error body, or the body's first line."""
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str) and error:
            return error
        if body.get("detail"):
            return str(body["detail"])
        if body.get("message"):
            return str(body["message"])
    text = _text(content).strip()
    return " ".join(text.split())[:300]


def _completion(body: dict[str, Any], *, latency_s: float) -> Completion:
    choice = body["choices"][0]
    raw_message = choice.get("message") or {}
    message: dict[str, Any] = {"role": "assistant", "content": raw_message.get("content")}
    if raw_message.get("tool_calls"):
        message["tool_calls"] = raw_message["tool_calls"]
    usage = body.get("usage") or {}
    return Completion(
        message=message,
        usage=TokenUsage(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        ),
        finish_reason=choice.get("finish_reason"),
        latency_s=latency_s,
    )


def _model_error(error: BaseException, attempts: int) -> ModelError:
    """Wrap a failed request as the one-line `ModelError` recorded on the episode."""
    if isinstance(error, ModelError):
        return error
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    if isinstance(error, HTTPStatusError):
        message = f"model request failed with HTTP {error.status_code}{tries}: {error}"
        return ModelError(message, status_code=error.status_code)
    if isinstance(error, HTTPConnectionError):
        return ModelError(f"model request failed{tries}: {error}")
    return ModelError(f"model request failed{tries}: {type(error).__name__}: {error}")
