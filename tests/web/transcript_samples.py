"""Samples whose transcripts a researcher must be able to read: a humaneval-like failure
graded in a sandbox and by a judge, images in a content list, code as the target, a
3,000-line answer, code run mid-conversation, a verifiers branch and an unknown event.

Shared by the in-process page tests and the browser tests.
"""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

TRACEBACK = """Traceback (most recent call last):
  File "/tmp/program.py", line 14, in <module>
    check(has_close_elements)
  File "/tmp/program.py", line 9, in check
    assert candidate([1.0, 2.0, 3.0], 0.5) == False
AssertionError"""

TARGET = """def has_close_elements(numbers, threshold):
    for i, a in enumerate(numbers):
        for j, b in enumerate(numbers):
            if i != j and abs(a - b) < threshold:
                return True
    return False
"""

LONG_LINES = 3_000


def png(width: int, height: int, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A plain-colour PNG image (no imaging library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        checksum = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + checksum

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


IMAGE = base64.b64encode(png(24, 16)).decode()
AUDIO = base64.b64encode(bytes(range(256)) * 40).decode()  # a blob that must never be shown


def _sample(sample_id: str, example_id: int, rollout: int, **fields: Any) -> dict[str, Any]:
    return {
        "sample_id": sample_id,
        "example_id": example_id,
        "rollout_number": rollout,
        "reward": 0.0,
        "error": None,
        **fields,
    }


def humaneval(rollout: int, *, passed: bool = False) -> dict[str, Any]:
    """A humaneval rollout: unit tests run in a sandbox (a traceback when they fail), then a
    judge's verdict."""
    sandbox = {
        "type": "sandbox",
        "stdout": "",
        "stderr": "" if passed else TRACEBACK,
        "exit_code": 0 if passed else 1,
        "timed_out": False,
        "output_truncated": False,
        "duration_s": 0.21,
        "purpose": "unit tests",
    }
    judge = {
        "type": "judge",
        "name": "style",
        "model": "judge-model",
        "prompt": "Grade the response.\n" * 3,
        "reply": "VERDICT: the loop compares each pair twice; GRADE: 0.25",
        "latency_s": 0.4,
        "score": 0.25,
    }
    code = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    return _sample(
        f"he-{rollout}",
        0,
        rollout,
        prompt=[{"role": "user", "content": "Complete the function.\n\n```python\ndef f():\n```"}],
        completion=[{"role": "assistant", "content": code}],
        answer=TARGET,
        reward=1.0 if passed else 0.0,
        trajectory=[sandbox, judge],
    )


def images() -> dict[str, Any]:
    """Images in a content list, in the shapes clients send them."""
    content = [
        {"type": "text", "text": "What colour is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{IMAGE}"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMAGE}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "input_audio", "input_audio": {"data": AUDIO, "format": "wav"}},
    ]
    return _sample(
        "img-1",
        1,
        1,
        prompt=[{"role": "user", "content": content}],
        completion=[{"role": "assistant", "content": "Red."}],
        answer="red",
        reward=1.0,
    )


def long_answer() -> dict[str, Any]:
    """A 3,000-line answer."""
    text = "\n".join(f"line {n} of the answer" for n in range(1, LONG_LINES + 1))
    return _sample(
        "long-1",
        2,
        1,
        prompt=[{"role": "user", "content": "Count to three thousand, one per line."}],
        completion=[{"role": "assistant", "content": text}],
    )


def code_turns() -> dict[str, Any]:
    """Code the model ran mid-conversation (a sandbox step after turn 1), a verifiers branch
    and an event of a kind the dashboard does not know."""
    run = {
        "type": "sandbox",
        "stdout": "    indented\n        twice\n",
        "stderr": "",
        "exit_code": 0,
        "timed_out": False,
        "output_truncated": False,
        "duration_s": 0.05,
        "turn": 1,
    }
    branch = {
        "messages": [{"role": "assistant", "content": "branch answer"}],
        "num_input_tokens": 12,
        "num_output_tokens": 3,
    }
    return _sample(
        "code-1",
        3,
        1,
        prompt=[{"role": "user", "content": "Print something indented."}],
        completion=[
            {"role": "assistant", "content": "```python\nprint('    indented')\n```"},
            {"role": "user", "content": "Output:\n    indented"},
            {"role": "assistant", "content": "Done."},
        ],
        reward=1.0,
        trajectory=[run, branch, {"type": "retrieval", "query": "q", "blob": "z" * 50_000}],
    )


def all_samples() -> list[dict[str, Any]]:
    """Every sample above, in upload order: humaneval's three rollouts first."""
    return [
        humaneval(1),
        humaneval(2, passed=True),
        humaneval(3),
        images(),
        long_answer(),
        code_turns(),
    ]
