"""The `local` sandbox backend: one subprocess per evaluation, in its own process group.

The command runs under `/bin/sh` in a working directory under the data dir, with stdout and
stderr captured to a log file. By default it runs confined (`proctor.sandboxes.confine`: its
own uid, root, network, cgroup); `isolation = "none"` runs it as the server's own user,
which only a single-user server may do (the launcher checks). A small shell wrapper
writes the command's exit code to a file, so a launcher that restarted (and so is no
longer the parent) still learns how a re-adopted sandbox ended. Processes are told apart
from a reused pid by their start time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel

from proctor.errors import SandboxError
from proctor.sandboxes.confine import (
    DEFAULT_UIDS,
    Limits,
    Policy,
    command_line,
    host_problem,
    refusal,
)
from proctor.sandboxes.sandbox import (
    BackendName,
    SandboxHandle,
    SandboxSpec,
    SandboxState,
    place_files,
    read_tail,
)

logger = logging.getLogger(__name__)

Isolation = Literal["bwrap", "none"]
"""`bwrap`: confined (the default); `none`: the server's own user, unconfined."""


class Config(BaseModel):
    """The local backend's options."""

    type: Literal["local"] = "local"
    """The backend's name."""
    isolation: Isolation = "bwrap"
    """`bwrap` confines each sandbox (`proctor.sandboxes.confine`); `none` runs it directly
    (`PROCTOR_HOSTED_ISOLATION`, like the two below: the launcher's own settings)."""
    uids: str = DEFAULT_UIDS
    """The uid range confined sandboxes take their own uid from."""
    limits: Limits = Limits()
    """Each confined sandbox's memory, process and CPU caps."""


def create(config: Config) -> LocalSandbox:
    """The backend for `config`."""
    return LocalSandbox(isolation=config.isolation, uids=config.uids, limits=config.limits)


def handle_token(handle: SandboxHandle) -> str:
    """`<pid>@<start time>`: the start time tells our process from a reused pid."""
    return f"{handle.ref}@{handle.started_at!r}"


def handle_from_token(token: str, *, log_path: str | None) -> SandboxHandle:
    """The handle `handle_token` wrote, with the log file it captures to."""
    ref, _, started = token.partition("@")
    return SandboxHandle("local", ref, float(started or 0.0), log_path)


# Only these variables of the launcher's own environment reach a sandbox: the launcher may
# hold a database URL or an admin key, and a sandbox must see only what its spec gives it.
_INHERITED = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "USER",
    "LOGNAME",
)


def base_environment() -> dict[str, str]:
    """The harmless part of the launcher's environment that every sandbox inherits."""
    return {k: v for k, v in os.environ.items() if k in _INHERITED}


def _wrapped(command: str, exit_path: Path) -> str:
    # The subshell keeps the command's own `exit` from skipping the exit-code record.
    return (
        f"(\n{command}\n)\nrc=$?\n"
        f'printf \'%s\\n\' "$rc" > {shlex.quote(str(exit_path))}\nexit "$rc"\n'
    )


class LocalSandbox:
    """Runs sandboxes as local process groups.

    Args:
        isolation: `"bwrap"` confines each sandbox (`proctor.sandboxes.confine`); `"none"`
            runs it directly, as the server's user.
        uids: the uid range confined sandboxes take their uid from.
        limits: each confined sandbox's caps.
    """

    name: BackendName = "local"

    def __init__(
        self,
        *,
        isolation: Isolation = "bwrap",
        uids: str = DEFAULT_UIDS,
        limits: Limits | None = None,
    ) -> None:
        self.isolation = isolation
        self.uids = uids
        self.limits = limits or Limits()
        # Our own children, so their exit codes are collected and no zombie is left.
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, spec: SandboxSpec) -> SandboxHandle:
        """Start the command in a new session (its own process group)."""
        if spec.workdir is None or spec.log_path is None:
            raise ValueError("the local backend needs a workdir and a log path")
        workdir, log_path = spec.workdir, spec.log_path
        workdir.mkdir(parents=True, exist_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        exit_path = log_path.parent / "exit_code"
        exit_path.unlink(missing_ok=True)
        env = {**base_environment(), **spec.env, "EVALUATION_ID": spec.evaluation_id}
        command = spec.command
        if self.isolation == "bwrap":
            problem = host_problem()
            if problem is not None:
                raise SandboxError(refusal(problem)[0].upper() + refusal(problem)[1:] + ".")
            # The sandbox's variables go to the confinement in a file only root reads; it
            # runs as root and takes none of them as its own.
            env_file = log_path.parent / "env.json"
            fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(env, f)
            policy = Policy(
                command=command,
                name=spec.evaluation_id,
                workdir=str(workdir),
                uids=self.uids,
                limits=self.limits,
                endpoints=list(spec.endpoints),
                package=spec.package,
                harness=spec.harness,
                hidden=[str(p) for p in spec.hidden],
                readonly=[str(p) for p in spec.readonly],
                env_file=str(env_file),
                files=spec.files,
            )
            command = command_line(policy)
            env = {k: v for k, v in base_environment().items() if k in ("PATH", "LANG", "TZ")}
        else:
            for path in spec.writable:
                path.mkdir(parents=True, exist_ok=True)
            place_files(workdir, spec.files)
        argv = ["/bin/sh", "-c", _wrapped(command, exit_path)]
        # The log may hold what the run printed of its secrets: readable by the server only.
        log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(log_fd, "ab") as log:
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._children[proc.pid] = proc
        try:
            started_at = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            started_at = 0.0  # already gone; poll reads the exit code from the child
        logger.info("started local sandbox pid %d for %s", proc.pid, spec.evaluation_id)
        return SandboxHandle(
            backend="local",
            ref=str(proc.pid),
            started_at=started_at,
            log_path=str(log_path),
        )

    def _alive(self, handle: SandboxHandle) -> bool:
        """Whether the handle's process still exists (and is not a pid reused by another)."""
        pid = int(handle.ref)
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        try:
            proc = psutil.Process(pid)
            if handle.started_at and abs(proc.create_time() - handle.started_at) > 0.01:
                return False
            return proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def adoptable(self, handle: SandboxHandle) -> bool:
        """Whether a sandbox started by an earlier launcher is still the same live process."""
        return self._alive(handle)

    def poll(self, handle: SandboxHandle) -> SandboxState:
        """Running, or the exit code (from our child, else from the wrapper's file).

        A sandbox is over when its wrapper is: whatever of its process group outlived the
        wrapper (it was killed, or the command left children behind) is killed then, so no
        orphaned eval keeps calling the model.
        """
        state = self._poll(handle)
        if not state.running:
            pgid = int(handle.ref)
            if _group_exists(pgid):
                logger.info("sandbox pid %d is over; killing what is left of its group", pgid)
                _signal_group(pgid, signal.SIGKILL)
        return state

    def _poll(self, handle: SandboxHandle) -> SandboxState:
        pid = int(handle.ref)
        child = self._children.get(pid)
        if child is not None and child.poll() is not None:
            self._children.pop(pid, None)
            return SandboxState.ended(child.returncode)
        if self._alive(handle):
            return SandboxState(running=True)
        if handle.log_path:
            try:
                code = int((Path(handle.log_path).parent / "exit_code").read_text())
                return SandboxState(running=False, exit_code=code)
            except (OSError, ValueError):
                pass
        return SandboxState(
            running=False, detail="the sandbox process is gone without an exit code"
        )

    def logs(self, handle: SandboxHandle, tail_bytes: int = 1 << 20) -> str:
        """The tail of the captured log file."""
        return read_tail(Path(handle.log_path), tail_bytes) if handle.log_path else ""

    def stop(self, handle: SandboxHandle, *, grace_seconds: float = 5.0) -> None:
        """SIGTERM the whole process group, then SIGKILL whatever is left after the grace."""
        pid = int(handle.ref)
        if not self._alive(handle) and not _group_exists(pid):
            self._reap(pid)
            return
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline:
            self._reap(pid)
            if not _group_exists(pid):
                return
            time.sleep(0.05)
        logger.info("sandbox pid %d outlived its grace period; killing its group", pid)
        _signal_group(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and _group_exists(pid):
            self._reap(pid)
            time.sleep(0.02)
        self._reap(pid)

    def _reap(self, pid: int) -> None:
        child = self._children.get(pid)
        if child is not None:
            child.poll()


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_exists(pgid: int) -> bool:
    """Whether any non-zombie process is left in the process group."""
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.info["pid"]) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False
