"""The uploader's retries are `proctor.retries`' loop: a server's `Retry-After` is honoured,
and closing the run cuts a retry's wait short."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from proctor.runs import PlatformClient
from proctor.runs._spool import Spool
from proctor.runs._uploader import Uploader, UploaderOptions
from tests.runs.support import make_record


def _uploader(tmp_path: Path, answer: object) -> tuple[Uploader, PlatformClient]:
    http = httpx.Client(transport=httpx.MockTransport(answer))  # type: ignore[arg-type]
    client = PlatformClient("http://platform.test", "pk-test", http=http)
    options = UploaderOptions(batch_interval=0.0)
    uploader = Uploader(client, "e1", Spool(tmp_path), on_record=lambda r: None, options=options)
    return uploader, client


def test_a_busy_platform_is_retried_after_the_wait_it_asked_for(tmp_path: Path) -> None:
    posts: list[float] = []

    def answer(request: httpx.Request) -> httpx.Response:
        posts.append(time.monotonic())
        if len(posts) == 1:
            return httpx.Response(503, headers={"Retry-After": "1"}, json={"error": "busy"})
        return httpx.Response(200, json={"ok": True})

    uploader, client = _uploader(tmp_path, answer)
    uploader.submit([make_record(0)])
    assert uploader.drain(timeout=30)
    uploader.close()
    client.close()
    assert len(posts) == 2 and uploader.sent == 1 and uploader.errors == 1
    assert posts[1] - posts[0] >= 1.0  # the server's Retry-After, not the 0.25 s backoff


def test_closing_the_run_ends_a_retry_wait_at_once(tmp_path: Path) -> None:
    posted = threading.Event()

    def answer(request: httpx.Request) -> httpx.Response:
        posted.set()
        return httpx.Response(503, headers={"Retry-After": "60"}, json={"error": "busy"})

    uploader, client = _uploader(tmp_path, answer)
    uploader.submit([make_record(0)])
    assert posted.wait(30)
    closer = threading.Thread(target=uploader.close)
    closer.start()
    closer.join(timeout=30)  # not the 60 s the server asked for
    assert not closer.is_alive()
    client.close()
    assert uploader.sent == 0 and not uploader.drained()  # the spool keeps the record
