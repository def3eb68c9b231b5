"""A sandbox command that dies whole: `python -m proctor.sandboxes.guard COMMAND`.

The Ray backend runs every sandbox under this guard. Ray's job supervisor (Ray 2.x,
`dashboard/modules/job/job_supervisor.py`) starts the entrypoint with `Popen(entrypoint,
shell=True, start_new_session=True)`; on `stop_job` it signals that process and the
descendants it finds at that moment (`psutil.children(recursive=True)`), and SIGKILLs them
`RAY_JOB_STOP_WAIT_TIME_S` (3) seconds later. Its only other safeguard is a shell loop that
kills the entrypoint's group once the *supervisor* is gone. So a process reparented away
before the stop (its parent exited) escapes `stop_job`, and when the entrypoint itself is
SIGKILLed nothing kills its children: measured on Ray 2.60, a `proctor eval` kept running
and calling the model in both cases. The guard closes both holes:

- the command runs in a process group of its own (a new session), so the group is the
  whole tree however its processes are reparented, and the guard signals the group;
- SIGTERM, SIGINT or SIGHUP to the guard goes to the group; whatever is left after the
  grace period (just under Ray's own, so the guard finishes first) is SIGKILLed;
- when the command ends, what it left behind in its group is SIGKILLed: a sandbox is over
  when its command is (as the local backend does);
- a watchdog, started before the command, holds the read end of a pipe whose only write
  end is the guard's. However the guard dies, SIGKILL included, the kernel closes that end;
  the watchdog reads EOF and SIGKILLs the group. A pipe rather than PR_SET_PDEATHSIG:
  the death signal reaches only a direct child (not the eval the shell started), and
  rather than polling `kill -0 PID` like Ray's loop, which a reused pid can fool. The
  watchdog forks away from the guard into a session of its own, so neither Ray's killpg
  of the entrypoint's group nor its snapshot of the entrypoint's children kills it first.

When the job's metadata carries a confinement policy (the launcher's default), the guard
runs the command through `proctor.sandboxes.confine` on the node: the same confinement as the
local backend's (its own uid, root, network and cgroup), refused there in one sentence when
the node cannot confine.

The guard runs the command in the sandbox's work dir, which the job's metadata names (the
launcher's per-sandbox folder, where a local sandbox runs too), creating it on the node; so
the run directory `proctor eval` writes lands there, never in the working directory Ray
starts jobs in. A node that cannot create it runs the command in a fresh temporary folder
and says so in the job's log.

The guard also writes the sandbox's files (`SandboxSpec.files`, the run's `eval.toml`) from
the job's metadata into the command's working directory (the confinement's, when confined),
and moves the sandbox's environment out of the job's metadata (see
`proctor.sandboxes.ray_jobs`): Ray hands the metadata to the entrypoint only through its
environment (`RAY_JOB_CONFIG_JSON_ENV_VAR`), where `runtime_env.env_vars` would also stand
on the command line of Ray's `setup_worker.py` on the node.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from proctor.sandboxes.sandbox import place_files, shell_exit_code

RAY_JOB_CONFIG = "RAY_JOB_CONFIG_JSON_ENV_VAR"
"""The variable through which Ray's supervisor hands a job's metadata to its entrypoint."""
ENV_METADATA_KEY = "proctor_env"
"""The job-metadata entry that holds the sandbox's environment (a JSON object)."""
CONFINE_METADATA_KEY = "proctor_confine"
"""The job-metadata entry that holds the sandbox's confinement policy, applied on the node
(`proctor.sandboxes.confine.Policy` as JSON, less the command and the environment)."""
FILES_METADATA_KEY = "proctor_files"
"""The job-metadata entry that holds the files the command finds in its working directory
(a JSON object, name -> text)."""
WORKDIR_METADATA_KEY = "proctor_workdir"
"""The job-metadata entry that names the sandbox's work dir on the node (a path)."""

END_MARKER = "[proctor guard] the command exited with code"
"""The guard's last line on stderr (the job's log), followed by the exit code."""
_DONE = b"done"
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def stop_grace() -> float:
    """Seconds between the polite signal and SIGKILL: a second less than Ray waits."""
    try:
        ray_wait = float(os.environ.get("RAY_JOB_STOP_WAIT_TIME_S", "3"))
    except ValueError:
        ray_wait = 3.0
    return max(0.5, ray_wait - 1.0)


def sandbox_environment(environ: dict[str, str]) -> dict[str, str]:
    """The command's environment: ours, plus the variables the job's metadata carries.

    Ours has no `PROCTOR_EVAL_*` variable: a node's never sets a hosted run's settings, which
    come from its `eval.toml` and flags only (`proctor.eval.variables`).
    """
    env = {k: v for k, v in environ.items() if not k.upper().startswith("PROCTOR_EVAL_")}
    raw = env.pop(RAY_JOB_CONFIG, None)
    if raw is None:
        return env
    try:
        config = json.loads(raw)
        carried = json.loads(config.get("metadata", {}).pop(ENV_METADATA_KEY, "{}"))
    except (ValueError, AttributeError, TypeError):
        return env
    env.update({str(k): str(v) for k, v in carried.items()})
    # What Ray itself reads there stays; the secrets are not copied into the command's copy.
    env[RAY_JOB_CONFIG] = json.dumps(config)
    return env


def _metadata(environ: dict[str, str], key: str) -> str | None:
    raw = environ.get(RAY_JOB_CONFIG)
    if raw is None:
        return None
    try:
        value = json.loads(raw).get("metadata", {}).get(key)
    except (ValueError, AttributeError, TypeError):
        return None
    return value if isinstance(value, str) and value else None


def carried_files(environ: dict[str, str]) -> dict[str, str]:
    """The files the job's metadata carries for the command's working directory."""
    text = _metadata(environ, FILES_METADATA_KEY)
    try:
        files = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def confinement(environ: dict[str, str]) -> dict[str, Any] | None:
    """The confinement policy the job's metadata carries, if any."""
    text = _metadata(environ, CONFINE_METADATA_KEY)
    try:
        policy = json.loads(text) if text else None
    except ValueError:
        return None
    return policy if isinstance(policy, dict) else None


def workdir(environ: dict[str, str], *, create: bool) -> str | None:
    """The sandbox's work dir on this node, as the job's metadata names it (None: none
    named). `create`: make it now (a confined command's confinement makes its own), or a
    fresh temporary folder instead, said on stderr, when this node cannot."""
    path = _metadata(environ, WORKDIR_METADATA_KEY)
    if path is None or not create:
        return path
    try:
        os.makedirs(path, exist_ok=True)
        return path
    except OSError as e:
        fallback = tempfile.mkdtemp(prefix="proctor-work-")
        print(
            f"proctor guard: cannot create the work dir {path} on this node ({e.strerror}); "
            f"running in {fallback}",
            file=sys.stderr,
            flush=True,
        )
        return fallback


def confined_command(
    policy: dict[str, Any], command: str, env: dict[str, str], workdir: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that run `command` under `policy` on this node (in
    `workdir`; None: a scratch folder): the sandbox's variables go to the confinement in a
    file only root reads, never as its own."""
    fd, path = tempfile.mkstemp(prefix="proctor-env-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({k: v for k, v in env.items() if k != RAY_JOB_CONFIG}, f)
    full = {**policy, "command": command, "env_file": path, "workdir": workdir}
    argv = [sys.executable, "-m", "proctor.sandboxes.confine", json.dumps(full)]
    return argv, {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TZ")}


def _kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_watchdog() -> int:
    """Fork the watchdog (see the module docstring); returns the guard's end of its pipe."""
    read_fd, write_fd = os.pipe()  # both close-on-exec: the command inherits neither
    pid = os.fork()
    if pid == 0:
        try:
            os.close(write_fd)
            os.setsid()
            for sig in _STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)  # only the guard's end of the pipe counts
            if os.fork() == 0:
                _watch(read_fd)
        finally:
            os._exit(0)
    os.close(read_fd)
    os.waitpid(pid, 0)  # the first fork exits at once; the watching half is nobody's child
    return write_fd


def _watch(read_fd: int) -> None:
    """Learn the command's group, wait until the guard's end closes, kill the group."""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        line = b""
        while not line.endswith(b"\n"):
            chunk = pipe.read(64)
            if not chunk:
                return  # the guard died before it started anything
            line += chunk
        pgid, rest = int(line), b""
        while chunk := pipe.read(64):
            rest += chunk
    if _DONE not in rest:  # (once done, the group's id may belong to someone else)
        _kill_group(pgid)


def run(command: str) -> int:
    """Run `command` under `/bin/sh` in its own group; its exit code, as a shell reports it."""
    write_fd = _start_watchdog()
    stopping: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    for sig in _STOP_SIGNALS:
        signal.signal(sig, on_signal)
    argv = ["/bin/sh", "-c", command]
    env = sandbox_environment(dict(os.environ))
    policy = confinement(dict(os.environ))
    files = carried_files(dict(os.environ))
    cwd = workdir(dict(os.environ), create=policy is None)
    if policy is not None:
        argv, env = confined_command({**policy, "files": files}, command, env, cwd)
        cwd = None  # the confinement enters it
    else:
        if cwd is not None:
            env["PWD"] = cwd
        place_files(Path(cwd) if cwd is not None else Path.cwd(), files)
    proc = subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True)
    os.write(write_fd, f"{proc.pid}\n".encode())
    deadline: float | None = None
    while True:
        try:
            code = proc.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            pass
        if stopping and deadline is None:
            _kill_group(proc.pid, stopping[0])
            deadline = time.monotonic() + stop_grace()
        elif deadline is not None and time.monotonic() >= deadline:
            _kill_group(proc.pid)
    if _group_alive(proc.pid):
        _kill_group(proc.pid)  # the command is over: so is what it left behind
    os.write(write_fd, _DONE)
    os.close(write_fd)
    code = shell_exit_code(code)
    # The log's last line: whoever reads the log (through Ray, which may serve it late)
    # knows it has all of it once this line is there.
    print(f"{END_MARKER} {code}", file=sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m proctor.sandboxes.guard COMMAND", file=sys.stderr)
        return 2
    return run(args[0])


if __name__ == "__main__":
    sys.exit(main())
