"""A stored sample as the sample page shows it: the transcript, rewards, usage and error.

Samples are stored exactly as clients sent them (`platform-api.md`, "A sample"), so every
field is read defensively: a missing or odd-typed field is shown as absent, never an error.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from proctor.contract import SAMPLE_FIELDS

# Top-level sample fields that are not reward-function scores: the contract's, plus the
# episode record's own keys, which other clients may send as a sample.
KNOWN_FIELDS = frozenset(SAMPLE_FIELDS) | {"messages", "ok", "id", "run", "rewards"}


TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
"""Content-list part types that hold text (chat completions' and the responses API's)."""

IMAGE_TYPES = frozenset({"png", "jpeg", "jpg", "gif", "webp", "avif", "bmp"})
"""Image formats shown inline (as data: URLs, never fetched from elsewhere)."""

_DATA_URL = re.compile(r"data:image/([a-z0-9.+-]+);base64,[A-Za-z0-9+/=\s]*\Z", re.IGNORECASE)

ELIDE_AT = 200
"""Strings in a part that is neither text nor image are cut to this many characters."""


def _image_source(part: dict[str, Any]) -> str | None:
    """Where an image part's picture is: `image_url` (a string or `{url}`), `image`, or
    a base64 `source` (`{type: base64, media_type, data}`)."""
    url = part.get("image_url", part.get("image"))
    if isinstance(url, dict):
        url = url.get("url")
    source = part.get("source")
    if url is None and isinstance(source, dict) and source.get("type") == "base64":
        media, data = source.get("media_type"), source.get("data")
        if isinstance(media, str) and isinstance(data, str):
            url = f"data:{media};base64,{data}"
    return url if isinstance(url, str) else None


def elided(value: Any, at: int = ELIDE_AT) -> Any:
    """A JSON value with every string longer than `at` cut, so a base64 blob never fills
    a page."""
    if isinstance(value, str):
        return value if len(value) <= at else f"{value[:40]}… ({len(value):,} characters)"
    if isinstance(value, dict):
        return {key: elided(item, at) for key, item in value.items()}
    if isinstance(value, list):
        return [elided(item, at) for item in value]
    return value


def part(raw: Any) -> dict[str, Any]:
    """One part of a message's content: `{"kind": "text", "text"}`, `{"kind": "image",
    "src", "text"}` (`src` a data: URL, or None with `text` saying why it is not shown), or
    `{"kind": "other", "text"}` (the part as JSON, long strings cut)."""
    if isinstance(raw, str):
        return {"kind": "text", "text": raw, "src": None}
    if not isinstance(raw, dict):
        return {"kind": "other", "text": json.dumps(elided(raw), ensure_ascii=False), "src": None}
    kind = raw.get("type")
    if kind in TEXT_PARTS and isinstance(raw.get("text"), str):
        return {"kind": "text", "text": raw["text"], "src": None}
    if kind in ("image_url", "input_image", "image") or "image_url" in raw:
        url = _image_source(raw)
        match = _DATA_URL.match(url) if url else None
        if match and match.group(1).lower() in IMAGE_TYPES:
            return {"kind": "image", "text": "", "src": url}
        if url and url.startswith(("http://", "https://")):
            why = f"image at {url[:300]} (not loaded: the dashboard loads nothing from elsewhere)"
        else:
            why = "image in a form the dashboard does not show; see the raw sample"
        return {"kind": "image", "text": why, "src": None}
    return {"kind": "other", "text": json.dumps(elided(raw), ensure_ascii=False), "src": None}


def parts(content: Any) -> list[dict[str, Any]]:
    """Message content as a list of parts (see `part`); none for no content."""
    if content is None or content == "":
        return []
    if isinstance(content, list):
        return [part(item) for item in content]
    if isinstance(content, str):
        return [part(content)]
    return [{"kind": "other", "text": json.dumps(elided(content), ensure_ascii=False), "src": None}]


def _text(content: Any) -> str:
    """Message content as text: its text parts, and a placeholder for each other part."""
    pieces = []
    for piece in parts(content):
        if piece["kind"] == "text":
            pieces.append(piece["text"])
        else:
            pieces.append("[image]" if piece["kind"] == "image" else piece["text"])
    return "\n".join(pieces)


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
    """The conversation: prompt then completion (or `messages`), one dict per message.

    The completion's assistant messages are numbered (`turn`: 1 for the first model call),
    so steps of the trajectory that name a turn can be shown after it.
    """
    messages: list[Any] = []
    first_answer = 0  # index of the first message the model may have written
    for key in ("prompt", "completion"):
        value = sample.get(key)
        if key == "completion":
            first_answer = len(messages)
        if isinstance(value, str):
            messages.append({"role": "user" if key == "prompt" else "assistant", "content": value})
        elif isinstance(value, list):
            messages.extend(value)
    if not messages and isinstance(sample.get("messages"), list):
        messages = sample["messages"]
    turn = 0
    rendered = []
    names: dict[str, str] = {}  # tool call id -> the tool's name, for the result's header
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            message = {"role": "unknown", "content": message}
        role = str(message.get("role") or "unknown")
        answered = role == "assistant" and index >= first_answer
        turn += answered
        calls = _tool_calls(message)
        names.update((call["id"], call["name"]) for call in calls if call["id"])
        call_id = message.get("tool_call_id")
        rendered.append(
            {
                "role": role,
                "name": message.get("name"),
                "content": _text(message.get("content")),
                "parts": parts(message.get("content")),
                "tool_calls": calls,
                "tool_call_id": call_id,
                "tool_name": names.get(call_id) if isinstance(call_id, str) else None,
                "turn": turn if answered else None,
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
