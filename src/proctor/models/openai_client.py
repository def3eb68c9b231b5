"""The OpenAI-compatible chat client: chat completions over lean HTTP/1.1, errors from the SDK.

Chat completions are the hot path: an engine keeping hundreds of rollouts in flight spent
most of its CPU inside the `openai` SDK's request pipeline (options, headers, transport
wrappers), about as much again as everything else per rollout, and then, below the SDK,
half of it inside aiohttp's client pipeline. So that one request is a POST of JSON bytes on
a lean keep-alive connection pool (`proctor.models.http`), read back as a dict. The
boundary keeps the SDK's semantics: a failed request raises the very exception the SDK
would (`openai.RateLimitError`, `openai.APIConnectionError`, ...), built by the SDK itself
from the response, so retries, error messages and `Retry-After` handling are unchanged;
`openai` is imported only once a request fails. The preflight (`GET /models` must list
models) is a plain GET on the same pool.

Our own retries apply — exponential backoff with jitter on 429 / 5xx / connection errors,
honouring `Retry-After` — and each attempt takes a slot of the `AdaptiveLimiter`, which lowers
the requests in flight on sustained 429s.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from proctor.errors import ConfigError, ModelError
from proctor.models.config import ClientConfig, SamplingConfig
from proctor.models.http import HTTPClient, HTTPConnectionError, Response
from proctor.models.limiter import AdaptiveLimiter
from proctor.models.retry import RetryPolicy, is_retryable, retry_after_seconds
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
        self._request_args = (sampling or SamplingConfig()).request_args()
        self._retry = RetryPolicy(
            max_retries=self.config.max_retries,
            base_delay=self.config.retry_base_delay,
            max_delay=self.config.retry_max_delay,
        )
        self.limiter = AdaptiveLimiter(max_connections, adaptive=self.config.adaptive_concurrency)
        """The requests in flight and their current cap (see `proctor.models.limiter`)."""
        self._max_connections = max_connections
        self._url = self.config.base_url.rstrip("/") + "/chat/completions"
        self._headers = {
            "Authorization": f"Bearer {self.config.api_key() or PLACEHOLDER_API_KEY}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            **self.config.all_headers(),
        }
        self._http = self._new_http()
        self._chat_target = self._http.target("/chat/completions")
        self._openai: AsyncOpenAI | None = None

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        """Request one assistant turn, retrying transient failures.

        Raises:
            ModelError: the request failed for good (a non-retryable status, or retries spent).
        """
        started = time.perf_counter()
        try:
            body = await self._attempt(messages, tools)
        except Exception as first:
            if not is_retryable(first) or self._retry.max_retries == 0:
                raise _model_error(first, attempts=1) from first
            body = await self._retry.run(
                lambda: self._attempt(messages, tools), first, _model_error
            )
        return _completion(body, latency_s=time.perf_counter() - started)

    async def _attempt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        # A slot per attempt, not per call: a request waiting out its backoff holds none.
        sent_at = await self.limiter.acquire()
        rate_limited, retry_after = False, None
        try:
            return await self._request(messages, tools)
        except Exception as e:
            if getattr(e, "status_code", None) == 429:
                rate_limited, retry_after = True, retry_after_seconds(e)
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
        try:
            response = await self._http.request(
                "POST", self._chat_target, json.dumps(payload).encode()
            )
        except (TimeoutError, HTTPConnectionError) as e:
            raise self._connection_error(e) from e
        if response.status >= 400:
            raise self._status_error(response)
        try:
            body = json.loads(response.content)
        except ValueError as e:
            raise ModelError(f"the model endpoint returned invalid JSON: {e}") from e
        if not isinstance(body, dict) or not body.get("choices"):
            raise ModelError(f"the model endpoint returned no choices: {str(body)[:200]}")
        return body

    def _new_http(self) -> HTTPClient:
        try:
            return HTTPClient(
                self.config.base_url,
                headers=self._headers,
                timeout=self.config.timeout,
                max_connections=self._max_connections,
            )
        except ValueError as e:
            raise ConfigError(f"{e}; fix --client.headers or ${self.config.headers_var}") from e

    def _sdk(self) -> AsyncOpenAI:
        """The SDK client, made on first use (it builds the errors of failed requests)."""
        if self._openai is None:
            from openai import AsyncOpenAI

            self._openai = AsyncOpenAI(
                base_url=self.config.base_url,
                api_key=self.config.api_key() or PLACEHOLDER_API_KEY,
                default_headers=self.config.all_headers() or None,
                timeout=self.config.timeout,
                max_retries=0,
            )
        return self._openai

    def _status_error(self, answer: Response) -> Exception:
        """The exception the SDK raises for this answer, built by the SDK from it."""
        import httpx2

        response = httpx2.Response(
            answer.status,
            headers=answer.headers,
            content=answer.content,
            request=httpx2.Request("POST", self._url),
        )
        return self._sdk()._make_status_error_from_response(response)

    def _connection_error(self, error: BaseException) -> Exception:
        """`openai.APITimeoutError` or `openai.APIConnectionError`, as the SDK would raise."""
        import httpx2
        import openai

        request = httpx2.Request("POST", self._url)
        if isinstance(error, TimeoutError):
            return openai.APITimeoutError(request=request)
        return openai.APIConnectionError(message=f"Connection error: {error}", request=request)

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
        except (TimeoutError, HTTPConnectionError) as e:
            raise ModelError(
                f"cannot reach the model at {self.config.base_url}: start it or pass {fix}"
            ) from e
        if problem is None:
            return
        if not url.endswith("/v1"):
            with_v1 = url + "/v1"
            try:
                guess_works = await self._model_list_problem("/v1/models", timeout) is None
            except (TimeoutError, HTTPConnectionError):
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
        """Close the HTTP connection pools."""
        await self._http.aclose()
        self._http = self._new_http()  # a closed client may still be used: it reconnects
        if self._openai is not None:
            await self._openai.close()
            self._openai = None


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
