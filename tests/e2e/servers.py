"""Several `proctor server` processes on one database, and a loopback balancer in front of
them: what tests/e2e/test_servers.py and bench/faults.py's server kills share."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text
from tests.support.platform import BOOTSTRAP_KEY
from tests.support.procs import PROCTOR, ManagedProcess, free_port, tls, wait_http

LAUNCHER_ENV = {
    "PROCTOR_BOOTSTRAP_KEY": BOOTSTRAP_KEY,
    "PROCTOR_HOSTED_POLL_SECONDS": "0.1",
    "PROCTOR_HOSTED_STOP_GRACE_SECONDS": "1",
    "PROCTOR_HOSTED_STALE_SECONDS": "3",
}
"""Quick launchers: a dead server's claims expire after 3 s."""


class Server:
    """One `proctor server` process on a (shared) database and data dir."""

    def __init__(
        self,
        data_dir: Path,
        name: str,
        database_url: str | None,
        *,
        port: int | None = None,
        api_url: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**LAUNCHER_ENV, **(extra_env or {})}
        if database_url:
            env["PROCTOR_DATABASE_URL"] = database_url
        if api_url:
            env["PROCTOR_HOSTED_API_URL"] = api_url  # sandboxes report through the balancer
        args = [*PROCTOR, "server", "--host", "127.0.0.1", "--port", str(self.port)]
        log = data_dir.parent / f"{name}.log"
        self.process = ManagedProcess([*args, "--data-dir", str(data_dir)], log, env=env)

    def start(self) -> Server:
        self.process.start()
        wait_http(f"{self.url}/healthz", proc=self.process.proc, timeout=60)
        return self

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/api/v1",
            headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"},
            timeout=30.0,
            verify=tls(),
        )

    def holds(self, launcher_id: object) -> bool:
        """Whether a launcher id is this server's in-server launcher."""
        return str(launcher_id).endswith(f":{self.port}")


class Balancer:
    """A TCP balancer on loopback: each connection goes to the next server that accepts it,
    as a load balancer in front of several servers passes over a dead one."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self._turn = itertools.count()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(downstream,), daemon=True).start()

    def _serve(self, downstream: socket.socket) -> None:
        first = next(self._turn)
        for i in range(len(self.ports)):
            port = self.ports[(first + i) % len(self.ports)]
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                continue
            upstream.settimeout(None)
            threading.Thread(target=_pipe, args=(upstream, downstream), daemon=True).start()
            _pipe(downstream, upstream)
            return
        downstream.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


@contextlib.contextmanager
def balanced_servers(
    data_dir: Path, database_url: str, count: int = 2, extra_env: dict[str, str] | None = None
) -> Iterator[tuple[list[Server], Balancer]]:
    """`count` servers on one database and data dir, behind a balancer; stopped afterwards."""
    ports = [free_port() for _ in range(count)]
    balancer = Balancer(ports)
    servers = []
    for i, port in enumerate(ports):
        name = f"server-{chr(ord('a') + i)}"
        servers.append(
            Server(
                data_dir, name, database_url, port=port, api_url=balancer.url, extra_env=extra_env
            )
        )
    try:
        for server in servers:  # one after the other: the first migrates and makes the key
            server.start()
        yield servers, balancer
    finally:
        for server in servers:
            server.process.stop()
        balancer.close()


def hosted_rows(database_url: str) -> dict[str, dict[str, object]]:
    """Every hosted evaluation's claim: `{evaluation id: {launcher_id, attempt, ended_at}}`."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT evaluation_id, launcher_id, attempt, ended_at FROM hosted_evaluations")
            ).mappings()
            return {str(row["evaluation_id"]): dict(row) for row in rows}
    finally:
        engine.dispose()
