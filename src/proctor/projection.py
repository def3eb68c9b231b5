"""Episode → platform sample: the one projection every side of proctor uses.

An episode reaches the platform in one of two wire forms, and both become samples here:

- **proctor's episode record** (`Episode.to_record()` of `proctor.envs`): `project_record`,
  used by the runs SDK's spool and uploader (and so by `proctor eval`);
- **verifiers' episode record** (`Episode.to_record()` of `verifiers.v1`, as `prime-runs`
  uploads it to `/traces`, `reference/public-clients.md` §6.2): `project_episode`, used by the
  server's traces service and by the verifiers driver. Its summary trace (the first
  trainable one, else the first) gives the row; its last branch is `completion`, one
  `trajectory` entry per branch, the weighted reward sum, and the whole record in
  `info.native_wrapper`. A record without that shape, or without traces, projects to nothing.

Both end in `finish_sample`, the one place a sample row is assembled: a field added there
reaches every path. The row's fields are `proctor.contract.Sample`'s, built as a plain dict
in the model's order because this runs once per episode on the hot path
(`tests/test_contract.py` checks the two agree); each reward's raw score follows as a
top-level key that never overwrites a field. `sample_id` is the episode id, which makes every
upload idempotent.

This module imports nothing of proctor but `proctor.contract`: the engine, the runs SDK and
the server all import it, and it imports none of them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from proctor.contract import MAX_REQUEST_BYTES

__all__ = [
    "encode",
    "encode_sample",
    "example_of",
    "finish_sample",
    "is_truncated",
    "project_episode",
    "project_record",
    "record_to_line",
    "summary_trace_index",
    "trace_sample",
]

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=True, default=str)
_STRICT_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str
)
_ENVELOPE_BYTES = len(b'{"samples":[]}')
_SURROGATE = re.compile(r"[\ud800-\udfff]")  # in a str, every surrogate is a lone half
# Stop conditions that cut a conversation short (verifiers' `Trace.is_truncated`).
_TRUNCATING_STOPS = frozenset(
    {"max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "context_length"}
)


# --- the one assembly step ---------------------------------------------------------------


def finish_sample(fields: dict[str, Any], scores: Mapping[str, float | None]) -> dict[str, Any]:
    """The sample row: `fields` (the contract's, in its order) then each reward's raw score.

    A score never overwrites a field (`reward`, `answer`, ...), and a null score is left out.
    """
    for name, score in scores.items():
        if score is not None:
            fields.setdefault(name, score)
    return fields


# --- encoding ------------------------------------------------------------------------------


def encode(value: Any) -> str:
    """JSON as the public clients encode it: compact, UTF-8, no NaN."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _nullify_non_finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _nullify_non_finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nullify_non_finite(v) for v in value]
    return value


def encode_sample(sample: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON for one sample, with NaN and ±inf turned into null and lone
    surrogate halves into U+FFFD."""
    text = _ENCODER.encode(sample)
    # Fast path: only re-walk the sample when the encoder wrote a non-finite token (a string
    # value that merely contains "NaN" costs one extra pass, nothing more).
    if "NaN" in text or "Infinity" in text:
        text = _STRICT_ENCODER.encode(_nullify_non_finite(sample))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate half (a model's answer cut mid-emoji): not text, and the platform
        # refuses it; the sample is kept with U+FFFD in its place instead of being dropped.
        return _SURROGATE.sub("\ufffd", text).encode("utf-8")


# --- proctor's episode record --------------------------------------------------------------


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


def project_record(record: dict[str, Any]) -> dict[str, Any]:
    """The platform sample for one proctor episode record (without non-finite cleaning).

    A record carrying a verifiers episode (`native`, from the verifiers driver) is that
    episode's sample (`project_episode`), numbered as the engine numbered it and errored
    where the engine counted it errored.
    """
    native = record.get("native")
    if isinstance(native, dict):
        samples = project_episode(native, record.get("rollout_number") or 1)
        if len(samples) == 1:
            sample = samples[0]
            sample["example_id"] = record.get("example_id", sample["example_id"])
            sample["error"] = sample["error"] or record.get("error")
            return sample
    task = record.get("task") or {}
    messages = record.get("messages") or []
    prompt, completion = _split_conversation(task, messages)
    fields: dict[str, Any] = {
        "sample_id": record["id"],
        "example_id": record.get("example_id", task.get("index")),
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
    return finish_sample(fields, record.get("rewards") or {})


def record_to_line(record: dict[str, Any]) -> bytes:
    """One spool line (newline-terminated) for a proctor episode record."""
    return encode_sample(project_record(record)) + b"\n"


# --- verifiers' episode record -------------------------------------------------------------


class _Unprojectable(ValueError):
    """The record lacks a field the projection needs (it is stored without a sample)."""


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Unprojectable(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Unprojectable(f"{what} is not a list")
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def summary_trace_index(traces: list[dict[str, Any]]) -> int:
    """The first trace whose agent is trainable, else the first."""
    for index, trace in enumerate(traces):
        agent = trace.get("agent")
        if not isinstance(agent, dict) or agent.get("trainable", True) is True:
            return index
    return 0


def _branches(trace: dict[str, Any]) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """`(nodes, calls)` of each root-to-leaf path of the trace's message graph."""
    nodes = [_mapping(n, "a node") for n in _list(trace.get("nodes"), "nodes")]
    calls = [_mapping(c, "a call") for c in _list(trace.get("calls"), "calls")]
    parents: list[int | None] = []
    for node in nodes:
        parent = node.get("parent")
        if parent is not None and (
            isinstance(parent, bool) or not isinstance(parent, int) or not 0 <= parent < len(nodes)
        ):
            raise _Unprojectable("a node's parent is not an index into nodes")
        parents.append(parent)
    has_child = {p for p in parents if p is not None}
    by_node = {c["node"]: c for c in calls if isinstance(c.get("node"), int)}
    branches = []
    for leaf in (i for i in range(len(nodes)) if i not in has_child):
        path: list[int] = []
        current: int | None = leaf
        while current is not None:
            if len(path) > len(nodes):
                raise _Unprojectable("the nodes' parents form a cycle")
            path.append(current)
            current = parents[current]
        path.reverse()
        branches.append(([nodes[i] for i in path], [by_node[i] for i in path if i in by_node]))
    return branches


def _usage(call: dict[str, Any]) -> dict[str, Any] | None:
    usage = call.get("usage")
    return usage if isinstance(usage, dict) else None


def _tokens(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _input_tokens(calls: list[dict[str, Any]]) -> int:
    """New input tokens over a branch's calls: each prompt beyond the previous sequence."""
    total, previous = 0, 0
    for call in calls:
        usage = _usage(call)
        if usage is None:
            continue
        fed = _tokens(usage, "prompt_tokens") + _tokens(usage, "cached_input_tokens")
        total += max(0, fed - previous)
        previous = fed + _tokens(usage, "completion_tokens")
    return total


def _output_tokens(calls: list[dict[str, Any]]) -> int:
    return sum(_tokens(u, "completion_tokens") for c in calls if (u := _usage(c)) is not None)


def _aggregate_usage(calls: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Provider usage summed over the calls; optional fields only where some call has them."""
    usages = [u for c in calls if (u := _usage(c)) is not None]
    if not usages:
        return None
    total: dict[str, Any] = {
        "prompt_tokens": sum(_tokens(u, "prompt_tokens") for u in usages),
        "completion_tokens": sum(_tokens(u, "completion_tokens") for u in usages),
    }
    for key in ("cached_input_tokens", "reasoning_tokens", "cost"):
        values = [v for u in usages if (v := _number(u.get(key))) is not None]
        if values:
            total[key] = sum(values) if key == "cost" else int(sum(values))
    return total


def is_truncated(trace: dict[str, Any], calls: list[dict[str, Any]]) -> bool:
    """Whether a verifiers trace was cut short (a limit's stop, or a `length` finish)."""
    if trace.get("stop_condition") in _TRUNCATING_STOPS:
        return True
    last = next((c for c in reversed(calls) if c.get("error") is None), None)
    return bool(last and last.get("finish_reason") == "length")


def trace_sample(
    trace: dict[str, Any], rollout_number: int, episode_id: str | None
) -> dict[str, Any]:
    """One verifiers trace record as a sample row (`sample_id` is the trace's id).

    Raises:
        ValueError: the trace lacks a field the projection needs.
    """
    task_block = _mapping(trace.get("task"), "task")
    task = _mapping(task_block.get("data"), "task.data")
    agent_block = trace.get("agent")
    agent: dict[str, Any] = agent_block if isinstance(agent_block, dict) else {}
    branches = _branches(trace)
    calls = [_mapping(c, "a call") for c in _list(trace.get("calls"), "calls")]
    rewards = _mapping(trace.get("rewards") or {}, "rewards")
    reward = 0.0
    scores: dict[str, float | None] = {}
    for name, entry in rewards.items():
        if entry is None:
            continue
        entry = _mapping(entry, "a reward")
        score, weight = _number(entry.get("score")), _number(entry.get("weight", 1.0))
        if score is None or weight is None:
            raise _Unprojectable("a reward has no numeric score")
        reward += score * weight
        scores[name] = score
    errors = _list(trace.get("errors"), "errors")
    tools = _list(trace.get("tools"), "tools")
    info = trace.get("info")
    idx = task.get("idx")
    fields: dict[str, Any] = {
        "sample_id": trace.get("id"),
        "example_id": idx if isinstance(idx, int) and not isinstance(idx, bool) else None,
        "rollout_number": rollout_number,
        "episode_id": episode_id,
        "agent": agent.get("name", "agent"),
        "trainable": agent.get("trainable", True),
        "task": task,
        "prompt": [],
        "completion": [n.get("message") for n in branches[-1][0]] if branches else [],
        "answer": task.get("answer"),
        "tool_defs": tools or None,
        "reward": reward,
        "timing": trace.get("timing") if isinstance(trace.get("timing"), dict) else {},
        "is_completed": trace.get("is_completed") is True,
        "is_truncated": is_truncated(trace, calls),
        "metrics": trace.get("metrics") if isinstance(trace.get("metrics"), dict) else {},
        "error": errors[-1] if errors else None,
        "stop_condition": trace.get("stop_condition"),
        "trajectory": [
            {
                "messages": [n.get("message") for n in nodes],
                "num_input_tokens": _input_tokens(branch_calls),
                "num_output_tokens": _output_tokens(branch_calls),
            }
            for nodes, branch_calls in branches
        ],
        "token_usage": _aggregate_usage(calls),
        "info": dict(info) if isinstance(info, dict) and info else None,
    }
    return finish_sample(fields, scores)


def project_episode(episode: dict[str, Any], rollout_number: int) -> list[dict[str, Any]]:
    """The sample rows of one verifiers episode record: normally one, with the whole episode
    in `info.native_wrapper`; one per trace when that row would pass the request cap; none
    when the record has no traces or lacks a field the projection needs.
    """
    try:
        return _episode_samples(episode, rollout_number)
    except _Unprojectable:
        return []


def _episode_samples(episode: dict[str, Any], rollout_number: int) -> list[dict[str, Any]]:
    traces = [_mapping(t, "a trace") for t in _list(episode.get("traces"), "traces")]
    if not traces:
        return []
    episode_id = episode.get("id")
    index = summary_trace_index(traces)
    sample = trace_sample(traces[index], rollout_number, episode_id)
    sample["sample_id"] = episode_id
    sample["info"] = {
        **(sample["info"] or {}),
        "native_wrapper": episode,
        "native_trace_index": index,
    }
    if _ENVELOPE_BYTES + len(encode(sample).encode("utf-8")) <= MAX_REQUEST_BYTES:
        return [sample]
    return [trace_sample(trace, rollout_number, episode_id) for trace in traces]


def example_of(episode: dict[str, Any]) -> int | None:
    """The example id (`task.data.idx` of the summary trace) rollouts are numbered by."""
    traces = [t for t in episode.get("traces") or [] if isinstance(t, dict)]
    if not traces:
        return None
    task = traces[summary_trace_index(traces)].get("task")
    data = task.get("data") if isinstance(task, dict) else None
    idx = data.get("idx") if isinstance(data, dict) else None
    return idx if isinstance(idx, int) and not isinstance(idx, bool) else None
