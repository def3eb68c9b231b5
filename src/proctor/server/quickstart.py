"""`proctor quickstart`: a platform, the demo model and one hosted evaluation, on one machine.

Starts `proctor server` (SQLite in the data dir) and `proctor demo-model` as child processes,
makes sure an admin key exists and is written to `<data dir>/config.toml` (so re-runs, and
`proctor hosted`/`proctor evals` with the default data dir, use it), then queues one hosted
`alphabet-sort` evaluation against the demo model and follows it to the end.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from proctor.errors import ConfigError, PlatformError
from proctor.sandboxes import remote
from proctor.sandboxes.command import wire_config
from proctor.sandboxes.confine import host_problem
from proctor.toml_io import dump_toml, read_toml

logger = logging.getLogger(__name__)

PROCTOR = [sys.executable, "-m", "proctor.cli.main"]


@dataclass
class QuickstartOptions:
    """What `proctor quickstart` runs."""

    data_dir: Path = field(default_factory=lambda: Path("~/.proctor").expanduser())
    """Where the database, logs, sandboxes and the key live."""
    port: int = 8000
    """Port of the platform server."""
    model_port: int = 8001
    """Port of the demo model."""
    environment: str = "alphabet-sort"
    """Environment of the hosted evaluation."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """`EvalConfig` fields of the hosted evaluation (`num_examples`, `sampling`, ...), from
    `proctor eval`'s flags (the command's `-n` has a default: alphabet-sort has no end);
    the endpoint is the demo model."""

    @property
    def num_examples(self) -> int | None:
        """Tasks to evaluate (None: the whole taskset)."""
        return self.overrides.get("num_examples")

    @property
    def rollouts(self) -> int:
        """Rollouts per task."""
        return int(wire_config(self.overrides)["rollouts_per_example"])


@dataclass
class _Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def output_tail(self, size: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


class Quickstart:
    """The processes of one quickstart; `stop()` ends them.

    A sandbox still running at `stop()` keeps running in its own session; the next quickstart
    on the same data dir and port adopts it.
    """

    def __init__(self, options: QuickstartOptions) -> None:
        self.options = options
        self.children: list[_Child] = []
        self.api_url = f"http://127.0.0.1:{options.port}"
        self.model_url = f"http://127.0.0.1:{options.model_port}/v1"

    def start(self) -> str:
        """Start the server and the demo model; returns the admin key."""
        data_dir = self.options.data_dir
        try:
            data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # holds the admin key
        except OSError as e:
            raise ConfigError(
                f"Cannot create the data directory {data_dir} ({e.strerror}); "
                "pass --data-dir with a writable directory."
            ) from None
        for port, flag in (
            (self.options.port, "--port"),
            (self.options.model_port, "--model-port"),
        ):
            _require_free(port, flag)
        key = ensure_admin_key(data_dir)
        write_client_config(data_dir / "config.toml", api_url=self.api_url, api_key=key)
        logs = data_dir / "logs"
        logs.mkdir(mode=0o700, exist_ok=True)
        env = {
            "PROCTOR_HOSTED_IN_SERVER": "true",
            "PROCTOR_MODEL_BASE_URL": self.model_url,
            "PROCTOR_DATABASE_URL": sqlite_url(data_dir),
        }
        if "PROCTOR_HOSTED_ISOLATION" not in os.environ and host_problem() is not None:
            # A laptop's one-user demo, not run as root: its own user runs the sandbox, said
            # loudly in the server's log (docs/security.md); a second user is refused.
            env["PROCTOR_HOSTED_ISOLATION"] = "none"
        self._spawn(
            "server",
            [
                *PROCTOR,
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.options.port),
                "--data-dir",
                str(data_dir),
            ],
            logs / "server.log",
            env,
        )
        self._spawn(
            "demo model",
            [*PROCTOR, "demo-model", "--host", "127.0.0.1", "--port", str(self.options.model_port)],
            logs / "demo-model.log",
            {},
        )
        self._wait(self.children[0], f"{self.api_url}/healthz")
        self._wait(self.children[1], f"{self.model_url}/models")
        return key

    def _spawn(self, name: str, argv: list[str], log_path: Path, env: dict[str, str]) -> None:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "ab") as log:
            proc = subprocess.Popen(
                argv,
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children.append(_Child(name, proc, log_path))

    def _wait(self, child: _Child, url: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if child.proc.poll() is not None:
                raise PlatformError(
                    f"The {child.name} exited with code {child.proc.returncode} while starting; "
                    f"see {child.log_path}:\n{child.output_tail()}"
                )
            try:
                if httpx.get(url, timeout=2.0).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise PlatformError(
            f"The {child.name} did not answer within {timeout:.0f}s; see {child.log_path}."
        )

    def submit(self, key: str) -> str:
        """Queue the hosted evaluation; returns its id."""
        client = remote.connect(self.api_url, key)
        try:
            return remote.submit(
                client,
                environment=self.options.environment,
                model="demo",
                eval_config={
                    **wire_config(
                        {**self.options.overrides, "client": {"base_url": self.model_url}}
                    ),
                    "timeout_minutes": 10,
                },
                name=f"quickstart-{self.options.environment}-{time.strftime('%Y%m%d-%H%M%S')}",
            )[0]
        finally:
            client.close()

    def follow(
        self,
        key: str,
        evaluation_id: str,
        *,
        on_logs: Callable[[str], None],
        on_status: Callable[[dict[str, Any]], None],
    ) -> dict[str, Any]:
        """Stream the evaluation's logs and status until it ends; returns the final record."""
        client = remote.connect(self.api_url, key)
        try:
            return remote.follow(
                client,
                evaluation_id,
                on_logs=on_logs,
                on_status=on_status,
                poll_seconds=0.5,
                outage_seconds=15.0,
            )
        finally:
            client.close()

    def alive(self) -> bool:
        """Whether the server and the demo model still run."""
        return all(child.proc.poll() is None for child in self.children)

    def stop(self) -> None:
        """Stop the demo model and the server (SIGTERM, then SIGKILL)."""
        for child in reversed(self.children):
            child.stop()


def _require_free(port: int, flag: str) -> None:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise ConfigError(
                f"Port {port} on 127.0.0.1 is in use (another quickstart?); stop it or pass "
                f"{flag} with a free port."
            ) from None


def ensure_admin_key(data_dir: Path) -> str:
    """The admin key stored in `<data_dir>/config.toml`, created in the database if needed."""
    from proctor.server import migrations
    from proctor.server.auth import service as auth
    from proctor.server.db.session import Database
    from proctor.server.errors import Unauthenticated

    stored = read_client_config(data_dir / "config.toml").get("api_key")
    db = Database(sqlite_url(data_dir))
    try:
        migrations.upgrade(db.write_engine)
        with db.write() as session:
            if isinstance(stored, str) and stored:
                try:
                    if auth.authenticate(session, stored).is_admin:
                        return stored
                except Unauthenticated:
                    pass
            created = auth.create_key(session, name="quickstart", user_name="admin", is_admin=True)
            return created.secret
    finally:
        db.dispose()


def sqlite_url(data_dir: Path) -> str:
    """The quickstart's database: always the SQLite file in the data dir."""
    return f"sqlite:///{data_dir / 'proctor.db'}"


def read_client_config(path: Path) -> dict[str, Any]:
    """The client config file's keys (empty when missing)."""
    return read_toml(path, optional=True, fix="fix or delete the file")


def write_client_config(path: Path, *, api_url: str, api_key: str) -> None:
    """Set `api_url` and `api_key` in the client config file, keeping its other keys."""
    data = read_client_config(path)
    data.update(api_url=api_url, api_key=api_key)
    # Only the client's scalar keys: nested tables are not part of the client config.
    text = dump_toml({k: v for k, v in data.items() if isinstance(v, str | int | float | bool)})
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    # Created 0600, never readable by others even for a moment: it holds an admin key.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    tmp.replace(path)
