"""The demo model over HTTP: response shape, determinism, errors, latency, the command."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from proctor.demo import DemoModelConfig, start_server
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http

Serve = Callable[..., Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Starts in-process demo models on free ports; returns their /v1 base URLs."""
    runners = []

    async def start(**options: Any) -> str:
        runner, url = await start_server(DemoModelConfig(port=0, **options))
        runners.append(runner)
        return url

    yield start
    for runner in runners:
        await runner.cleanup()


def _chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "my-model", "messages": [{"role": "user", "content": text}], **extra}


async def test_models_and_completion_shape(serve: Serve) -> None:
    url = await serve()
    async with httpx.AsyncClient(base_url=url) as http:
        models = (await http.get("/models")).json()
        assert models["object"] == "list" and models["data"][0]["object"] == "model"
        response = await http.post("/chat/completions", json=_chat("hello"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    assert isinstance(body["created"], int) and body["model"] == "my-model"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


async def test_replies_depend_only_on_seed_and_request(serve: Serve) -> None:
    prompt = "Reverse the following text character by character, and put the result inside "
    requests = [
        _chat(f"{prompt}<reversed_text> tags:\n\nSome words number {i}.") for i in range(30)
    ]
    url_a, url_b, url_other = await serve(seed=1), await serve(seed=1), await serve(seed=2)

    async def contents(url: str) -> list[str]:
        async with httpx.AsyncClient(base_url=url) as http:
            replies = [await http.post("/chat/completions", json=r) for r in requests]
        return [r.json()["choices"][0]["message"]["content"] for r in replies]

    first = await contents(url_a)
    assert first == await contents(url_b)
    assert first != await contents(url_other)


async def test_bad_requests_get_openai_style_400s(serve: Serve) -> None:
    url = await serve()
    async with httpx.AsyncClient(base_url=url) as http:
        for body in [b"{not json", b'{"messages": "hi"}', b'{"messages": [1], "stream": true}']:
            response = await http.post("/chat/completions", content=body)
            assert response.status_code == 400
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and error["message"]


async def test_max_tokens_truncates_with_finish_reason_length(serve: Serve) -> None:
    url = await serve()
    async with httpx.AsyncClient(base_url=url) as http:
        body = (await http.post("/chat/completions", json=_chat("hi", max_tokens=2))).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert len(body["choices"][0]["message"]["content"]) == 8


async def test_error_injection_answers_429_and_500(serve: Serve) -> None:
    url = await serve(error_rate=1.0)
    async with httpx.AsyncClient(base_url=url) as http:
        responses = [await http.post("/chat/completions", json=_chat("hi")) for _ in range(30)]
    statuses = {r.status_code for r in responses}
    assert statuses == {429, 500}
    for response in responses:
        assert response.json()["error"]["message"]
        if response.status_code == 429:
            assert response.headers["retry-after"] == "0"

    partial = await serve(error_rate=0.3, seed=4)
    async with httpx.AsyncClient(base_url=partial) as http:
        codes = [
            (await http.post("/chat/completions", json=_chat("hi"))).status_code for _ in range(60)
        ]
    assert 200 in codes and (429 in codes or 500 in codes)
    assert 5 < sum(c != 200 for c in codes) < 35


async def test_latency_is_waited_in_parallel(serve: Serve) -> None:
    # Concurrency, not speed: 30 requests of 1 s each would take 30 s one after another,
    # about 1 s side by side; the bound is half the serial time, so load cannot fail it.
    url = await serve(latency_ms=1000)
    limits = httpx.Limits(max_connections=100)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as http:
        started = time.monotonic()
        responses = await asyncio.gather(
            *(http.post("/chat/completions", json=_chat(f"hi {i}")) for i in range(30))
        )
        elapsed = time.monotonic() - started
    assert all(r.status_code == 200 for r in responses)
    assert elapsed >= 1.0
    assert elapsed < 15.0


def _start_cli(tmp_path: Path, *args: str) -> tuple[ManagedProcess, str]:
    port = free_port()
    proc = ManagedProcess(
        [*PROCTOR, "demo-model", "--host", "127.0.0.1", "--port", str(port), *args],
        tmp_path / "demo.log",
    ).start()
    url = f"http://127.0.0.1:{port}/v1"
    wait_http(f"{url}/models", proc=proc.proc)
    return proc, url


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_command_announces_itself_and_stops_cleanly(tmp_path: Path, sig: int) -> None:
    proc, url = _start_cli(tmp_path, "--latency-ms", "5", "--seed", "3")
    try:
        assert httpx.post(f"{url}/chat/completions", json=_chat("hi")).status_code == 200
        proc.signal(sig)
        assert proc.proc is not None
        assert proc.proc.wait(timeout=10) == 128 + sig  # 143, 130, 129: as a shell reports
    finally:
        proc.stop()
    assert proc.output().strip() == f"demo model serving on {url}"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--error-rate", "1.5"], "--error-rate"),
        (["--port", "http"], "--port"),
        (["--latency-ms", "-1"], "--latency-ms"),
        (["--frobnicate"], "unrecognized arguments"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args: list[str], says: str) -> None:
    done = subprocess.run(
        [*PROCTOR, "demo-model", *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and says in done.stderr
    assert done.stderr.startswith("proctor demo-model: ")


def test_a_busy_port_is_one_clear_line(tmp_path: Path) -> None:
    proc, url = _start_cli(tmp_path)
    try:
        port = url.split(":")[2].split("/")[0]
        done = subprocess.run(
            [*PROCTOR, "demo-model", "--port", port],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        proc.stop()
    assert done.returncode == 2
    assert "cannot listen on 127.0.0.1:" in done.stderr and "pick another --port" in done.stderr
    assert done.stderr.count("\n") == 1


async def test_rate_limit_answers_429_with_retry_after_above_it(serve: Serve) -> None:
    url = await serve(rate_limit=5)
    async with httpx.AsyncClient(base_url=url) as http:
        replies = await asyncio.gather(
            *(http.post("/chat/completions", json=_chat(f"hi {i}")) for i in range(12))
        )
        assert (await http.get("/models")).status_code == 200  # only chat counts
    statuses = [r.status_code for r in replies]
    assert 1 <= statuses.count(200) <= 6  # a burst of one second's worth, then refusals
    refused = [r for r in replies if r.status_code == 429]
    assert len(refused) >= 6
    for r in refused:
        assert int(r.headers["retry-after"]) >= 1
        assert 0 < float(r.headers["retry-after-ms"]) <= 1000
        assert r.json()["error"]["type"] == "rate_limit_error"
