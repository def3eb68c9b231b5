"""Episode record → platform sample (one row per episode), encoded once as a JSON line.

The record is `Episode.to_record()`'s dict; the sample's fields are `proctor.contract.Sample`'s
(built here as a plain dict, in the model's field order, because this runs once per episode
on the hot path; `tests/test_contract.py` checks the two agree). `sample_id` is the episode
id, which makes every upload idempotent on the server.
"""

from __future__ import annotations

import json
import math
from typing import Any

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=True, default=str)
_STRICT_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str
)


def _split_conversation(task: dict[str, Any], messages: list[Any]) -> tuple[list[Any], list[Any]]:
    """(prompt, completion): the task's prompt messages and the conversation after them."""
    prompt = task.get("messages")
    if isinstance(prompt, list) and messages[: len(prompt)] == prompt:
        return prompt, messages[len(prompt) :]
    # A string prompt (or a conversation that does not start with the task's messages): the
    # prompt is everything the model saw before it first answered.
    first_answer = next(
        (i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        len(messages),
    )
    if first_answer == 0 and isinstance(task.get("prompt"), str):
        return [{"role": "user", "content": task["prompt"]}], messages
    return messages[:first_answer], messages[first_answer:]


def project_sample(record: dict[str, Any]) -> dict[str, Any]:
    """The platform sample for one episode record (without non-finite cleaning)."""
    task = record.get("task") or {}
    messages = record.get("messages") or []
    prompt, completion = _split_conversation(task, messages)
    example_id = record.get("example_id", task.get("index"))
    sample: dict[str, Any] = {
        "sample_id": record["id"],
        "example_id": example_id,
        "rollout_number": record.get("rollout_number"),
        "episode_id": record["id"],
        "task": task,
        "prompt": prompt,
        "completion": completion,
        "answer": task.get("answer"),
        "reward": record.get("reward"),
        "metrics": record.get("metrics") or {},
        "timing": record.get("timing") or {},
        "token_usage": record.get("token_usage"),
        "is_completed": bool(record.get("is_completed")),
        "is_truncated": bool(record.get("is_truncated")),
        "error": record.get("error"),
        "stop_condition": record.get("stop_condition") or None,
        "trajectory": record.get("trajectory") or [],
        "info": task.get("info") or {},
        "env": record.get("env"),
        "num_turns": record.get("num_turns"),
    }
    for name, score in (record.get("rewards") or {}).items():
        if score is not None:
            sample.setdefault(name, score)
    return sample


def _nullify_non_finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _nullify_non_finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nullify_non_finite(v) for v in value]
    return value


def encode_sample(sample: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON for one sample, with NaN and ±inf turned into null."""
    text = _ENCODER.encode(sample)
    # Fast path: only re-walk the sample when the encoder wrote a non-finite token (a string
    # value that merely contains "NaN" costs one extra pass, nothing more).
    if "NaN" in text or "Infinity" in text:
        text = _STRICT_ENCODER.encode(_nullify_non_finite(sample))
    return text.encode("utf-8")


def record_to_line(record: dict[str, Any]) -> bytes:
    """One spool line (newline-terminated) for an episode record."""
    return encode_sample(project_sample(record)) + b"\n"
