"""Tool use: schemas from signatures, execution with timeouts, failures as data."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from proctor.envs import Task, Taskset, Tool, ToolCallError, ToolEnv
from proctor.testing import ScriptedClient


def lookup(city: str, units: str = "metric", days: int | None = None) -> dict[str, Any]:
    """Look up the weather of a city.

    Args:
        city: Name of the city.
        units: "metric" or "imperial".
        days: How many days
            of forecast.
    """
    return {"city": city, "units": units}


async def slow_async(seconds: float) -> str:
    """Sleep asynchronously."""
    await asyncio.sleep(seconds)
    return "done"


def slow_sync(seconds: float) -> str:
    """Sleep in a thread."""
    time.sleep(seconds)
    return "done"


def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


def _call(name: str, arguments: str | dict[str, Any], call_id: str = "c1") -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        ],
    }


def _env(**kwargs: Any) -> ToolEnv:
    task = Task(index=0, prompt="go")
    options = {"tools": [lookup, slow_async, slow_sync, explode], "tool_timeout_s": 0.2}
    return ToolEnv(name="tools", taskset=Taskset([task]), **{**options, **kwargs})


def test_schema_comes_from_signature_and_docstring() -> None:
    schema = Tool.from_function(lookup).schema()
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "lookup"
    assert function["description"] == "Look up the weather of a city."
    params = function["parameters"]
    assert params["required"] == ["city"]
    assert params["properties"]["city"] == {"type": "string", "description": "Name of the city."}
    assert params["properties"]["days"] == {
        "type": "integer",
        "description": "How many days of forecast.",
    }


async def test_tool_calls_run_and_replies_go_back_to_the_model() -> None:
    env = _env()
    client = ScriptedClient([_call("lookup", {"city": "Oslo"}, "id-1"), "It is cold."])
    episode = await env.rollout(env.taskset.select(1)[0], client, episode_id="e", rollout_number=1)
    assert [m["role"] for m in episode.messages] == ["user", "assistant", "tool", "assistant"]
    tool_reply = episode.messages[2]
    assert tool_reply["tool_call_id"] == "id-1"
    assert json.loads(tool_reply["content"]) == {"city": "Oslo", "units": "metric"}
    assert client.requests[0][1] == env.tool_schemas
    assert episode.metrics == {"tool_calls": 1, "tool_errors": 0}
    assert episode.stop_condition == "completed" and episode.ok


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (_call("slow_async", {"seconds": 5}), "slow_async timed out after 0.2s"),
        (_call("slow_sync", {"seconds": 1}), "slow_sync timed out after 0.2s"),
        (_call("explode", {"reason": "kaput"}), "explode failed: ValueError: kaput"),
        (_call("nope", {}), "no tool named 'nope'"),
        (_call("lookup", "{not json"), "not valid JSON"),
        (_call("lookup", {"town": "Oslo"}), "lookup failed: TypeError"),
    ],
)
async def test_tool_failures_are_told_to_the_model_and_counted(
    call: dict[str, Any], message: str
) -> None:
    env = _env()
    client = ScriptedClient([call, "sorry"])
    episode = await env.rollout(env.taskset.select(1)[0], client, episode_id="e", rollout_number=1)
    assert episode.ok, "a tool failure is the model's problem to handle, not a failed rollout"
    assert message in episode.messages[2]["content"]
    assert episode.messages[2]["content"].startswith("Error: ")
    assert episode.metrics == {"tool_calls": 1, "tool_errors": 1}


async def test_on_tool_error_fail_ends_the_rollout_with_an_error() -> None:
    env = _env(on_tool_error="fail")
    client = ScriptedClient([_call("explode", {"reason": "kaput"})])
    episode = await env.rollout(env.taskset.select(1)[0], client, episode_id="e", rollout_number=1)
    assert episode.stop_condition == "tool_error"
    assert episode.error == {
        "type": "ToolCallError",
        "message": "tool explode failed: ValueError: kaput",
        "stage": "tool",
    }
    assert episode.metrics["tool_errors"] == 1


async def test_too_many_tool_rounds_truncate() -> None:
    env = _env(max_tool_turns=2)
    client = ScriptedClient(lambda messages, tools: _call("lookup", {"city": "Rome"}))
    episode = await env.rollout(env.taskset.select(1)[0], client, episode_id="e", rollout_number=1)
    assert episode.num_turns == 3
    assert episode.metrics["tool_calls"] == 2
    assert episode.stop_condition == "max_turns" and episode.is_truncated


async def test_tool_call_raises_tool_call_error_directly() -> None:
    with pytest.raises(ToolCallError, match="must be a JSON object"):
        await Tool.from_function(lookup).call("[1, 2]", timeout=1)
