"""The local spool: an append-only file of encoded samples and the offset the server acked.

Layout, one directory per evaluation (`<run_dir>/platform/<evaluation_id>/`):

- `spool.jsonl`: one encoded sample per line, appended in the order records were handed over;
- `spool.acked`: a byte offset into `spool.jsonl`; every line before it was acknowledged by
  the server. It is replaced atomically after each acknowledged batch, so a crash leaves it
  at or behind the truth, and a replay of lines past it is harmless (sample ids are
  idempotency keys on the server);
- `rejected.jsonl`: samples the server refused for good (400/413/422), kept for inspection.

What survives a SIGKILL: every line whose append was flushed (the OS keeps it; an fsync
happens before each upload, so whatever was ever sent is on disk too). A torn last line is
cut off on reopen; its record is still in the engine's `traces.jsonl`, which
`proctor runs sync` reads to refill the spool.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

SPOOL_FILE = "spool.jsonl"
ACK_FILE = "spool.acked"
REJECTED_FILE = "rejected.jsonl"


def _cut_torn_tail(path: Path) -> int:
    """Truncate a last line that lacks its newline; return the resulting size."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "r+b") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return size
        # Walk back to the previous newline in 64 KiB steps.
        pos = size
        while pos > 0:
            step = min(65536, pos)
            f.seek(pos - step)
            chunk = f.read(step)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = pos - step + nl + 1
                f.truncate(keep)
                return keep
            pos -= step
        f.truncate(0)
        return 0


class Spool:
    """Thread-safe appends (any thread), sequential reads and acks (the one sender thread)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.path = directory / SPOOL_FILE
        self._ack_path = directory / ACK_FILE
        self._lock = threading.Lock()
        size = _cut_torn_tail(self.path)
        self._writer = open(self.path, "ab")  # noqa: SIM115 - lives as long as the spool
        self._reader = open(self.path, "rb")  # noqa: SIM115
        self.size = size
        """Bytes flushed to the file: readers never look past this."""
        self.acked = min(self._read_ack(), size)
        """Bytes acknowledged by the server."""
        self.pending_records = self._count_lines(self.acked, size)
        """Lines between `acked` and `size`."""
        self.appended_records = 0
        """Lines appended by this process."""

    def _read_ack(self) -> int:
        try:
            return max(0, int(self._ack_path.read_text().strip() or 0))
        except (OSError, ValueError):
            return 0

    def _count_lines(self, start: int, end: int) -> int:
        count = 0
        self._reader.seek(start)
        remaining = end - start
        while remaining > 0:
            chunk = self._reader.read(min(1 << 20, remaining))
            if not chunk:
                break
            count += chunk.count(b"\n")
            remaining -= len(chunk)
        return count

    def append(self, lines: list[bytes]) -> None:
        """Append newline-terminated lines and flush them to the OS."""
        if not lines:
            return
        with self._lock:
            self._writer.write(b"".join(lines))
            self._writer.flush()
            self.size = self._writer.tell()
            self.pending_records += len(lines)
            self.appended_records += len(lines)

    def sync_to_disk(self) -> None:
        """fsync what was appended so far (called before an upload).

        Runs without the append lock: an fsync may take milliseconds, and appends (possibly
        from the producer's thread) must not wait for it.
        """
        os.fsync(self._writer.fileno())

    def read_chunk(self, start: int, *, max_bytes: int, max_count: int) -> tuple[bytes, int]:
        """Whole lines from byte `start` within the limits (at least one if any), and their count.

        One read, no per-line objects: the sender turns the chunk into a request body with a
        single `replace` (a JSON line never holds a raw newline).
        """
        end = self.size
        if start >= end:
            return b"", 0
        # Read in growing blocks until `max_count` lines are in: reading `max_bytes` (25 MiB)
        # at once would hold that much in RAM for every batch of a long backlog.
        limit = min(max_bytes, end - start)
        self._reader.seek(start)
        parts: list[bytes] = []
        got = lines = 0
        block = 256 * 1024
        while got < limit and lines < max_count:
            part = self._reader.read(min(block, limit - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
            lines += part.count(b"\n")
            block = min(block * 2, 8 * 1024 * 1024)
        data = b"".join(parts)
        cut = data.rfind(b"\n") + 1
        if cut == 0:  # one line longer than max_bytes: it goes alone
            self._reader.seek(start)
            line = self._reader.readline()
            return (line, 1) if line.endswith(b"\n") else (b"", 0)
        if cut < len(data):
            data = data[:cut]
        count = data.count(b"\n")
        if count > max_count:
            pos = -1
            for _ in range(max_count):
                pos = data.find(b"\n", pos + 1)
            data, count = data[: pos + 1], max_count
        return data, count

    def ack(self, offset: int, records: int) -> None:
        """Record that every line before `offset` was acknowledged."""
        tmp = self._ack_path.with_suffix(".tmp")
        tmp.write_text(str(offset))
        os.replace(tmp, self._ack_path)
        with self._lock:
            self.acked = offset
            self.pending_records -= records

    def reject(self, line: bytes) -> None:
        """Keep a sample the server refused for good next to the spool."""
        with open(self.directory / REJECTED_FILE, "ab") as f:
            f.write(line)

    def sample_ids(self) -> Iterator[str]:
        """The `sample_id` of every line in the spool (acked or not)."""
        with open(self.path, "rb") as f:
            for raw in f:
                if raw.endswith(b"\n"):
                    yield str(json.loads(raw)["sample_id"])

    def drained(self) -> bool:
        """True when the server acknowledged everything appended."""
        return self.acked >= self.size

    def close(self, *, discard_if_drained: bool = False) -> None:
        """Close the files; with `discard_if_drained`, delete a fully acknowledged spool."""
        with self._lock:
            self._writer.close()
            self._reader.close()
            if discard_if_drained and self.acked >= self.size:
                self.path.unlink(missing_ok=True)
                self._ack_path.unlink(missing_ok=True)
