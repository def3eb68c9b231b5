"""The run directory: `config.toml`, `traces.jsonl` (one episode per line), `logs/eval.log`.

Traces are appended and flushed as each episode finishes, so a killed run keeps everything
it finished; `--resume` reads them back, keeps the successful ones and re-runs the rest.

One writer per run directory: the process that runs it holds an exclusive OS file lock
(`flock`) on `.proctor.lock` inside it from before its checks until it ends, so a second
`proctor eval` or `--resume` there is refused with the holder's pid. The kernel drops the
lock when its holder dies, however it dies, so a killed run never leaves a stale lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from proctor.errors import RunDirError
from proctor.toml_io import dump_toml, read_toml

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.toml"
TRACES_FILE = "traces.jsonl"
LOG_FILE = "logs/eval.log"
LOCK_FILE = ".proctor.lock"
"""Held (flock) by the one process writing the run directory; it holds that process's pid."""


class RunDirectory:
    """One run's directory on disk.

    Args:
        path: `<output_dir>/<run.dir>`.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.config_path = path / CONFIG_FILE
        self.traces_path = path / TRACES_FILE
        self.log_path = path / LOG_FILE

    def check(self, *, resume: bool, clean: bool, naming: str = "--run.name") -> None:
        """Refuse to start where results would be written over or mixed up.

        Args:
            naming: The setting that chose this directory (`--run.dir` when it was set),
                named in the message as the way to another one.

        Raises:
            RunDirError: results exist without --resume/--clean, or nothing is there to resume.
        """
        if resume and clean:
            raise RunDirError("--resume and --clean contradict each other; pass only one")
        if resume:
            if not self.config_path.is_file():
                raise RunDirError(
                    f"nothing to resume in {self.path} (no {CONFIG_FILE}); "
                    f"drop --resume or pass the {naming} of an earlier run"
                )
            return
        # Results are files: empty folders (a mount point made ready for the spool) are none,
        # and neither is the writer's lock.
        lock = self.path / LOCK_FILE
        if (
            not clean
            and self.path.exists()
            and any(p.is_file() and p != lock for p in self.path.rglob("*"))
        ):
            raise RunDirError(
                f"{self.path} already holds results; pass --resume to continue that run, "
                f"--clean to start it over, or choose another {naming}"
            )

    def lock(self) -> RunDirLock:
        """Become the one process writing this directory (created if missing); the caller
        calls `release()` when it is done.

        Raises:
            RunDirError: another process holds it (named by its pid), or it cannot be created.
        """
        return RunDirLock.acquire(self.path)

    def saved_config(self) -> dict[str, Any]:
        """The config.toml of an earlier run."""
        return read_toml(self.config_path)

    def load_records(self) -> list[dict[str, Any]]:
        """Every complete line of traces.jsonl (a line cut short by a crash is skipped)."""
        if not self.traces_path.exists():
            return []
        records: list[dict[str, Any]] = []
        with self.traces_path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except ValueError:
                    logger.warning("skipping unreadable line %d of %s", number, self.traces_path)
        return records

    def prepare(self, *, clean: bool, kept: list[dict[str, Any]] | None) -> None:
        """Create the directory; empty it (`clean`) or rewrite traces to the `kept` records."""
        if clean and self.path.exists():
            # Everything but the lock this process holds (a new lock file would admit a
            # second writer).
            for entry in self.path.iterdir():
                if entry.name == LOCK_FILE:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if kept is not None:
            # Drop errored and duplicate lines in one atomic step: a crash mid-way leaves the
            # old file, never a half-written one.
            tmp = self.traces_path.with_suffix(".jsonl.tmp")
            with tmp.open("w", encoding="utf-8") as f:
                for record in kept:
                    f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.traces_path)

    def write_config(self, data: dict[str, Any]) -> None:
        """Write the resolved config (with the run id) as config.toml."""
        self.config_path.write_text(dump_toml(data), encoding="utf-8")

    def open_traces(self) -> TraceWriter:
        """An appender for traces.jsonl."""
        return TraceWriter(self.traces_path)

    def attach_log(self, *, verbose: bool) -> logging.Handler:
        """Send proctor's log records to logs/eval.log; the caller removes the handler."""
        handler = _QuietFileHandler(self.log_path, encoding="utf-8")
        handler.setLevel(logging.DEBUG if verbose else logging.INFO)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger("proctor")
        root.addHandler(handler)
        if root.getEffectiveLevel() > handler.level:
            root.setLevel(handler.level)
        return handler


class RunDirLock:
    """An exclusive `flock` on `<run dir>/.proctor.lock`, held until `release()` or death."""

    def __init__(self, path: Path, fd: int, created: list[Path]) -> None:
        self.path = path
        self._fd: int | None = fd
        self._created = created

    @classmethod
    def acquire(cls, run_dir: Path) -> RunDirLock:
        """Lock `run_dir`, creating it when missing (see `RunDirectory.lock`)."""
        created = [p for p in [run_dir, *run_dir.parents] if not p.exists()]
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            reason = e.strerror or str(e)
            raise RunDirError(
                f"cannot create the run directory {run_dir} ({reason}); make its parent "
                "writable or pass another -o"
            ) from e
        path = run_dir / LOCK_FILE
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                _remove_empty(created)
                reason = e.strerror or str(e)
                raise RunDirError(
                    f"cannot write the run directory {run_dir} ({reason}); make it writable "
                    "or pass another -o"
                ) from e
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _holder(fd)
                os.close(fd)
                raise RunDirError(
                    f"{run_dir} is in use by {holder}; wait for it to end (or stop it), then "
                    "continue with --resume"
                ) from None
            # A holder that released meanwhile may have removed the file we opened.
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        lock = cls(path, fd, created)
        command = " ".join(["proctor", *sys.argv[1:]])[:200]
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {command}\n".encode())
        except OSError as e:  # a full disk: nothing has run yet, so say so now
            lock.release()
            reason = e.strerror or str(e)
            raise RunDirError(
                f"cannot write the run directory {run_dir} ({reason}); free space there or "
                "pass another -o"
            ) from e
        return lock

    def release(self) -> None:
        """Let the next writer in; a directory this lock created and nothing filled goes."""
        if self._fd is None:
            return
        run_dir = self.path.parent
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)  # a lock nobody holds names nobody
        with contextlib.suppress(OSError):
            if [entry.name for entry in run_dir.iterdir()] == [LOCK_FILE]:
                self.path.unlink()  # under the lock: a waiting writer re-checks the inode
        os.close(self._fd)
        self._fd = None
        _remove_empty(self._created)


def _holder(fd: int) -> str:
    """Who holds a lock file, from what it wrote there: "proctor process 123 (`...`)"."""
    try:
        text = os.pread(fd, 400, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    pid, _, command = text.partition(" ")
    if not pid.isdigit():
        return "another proctor process"
    return f"proctor process {pid}" + (f" (`{command}`)" if command else "")


def _remove_empty(created: list[Path]) -> None:
    """Remove the directories that were made for a run and stayed empty (deepest first)."""
    for path in created:
        try:
            path.rmdir()
        except OSError:
            return


class _QuietFileHandler(logging.FileHandler):
    """A log file that a full disk silences instead of printing tracebacks to the terminal."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def unwritable(path: Path, error: OSError) -> RunDirError:
    """The one sentence for a run directory the disk refuses (full, read-only, gone)."""
    reason = error.strerror or str(error)
    return RunDirError(
        f"cannot write the run directory {path} ({reason}); free space there or make it "
        "writable, then continue with --resume"
    )


class TraceWriter:
    """Appends one JSON line per episode in one write, so a crash loses nothing finished.

    A write the disk refuses is undone (the file is cut back to its last whole line), so a
    full disk never leaves a torn line in the middle of `traces.jsonl`.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size

    def write(self, record: dict[str, Any]) -> None:
        """Append `record` as one line (to the OS, no fsync).

        Raises:
            RunDirError: the disk refused it; nothing of it stays in the file.
        """
        self.write_line(json.dumps(record).encode() + b"\n")

    def write_line(self, line: bytes) -> None:
        """Append a record already serialised as one JSON line (ending in a newline).

        Raises:
            RunDirError: the disk refused it; nothing of it stays in the file.
        """
        view, written = memoryview(line), 0
        try:
            while written < len(line):
                written += os.write(self._fd, view[written:])
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            raise unwritable(self._path.parent, e) from e
        self._size += len(line)

    def close(self) -> None:
        os.close(self._fd)
