"""The model client on networks as users have them, with real processes on loopback.

- a forward proxy (Debian's `tinyproxy`): `HTTPS_PROXY` / `HTTP_PROXY` are followed, and
  `NO_PROXY` excludes a host; a dead proxy is named as the cause;
- https to a server whose CA is private: trusted through `--client.ca-bundle` and through
  `SSL_CERT_FILE`, refused without, with a sentence naming both; https to a plain-http
  server is told to use http://;
- a name resolving to a black-holed address first and a live one second (happy eyeballs);
- a server (or a firewall) that stops answering connections left idle (keep-alive expiry);
- a connect timeout shorter than the request timeout;
- a redirect, never followed and never parsed as JSON.

A black-holed address is a listening socket on 127.0.0.2 whose accept queue is full: the
kernel drops further SYNs, as a firewall does, so a connection attempt just hangs.
(The worker slot that raises, with -w 1/3/4, is in tests/eval/test_workers.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor.errors import ConfigError, HTTPStatusError, HTTPTimeoutError, ModelError
from proctor.models.config import ClientConfig
from proctor.models.openai_client import OpenAIChatClient
from tests.eval.helpers import cli_env
from tests.models.test_http import OK, RawServer, answer
from tests.support.procs import PROCTOR, ManagedProcess, free_port
from tests.support.tools import tool

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "hello"}]
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def wait_port(port: int, proc: ManagedProcess, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + 30
    while True:
        assert proc.proc is not None and proc.proc.poll() is None, proc.output()
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        assert time.monotonic() < deadline, f"nothing listens on {port}: {proc.output()}"
        time.sleep(0.05)


def clean_env(**extra: str) -> dict[str, str]:
    """The CLI's environment without any proxy or CA setting of the machine's."""
    env = cli_env()
    for name in (*PROXY_VARS, "SSL_CERT_FILE"):
        env.pop(name, None)
        env.pop(name.lower(), None)
    return {**env, **extra}


def eval_cli(url: str, tmp_path: Path, *flags: str, env: dict[str, str]) -> tuple[int, str]:
    out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
    proc = subprocess.run(
        [*PROCTOR, "eval", "reverse-text", "-n", "2", "--no-push", "--no-rich", "-o", str(out),
         "--client.base-url", url, "--client.max-retries", "0", *flags],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


# --- certificates and servers ------------------------------------------------------------


def openssl(*args: str) -> None:
    subprocess.run([tool("openssl"), *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A private CA and a server certificate it signed for 127.0.0.1 and localhost."""
    d = tmp_path_factory.mktemp("pki")
    ca, ca_key, key, csr, cert = (d / n for n in ("ca.pem", "ca.key", "key.pem", "s.csr", "s.pem"))
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=proctor test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", str(ca_key), "-out", str(ca))  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", str(key), "-out", str(csr))  # fmt: skip
    (d / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
    )
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
            "-CAcreateserial", "-days", "2", "-extfile", str(d / "ext.cnf"),
            "-out", str(cert))  # fmt: skip
    return {"ca": ca, "cert": cert, "key": key}


@pytest.fixture(scope="module")
def tls_model(
    certificates: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The demo model over https, its certificate signed by the private CA."""
    port = free_port()
    log = tmp_path_factory.mktemp("tls-model") / "tls-model.log"
    cmd = [sys.executable, "-m", "tests.models.tls_model", str(port),
           str(certificates["cert"]), str(certificates["key"])]  # fmt: skip
    proc = ManagedProcess(cmd, log, cwd=ROOT).start()
    try:
        wait_port(port, proc)
        yield f"https://127.0.0.1:{port}/v1"
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real forward proxy (tinyproxy) on loopback: its URL and its log."""
    tinyproxy = tool("tinyproxy")
    d = tmp_path_factory.mktemp("proxy")
    port = free_port()
    log = d / "tinyproxy.log"
    (d / "tinyproxy.conf").write_text(
        f'Port {port}\nListen 127.0.0.1\nTimeout 60\nLogFile "{log}"\nLogLevel Info\n'
        "MaxClients 64\nAllow 127.0.0.1\n"  # no ConnectPort line: CONNECT to any port
    )
    proc = ManagedProcess([tinyproxy, "-d", "-c", str(d / "tinyproxy.conf")], d / "out.log")
    proc.start()
    try:
        wait_port(port, proc)
        yield f"http://127.0.0.1:{port}", log
    finally:
        proc.stop()


def proxied(log: Path, port: int) -> bool:
    """Whether the proxy's log shows a connection it opened to the model's port."""
    return f"127.0.0.1:{port}" in log.read_text(errors="replace")


def port_of(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


# --- the proxy ---------------------------------------------------------------------------


def test_https_through_a_forward_proxy_and_no_proxy_excluding_it(
    tls_model: str, proxy: tuple[str, Path], certificates: dict[str, Path], tmp_path: Path
) -> None:
    proxy_url, log = proxy
    ca = ("--client.ca-bundle", str(certificates["ca"]))
    code, output = eval_cli(tls_model, tmp_path, *ca, env=clean_env(HTTPS_PROXY=proxy_url))
    assert code == 0, output
    assert proxied(log, port_of(tls_model))  # a CONNECT tunnel through the proxy

    # NO_PROXY excludes the host: the (dead) proxy is never asked.
    dead = f"http://127.0.0.1:{free_port()}"
    env = clean_env(HTTPS_PROXY=dead, NO_PROXY="localhost,127.0.0.1")
    code, output = eval_cli(tls_model, tmp_path, *ca, env=env)
    assert code == 0, output

    # Without NO_PROXY the dead proxy is the cause, and the sentence says so.
    code, output = eval_cli(tls_model, tmp_path, *ca, env=clean_env(HTTPS_PROXY=dead))
    assert code == 1, output
    assert f"cannot connect to the proxy {dead}" in output and "NO_PROXY" in output
    assert "Traceback" not in output


def test_http_through_a_forward_proxy(
    demo_model: str, proxy: tuple[str, Path], tmp_path: Path
) -> None:
    proxy_url, log = proxy
    code, output = eval_cli(demo_model, tmp_path, env=clean_env(HTTP_PROXY=proxy_url))
    assert code == 0, output
    assert proxied(log, port_of(demo_model))


# --- certificates ------------------------------------------------------------------------


def test_a_private_ca_is_trusted_through_the_flag_or_ssl_cert_file_and_refused_without(
    tls_model: str, certificates: dict[str, Path], tmp_path: Path
) -> None:
    ca = str(certificates["ca"])
    code, output = eval_cli(tls_model, tmp_path, "--client.ca-bundle", ca, env=clean_env())
    assert code == 0, output
    code, output = eval_cli(tls_model, tmp_path, env=clean_env(SSL_CERT_FILE=ca))
    assert code == 0, output

    code, output = eval_cli(tls_model, tmp_path, env=clean_env())
    assert code == 1, output
    assert f"cannot reach the model at {tls_model}: the certificate of" in output
    assert "is not trusted" in output and "--client.ca-bundle" in output
    assert "SSL_CERT_FILE" in output and "Traceback" not in output


def test_https_to_a_plain_http_endpoint_names_the_scheme_not_a_ca(tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    proc = ManagedProcess(cmd, tmp_path / "http.log", cwd=tmp_path).start()
    try:
        wait_port(port, proc)
        code, output = eval_cli(f"https://127.0.0.1:{port}/v1", tmp_path, env=clean_env())
    finally:
        proc.stop()
    assert code == 1, output
    assert f"answered in plain HTTP, not TLS; use http://127.0.0.1:{port} instead" in (output)
    assert "ca-bundle" not in output and "start it" not in output and "Traceback" not in output


# --- addresses, idle connections, timeouts, redirects -------------------------------------


@contextlib.contextmanager
def black_hole(port: int) -> Iterator[None]:
    """127.0.0.2:`port` listening with a full accept queue: connection attempts hang."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.2", port))
    listener.listen(0)
    fillers = []
    try:
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.2", port))
            fillers.append(filler)
        time.sleep(0.1)  # let the fillers' handshakes fill the queue
        yield
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def client(url: str, **settings: Any) -> OpenAIChatClient:
    settings.setdefault("max_retries", 0)
    config = ClientConfig(base_url=url, **settings)
    return OpenAIChatClient(model="m", client=config, max_connections=4)


async def test_an_unreachable_first_address_costs_no_connect_timeout(
    raw: RawServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw.script = [(answer(200, OK), "keep")]
    port = port_of(raw.url)
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "model.test":
            return real(host, *args, **kwargs)
        live = real("127.0.0.1", port, socket.AF_INET, socket.SOCK_STREAM)
        dead = real("127.0.0.2", port, socket.AF_INET, socket.SOCK_STREAM)
        return dead + live  # the black hole first, as a dead IPv6 route would come

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    with black_hole(port):
        # Tried one after the other, the black hole would eat the whole request timeout (the
        # connect timeout is longer), leaving no time for the live address.
        c = client(f"http://model.test:{port}/v1", connect_timeout=12, timeout=8)
        try:
            done = await c.complete(MESSAGES)
        finally:
            await c.aclose()
    assert done.message["content"] == "olleh"


async def test_a_connect_timeout_shorter_than_the_request_timeout(raw: RawServer) -> None:
    port = port_of(raw.url)
    with black_hole(port):
        c = client(f"http://127.0.0.2:{port}/v1", connect_timeout=0.5, timeout=600)
        try:
            with pytest.raises(ModelError, match=r"--client\.connect-timeout") as caught:
                await c.complete(MESSAGES)
        finally:
            await c.aclose()
    cause = caught.value.__cause__
    assert isinstance(cause, HTTPTimeoutError) and cause.connect


async def test_a_connection_the_server_stopped_answering_is_not_reused() -> None:
    # Each connection gets one answer; after that the server (or a firewall that forgot the
    # flow) swallows requests. Reusing the idle connection would wait out the timeout.
    connections = 0

    async def one_answer_per_connection(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        nonlocal connections
        connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            writer.write(answer(200, OK))
            await writer.drain()
            await reader.read()  # swallow anything more, answer nothing, until closed
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    listener = await asyncio.start_server(one_answer_per_connection, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/v1"
    c = client(url, keepalive_expiry=0.3, timeout=10)
    try:
        for _ in range(2):
            assert (await c.complete(MESSAGES)).message["content"] == "olleh"
            await asyncio.sleep(0.6)  # idle past the keep-alive expiry
    finally:
        await c.aclose()
        listener.close()
    assert connections == 2  # a fresh connection for the second request


async def test_a_redirect_is_not_followed_nor_read_as_json(raw: RawServer) -> None:
    elsewhere = "https://api.example.test/v1/chat/completions"
    raw.script = [(answer(307, b"", f"Location: {elsewhere}"), "keep")]
    c = client(raw.url, max_retries=3)
    try:
        with pytest.raises(ModelError, match="redirects") as caught:
            await c.complete(MESSAGES)
        cause = caught.value.__cause__
        assert isinstance(cause, HTTPStatusError) and cause.status_code == 307
        assert elsewhere in str(caught.value) and "--client.base-url" in str(caught.value)
        assert len(raw.requests) == 1  # neither followed nor retried

        raw.script = [(answer(301, b"", "Location: https://api.example.test/v1/models"), "keep")]
        with pytest.raises(ConfigError, match="redirect"):
            await c.preflight()
    finally:
        await c.aclose()


def test_proxy_settings_are_read_once_per_client(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:p%40ss@proxy.test:3128")
    monkeypatch.setenv("NO_PROXY", "internal.test")
    via = OpenAIChatClient(model="m", client=ClientConfig(base_url="https://api.test/v1"))
    assert via._http.proxy == "http://proxy.test:3128"
    assert via._http._proxy_headers == {"Proxy-Authorization": "Basic dXNlcjpwQHNz"}
    direct = OpenAIChatClient(model="m", client=ClientConfig(base_url="https://internal.test/v1"))
    assert direct._http.proxy is None
    plain = OpenAIChatClient(model="m", client=ClientConfig(base_url="http://api.test/v1"))
    assert plain._http.proxy is None  # HTTPS_PROXY is for https URLs only
    os.environ.pop("HTTPS_PROXY")
    assert via._http.proxy == "http://proxy.test:3128"  # resolved once, when made
