"""Text the CLI prints, made safe for a terminal: control characters never reach it.

Evaluation names, error messages, sandbox logs and environment descriptions come from other
people; printed raw, an escape sequence among them could rewrite the screen, set the window
title, hide lines or fake a prompt. `proctor.cli.main` wraps stdout and stderr in
`SafeStream`, so every line any command prints goes through `clean`:

- escape sequences (CSI `ESC [ ... final`, OSC `ESC ] ... BEL|ESC \\`, and two-character
  `ESC x`) are removed whole, so no fragment like `[31m` is left behind;
- every other C0 control except tab and newline, DEL, the C1 controls (U+0080-U+009F) and the
  bidirectional overrides (U+202A-U+202E, U+2066-U+2069) are removed.

The live progress view of `proctor eval` draws with escape sequences on purpose; it writes to
`raw(stream)`, and rich removes control characters from the text it is given.
"""

from __future__ import annotations

import io
import re
from typing import IO

_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI (or one cut off)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, terminated by BEL or ST (or cut off)
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|\x1b[@-Z\\-_ -/]?"  # two-character escapes (and a lone ESC)
)
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """`text` without escape sequences or control characters (tab and newline kept)."""
    if text.isprintable():
        return text
    return _CONTROLS.sub("", _SEQUENCES.sub("", text))


class SafeStream(io.TextIOBase):
    """A text stream that passes `clean` text on to `stream`."""

    def __init__(self, stream: IO[str]) -> None:
        self.raw_stream = stream

    def write(self, text: str) -> int:
        self.raw_stream.write(clean(text))
        return len(text)

    def flush(self) -> None:
        self.raw_stream.flush()

    def isatty(self) -> bool:
        return self.raw_stream.isatty()

    def fileno(self) -> int:
        return self.raw_stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.raw_stream, "encoding", "utf-8"))

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.raw_stream, "errors", None)


def raw(stream: IO[str]) -> IO[str]:
    """The stream under a `SafeStream` (for a view that draws with escape sequences)."""
    return stream.raw_stream if isinstance(stream, SafeStream) else stream
