"""The model transport (tuned aiohttp) against real servers on 127.0.0.1, well- and ill-behaved.

A scripted raw server (asyncio streams, bytes on the wire written by hand) stands for the
misbehaving endpoints: a body cut off, a chunked body, a keep-alive closed between requests,
429 with Retry-After, 500, an answer that never comes. The demo model stands for a real one.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from proctor.errors import HTTPConnectionError, HTTPStatusError, HTTPTimeoutError, ModelError
from proctor.models.config import ClientConfig
from proctor.models.http import HTTPClient
from proctor.models.openai_client import OpenAIChatClient
from tests.eval.helpers import start_demo_model

MESSAGES = [{"role": "user", "content": "hello"}]
OK = json.dumps(
    {"choices": [{"message": {"role": "assistant", "content": "olleh"}, "finish_reason": "stop"}]}
).encode()


def answer(status: int, body: bytes, *headers: str, length: bool = True) -> bytes:
    lines = [f"HTTP/1.1 {status} X", "Content-Type: application/json", *headers]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(status: int, body: bytes, *headers: str) -> bytes:
    half = len(body) // 2
    parts = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:]))
    head = answer(status, b"", "Transfer-Encoding: chunked", *headers, length=False)
    return head + parts + b"0\r\n\r\n"


@dataclass
class RawServer:
    """Answers requests from `script` in order (the last repeats); records what came in."""

    script: list[tuple[bytes | None, str]] = field(default_factory=list)
    """(bytes to send or None for nothing, then "keep" | "close" | "hang")."""
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    connections: int = 0
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                line, *rest = head.decode("latin-1").split("\r\n")
                headers = {
                    k.lower(): v.strip() for k, _, v in (h.partition(":") for h in rest if h)
                }
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                self.requests.append((line, headers, body))
                data, then = self.script[min(len(self.requests), len(self.script)) - 1]
                if data is not None:
                    writer.write(data)
                    await writer.drain()
                if then == "hang":
                    await asyncio.sleep(30)
                if then != "keep":
                    return
        finally:
            writer.close()


def transport(url: str, **options: Any) -> HTTPClient:
    return HTTPClient(url, headers={}, timeout=5, connect_timeout=5, max_connections=2, **options)


def client_for(url: str, **overrides: Any) -> OpenAIChatClient:
    config = ClientConfig(base_url=url, retry_base_delay=0.01, retry_max_delay=1.0, **overrides)
    return OpenAIChatClient(model="m", client=config, max_connections=4)


async def test_keep_alive_reuses_one_connection_and_sends_the_headers(raw: RawServer) -> None:
    raw.script = [(answer(200, OK), "keep")]
    client = client_for(raw.url, headers={"X-Team": "blue"})
    try:
        for _ in range(3):
            done = await client.complete(MESSAGES)
            assert done.message["content"] == "olleh"
    finally:
        await client.aclose()
    assert raw.connections == 1 and len(raw.requests) == 3
    line, headers, body = raw.requests[0]
    assert line == "POST /v1/chat/completions HTTP/1.1"
    assert headers["host"] == raw.url.split("/")[2]
    assert headers["x-team"] == "blue" and headers["authorization"].startswith("Bearer ")
    assert "gzip" in headers["accept-encoding"]
    assert json.loads(body)["messages"] == MESSAGES


async def test_chunked_gzip_and_read_to_close_bodies(raw: RawServer) -> None:
    zipped = gzip.compress(OK)
    raw.script = [
        (chunked(200, OK), "keep"),
        (answer(200, zipped, "Content-Encoding: gzip"), "keep"),
        (answer(200, OK, "Connection: close", length=False), "close"),
    ]
    http = transport(raw.url)
    try:
        for _ in range(3):
            response = await http.request("POST", http.target("/chat/completions"), b"{}")
            assert (response.status, response.content) == (200, OK)
    finally:
        await http.aclose()
    assert raw.connections == 1  # the chunked and gzip answers kept the connection


@pytest.mark.parametrize("pause_s", [0.0, 0.05])
async def test_a_keep_alive_the_server_closed_costs_at_most_one_retry(
    raw: RawServer, pause_s: float
) -> None:
    # The server answers, then drops the idle connection without saying so (keep-alive
    # timeout): the next request finds it closed (a pause) and opens a fresh one, or is sent
    # before the close arrives (none): then the transport does not resend it, the retry does.
    raw.script = [(answer(200, OK), "close")]
    client = client_for(raw.url, max_retries=1)
    try:
        for _ in range(2):
            await asyncio.sleep(pause_s)
            assert (await client.complete(MESSAGES)).message["content"] == "olleh"
    finally:
        await client.aclose()
    assert raw.connections == len(raw.requests) >= 2


async def test_a_body_cut_off_is_a_connection_error_and_retried(raw: RawServer) -> None:
    cut = answer(200, OK)[:-10]
    raw.script = [(cut, "close")]
    client = client_for(raw.url, max_retries=1)
    try:
        with pytest.raises(ModelError, match=r"after 2 attempts: .*whole answer") as caught:
            await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert type(caught.value.__cause__) is HTTPConnectionError
    assert len(raw.requests) == 2


async def test_a_post_that_went_out_is_never_resent_by_the_transport(raw: RawServer) -> None:
    raw.script = [(None, "close")]
    client = client_for(raw.url, max_retries=0)
    try:
        with pytest.raises(ModelError, match="whole answer"):
            await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert len(raw.requests) == 1


async def test_429_with_retry_after_then_500_then_success(raw: RawServer) -> None:
    raw.script = [
        (chunked(429, b'{"error": {"message": "slow down"}}', "Retry-After: 0.3"), "keep"),
        (answer(500, b'{"error": {"message": "oops"}}'), "keep"),
        (answer(200, OK), "keep"),
    ]
    client = client_for(raw.url, max_retries=3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        done = await client.complete(MESSAGES)
    finally:
        await client.aclose()
    assert done.message["content"] == "olleh" and len(raw.requests) == 3
    assert loop.time() - started >= 0.3  # Retry-After was honoured


@pytest.mark.parametrize("status", [429, 500])
async def test_status_errors_carry_status_body_and_retry_after(raw: RawServer, status: int) -> None:
    raw.script = [(answer(status, b'{"error": {"message": "no"}}', "Retry-After: 0"), "keep")]
    client = client_for(raw.url, max_retries=0)
    try:
        with pytest.raises(ModelError) as caught:
            await client.complete(MESSAGES)
    finally:
        await client.aclose()
    cause = caught.value.__cause__
    assert isinstance(cause, HTTPStatusError)
    assert (cause.status_code, cause.retry_after, cause.body) == (
        status,
        0.0,
        '{"error": {"message": "no"}}',
    )
    assert str(caught.value) == f"model request failed with HTTP {status}: no"


async def test_a_slow_server_times_out_as_a_request_timeout(raw: RawServer) -> None:
    raw.script = [(None, "hang")]
    client = client_for(raw.url, timeout=0.2, max_retries=0)
    try:
        with pytest.raises(ModelError, match=r"within 0\.2 s") as caught:
            await client.complete(MESSAGES)
    finally:
        await client.aclose()
    cause = caught.value.__cause__
    assert isinstance(cause, HTTPTimeoutError) and not cause.connect


async def test_headers_with_line_breaks_are_refused() -> None:
    from proctor.errors import ConfigError

    with pytest.raises(ConfigError, match="line break"):
        client_for("http://127.0.0.1:9/v1", headers={"X-A": "b\r\nX-Evil: 1"})


async def test_against_the_demo_model_with_many_in_flight(tmp_path: Path) -> None:
    url, demo = start_demo_model(tmp_path)
    client = OpenAIChatClient(model="m", client=ClientConfig(base_url=url), max_connections=16)
    try:
        await client.preflight()
        done = await asyncio.gather(
            *(client.complete([{"role": "user", "content": f"n{i}"}]) for i in range(64))
        )
    finally:
        await client.aclose()
        demo.stop()
    assert all(d.message["content"] for d in done) and len(done) == 64


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_verifies_the_server(
    raw: RawServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    raw.script = [(answer(200, OK), "keep")]
    listener = await asyncio.start_server(raw.handle, "127.0.0.1", 0, ssl=context)
    url = f"https://127.0.0.1:{listener.sockets[0].getsockname()[1]}/v1"
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    try:
        untrusted = transport(url)
        with pytest.raises(HTTPConnectionError, match=r"is not trusted .*--client\.ca-bundle"):
            await untrusted.request("GET", untrusted.target("/models"))
        await untrusted.aclose()
        http = transport(url, ca_bundle=str(cert))
        try:
            for _ in range(2):
                response = await http.request("POST", http.target("/chat/completions"), b"{}")
                assert (response.status, response.content) == (200, OK)
        finally:
            await http.aclose()
    finally:
        listener.close()
    assert raw.connections == 1 and len(raw.requests) == 2  # kept alive; the refused never got in


async def test_a_host_name_is_looked_up_and_its_addresses_tried(raw: RawServer) -> None:
    raw.script = [(answer(200, OK), "keep")]
    url = raw.url.replace("127.0.0.1", "localhost")  # ::1 may come first and refuse
    http = transport(url)
    try:
        response = await http.request("GET", http.target("/models"))
    finally:
        await http.aclose()
    assert response.status == 200 and raw.requests[0][1]["host"] == url.split("/")[2]
