"""Client-side following: new log text from full or cut logs, and giving up on a dead platform."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from proctor.errors import ConfigError, PlatformError
from proctor.runs import PlatformClient
from proctor.sandboxes import remote
from proctor.sandboxes.sandbox import tail_text
from tests.support.procs import free_port


def test_new_text_from_growing_and_cut_logs() -> None:
    assert remote.new_text("", "a\nb\n") == "a\nb\n"
    assert remote.new_text("a\nb\n", "a\nb\nc\n") == "c\n"
    assert remote.new_text("a\nb\n", "a\nb\n") == ""
    full = "".join(f"line-{i:05d}\n" for i in range(3000))
    printed = full[:20000]
    grown = full + "tail-1\ntail-2\n"
    cut = tail_text(grown.encode(), 25000)  # the endpoint's tail, behind its marker line
    assert remote.new_text(printed, cut) == grown[20000:]


def test_follow_gives_up_when_the_platform_stays_down() -> None:
    client = remote.connect(f"http://127.0.0.1:{free_port()}", "pk_test")
    try:
        with pytest.raises(PlatformError, match="stopped answering"):
            remote.follow(
                client, "ev-1", on_logs=lambda _: None, poll_seconds=0.05, outage_seconds=0.2
            )
    finally:
        client.close()


def test_connect_without_a_key_names_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PROCTOR_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="PROCTOR_API_KEY"):
        remote.connect("http://127.0.0.1:1")


def test_a_platform_not_running_is_named_with_the_fix() -> None:
    client = remote.connect(f"http://127.0.0.1:{free_port()}", "pk_test")
    try:
        with pytest.raises(PlatformError, match=r"proctor server.*PROCTOR_API_URL"):
            remote.logs(client, "ev-1")
    finally:
        client.close()


def test_follow_reads_the_last_lines_and_the_status_the_launcher_closed_with() -> None:
    # The run finalized (COMPLETED) while its sandbox still printed; then the launcher closed
    # it on the sandbox's exit and overruled the status. Following shows both.
    logs = iter(
        [
            {"logs": "start\n", "ended": False},
            {"logs": "start\n", "ended": False},
            {"logs": "start\nresults: /runs/x\n", "ended": True},
        ]
    )
    records = iter([{"status": "COMPLETED"}, {"status": "FAILED", "error_message": "exit 1"}])

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs"):
            return httpx.Response(200, json=next(logs))
        return httpx.Response(200, json=next(records))

    http = httpx.Client(transport=httpx.MockTransport(answer))
    client = PlatformClient("http://platform.test", "pk-follow", http=http)
    shown: list[str] = []
    record = remote.follow(
        client,
        "ev-1",
        on_logs=shown.append,
        on_status=lambda r: shown.append(f"[{r['status']}]"),
        poll_seconds=0.01,
    )
    assert "".join(shown) == "start\nresults: /runs/x\n[FAILED]"
    assert record["status"] == "FAILED"
