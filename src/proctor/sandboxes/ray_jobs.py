"""The `ray` sandbox backend: each sandbox is a Ray job submitted through the job API.

The entrypoint runs the same shell command the local backend runs, under
`proctor.sandboxes.guard`, so that stopping the job or killing its entrypoint ends the whole
process tree (Ray alone leaves orphans running: see the guard's docstring). The sandbox's
environment (secrets included) travels in the job's metadata, which Ray hands the
entrypoint only through its environment; the guard moves it into the command's. Not in
`runtime_env.env_vars`: Ray puts those on the command line of `setup_worker.py` on the node,
where any local user reads them in `ps`. Either way the job API shows them to whoever holds
it, as it lets them run any code on the cluster. The command runs in the sandbox's work dir
(the metadata names it; the guard creates it on the node), as a local sandbox does: its run
directory is never left in the working directory Ray starts jobs in. Logs, status and the
driver's exit code come from the job API, and stopping goes through it too.
Needs the optional extra: `pip install 'proctor[ray]'`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shlex
import sys
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

from proctor.errors import ConfigError, SandboxError
from proctor.sandboxes.confine import DEFAULT_UIDS, Limits, Policy
from proctor.sandboxes.guard import (
    CONFINE_METADATA_KEY,
    END_MARKER,
    ENV_METADATA_KEY,
    FILES_METADATA_KEY,
    WORKDIR_METADATA_KEY,
)
from proctor.sandboxes.local import Isolation
from proctor.sandboxes.sandbox import (
    BackendName,
    SandboxHandle,
    SandboxSpec,
    SandboxState,
    tail_text,
)

logger = logging.getLogger(__name__)

_TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
LOG_WAIT_SECONDS = 10.0
"""How long `logs` asks again for an ended job's log until it holds the guard's last line."""
_KEPT_LOGS = 256  # ended jobs' logs kept, newest last


class Config(BaseModel):
    """The ray backend's options."""

    type: Literal["ray"] = "ray"
    """The backend's name."""
    address: str = Field(min_length=1)
    """The cluster's job API (dashboard) address, e.g. `http://127.0.0.1:8265`
    (`PROCTOR_HOSTED_RAY_ADDRESS`, `--ray-address`)."""
    stop_grace_seconds: float = 5.0
    """Time between the stop signal and SIGKILL (`PROCTOR_HOSTED_STOP_GRACE_SECONDS`)."""
    isolation: Isolation = "bwrap"
    """`bwrap`: the guard confines the command on the node; `none`: it does not."""
    uids: str = DEFAULT_UIDS
    """The uid range confined sandboxes take their own uid from, on each node."""
    limits: Limits = Limits()
    """Each confined sandbox's memory, process and CPU caps."""
    entrypoint_cpus: float | None = Field(default=None, ge=0)
    """CPUs each job's entrypoint reserves (`PROCTOR_HOSTED_RAY_ENTRYPOINT_CPUS`): Ray then
    places it on any node with them free; unset, every entrypoint runs on the head node."""


def create(config: Config) -> RaySandbox:
    """The backend for `config`."""
    return RaySandbox(
        config.address,
        stop_grace_seconds=config.stop_grace_seconds,
        isolation=config.isolation,
        uids=config.uids,
        limits=config.limits,
        entrypoint_cpus=config.entrypoint_cpus,
    )


def handle_token(handle: SandboxHandle) -> str:
    """The Ray job's submission id."""
    return handle.ref


def handle_from_token(token: str, *, log_path: str | None) -> SandboxHandle:
    """The handle of the job `token` names (Ray keeps the logs: no log file)."""
    return SandboxHandle("ray", token, 0.0, None)


class RaySandbox:
    """Runs sandboxes as jobs on a Ray cluster.

    Args:
        address: the cluster's job API (dashboard) address, e.g. `http://127.0.0.1:8265`.
        stop_grace_seconds: time the guard gives the command between the stop signal and
            SIGKILL (fixed when the job starts: Ray's stop takes no grace of its own).
        isolation: `"bwrap"` has the guard confine each sandbox on its node
            (`proctor.sandboxes.confine`); `"none"` runs it as the Ray worker's user.
        uids: the uid range confined sandboxes take their uid from.
        limits: each confined sandbox's caps.
        entrypoint_cpus: CPUs each job's entrypoint reserves (None: Ray's default, the head
            node).
    """

    name: BackendName = "ray"

    def __init__(
        self,
        address: str,
        *,
        stop_grace_seconds: float = 5.0,
        isolation: Isolation = "bwrap",
        uids: str = DEFAULT_UIDS,
        limits: Limits | None = None,
        entrypoint_cpus: float | None = None,
    ) -> None:
        self.stop_grace_seconds = stop_grace_seconds
        self.entrypoint_cpus = entrypoint_cpus
        self.isolation = isolation
        self.uids = uids
        self.limits = limits or Limits()
        try:
            from ray.job_submission import JobSubmissionClient
        except ImportError as e:
            raise ConfigError(
                "The ray sandbox needs Ray; install it with `pip install ray`."
            ) from e
        self.address = address
        self._ended_logs: dict[str, str] = {}
        try:
            self._client: Any = JobSubmissionClient(address)
        except Exception as e:  # Ray raises ConnectionError, RuntimeError, ValueError...
            raise SandboxError(
                f"Cannot reach the Ray job API at {address}; check --ray-address ({e})."
            ) from e

    def start(self, spec: SandboxSpec) -> SandboxHandle:
        """Submit the command as a guarded job; its env vars go only through the metadata."""
        submission_id = f"proctor-{spec.evaluation_id}-{uuid.uuid4().hex[:8]}"
        env = {**spec.env, "EVALUATION_ID": spec.evaluation_id}
        # exec: the guard is the process Ray started, the one its stop and a kill reach.
        guard = f"{shlex.quote(sys.executable)} -m proctor.sandboxes.guard"
        wait = math.ceil(self.stop_grace_seconds) + 1
        metadata = {
            "evaluation_id": spec.evaluation_id,
            "launcher": "proctor",
            ENV_METADATA_KEY: json.dumps(env),
        }
        if spec.files:
            metadata[FILES_METADATA_KEY] = json.dumps(spec.files)  # written by the guard
        if spec.workdir is not None:
            metadata[WORKDIR_METADATA_KEY] = str(spec.workdir)
        if self.isolation == "bwrap":
            # Applied by the guard on the node; the command and environment join it there.
            policy = Policy(
                command="",
                name=spec.evaluation_id,
                uids=self.uids,
                limits=self.limits,
                endpoints=list(spec.endpoints),
                package=spec.package,
                harness=spec.harness,
                readonly=[str(p) for p in spec.readonly],
            )
            metadata[CONFINE_METADATA_KEY] = policy.model_dump_json(
                exclude={"command", "workdir", "env_file"}
            )
        placement = (
            {} if self.entrypoint_cpus is None else {"entrypoint_num_cpus": self.entrypoint_cpus}
        )
        try:
            self._client.submit_job(
                entrypoint=f"exec {guard} {shlex.quote(spec.command)}",
                **placement,
                submission_id=submission_id,
                # Read by Ray's supervisor (how long before it SIGKILLs) and by the guard
                # (a second less, so it finishes first). Not a secret.
                runtime_env={"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(wait)}},
                metadata=metadata,
            )
        except Exception as e:
            raise SandboxError(f"Ray refused the job for {spec.evaluation_id}: {e}") from e
        logger.info(
            "submitted Ray job %s for %s (work dir %s)",
            submission_id,
            spec.evaluation_id,
            spec.workdir or "Ray's",
        )
        return SandboxHandle(backend="ray", ref=submission_id)

    def adoptable(self, handle: SandboxHandle) -> bool:
        """Whether the job is still known to the cluster and not finished."""
        try:
            return str(self._client.get_job_status(handle.ref)) not in _TERMINAL
        except Exception:
            return False

    def poll(self, handle: SandboxHandle) -> SandboxState:
        """Running while the job is pending or running; else the driver's exit code."""
        try:
            info = self._client.get_job_info(handle.ref)
        except Exception as e:
            return SandboxState(running=False, detail=f"the Ray job is unknown: {e}")
        status = str(getattr(info.status, "value", info.status))
        if status not in _TERMINAL:
            return SandboxState(running=True)
        code = info.driver_exit_code
        if code is None:
            code = 0 if status == "SUCCEEDED" else None
        if code is not None and code < 0:  # the entrypoint killed by a signal
            return SandboxState.ended(code)
        # Ray's message on a failure is the log's tail, which the launcher reads itself.
        detail = (info.message or None) if code is None else None
        return SandboxState(running=False, exit_code=code, detail=detail)

    def logs(self, handle: SandboxHandle, tail_bytes: int = 1 << 20) -> str:
        """The job's driver log so far, cut to its tail.

        Ray may serve an ended job's log late (empty, or its first lines only, for a while
        after the job ended, or nothing on a timeout): an ended job's log is asked again
        until it holds the guard's last line, for up to `LOG_WAIT_SECONDS` (a killed guard
        writes none), and then kept, so a failed shard's error carries its output. If it
        never comes, a failed job's status message is kept after it: Ray's supervisor
        writes the log's last lines there, read on the node the entrypoint ran on."""
        kept = self._ended_logs.get(handle.ref)
        if kept is not None:
            return tail_text(kept.encode("utf-8", errors="replace"), tail_bytes)
        deadline = time.monotonic() + LOG_WAIT_SECONDS
        while True:
            try:
                text = str(self._client.get_job_logs(handle.ref))
            except Exception:
                text = ""
            if END_MARKER in text:
                return self._keep(handle, text, tail_bytes)
            try:
                info = self._client.get_job_info(handle.ref)
            except Exception:
                info = None
            ended = info is None or str(getattr(info.status, "value", info.status)) in _TERMINAL
            if not ended:
                return tail_text(text.encode("utf-8", errors="replace"), tail_bytes)
            if time.monotonic() >= deadline:
                message = (getattr(info, "message", None) or "") if info is not None else ""
                if message and message not in text:
                    text = f"{text.rstrip()}\n{message}" if text.strip() else message
                return self._keep(handle, text, tail_bytes)
            time.sleep(0.25)

    def _keep(self, handle: SandboxHandle, text: str, tail_bytes: int) -> str:
        """Keep an ended job's log (the newest `_KEPT_LOGS`) and return its tail."""
        self._ended_logs[handle.ref] = text
        with contextlib.suppress(KeyError, RuntimeError, StopIteration):
            while len(self._ended_logs) > _KEPT_LOGS:  # (another thread may too)
                del self._ended_logs[next(iter(self._ended_logs))]
        return tail_text(text.encode("utf-8", errors="replace"), tail_bytes)

    def stop(self, handle: SandboxHandle, *, grace_seconds: float = 5.0) -> None:
        """Ask Ray to stop the job (it SIGTERMs, then kills) and wait until it has stopped."""
        try:
            self._client.stop_job(handle.ref)
        except Exception as e:
            logger.warning("stopping Ray job %s failed: %s", handle.ref, e)
            return
        deadline = time.monotonic() + grace_seconds + 30.0
        while time.monotonic() < deadline:
            if not self.poll(handle).running:
                return
            time.sleep(0.2)
        logger.warning("Ray job %s did not stop within %.0fs", handle.ref, grace_seconds + 30)
