"""The network of a confined sandbox: its only way out is a relay to the endpoints it was given.

A confined sandbox has a network namespace of its own, holding only a loopback device. The
confinement (`proctor.sandboxes.confine`) gives it one Unix socket per allowed endpoint (the
platform URL, the model and judge URLs), each answered outside by `serve_outside`, which
connects to that one host and port and nothing else: what the sandbox sends there is
relayed byte for byte (TLS included, so certificates are still checked against the name).

Inside, `python -m proctor.sandboxes.relay inside` runs first, as root of the sandbox's
namespaces only: it binds a loopback listener where each endpoint's URL points (the same
address for a loopback URL; a 127.0.0.x alias that the sandbox's `/etc/hosts` gives the
name for any other host), drops to the sandbox's uid for good, and then runs the command,
relaying each connection to its endpoint's socket. Everything else (PostgreSQL, the
server's other ports, other local listeners, other hosts) has no route at all.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ipaddress
import json
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from proctor.sandboxes.sandbox import shell_exit_code

_CHUNK = 1 << 16
_PR_CAPBSET_DROP = 24


@dataclass(frozen=True)
class Endpoint:
    """One host and port a sandbox may reach, and where it is reached inside."""

    host: str
    """The host as the URL names it (resolved outside, by the relay)."""
    port: int
    """The TCP port."""
    inside: str
    """The loopback address the sandbox connects to for it."""
    alias: str | None = None
    """A name the sandbox's `/etc/hosts` maps to `inside` (for a host that is a name)."""


def endpoints(urls: list[str]) -> list[Endpoint]:
    """The endpoints of `urls` (http/https), one per distinct host and port.

    A loopback address is reached at the same address inside; `localhost` at 127.0.0.1;
    any other name gets a 127.0.0.x alias in the sandbox's `/etc/hosts`. An address that is
    neither loopback nor a name cannot be answered inside and is refused.

    Raises:
        ValueError: a URL without a host, or with a non-loopback IP address.
    """
    found: dict[tuple[str, int], Endpoint] = {}
    for url in urls:
        parts = urlsplit(url)
        host = parts.hostname
        if not host or parts.scheme not in ("http", "https"):
            raise ValueError(f"the sandbox endpoint {url!r} is not an http(s) URL with a host")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if (host, port) in found:
            continue
        alias: str | None = None
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        if address is not None:
            if not address.is_loopback or address.version != 4:
                raise ValueError(
                    f"the sandbox endpoint {url!r} is an IP address other than 127.x; "
                    "name its host instead so the sandbox can reach it through its relay"
                )
            inside = host
        elif host == "localhost":
            inside = "127.0.0.1"
        else:
            inside = f"127.0.{len(found) // 250 + 1}.{len(found) % 250 + 2}"
            alias = host
        found[(host, port)] = Endpoint(host, port, inside, alias)
    return list(found.values())


def hosts_file(points: list[Endpoint]) -> str:
    """The sandbox's `/etc/hosts`: localhost, and each named endpoint's alias."""
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
    lines += [f"{p.inside} {p.alias}" for p in points if p.alias]
    return "\n".join(lines) + "\n"


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, ConnectionError):
        pass


async def _splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    try:
        await asyncio.gather(_pump(a[0], b[1]), _pump(b[0], a[1]))
    finally:
        for writer in (a[1], b[1]):
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


# -- outside: one Unix socket per endpoint, each connecting to its one host and port ------


class OutsideRelay:
    """Unix sockets in `directory` (`0.sock`, `1.sock`, ...), one per endpoint, owned by `uid`.

    Runs its own event loop in a daemon thread until `close()`.
    """

    def __init__(self, directory: Path, points: list[Endpoint], *, uid: int, gid: int) -> None:
        self.directory = directory
        self.points = points
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(uid, gid), name="proctor-relay", daemon=True
        )
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error

    def socket_path(self, index: int) -> Path:
        return self.directory / f"{index}.sock"

    def _run(self, uid: int, gid: int) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            for index, point in enumerate(self.points):
                path = self.socket_path(index)
                self._loop.run_until_complete(
                    asyncio.start_unix_server(self._handler(point), path=str(path))
                )
                os.chown(path, uid, gid)
                os.chmod(path, 0o600)
        except BaseException as e:  # reported to the constructor
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    def _handler(self, point: Endpoint) -> Any:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                upstream = await asyncio.wait_for(
                    asyncio.open_connection(point.host, point.port), timeout=30
                )
            except (TimeoutError, OSError):
                writer.close()
                return
            await _splice((reader, writer), upstream)

        return handle

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


# -- inside: listeners where the URLs point, then the command as the sandbox's uid ---------


def drop_privileges(uid: int, gid: int) -> None:
    """Become `uid`/`gid` for good, with no supplementary groups and no capabilities."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # (past the last cap: EINVAL, ignored)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != gid:
        raise OSError("could not drop to the sandbox's uid")


async def _serve_inside(listeners: list[tuple[socket.socket, str]], child: int) -> int:
    async def forward(path: str, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_unix_connection(path)
        except OSError:
            w.close()
            return
        await _splice((reader, w), upstream)

    servers = []
    for sock, path in listeners:

        async def on_client(
            r: asyncio.StreamReader, w: asyncio.StreamWriter, path: str = path
        ) -> None:
            await forward(path, r, w)

        servers.append(await asyncio.start_server(on_client, sock=sock))
    _, status = await asyncio.to_thread(os.waitpid, child, 0)
    for server in servers:
        server.close()
    return os.waitstatus_to_exitcode(status)


def inside(
    uid: int,
    gid: int,
    routes: list[tuple[str, int, str]],
    command: list[str],
    env: dict[str, str],
    workdir: str,
) -> int:
    """Listen on each (address, port) -> socket path, drop to `uid`, run `command`."""
    listeners = []
    for address, port, path in routes:
        sock = socket.create_server((address, port), reuse_port=False)
        sock.setblocking(False)
        listeners.append((sock, path))
    drop_privileges(uid, gid)
    os.chdir(workdir)
    child = os.fork()
    if child == 0:
        for sock, _ in listeners:
            sock.close()
        try:
            os.execve(command[0], command, env)
        finally:
            os._exit(127)
    signal.signal(signal.SIGTERM, lambda signum, frame: os.kill(child, signum))
    code = asyncio.run(_serve_inside(listeners, child))
    return shell_exit_code(code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proctor.sandboxes.relay inside")
    parser.add_argument("mode", choices=["inside"])
    parser.add_argument("--env-file", required=True)
    parser.add_argument("--uid", type=int, required=True)
    parser.add_argument("--chdir", required=True)
    parser.add_argument("--gid", type=int, required=True)
    parser.add_argument("--route", action="append", default=[], help="ADDRESS:PORT=SOCKET")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    routes = []
    for route in ns.route:
        where, _, path = route.partition("=")
        address, _, port = where.rpartition(":")
        routes.append((address, int(port), path))
    with open(ns.env_file) as f:
        env = {str(k): str(v) for k, v in json.load(f).items()}
    return inside(ns.uid, ns.gid, routes, command, env, ns.chdir)


if __name__ == "__main__":
    sys.exit(main())
