"""The OpenAI-compatible client over real loopback HTTP: retries, Retry-After, errors, usage."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from proctor.errors import ConfigError, HTTPConnectionError, HTTPStatusError, ModelError
from proctor.models.config import ClientConfig, SamplingConfig
from proctor.models.openai_client import PLACEHOLDER_API_KEY, OpenAIChatClient
from tests.support.procs import free_port

MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


def ok_body(content: str = "4") -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }


@dataclass
class Script:
    """A scripted endpoint: answers in order (status, headers, body); the last one repeats."""

    answers: list[tuple[int, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    delay_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    headers: list[Any] = field(default_factory=list)


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[str, Script]]:
    script = Script()

    async def chat(request: web.Request) -> web.Response:
        script.arrivals.append(time.monotonic())
        script.requests.append(await request.json())
        script.headers.append(request.headers.copy())  # case-insensitive
        if script.delay_s:
            await asyncio.sleep(script.delay_s)
        index = min(len(script.requests) - 1, len(script.answers) - 1)
        status, headers, body = script.answers[index]
        return web.json_response(body, status=status, headers=headers)

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<html>a web page</html>", content_type="text/html")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/html/models", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}/v1", script
    await runner.cleanup()


def make_client(url: str, **overrides: Any) -> OpenAIChatClient:
    config = ClientConfig(base_url=url, retry_base_delay=0.01, retry_max_delay=2.0, **overrides)
    return OpenAIChatClient(model="m", client=config, sampling=SamplingConfig(temperature=0.5))


Client = Callable[..., OpenAIChatClient]


async def test_completion_returns_message_usage_and_sends_sampling(
    endpoint: tuple[str, Script], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, script = endpoint
    script.answers = [(200, {}, ok_body("four"))]
    monkeypatch.setenv("MY_KEY", "sk-test-123")
    client = make_client(url, api_key_var="MY_KEY", headers={"X-Team": "evals"})
    try:
        completion = await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert completion.message == {"role": "assistant", "content": "four"}
    assert completion.usage.to_dict() == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
    }
    assert completion.finish_reason == "stop"
    sent = script.requests[0]
    assert sent["model"] == "m" and sent["messages"] == MESSAGES and sent["temperature"] == 0.5
    assert "max_tokens" not in sent  # unset sampling fields are not sent
    assert script.headers[0]["Authorization"] == "Bearer sk-test-123"
    assert script.headers[0]["X-Team"] == "evals"


async def test_missing_key_variable_sends_placeholder(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    script.answers = [(200, {}, ok_body())]
    client = make_client(url, api_key_var="PROCTOR_TEST_UNSET_KEY_VAR")
    try:
        await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert script.headers[0]["Authorization"] == f"Bearer {PLACEHOLDER_API_KEY}"


async def test_tools_and_tool_calls_pass_through(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    call = {"id": "t1", "type": "function", "function": {"name": "calc", "arguments": "{}"}}
    body = ok_body()
    body["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": [call]}
    script.answers = [(200, {}, body)]
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]
    client = make_client(url)
    try:
        completion = await client.complete(MESSAGES, tools=tools)
    finally:
        await client.aclose()
    assert script.requests[0]["tools"] == tools
    assert completion.message["tool_calls"] == [call]


async def test_429_and_500_are_retried_until_success(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    error = {"error": {"message": "busy"}}
    script.answers = [(429, {}, error), (500, {}, error), (503, {}, error), (200, {}, ok_body())]
    client = make_client(url)
    try:
        completion = await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert completion.message["content"] == "4"
    assert len(script.requests) == 4


async def test_retry_after_is_honoured(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    script.answers = [(429, {"Retry-After": "0.6"}, {"error": {}}), (200, {}, ok_body())]
    client = make_client(url)  # backoff alone would wait ~10 ms
    try:
        await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert script.arrivals[1] - script.arrivals[0] >= 0.55


async def test_client_error_fails_at_once(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    script.answers = [(400, {}, {"error": {"message": "bad messages"}})]
    client = make_client(url)
    try:
        with pytest.raises(ModelError) as caught:
            await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert len(script.requests) == 1
    assert caught.value.status_code == 400
    assert "HTTP 400" in str(caught.value)


async def test_retries_are_bounded(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    script.answers = [(500, {}, {"error": {"message": "down"}})]
    client = make_client(url, max_retries=3)
    try:
        with pytest.raises(ModelError) as caught:
            await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert len(script.requests) == 4
    assert caught.value.status_code == 500
    assert "after 4 attempts" in str(caught.value)


async def test_invalid_body_is_a_model_error(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    script.answers = [(200, {}, {"choices": []})]
    client = make_client(url)
    try:
        with pytest.raises(ModelError, match="no choices"):
            await client.complete(MESSAGES)
    finally:
        await client.aclose()


async def test_connection_refused_is_retried_then_fails() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = make_client(url, max_retries=2)
    started = time.monotonic()
    try:
        with pytest.raises(ModelError, match="after 3 attempts"):
            await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert time.monotonic() - started < 5


async def test_preflight_accepts_a_json_model_list(endpoint: tuple[str, Script]) -> None:
    url, _ = endpoint
    client = make_client(url)
    try:
        await client.preflight()
    finally:
        await client.aclose()


async def preflight_error(url: str) -> str:
    client = make_client(url)
    try:
        with pytest.raises(ConfigError) as caught:
            await client.preflight()
    finally:
        await client.aclose()
    return str(caught.value)


async def test_preflight_asks_did_you_mean_v1(endpoint: tuple[str, Script]) -> None:
    url, _ = endpoint
    base = url.removesuffix("/v1")
    assert await preflight_error(base) == (
        f"the endpoint at {base} does not speak the OpenAI API (GET /models answered HTTP 404); "
        f"did you mean {url}? pass --client.base-url {url}"
    )


async def test_preflight_refuses_what_is_not_a_model_list(endpoint: tuple[str, Script]) -> None:
    url, _ = endpoint
    html = url.removesuffix("/v1") + "/html"
    message = await preflight_error(html)
    assert message.startswith(f"the endpoint at {html} does not speak the OpenAI API (GET /models")
    assert "did you mean" not in message and "pass --client.base-url" in message
    missing = url + "/nothing"
    assert "answered HTTP 404); pass --client.base-url" in await preflight_error(missing)


async def test_preflight_names_the_unreachable_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    client = make_client(url)
    try:
        with pytest.raises(ModelError) as caught:
            await client.preflight(timeout=2.0)
    finally:
        await client.aclose()
    assert (
        str(caught.value) == f"cannot reach the model at {url}: start it or pass --client.base-url"
    )


def test_sampling_extras_pass_through() -> None:
    sampling = SamplingConfig.model_validate({"max_tokens": 9, "top_k": 5})
    assert sampling.request_args() == {"max_tokens": 9, "top_k": 5}
    assert json.dumps(SamplingConfig().request_args()) == "{}"


async def test_per_request_timeout_is_retried_then_fails(endpoint: tuple[str, Script]) -> None:
    url, script = endpoint
    script.answers = [(200, {}, ok_body())]
    script.delay_s = 0.8
    client = make_client(url, timeout=0.2, max_retries=1)
    started = time.monotonic()
    try:
        with pytest.raises(ModelError, match=r"after 2 attempts: no answer .* within 0.2 s"):
            await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert len(script.requests) == 2
    assert time.monotonic() - started < 0.8 * 2


@pytest.mark.parametrize("status", [400, 401, 404, 429, 503])
async def test_status_failures_are_proctors_own_errors(
    endpoint: tuple[str, Script], status: int
) -> None:
    """No SDK on the path: the status, the body and Retry-After are on proctor's error."""
    url, script = endpoint
    script.answers = [(status, {"Retry-After": "7"}, {"error": {"message": "nope"}})]
    client = make_client(url, max_retries=0)
    try:
        with pytest.raises(ModelError) as caught:
            await client.complete(MESSAGES)
    finally:
        await client.aclose()
    cause = caught.value.__cause__
    assert isinstance(cause, HTTPStatusError)
    assert cause.status_code == status and cause.retry_after == 7.0
    assert json.loads(cause.body) == {"error": {"message": "nope"}}
    assert str(caught.value) == f"model request failed with HTTP {status}: nope"
    assert caught.value.status_code == status


async def test_a_refused_connection_is_proctors_connection_error() -> None:
    client = make_client(f"http://127.0.0.1:{free_port()}/v1", max_retries=0)
    try:
        with pytest.raises(ModelError) as caught:
            await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert type(caught.value.__cause__) is HTTPConnectionError
    assert str(caught.value).endswith("(Connection refused)")
