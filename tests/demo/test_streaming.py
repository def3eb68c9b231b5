"""The demo model streams as OpenAI does, and its answers are a pure function of its seed
and the conversation: checked with the real `openai` SDK over HTTP, and across two servers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from proctor.demo import DemoModelConfig, start_server
from proctor.envs import load_environment
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http

REVERSE = "Reverse the following text character by character, and put the result inside "


def _reverse_prompt(i: int) -> list[dict[str, Any]]:
    text = f"{REVERSE}<reversed_text> tags:\n\nSome words, number {i}."
    return [{"role": "user", "content": text}]


@pytest.fixture
async def demo_url() -> AsyncIterator[str]:
    runner, url = await start_server(DemoModelConfig(port=0, seed=5))
    yield url
    await runner.cleanup()


async def _sdk_stream(client: AsyncOpenAI, **request: Any) -> tuple[str, Any, Any, list[Any]]:
    """(content, finish_reason, usage, tool call deltas) assembled from a streamed reply."""
    stream = await client.chat.completions.create(model="proctor-demo", stream=True, **request)
    content, finish, usage, calls = "", None, None, []
    async for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        usage = chunk.usage or usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            calls += choice.delta.tool_calls or []
    return content, finish, usage, calls


async def test_the_openai_sdk_streams_the_same_answer_it_gets_whole(demo_url: str) -> None:
    async with AsyncOpenAI(base_url=demo_url, api_key="demo", max_retries=0) as client:
        for i in range(5):
            messages = _reverse_prompt(i)
            whole = await client.chat.completions.create(model="proctor-demo", messages=messages)
            content, finish, usage, _ = await _sdk_stream(
                client, messages=messages, stream_options={"include_usage": True}
            )
            assert content == whole.choices[0].message.content
            assert content.startswith("<reversed_text>") and len(content) > 24  # several pieces
            assert finish == whole.choices[0].finish_reason == "stop"
            assert usage is not None and usage.model_dump() == whole.usage.model_dump()
        # Without include_usage no usage chunk comes.
        assert (await _sdk_stream(client, messages=_reverse_prompt(0)))[2] is None
        # A length cut streams with finish_reason "length".
        cut = await _sdk_stream(client, messages=_reverse_prompt(0), max_tokens=2)
        assert cut[1] == "length" and len(cut[0]) == 8


async def test_a_tool_call_streams_as_one_delta_the_sdk_assembles(demo_url: str) -> None:
    env = load_environment("tool-calc", num_tasks=3)
    async with AsyncOpenAI(base_url=demo_url, api_key="demo", max_retries=0) as client:
        # The demo calls the calculator on most tasks; find one it does for this seed.
        found = []
        for task in env.taskset.select(3):
            messages = [{"role": "user", "content": task.prompt or ""}]
            _, finish, _, calls = await _sdk_stream(
                client, messages=messages, tools=env.tool_schemas
            )
            if finish == "tool_calls":
                found = calls
                break
    assert found, "the demo model called no tool on three tool-calc tasks"
    (call,) = found
    assert call.index == 0 and call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "calculator"
    assert "expression" in json.loads(call.function.arguments)


async def test_the_sdks_stream_helper_assembles_a_tool_call_as_verifiers_reads_it(
    demo_url: str,
) -> None:
    """verifiers' harnesses read a turn through the SDK's `ChatCompletionStream` (with
    `include_usage`) and fail a turn whose stream has no finish reason."""
    env = load_environment("tool-calc", num_tasks=3)
    async with AsyncOpenAI(base_url=demo_url, api_key="demo", max_retries=0) as client:
        finals = []
        for task in env.taskset.select(3):
            async with client.chat.completions.stream(
                model="proctor-demo",
                messages=[{"role": "user", "content": task.prompt or ""}],
                tools=env.tool_schemas,
                stream_options={"include_usage": True},
            ) as stream:
                finals.append(await stream.get_final_completion())
    assert all(f.choices[0].finish_reason is not None and f.usage for f in finals)
    called = [f for f in finals if f.choices[0].finish_reason == "tool_calls"]
    assert called, "the demo model called no tool on three tool-calc tasks"
    assert not called[0].choices[0].message.content
    (call,) = called[0].choices[0].message.tool_calls or []
    assert call.function.name == "calculator" and json.loads(call.function.arguments)


async def test_the_sse_wire_ends_with_done_and_a_usage_chunk(demo_url: str) -> None:
    body = {
        "model": "m",
        "messages": _reverse_prompt(1),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with httpx.AsyncClient(base_url=demo_url) as http:
        response = await http.post("/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [e for e in response.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


# --- determinism across two server processes ----------------------------------------------


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[str, str]]:
    procs, urls = [], []
    try:
        for i in range(2):
            port = free_port()
            proc = ManagedProcess(
                [*PROCTOR, "demo-model", "--port", str(port)], tmp_path / f"demo{i}.log"
            ).start()
            procs.append(proc)
            urls.append(f"http://127.0.0.1:{port}/v1")
            wait_http(f"{urls[-1]}/models", proc=proc.proc)
        yield urls[0], urls[1]
    finally:
        for proc in procs:
            proc.stop()


def test_two_servers_at_the_default_seed_give_the_same_answers_in_any_order(
    two_servers: tuple[str, str],
) -> None:
    first_url, second_url = two_servers
    requests = [{"model": "a", "messages": _reverse_prompt(i)} for i in range(20)]

    def answers(url: str, order: list[int], **extra: Any) -> dict[int, str]:
        out: dict[int, str] = {}
        with httpx.Client(base_url=url) as http:
            for i in order:
                body = {**requests[i], **extra}
                reply = http.post("/chat/completions", json=body)
                assert reply.status_code == 200, reply.text
                out[i] = reply.json()["choices"][0]["message"]["content"]
        return out

    forward = answers(first_url, list(range(20)))
    # The same server again, backwards (a second run against a long-lived server) ...
    assert answers(first_url, list(range(19, -1, -1))) == forward
    # ... another server process, another model name and sampling: the same answers.
    assert answers(second_url, list(range(20)), model="b", temperature=0.7) == forward
    assert len(set(forward.values())) == 20
    # The request's own seed is part of the request.
    seeded = answers(second_url, list(range(20)), seed=11)
    assert seeded != forward and seeded == answers(first_url, list(range(20)), seed=11)
