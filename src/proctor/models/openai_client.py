"""The OpenAI-compatible chat client: one `AsyncOpenAI` over aiohttp, our own retries.

The SDK's own retries are off (`max_retries=0`) so that one policy — exponential backoff with
jitter on 429 / 5xx / connection errors, honouring `Retry-After` — applies to every request
and is visible in our logs. Responses are read as raw JSON rather than parsed into the SDK's
pydantic models: an engine keeping hundreds of rollouts in flight spends most of its CPU on
the client, and the plain dict is all an environment needs.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from proctor.errors import ModelError
from proctor.models.config import ClientConfig, SamplingConfig
from proctor.models.retry import RetryPolicy, is_retryable
from proctor.models.types import Completion, TokenUsage

if TYPE_CHECKING:
    from openai import AsyncOpenAI

logger = logging.getLogger(__name__)

PLACEHOLDER_API_KEY = "proctor-no-key"
"""Sent when the key variable is unset: local endpoints such as the demo model need none."""


class OpenAIChatClient:
    """A `ChatClient` for any OpenAI-compatible `/chat/completions` endpoint.

    Args:
        model: Model name sent with every request.
        client: Endpoint, key, headers, timeout and retry settings.
        sampling: Sampling parameters sent with every request.
        max_connections: Upper bound of open HTTP connections (the run's concurrency).
    """

    def __init__(
        self,
        *,
        model: str,
        client: ClientConfig | None = None,
        sampling: SamplingConfig | None = None,
        max_connections: int = 1000,
    ) -> None:
        import httpx2
        from openai import AsyncOpenAI, DefaultAioHttpClient

        self.model = model
        self.config = client or ClientConfig()
        self._request_args = (sampling or SamplingConfig()).request_args()
        self._retry = RetryPolicy(
            max_retries=self.config.max_retries,
            base_delay=self.config.retry_base_delay,
            max_delay=self.config.retry_max_delay,
        )
        # aiohttp's connection pool costs a fraction of httpx's per request (bench/README.md).
        limits = httpx2.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._response_type = httpx2.Response
        self._openai: AsyncOpenAI = AsyncOpenAI(
            base_url=self.config.base_url,
            api_key=self.config.api_key() or PLACEHOLDER_API_KEY,
            default_headers=self.config.headers or None,
            timeout=self.config.timeout,
            max_retries=0,
            http_client=DefaultAioHttpClient(timeout=self.config.timeout, limits=limits),
        )

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        """Request one assistant turn, retrying transient failures.

        Raises:
            ModelError: the request failed for good (a non-retryable status, or retries spent).
        """
        started = time.perf_counter()
        try:
            body = await self._request(messages, tools)
        except Exception as first:
            if not is_retryable(first) or self._retry.max_retries == 0:
                raise _model_error(first, attempts=1) from first
            body = await self._retry.run(
                lambda: self._request(messages, tools), first, _model_error
            )
        return _completion(body, latency_s=time.perf_counter() - started)

    async def _request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "messages": messages, **self._request_args}
        if tools is not None:
            payload["tools"] = tools
        # The SDK's `chat.completions.create` first walks the messages through its TypedDict
        # transforms (about half its CPU per request); the body is plain JSON already, so we
        # hand the client the bytes and take the response as it came.
        response = await self._openai.post(
            "/chat/completions", cast_to=self._response_type, content=json.dumps(payload).encode()
        )
        try:
            body = json.loads(response.content)
        except ValueError as e:
            raise ModelError(f"the model endpoint returned invalid JSON: {e}") from e
        if not isinstance(body, dict) or not body.get("choices"):
            raise ModelError(f"the model endpoint returned no choices: {str(body)[:200]}")
        return body

    async def preflight(self, *, timeout: float = 5.0) -> None:
        """Fail fast when the endpoint does not answer at all (`GET /models`).

        Any HTTP answer counts as reachable; a 401/403 only warns, since some endpoints guard
        `/models` differently from chat completions.

        Raises:
            ModelError: nothing answered at `base_url`.
        """
        import openai

        url = self.config.base_url
        try:
            await self._openai.with_options(timeout=timeout).models.list()
        except openai.APIStatusError as e:
            if e.status_code in (401, 403):
                logger.warning(
                    "the model at %s answered HTTP %s; is $%s set to a valid key?",
                    url,
                    e.status_code,
                    self.config.api_key_var,
                )
        except openai.APIConnectionError as e:
            raise ModelError(
                f"cannot reach the model at {url}: start it or pass --client.base-url"
            ) from e

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._openai.close()


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


def _model_error(error: BaseException, *, attempts: int) -> ModelError:
    """Wrap a failed request as the one-line `ModelError` recorded on the episode."""
    if isinstance(error, ModelError):
        return error
    status = getattr(error, "status_code", None)
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    if status is not None:
        detail = getattr(error, "message", None) or str(error)
        message = f"model request failed with HTTP {status}{tries}: {detail}"
        return ModelError(message, status_code=status)
    return ModelError(f"model request failed{tries}: {type(error).__name__}: {error}")
