"""A sample's trajectory as the sample page shows it: one step per recorded event, with
what it printed or answered.

The engine records what happened beside the conversation in the sample's `trajectory`
(`contract.Sample`): sandbox runs (`type: "sandbox"`: stdout, stderr, exit code; a
`turn` when the model's code ran mid-conversation, a `purpose` such as "unit tests" when a
reward ran it) and judge calls (`type: "judge"`: the prompt, the reply, the score).
verifiers' projection records one branch per entry (`messages` and token counts). Other
clients may send anything, so every entry is read defensively and an unknown one is shown
as its JSON.
"""

from __future__ import annotations

import json
from typing import Any

from proctor.server.web.transcript import ELIDE_AT, elided

EVENT_STRING_MAX = 20_000
"""Strings of an unknown entry longer than this are cut (the raw sample has them whole)."""


def _output(label: str, text: Any, *, open: bool = True) -> dict[str, Any] | None:
    if not isinstance(text, str) or not text:
        return None
    return {"label": label, "text": text, "open": open}


def _number(value: Any, unit: str = "") -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return f"{value:.3g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def _sandbox(event: dict[str, Any]) -> dict[str, Any]:
    exit_code = event.get("exit_code")
    timed_out = event.get("timed_out") is True
    truncated = event.get("output_truncated") is True
    ok = exit_code == 0 and not timed_out and not truncated
    purpose = event.get("purpose")
    if timed_out:
        ending = "timed out"
    elif exit_code is None:
        ending = "killed"
    else:
        ending = f"exit {exit_code}"
    return {
        "kind": "sandbox",
        "title": "sandbox run" + (f" · {purpose}" if isinstance(purpose, str) else ""),
        "state": "ok" if ok else "bad",
        "facts": [
            ("result", ending + (", output cut" if truncated else "")),
            ("duration", _number(event.get("duration_s"), " s")),
        ],
        "outputs": [_output("stdout", event.get("stdout")), _output("stderr", event.get("stderr"))],
    }


def _judge(event: dict[str, Any]) -> dict[str, Any]:
    score = event.get("score")
    name = event.get("name")
    failed = isinstance(event.get("error"), str) or score is None
    return {
        "kind": "judge",
        "title": "judge call" + (f" · {name}" if isinstance(name, str) else ""),
        "state": "bad" if failed else None,
        "facts": [
            ("model", event.get("model") if isinstance(event.get("model"), str) else None),
            ("score", _number(score) if score is not None else "none"),
            ("latency", _number(event.get("latency_s"), " s")),
        ],
        "outputs": [
            _output("error", event.get("error")),
            _output("reply", event.get("reply")),
            # The prompt is the template filled in: long and mostly known, so folded.
            _output("prompt", event.get("prompt"), open=False),
        ],
    }


def _branch(event: dict[str, Any], number: int) -> dict[str, Any]:
    messages = event.get("messages")
    count = len(messages) if isinstance(messages, list) else 0
    return {
        "kind": "branch",
        "title": f"branch {number}",
        "state": None,
        "facts": [
            ("messages", str(count)),
            ("input tokens", _number(event.get("num_input_tokens"))),
            ("output tokens", _number(event.get("num_output_tokens"))),
        ],
        "outputs": [],
        "messages": messages if isinstance(messages, list) else [],
    }


def _event(event: Any) -> dict[str, Any]:
    kind = event.get("type") if isinstance(event, dict) else None
    text = json.dumps(elided(event, EVENT_STRING_MAX), ensure_ascii=False, indent=2)
    return {
        "kind": "event",
        "title": kind if isinstance(kind, str) and len(kind) <= ELIDE_AT else "event",
        "state": None,
        "facts": [],
        "outputs": [_output("recorded", text)],
    }


def step(event: Any, number: int) -> dict[str, Any]:
    """One trajectory entry as a step: `kind`, `title`, `state` ("ok", "bad" or None),
    `facts` (label, value) pairs, `outputs` (label, text, open), `turn` (the model call it
    followed, or None) and, for a branch, its `messages`."""
    if isinstance(event, dict) and event.get("type") == "sandbox":
        shown = _sandbox(event)
    elif isinstance(event, dict) and event.get("type") == "judge":
        shown = _judge(event)
    elif isinstance(event, dict) and "type" not in event and "messages" in event:
        shown = _branch(event, number)
    else:
        shown = _event(event)
    turn = event.get("turn") if isinstance(event, dict) else None
    return {
        "messages": [],
        **shown,
        "facts": [(label, value) for label, value in shown["facts"] if value is not None],
        "outputs": [output for output in shown["outputs"] if output is not None],
        "turn": turn if isinstance(turn, int) and not isinstance(turn, bool) else None,
    }


def steps(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """The sample's trajectory, one step per entry, in the order recorded."""
    trajectory = sample.get("trajectory")
    if not isinstance(trajectory, list):
        return []
    return [step(event, number) for number, event in enumerate(trajectory, start=1)]
