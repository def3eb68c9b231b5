"""Tool use: Python functions offered to the model through the chat API's tool calling.

A tool is a plain (sync or async) Python function. Its JSON schema comes from its signature
(type hints) and its Google-style docstring (first paragraph = description, `Args:` = one
line per parameter). Calls run in-process under a timeout: async tools on the event loop,
sync tools in a worker thread (a sync tool that overruns its timeout is abandoned, not
killed, so keep tools short).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from proctor.envs._environment import Environment
from proctor.envs._episode import COMPLETED, MAX_TURNS, TOOL_ERROR, Episode
from proctor.envs._task import Task
from proctor.errors import ToolCallError
from proctor.models.types import ChatClient

logger = logging.getLogger(__name__)

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


def _json_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(options) == 1:
            return _json_type(options[0])
        return {"anyOf": [_json_type(a) for a in options]}
    if origin is Literal:
        return {"enum": list(typing.get_args(annotation))}
    if origin is not None:
        annotation = origin
    json_type = _JSON_TYPES.get(annotation)
    return {"type": json_type} if json_type else {}


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Description (first paragraph) and per-argument help from a Google-style docstring."""
    doc = inspect.cleandoc(doc)
    description = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    arg_help: dict[str, str] = {}
    match = re.search(r"^Args:\n((?:[ \t]+.*\n?)+)", doc, re.MULTILINE)
    if match:
        current = None
        for line in match.group(1).splitlines():
            entry = re.match(r"^\s{2,8}(\*{0,2}\w+)(?:\s*\(.*?\))?:\s*(.*)$", line)
            if entry:
                current = entry.group(1)
                arg_help[current] = entry.group(2).strip()
            elif current and line.strip():
                arg_help[current] += " " + line.strip()
    return description, arg_help


@dataclass(frozen=True, slots=True)
class Tool:
    """A Python function offered to the model, with the schema the chat API needs."""

    func: Callable[..., Any]
    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments."""
    is_async: bool

    @classmethod
    def from_function(cls, func: Callable[..., Any] | Tool, *, name: str | None = None) -> Tool:
        """Derive the tool's schema from `func`'s signature and docstring."""
        if isinstance(func, Tool):
            return func
        description, arg_help = _parse_docstring(func.__doc__ or "")
        try:
            hints = typing.get_type_hints(func)
        except Exception:  # annotations naming types only imported for type checking
            hints = {}
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param in inspect.signature(func).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            schema = _json_type(hints.get(param.name, Any))
            if param.name in arg_help:
                schema["description"] = arg_help[param.name]
            properties[param.name] = schema
            if param.default is param.empty:
                required.append(param.name)
        parameters = {"type": "object", "properties": properties, "required": required}
        return cls(
            func=func,
            name=name or func.__name__,
            description=description,
            parameters=parameters,
            is_async=inspect.iscoroutinefunction(func),
        )

    def schema(self) -> dict[str, Any]:
        """The OpenAI `tools=[...]` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    async def call(self, arguments: str | dict[str, Any], *, timeout: float) -> str:
        """Run the tool on JSON `arguments` and return its result as text.

        Raises:
            ToolCallError: bad arguments, the tool raised, or it ran past `timeout` seconds.
        """
        try:
            kwargs = json.loads(arguments or "{}") if isinstance(arguments, str) else arguments
        except json.JSONDecodeError as e:
            raise ToolCallError(f"arguments for {self.name} are not valid JSON: {e}") from e
        if not isinstance(kwargs, dict):
            raise ToolCallError(f"arguments for {self.name} must be a JSON object")
        try:
            if self.is_async:
                result = await asyncio.wait_for(self.func(**kwargs), timeout)
            else:
                result = await asyncio.wait_for(asyncio.to_thread(self.func, **kwargs), timeout)
        except TimeoutError as e:
            raise ToolCallError(f"tool {self.name} timed out after {timeout:g}s") from e
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise ToolCallError(f"tool {self.name} failed: {type(e).__name__}: {e}") from e
        if isinstance(result, str):
            return result
        return json.dumps(result, default=str)


class ToolEnv(Environment):
    """The model may call Python tools; the conversation ends when it answers without one.

    Each round of tool calls is answered with `role: tool` messages. A tool failure (bad
    arguments, an exception, a timeout) is told to the model as the tool's reply and counted
    in the `tool_errors` metric (`on_tool_error="reply"`), or ends the rollout with an error
    and stop condition `tool_error` (`on_tool_error="fail"`). The metric `tool_calls` counts
    the calls made. More than `max_tool_turns` rounds stops the conversation (`max_turns`).

    Args:
        tools: The functions offered (or `Tool`s).
        max_tool_turns: Most rounds of tool calls before the conversation is cut off.
        tool_timeout_s: Seconds one tool call may take.
        on_tool_error: Tell the model and go on (`"reply"`), or fail the rollout (`"fail"`).
        **kwargs: `name`, `taskset`, `rubric`, `system_prompt`, `description` as for
            `Environment`.
    """

    def __init__(
        self,
        *,
        tools: Sequence[Callable[..., Any] | Tool],
        max_tool_turns: int = 8,
        tool_timeout_s: float = 10.0,
        on_tool_error: Literal["reply", "fail"] = "reply",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tools = {t.name: t for t in (Tool.from_function(f) for f in tools)}
        self.tool_schemas = [t.schema() for t in self.tools.values()]
        self.max_tool_turns = max_tool_turns
        self.tool_timeout_s = tool_timeout_s
        self.on_tool_error = on_tool_error

    async def run_tool_call(self, call: dict[str, Any]) -> str:
        """Run one `tool_calls` entry and return its reply text.

        Raises:
            ToolCallError: the tool is unknown or failed.
        """
        function = call.get("function") or {}
        tool = self.tools.get(function.get("name", ""))
        if tool is None:
            raise ToolCallError(
                f"no tool named {function.get('name')!r}; available: {', '.join(self.tools)}"
            )
        return await tool.call(function.get("arguments") or "{}", timeout=self.tool_timeout_s)

    async def converse(self, task: Task, client: ChatClient, episode: Episode) -> None:
        calls_made = errors = tool_turns = 0
        metrics = episode.metrics
        metrics["tool_calls"] = 0
        metrics["tool_errors"] = 0
        while True:
            message = await self.ask_model(client, episode, tools=self.tool_schemas)
            calls = message.get("tool_calls")
            if not calls:
                episode.stop_condition = COMPLETED
                episode.is_completed = True
                return
            if tool_turns >= self.max_tool_turns:
                episode.stop_condition = MAX_TURNS
                episode.is_truncated = True
                return
            tool_turns += 1
            for call in calls:
                calls_made += 1
                metrics["tool_calls"] = calls_made
                try:
                    content = await self.run_tool_call(call)
                except ToolCallError as e:
                    errors += 1
                    metrics["tool_errors"] = errors
                    if self.on_tool_error == "fail":
                        episode.error = {
                            "type": "ToolCallError",
                            "message": str(e),
                            "stage": "tool",
                        }
                        episode.stop_condition = TOOL_ERROR
                        return
                    content = f"Error: {e}"
                episode.messages.append(
                    {"role": "tool", "tool_call_id": call.get("id", ""), "content": content}
                )
