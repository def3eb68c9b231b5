"""The background uploader: queue → spool → batched POSTs → acknowledged offset.

Two daemon threads per run:

- the *spooler* takes record lists off a bounded in-memory queue, projects each record to a
  sample, appends the encoded lines to the spool and wakes the sender. When the queue is
  full the producer appends to the spool itself, so `log_episodes` never waits for the
  network and never drops a record; RAM holds at most the queue, the disk holds the backlog;
- the *sender* reads the spool from the acknowledged offset and POSTs batches of samples
  (≤ 25 MiB, ≤ `max_batch_samples`, sent once the oldest line is `batch_interval` old, at
  once when there is a full batch or a drain is asked). Transient failures are retried with
  backoff until the run closes; a batch the server refuses as invalid is split until the bad
  sample is isolated and set aside; any other refusal (401, 403, 404, ...) stops the sender
  and leaves the spool for `proctor runs sync`.

The spool is a cache: when its disk refuses a write (full, read-only, gone), the lines wait
in memory (`overflow`), are sent from there, and are moved to the spool once it takes writes
again; a failing `spool.acked` write only makes later replays. Neither thread dies of an
unexpected error: it is counted, logged, and the loop goes on.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from proctor.contract import MAX_REQUEST_BYTES
from proctor.errors import APIError, PlatformError
from proctor.projection import record_to_line
from proctor.runs._client import PlatformClient, backoff_delay, retry_policy
from proctor.runs._spool import Spool

log = logging.getLogger(__name__)

_ENVELOPE = (b'{"samples":[', b"]}")
_REJECTED_STATUSES = frozenset({400, 413, 422})

Outcome = Literal["sent", "rejected", "fatal", "aborted"]


@dataclass(frozen=True)
class UploaderOptions:
    """Batching and buffering knobs of the uploader."""

    batch_interval: float = 1.0
    """Seconds a sample may wait for companions before its batch is sent."""
    max_batch_bytes: int = MAX_REQUEST_BYTES - 1024
    """Largest request body, envelope included (the platform's ceiling is 25 MiB)."""
    max_batch_samples: int = 2000
    """Most samples in one request."""
    queue_size: int = 2048
    """`log_episodes` calls buffered in memory before the producer spools them itself."""
    spool_delay: float = 0.005
    """Seconds the spooler lets records gather before it writes them out."""
    retry_cap: float = 5.0
    """Longest backoff between two attempts (a `Retry-After` may ask for more, up to 60 s)."""


@dataclass(frozen=True)
class RunCounters:
    """What happened to the records of a run, as seen by this process."""

    logged: int
    """Records handed to `log_episodes`."""
    spooled: int
    """Records written to the local spool."""
    sent: int
    """Records the server acknowledged."""
    pending: int
    """Records not yet acknowledged (queued or spooled, including any left by an earlier
    process)."""
    rejected: int
    """Records the server refused for good (kept in `rejected.jsonl`)."""
    errors: int
    """Failed upload attempts and unprojectable records."""
    last_error: str | None
    """The most recent upload error, if any."""


class _Aborted(Exception):
    """The run was aborted while an upload waited to retry."""


class _Stop(Exception):
    """The sender is done (closed, aborted, or refused for good)."""


class Uploader:
    """Moves records from `submit()` to the platform through the spool."""

    def __init__(
        self,
        client: PlatformClient,
        evaluation_id: str | None,
        spool: Spool,
        *,
        on_record: Callable[[dict[str, Any]], None],
        options: UploaderOptions | None = None,
    ) -> None:
        self._client = client
        self._evaluation_id = evaluation_id
        self.spool = spool
        self._on_record = on_record
        self.options = options or UploaderOptions()
        self._send_policy = retry_policy(
            cap=self.options.retry_cap, attempts=None, what="POST samples"
        )
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self.options.queue_size)
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()  # the summary, when the producer spools too
        self._flush_requested = False
        self._closing = False
        self._abort = threading.Event()
        self._pending_since: float | None = None if spool.drained() else time.monotonic()
        self.logged = 0
        self.sent = 0
        self.rejected = 0
        self.errors = 0
        self.last_error: str | None = None
        self.fatal: PlatformError | None = None
        self._unprojectable = 0
        self._stored = 0
        self._mem_lock = threading.Lock()
        self._overflow: list[bytes] = []
        """Lines the spool's disk refused, oldest first; sent from memory."""
        self._in_flight: list[bytes] = []
        """Overflow lines taken by the sender for the request under way."""
        self._spool_failing = False
        self._spooler = threading.Thread(
            target=self._spool_loop, name="proctor-spooler", daemon=True
        )
        self._sender = threading.Thread(
            target=self._send_loop, name="proctor-uploader", daemon=True
        )
        self._spooler.start()
        # Without an evaluation (the run is offline) records are only spooled, for a sync.
        self._sending = evaluation_id is not None
        if self._sending:
            self._sender.start()

    # -- producer side ---------------------------------------------------------------------

    def submit(self, records: list[dict[str, Any]]) -> None:
        """Hand records over; a queue put, or a direct spool append when the queue is full."""
        self.logged += len(records)
        try:
            self._queue.put_nowait(records)
        except queue.Full:
            try:
                self._write([records])
            except Exception as e:  # never let the uploader break the caller's loop
                self._note_error(f"cannot hand records to the uploader: {e!r}")
                log.exception("cannot hand records to the uploader")

    def counters(self) -> RunCounters:
        """A snapshot of the counters."""
        stored = self._stored
        queued = max(0, self.logged - stored - self._unprojectable)
        in_memory = len(self._overflow) + len(self._in_flight)
        return RunCounters(
            logged=self.logged,
            spooled=stored,
            sent=self.sent,
            pending=queued + self.spool.pending_records + in_memory,
            rejected=self.rejected,
            errors=self.errors,
            last_error=self.last_error,
        )

    # -- spooler thread --------------------------------------------------------------------

    _unprojectable = 0

    def _write(self, batches: list[list[dict[str, Any]]]) -> None:
        # Projection is pure and runs unlocked, so a producer spooling for itself (queue full)
        # never waits for the spooler's whole batch; only the summary needs the lock.
        lines: list[bytes] = []
        projected: list[dict[str, Any]] = []
        for records in batches:
            for record in records:
                try:
                    lines.append(record_to_line(record))
                except Exception as e:  # one malformed record must not stop the others
                    self._note_error(f"a record could not be turned into a sample: {e!r}")
                    with self._write_lock:
                        self._unprojectable += 1
                    continue
                projected.append(record)
        with self._write_lock:
            for record in projected:
                self._on_record(record)
        self._store(lines)
        if lines:
            with self._cond:
                if self._pending_since is None:
                    self._pending_since = time.monotonic()
                self._cond.notify_all()

    def _store(self, lines: list[bytes]) -> None:
        """Append to the spool, or keep in memory what its disk refuses (sent from there)."""
        if not lines and not self._overflow:
            return
        with self._mem_lock:
            backlog = self._overflow + lines
            try:
                self.spool.append(backlog)
            except OSError as e:
                self._overflow = backlog
                self._stored += len(lines)
                self._note_error(f"cannot write the spool {self.spool.path}: {e}")
                if not self._spool_failing:
                    log.warning(
                        "cannot write the spool %s (%s); keeping unsent samples in memory "
                        "(traces.jsonl has them too)",
                        self.spool.path,
                        e,
                    )
                self._spool_failing = True
                return
            self._overflow = []
            # Counted once written (or held in memory), so `spooled` never runs ahead.
            self._stored += len(lines)
            if self._spool_failing:
                log.info("the spool %s takes writes again", self.spool.path)
                self._spool_failing = False

    def _spool_loop(self) -> None:
        stop = False
        while not stop:
            items = [self._queue.get()]
            # Let a burst accumulate: one wake-up per few ms instead of one per call keeps
            # this thread from taking the GIL away from the producer at every put.
            time.sleep(self.options.spool_delay)
            while len(items) < 4096:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            batches = [i for i in items if isinstance(i, list)]
            barriers = [i for i in items if isinstance(i, threading.Event)]
            stop = any(i is None for i in items)
            try:
                self._write(batches)
                if not batches and self._overflow:
                    self._store([])  # a drain: one more try to move memory to the spool
            except Exception as e:  # the thread must outlive any one failure
                self._note_error(f"the spooler failed: {e!r}")
                log.exception("the spooler failed; it goes on")
            for barrier in barriers:
                barrier.set()

    # -- sender thread ---------------------------------------------------------------------

    def _ready(self, pos: int) -> bool:
        in_spool = pos < self.spool.size
        if not in_spool and not self._overflow:
            return False
        if self._flush_requested or self._closing:
            return True
        if self.spool.size - pos >= self.options.max_batch_bytes:
            return True
        if self.spool.pending_records + len(self._overflow) >= self.options.max_batch_samples:
            return True
        since = self._pending_since
        return since is not None and time.monotonic() - since >= self.options.batch_interval

    def _send_loop(self) -> None:
        pos = self.spool.acked
        failures = 0
        while not self._abort.is_set():
            try:
                pos = self._send_once(pos)
                failures = 0
            except _Stop:
                with self._cond:
                    self._cond.notify_all()
                return
            except Exception as e:  # e.g. the spool file vanished under us: try again
                failures += 1
                self._note_error(f"the uploader failed: {e!r}")
                log.exception("the uploader failed; it goes on")
                if self._abort.wait(backoff_delay(failures, None, cap=self.options.retry_cap)):
                    return

    def _send_once(self, pos: int) -> int:
        """Send one batch (from the spool, else from memory); return the new spool position."""
        pos = max(pos, self.spool.acked)  # a spool opened late starts at its recorded offset
        with self._cond:
            while not self._abort.is_set() and not self._ready(pos):
                if self._closing and pos >= self.spool.size and not self._overflow:
                    raise _Stop
                self._cond.wait(timeout=0.1)
        if self._abort.is_set():
            raise _Stop
        started = time.monotonic()
        cap = self.options.max_batch_bytes - len(_ENVELOPE[0]) - len(_ENVELOPE[1])
        if pos < self.spool.size:
            chunk, count = self.spool.read_chunk(
                pos, max_bytes=cap, max_count=self.options.max_batch_samples
            )
            if not count:
                return pos
            self.spool.sync_to_disk()
            outcome = self._deliver(chunk, count)
            if outcome in ("fatal", "aborted"):
                raise _Stop
            pos += len(chunk)
            self.spool.ack(pos, count)
        else:
            with self._mem_lock:
                taken = self._take_overflow(cap)
            outcome = self._deliver(b"".join(taken), len(taken))
            with self._mem_lock:
                self._in_flight = []
                if outcome in ("fatal", "aborted"):
                    self._overflow = taken + self._overflow
            if outcome in ("fatal", "aborted"):
                raise _Stop
        with self._cond:
            busy = pos < self.spool.size or bool(self._overflow)
            self._pending_since = started if busy else None
            self._cond.notify_all()
        return pos

    def _take_overflow(self, cap: int) -> list[bytes]:
        """Move the oldest memory lines that fit in one request to `_in_flight`."""
        size, count = 0, 0
        for line in self._overflow:
            if count and (size + len(line) > cap or count >= self.options.max_batch_samples):
                break
            size += len(line)
            count += 1
        taken, self._overflow = self._overflow[:count], self._overflow[count:]
        self._in_flight = taken
        return taken

    def _deliver(self, chunk: bytes, count: int) -> Outcome:
        """Send `count` lines until acknowledged; split a refused batch to set bad ones aside."""
        outcome = self._post(chunk, count)
        if outcome != "rejected":
            if outcome == "sent":
                self.sent += count
            return outcome
        if count == 1:
            self.spool.reject(chunk)
            self.rejected += 1
            return "sent"
        lines = chunk.splitlines(keepends=True)
        mid = len(lines) // 2
        for half in (lines[:mid], lines[mid:]):
            result = self._deliver(b"".join(half), len(half))
            if result in ("fatal", "aborted"):
                return result
        return "sent"

    def _post(self, chunk: bytes, count: int) -> Outcome:
        # Lines are JSON without raw newlines, so newline -> comma makes the array body.
        body = _ENVELOPE[0] + chunk[:-1].replace(b"\n", b",") + _ENVELOPE[1]
        evaluation_id = self._evaluation_id
        assert evaluation_id is not None
        failures = 0

        def on_retry(error: BaseException, wait: float) -> None:
            nonlocal failures
            failures += 1
            self._note_error(str(error))
            if failures == 1:
                log.warning("sample upload failed, retrying until it succeeds: %s", error)

        try:
            # Transient failures are retried without limit (the spool holds the batch); an
            # abort cuts the wait short.
            self._send_policy.call(
                lambda: self._client.post_samples(evaluation_id, body),
                on_retry=on_retry,
                sleep=self._sleep_unless_aborted,
            )
        except _Aborted:
            return "aborted"
        except PlatformError as e:
            self._note_error(str(e))
            if isinstance(e, APIError) and e.status_code in _REJECTED_STATUSES:
                log.warning("the platform refused %d sample(s): %s", count, e)
                return "rejected"
            log.error("sample uploads stopped; the spool keeps the rest: %s", e)
            self.fatal = e
            return "fatal"
        if failures:
            log.info("sample uploads resumed after %d failed attempts", failures)
        return "sent"

    def _sleep_unless_aborted(self, seconds: float) -> None:
        if self._abort.wait(seconds):
            raise _Aborted

    def _note_error(self, message: str) -> None:
        self.errors += 1
        self.last_error = message

    # -- lifecycle -------------------------------------------------------------------------

    def drain(self, timeout: float) -> bool:
        """Spool everything queued, then send it all; True when the server acked everything."""
        deadline = time.monotonic() + timeout
        barrier = threading.Event()
        try:
            self._queue.put(barrier, timeout=max(0.0, timeout))
        except queue.Full:
            return False
        if not barrier.wait(max(0.0, deadline - time.monotonic())):
            return False
        if not self._sending:
            return False
        with self._cond:
            self._flush_requested = True
            self._cond.notify_all()
            while not self.drained():
                if self.fatal is not None or not self._sender.is_alive():
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(timeout=min(left, 0.1))
        return True

    def drained(self) -> bool:
        """True when the server acknowledged every line, spooled or held in memory."""
        return self.spool.drained() and not self._overflow and not self._in_flight

    def close(self) -> None:
        """Stop both threads (whatever is still spooled stays in the spool)."""
        self._closing = True
        self._abort.set()
        with self._cond:
            self._cond.notify_all()
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=5.0)
        self._spooler.join(timeout=10.0)
        if self._sending:
            self._sender.join(timeout=10.0)
