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

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

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
    """Thread-safe appends (any thread), sequential reads and acks (the one sender thread).

    The spool is a cache, never the only copy (the engine's `traces.jsonl` is): every disk
    error is raised to the caller, who keeps the lines in memory, and leaves the files as
    they were. A spool that cannot even be opened (full or read-only disk) is `broken` and
    tries again at the next append.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / SPOOL_FILE
        self._ack_path = directory / ACK_FILE
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._reader: IO[bytes] | None = None
        self.size = 0
        """Bytes written to the file: readers never look past this."""
        self.acked = 0
        """Bytes acknowledged by the server."""
        self.pending_records = 0
        """Lines between `acked` and `size`."""
        self.appended_records = 0
        """Lines appended by this process."""
        self.broken: OSError | None = None
        """Why the spool could not be opened (None once it is)."""
        self._ack_error: OSError | None = None
        self._open()

    def _open(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            size = _cut_torn_tail(self.path)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                reader = open(self.path, "rb")  # noqa: SIM115 - lives as long as the spool
            except OSError:
                os.close(fd)
                raise
        except OSError as e:
            self.broken = e
            return
        self._fd, self._reader, self.size, self.broken = fd, reader, size, None
        self.acked = min(self._read_ack(), size)
        self.pending_records = self._count_lines(self.acked, size)

    def _read_ack(self) -> int:
        try:
            return max(0, int(self._ack_path.read_text().strip() or 0))
        except (OSError, ValueError):
            return 0

    def _count_lines(self, start: int, end: int) -> int:
        assert self._reader is not None
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
        """Append newline-terminated lines, all or none.

        Raises:
            OSError: the disk refused (full, read-only, removed); the file is as it was.
        """
        if not lines:
            return
        data = b"".join(lines)
        with self._lock:
            if self._fd is None:
                self._open()
                if self._fd is None:
                    assert self.broken is not None
                    raise self.broken
            fd, view, written = self._fd, memoryview(data), 0
            try:
                while written < len(data):
                    written += os.write(fd, view[written:])
            except OSError:
                # A partial write would glue the next append onto a torn line: cut it off.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self.size)
                raise
            self.size += len(data)
            self.pending_records += len(lines)
            self.appended_records += len(lines)

    def sync_to_disk(self) -> None:
        """fsync what was appended so far (called before an upload; a failure is ignored:
        the lines are in the OS's cache and in `traces.jsonl`).

        Runs without the append lock: an fsync may take milliseconds, and appends (possibly
        from the producer's thread) must not wait for it.
        """
        fd = self._fd
        if fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(fd)

    def read_chunk(self, start: int, *, max_bytes: int, max_count: int) -> tuple[bytes, int]:
        """Whole lines from byte `start` within the limits (at least one if any), and their count.

        One read, no per-line objects: the sender turns the chunk into a request body with a
        single `replace` (a JSON line never holds a raw newline).
        """
        end = self.size
        if start >= end or self._reader is None:
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
        """Record that every line before `offset` was acknowledged.

        The offset is kept in memory first; writing `spool.acked` may fail (disk full) and
        is tried again at the next ack. A stale file only means replays, which the server
        answers as successes.
        """
        with self._lock:
            self.acked = offset
            self.pending_records -= records
        tmp = self._ack_path.with_suffix(".tmp")
        try:
            tmp.write_text(str(offset))
            os.replace(tmp, self._ack_path)
        except OSError as e:
            if self._ack_error is None:
                log.warning("cannot record the acknowledged offset in %s: %s", self._ack_path, e)
            self._ack_error = e
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        else:
            self._ack_error = None

    def reject(self, line: bytes) -> None:
        """Keep a sample the server refused for good next to the spool (best effort)."""
        try:
            with open(self.directory / REJECTED_FILE, "ab") as f:
                f.write(line)
        except OSError as e:
            log.warning("cannot keep a refused sample in %s: %s", self.directory, e)

    def sample_ids(self) -> Iterator[str]:
        """The `sample_id` of every readable line in the spool (acked or not)."""
        for line in self.lines():
            try:
                yield str(json.loads(line)["sample_id"])
            except (ValueError, KeyError, TypeError):
                continue

    def lines(self) -> Iterator[bytes]:
        """Every complete line of the spool file (none if it cannot be read)."""
        try:
            with open(self.path, "rb") as f:
                for raw in f:
                    if raw.endswith(b"\n"):
                        yield raw
        except OSError:
            return

    def drained(self) -> bool:
        """True when the server acknowledged everything appended."""
        return self.acked >= self.size

    def close(self, *, discard_if_drained: bool = False) -> None:
        """Close the files; with `discard_if_drained`, delete a fully acknowledged spool."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            if discard_if_drained and self.acked >= self.size:
                with contextlib.suppress(OSError):
                    self.path.unlink(missing_ok=True)
                    self._ack_path.unlink(missing_ok=True)
