"""The demo model's HTTP server: an OpenAI-compatible chat-completions endpoint on loopback.

Lean by design (aiohttp on uvloop, no per-request validation or logging) so that a
benchmark's hundreds of concurrent rollouts are limited by the engine, not by this stand-in.

An answer is a pure function of `--seed` and the conversation the request carries (each
message's role, text and tool calls, the offered tools' names, and the request's own `seed`
when it sends one): not of the order requests arrive in, how often a server saw them, the
model name, the sampling knobs or whether the reply streams. So two runners (`proctor eval`,
`vf-eval`) sending the same prompts get the same answers, from one server or from two, and a
run replays exactly; the rollouts of one task get one answer unless their requests carry
different `seed`s. Injected errors draw from their own seeded stream, so a retry can succeed.

`stream: true` answers as OpenAI streams chat completions: server-sent events of
`chat.completion.chunk`s (the role, the content in pieces, each tool call, the finish
reason), then a usage chunk when `stream_options.include_usage` asks for it, then
`data: [DONE]`.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import math
import random
import signal
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from proctor.demo.policy import respond
from proctor.errors import ConfigError

logger = logging.getLogger(__name__)

MODEL_ID = "proctor-demo"


class DemoModelConfig(BaseModel):
    """How the demo model serves."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """Interface to listen on (keep it on loopback)."""
    port: int = Field(default=8001, ge=0, le=65535)
    """TCP port; 0 picks a free one."""
    latency_ms: float = Field(default=0.0, ge=0.0)
    """Delay before every answer, in milliseconds (concurrent requests wait in parallel)."""
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Share of requests answered with an error: half 429 (`Retry-After: 0`), half 500."""
    seed: int = 0
    """Seeds the policies' mistakes and the error injection."""
    rate_limit: float | None = Field(default=None, gt=0)
    """Most chat completions answered per second (a token bucket holding one second's worth);
    above it, HTTP 429 with `Retry-After` / `retry-after-ms` saying when a slot frees up."""


def _json(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        headers=headers,
        content_type="application/json",
    )


def _error(status: int, message: str, type_: str, code: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    headers = {"Retry-After": "0"} if status == 429 else None
    return _json(body, status=status, headers=headers)


class _TokenBucket:
    """`rate` requests per second with bursts of up to one second's worth, like a provider's."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self._tokens = self.capacity
        self._at = time.monotonic()
        self.admitted = 0
        self.refused = 0

    def take(self) -> float:
        """0.0 when a request may go ahead, else the seconds until one may."""
        now = time.monotonic()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            self.admitted += 1
            return 0.0
        self.refused += 1
        return (1.0 - self._tokens) / self.rate


def _rate_limited(wait_s: float) -> web.Response:
    body = {
        "error": {
            "message": "Rate limit reached; retry after the time in Retry-After.",
            "type": "rate_limit_error",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    # Both spellings, as OpenAI sends them: whole seconds (HTTP) and milliseconds.
    headers = {
        "Retry-After": str(max(1, math.ceil(wait_s))),
        "retry-after-ms": f"{wait_s * 1000:.0f}",
    }
    return _json(body, status=429, headers=headers)


def _estimate_tokens(text: str) -> int:
    return len(text) // 4 + 1


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return ""


def conversation_key(payload: dict[str, Any]) -> bytes:
    """What decides an answer: each message's role, text and tool calls, the offered tools'
    names and the request's `seed`, in a canonical form (so clients that spell the same
    conversation differently, e.g. content as parts or `"tool_calls": []`, agree)."""
    messages = []
    for m in payload.get("messages") or []:
        calls = [
            [(c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments")]
            for c in m.get("tool_calls") or []
            if isinstance(c, dict)
        ]
        messages.append([m.get("role"), _content_text(m.get("content")), calls])
    tools = payload.get("tools")
    names = sorted(
        str((t.get("function") or {}).get("name"))
        for t in (tools if isinstance(tools, list) else [])
        if isinstance(t, dict)
    )
    seed = payload.get("seed")
    canonical = [messages, names, seed if isinstance(seed, int) else None]
    return json.dumps(canonical, ensure_ascii=False, separators=(",", ":")).encode()


def reply_seed(seed: int, payload: dict[str, Any]) -> int:
    """The policy generator's seed for a request: a pure function of `seed` and the
    request's conversation (`conversation_key`)."""
    digest = hashlib.blake2b(conversation_key(payload), digest_size=8, key=b"proctor-demo")
    return (seed << 64) ^ int.from_bytes(digest.digest(), "big")


_PIECE = 24
"""Characters of content per streamed chunk (so a client really assembles the deltas)."""


def _sse(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


def stream_events(
    head: dict[str, Any],
    message: dict[str, Any],
    finish_reason: str,
    usage: dict[str, int] | None,
) -> list[bytes]:
    """The SSE events of one streamed reply: role, content pieces, tool calls, the finish
    reason, a usage chunk (when `usage` is given; every earlier chunk then says
    `"usage": null`, as OpenAI's do), and `[DONE]`."""
    extra = {"usage": None} if usage is not None else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _sse({**head, "choices": [choice], **extra})

    content = message.get("content")
    # As OpenAI's streams open: an empty text, or null before tool calls.
    events = [chunk({"role": "assistant", "content": "" if content is not None else None})]
    content = content or ""
    events += [chunk({"content": content[i : i + _PIECE]}) for i in range(0, len(content), _PIECE)]
    for index, call in enumerate(message.get("tool_calls") or []):
        events.append(chunk({"tool_calls": [{"index": index, **call}]}))
    events.append(chunk({}, finish_reason))
    if usage is not None:
        events.append(_sse({**head, "choices": [], "usage": usage}))
    events.append(b"data: [DONE]\n\n")
    return events


class DemoModel:
    """The request handlers, holding the config and the error-injection stream."""

    def __init__(self, config: DemoModelConfig) -> None:
        self.config = config
        self._latency_s = config.latency_ms / 1000.0
        self._errors = random.Random(f"demo-errors:{config.seed}")
        self._ids = itertools.count(1)
        self.bucket = _TokenBucket(config.rate_limit) if config.rate_limit else None
        """The rate limiter (None without `rate_limit`); its counters tell what was refused."""

    def app(self) -> web.Application:
        """The aiohttp application serving `/v1`."""
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        return app

    async def models(self, request: web.Request) -> web.Response:
        """`GET /v1/models`: the one model this server pretends to be."""
        return _json(
            {
                "object": "list",
                "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "proctor"}],
            }
        )

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        """`POST /v1/chat/completions`, answered whole or, with `stream: true`, as SSE."""
        body = await request.read()
        if self.bucket is not None and (wait_s := self.bucket.take()):
            return _rate_limited(wait_s)  # refused at once, as a provider's gateway does
        if self._latency_s:
            await asyncio.sleep(self._latency_s)
        if self.config.error_rate and self._errors.random() < self.config.error_rate:
            if self._errors.random() < 0.5:
                return _error(429, "Injected rate limit; retry.", "rate_limit_error", "rate_limit")
            return _error(500, "Injected server error; retry.", "server_error")
        try:
            payload = json.loads(body)
        except ValueError:
            return _error(400, "The request body is not valid JSON.", "invalid_request_error")
        messages = payload.get("messages") if isinstance(payload, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return _error(
                400, "'messages' must be a list of message objects.", "invalid_request_error"
            )
        tools = payload.get("tools")
        rng = random.Random(reply_seed(self.config.seed, payload))
        message, finish_reason = respond(messages, tools if isinstance(tools, list) else None, rng)
        content = message.get("content") or ""
        max_tokens = payload.get("max_completion_tokens") or payload.get("max_tokens")
        if isinstance(max_tokens, int) and max_tokens > 0 and len(content) > 4 * max_tokens:
            message["content"] = content = content[: 4 * max_tokens]
            finish_reason = "length"
        prompt_tokens = sum(_estimate_tokens(_content_text(m.get("content"))) + 3 for m in messages)
        completion_tokens = _estimate_tokens(content)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        head = {
            "id": f"chatcmpl-demo{next(self._ids):x}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": payload.get("model") or MODEL_ID,
        }
        if payload.get("stream"):
            options = payload.get("stream_options")
            with_usage = isinstance(options, dict) and options.get("include_usage") is True
            head["object"] = "chat.completion.chunk"
            events = stream_events(head, message, finish_reason, usage if with_usage else None)
            return await self._stream(request, events)
        choice = {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        return _json({**head, "choices": [choice], "usage": usage})

    async def _stream(self, request: web.Request, events: list[bytes]) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        await response.write(b"".join(events))
        await response.write_eof()
        return response


async def start_server(
    config: DemoModelConfig, *, model: DemoModel | None = None
) -> tuple[web.AppRunner, str]:
    """Start serving; returns the runner (call `cleanup()` to stop) and the `/v1` base URL.

    Raises:
        ConfigError: the address cannot be listened on.
    """
    model = model or DemoModel(config)
    runner = web.AppRunner(model.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, backlog=1024)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise ConfigError(
            f"cannot listen on {config.host}:{config.port} ({e.strerror or e}); "
            "pick another --port or --host."
        ) from e
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}/v1"


def serve(config: DemoModelConfig, *, ready: Callable[[str], None] | None = None) -> int | None:
    """Serve until SIGTERM, SIGINT or SIGHUP (unless ignored, as under nohup), then stop
    cleanly; `ready(url)` runs once listening. Returns the signal that stopped it."""
    stopped_by: list[int] = []
    stops = [signal.SIGTERM, signal.SIGINT]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        stops.append(signal.SIGHUP)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def stopping(sig: int) -> None:
            stopped_by.append(sig)
            stop.set()

        for sig in stops:
            loop.add_signal_handler(sig, stopping, sig)
        runner, url = await start_server(config)
        logger.info("demo model serving on %s", url)
        if ready is not None:
            ready(url)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    try:
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # uvloop is optional: the default loop is only slower
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())
    return stopped_by[0] if stopped_by else None
