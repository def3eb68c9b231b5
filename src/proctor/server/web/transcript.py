"""A stored sample as the sample page shows it: the transcript, rewards, usage and error.

Samples are stored exactly as clients sent them (`platform-api.md`, "A sample"), so every
field is read defensively: a missing or odd-typed field is shown as absent, never an error.
"""

from __future__ import annotations

import json
import math
from typing import Any

from proctor.contract import SAMPLE_FIELDS

# Top-level sample fields that are not reward-function scores: the contract's, plus the
# episode record's own keys, which other clients may send as a sample.
KNOWN_FIELDS = frozenset(SAMPLE_FIELDS) | {"messages", "ok", "id", "run", "rewards"}


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict):
                pieces.append(str(part.get("text", "") if part.get("type") == "text" else part))
            else:
                pieces.append(str(part))
        return "\n".join(pieces)
    return json.dumps(content, ensure_ascii=False, indent=2)


def _arguments(raw: Any) -> str:
    """Tool-call arguments pretty-printed when they are JSON."""
    if isinstance(raw, str):
        try:
            return json.dumps(json.loads(raw), ensure_ascii=False, indent=2)
        except ValueError:
            return raw
    return json.dumps(raw, ensure_ascii=False, indent=2)


def _tool_calls(message: dict[str, Any]) -> list[dict[str, str]]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    rendered = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        inner = call.get("function")
        function: dict[str, Any] = inner if isinstance(inner, dict) else call
        rendered.append(
            {
                "id": str(call.get("id") or ""),
                "name": str(function.get("name") or "?"),
                "arguments": _arguments(function.get("arguments", "")),
            }
        )
    return rendered


def transcript(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation: prompt then completion (or `messages`), one dict per message."""
    messages: list[Any] = []
    for key in ("prompt", "completion"):
        value = sample.get(key)
        if isinstance(value, str):
            messages.append({"role": "user" if key == "prompt" else "assistant", "content": value})
        elif isinstance(value, list):
            messages.extend(value)
    if not messages and isinstance(sample.get("messages"), list):
        messages = sample["messages"]
    rendered = []
    for message in messages:
        if not isinstance(message, dict):
            message = {"role": "unknown", "content": message}
        role = str(message.get("role") or "unknown")
        rendered.append(
            {
                "role": role,
                "name": message.get("name"),
                "content": _text(message.get("content")),
                "tool_calls": _tool_calls(message),
                "tool_call_id": message.get("tool_call_id"),
            }
        )
    return rendered


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def reward_scores(sample: dict[str, Any]) -> dict[str, float]:
    """Each reward function's score: the numeric top-level keys the contract leaves open."""
    return {
        key: number
        for key, value in sample.items()
        if key not in KNOWN_FIELDS and (number := _number(value)) is not None
    }


def numbers(value: Any) -> dict[str, Any]:
    """A dict field (metrics, timing, token usage) or an empty one."""
    return value if isinstance(value, dict) else {}


def error_message(error: Any) -> str | None:
    """The error's message, whatever shape the client sent it in."""
    if error in (None, {}, "", False):
        return None
    if isinstance(error, dict):
        kind = error.get("type") or error.get("error_type") or error.get("code")
        message = error.get("message") or error.get("error") or json.dumps(error)
        return f"{kind}: {message}" if kind else str(message)
    return str(error)


def preview(sample: dict[str, Any], length: int = 90) -> str:
    """The start of the model's last answer, for the samples table."""
    for message in reversed(transcript(sample)):
        if message["role"] == "assistant":
            text = message["content"] or ", ".join(c["name"] for c in message["tool_calls"])
            text = " ".join(text.split())
            return text if len(text) <= length else text[: length - 1] + "…"
    return ""
