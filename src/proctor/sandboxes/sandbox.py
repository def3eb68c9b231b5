"""The sandbox backend interface: start a command, poll it, read its log, stop it.

A sandbox runs one hosted evaluation's command (a shell command line) with its own
environment variables. Backends are small and stateless enough that a launcher restarted
from scratch can pick up a sandbox again from its `SandboxHandle`, which is plain JSON.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

BackendName = str
"""A registered backend's `type` (`proctor.sandboxes.backends.backend_types()`)."""

TRUNCATION_MARKER = "[... earlier output cut: showing the last {n} bytes ...]\n"
"""The line put in front of a log that was cut to its tail."""


@dataclass(frozen=True)
class SandboxSpec:
    """What to run in a sandbox."""

    evaluation_id: str
    """The evaluation this sandbox works for (also in its environment as EVALUATION_ID)."""
    command: str
    """A POSIX shell command line; values in it are already shell-quoted."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables for the sandbox; secrets go here and nowhere else."""
    workdir: Path | None = None
    """The sandbox's working directory (the local backend creates it)."""
    log_path: Path | None = None
    """Where the local backend captures stdout and stderr."""
    writable: tuple[Path, ...] = ()
    """More directories an unconfined command writes to (e.g. the venv cache)."""
    endpoints: tuple[str, ...] = ()
    """The URLs a confined sandbox may reach: the platform, the model, the judge."""
    package: dict[str, Any] | None = None
    """A published environment a confined sandbox's packages are built from, outside it
    (`proctor.sandboxes.packages.prepare`'s arguments)."""
    harness: dict[str, str] | None = None
    """Where a confined sandbox's verifiers harness environment is built from and kept,
    outside it (`proctor.sandboxes.harness.prepare`'s arguments: index, envs)."""
    hidden: tuple[Path, ...] = ()
    """Paths a confined sandbox never sees, even inside its runtime (the data dir)."""
    readonly: tuple[Path, ...] = ()
    """More host folders a confined sandbox sees read-only (a harness index, datasets)."""
    files: dict[str, str] = field(default_factory=dict)
    """Files the command finds in its working directory, by name (the run's `eval.toml`):
    never a secret, since a Ray backend carries them in the job's metadata."""


@dataclass(frozen=True)
class SandboxHandle:
    """Everything needed to find a sandbox again, even from another launcher process."""

    backend: BackendName
    """Which backend started it."""
    ref: str
    """The backend's id for it: a process id (local) or a Ray job submission id (ray)."""
    started_at: float = 0.0
    """The process start time (local), to tell a reused pid from ours."""
    log_path: str | None = None
    """The captured log file (local); the wrapper's exit-code file lies beside it."""

    def token(self) -> str:
        """The handle as one short string to store with the evaluation (its backend's format)."""
        from proctor.sandboxes.backends import handle_token

        return handle_token(self)

    @classmethod
    def from_token(cls, backend: BackendName, token: str, *, log_path: str | None) -> SandboxHandle:
        """Rebuild a handle stored by `token`."""
        from proctor.sandboxes.backends import handle_from_token

        return handle_from_token(backend, token, log_path=log_path)


@dataclass(frozen=True)
class SandboxState:
    """A sandbox's state as seen by `poll`."""

    running: bool
    """Whether the command is still running (or queued to run)."""
    exit_code: int | None = None
    """The command's exit code once it has ended; None if it cannot be known (lost)."""
    detail: str | None = None
    """A short note from the backend, e.g. why the exit code is unknown."""

    @classmethod
    def ended(cls, returncode: int) -> SandboxState:
        """The state of a command that ended with `returncode` as `Popen` and Ray report it
        (-N for death by signal N): the shell's exit code, and the signal named."""
        if returncode < 0:
            detail = f"killed by {signal_name(-returncode)}"
            return cls(running=False, exit_code=shell_exit_code(returncode), detail=detail)
        return cls(running=False, exit_code=returncode)


class SandboxBackend(Protocol):
    """A place to run sandboxes: local processes or a Ray cluster (see `backends`)."""

    name: BackendName

    def start(self, spec: SandboxSpec) -> SandboxHandle:
        """Start the command; returns once it has been handed to the backend."""
        ...

    def poll(self, handle: SandboxHandle) -> SandboxState:
        """Whether the sandbox still runs, or how it ended."""
        ...

    def logs(self, handle: SandboxHandle, tail_bytes: int = 1 << 20) -> str:
        """The sandbox's output so far, cut to its last `tail_bytes` with a marker line."""
        ...

    def stop(self, handle: SandboxHandle, *, grace_seconds: float = 5.0) -> None:
        """Stop the sandbox: ask politely, then kill after the grace period."""
        ...

    def adoptable(self, handle: SandboxHandle) -> bool:
        """Whether a sandbox started by an earlier launcher is still running and ours."""
        ...


def place_files(directory: Path, files: Mapping[str, str], *, owner: int | None = None) -> None:
    """Write `files` (name -> text) into `directory`, readable by all, owned by `owner`.

    What is there already under a name is removed first and the file created anew, never
    followed: an earlier sandbox of the same evaluation may have left a link in its place.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise ValueError(f"a sandbox file is named by a plain name, not {name!r}")
        path = directory / name
        if path.is_symlink() or path.exists():
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if owner is not None:
            os.chown(path, owner, owner)


def tail_text(data: bytes, tail_bytes: int) -> str:
    """Decode `data`, keeping only its last `tail_bytes` behind a marker line when cut."""
    if len(data) <= tail_bytes:
        return data.decode("utf-8", errors="replace")
    cut = data[-tail_bytes:]
    # Start at a line boundary so the first line shown is whole.
    newline = cut.find(b"\n")
    if 0 <= newline < len(cut) - 1:
        cut = cut[newline + 1 :]
    return TRUNCATION_MARKER.format(n=len(cut)) + cut.decode("utf-8", errors="replace")


def read_tail(path: Path, tail_bytes: int) -> str:
    """The tail of a log file (empty when it does not exist yet)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            # One extra KiB so `tail_text` can drop a partial first line and still cut.
            f.seek(max(0, size - tail_bytes - 1024))
            data = f.read()
    except FileNotFoundError:
        return ""
    if size <= tail_bytes:
        return data.decode("utf-8", errors="replace")
    return tail_text(data, tail_bytes)


def signal_name(number: int) -> str:
    """`SIGKILL` for 9: how a sandbox killed by a signal is described."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def shell_exit_code(returncode: int) -> int:
    """A return code as a shell reports it: 128 + N for death by signal N (which `Popen` and
    Ray report as -N); any other code unchanged."""
    return 128 - returncode if returncode < 0 else returncode
