"""The hub refuses zip bombs (#21 D4): a small wheel whose METADATA inflates hugely is
refused with a 4xx after bounded reads (server memory stays small), stored fields are
bounded, and the wheel is inspected outside any write transaction, so other writers go on."""

from __future__ import annotations

import io
import secrets
import threading
import tracemalloc
import zipfile
from typing import Any

import pytest

from proctor.server.environments import artifacts
from proctor.server.errors import InvalidInput
from tests.server.conftest import Api
from tests.server.test_environments import sha


def _wheel(metadata: str, *, name: str = "bomb-env", members: int = 0) -> tuple[str, bytes]:
    dist = name.replace("-", "_")
    info = f"{dist}-0.1.0.dist-info"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as whl:
        whl.writestr(f"{dist}/__init__.py", "def load_environment():\n    pass\n")
        whl.writestr(f"{info}/METADATA", metadata)
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nTag: py3-none-any\n")
        whl.writestr(
            f"{info}/entry_points.txt",
            f"[proctor.environments]\n{name} = {dist}:load_environment\n",
        )
        for i in range(members):
            whl.writestr(f"{dist}/m{i}.py", "")
    return f"{dist}-0.1.0-py3-none-any.whl", buffer.getvalue()


def _head(name: str = "bomb-env") -> str:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n"


def _upload_and_finalize(api: Api, filename: str, wheel: bytes, name: str = "bomb-env") -> Any:
    env_id = api.post("/environmentshub/resolve", json={"name": name}).json()["data"]["id"]
    body = {
        "content_hash": sha(wheel),
        "semantic_version": "0.1.0",
        "metadata": {},
        "filename": filename,
        "sha256": sha(wheel),
        "size": len(wheel),
    }
    slot = api.post(f"/environmentshub/{env_id}/wheels", json=body).json()["data"]
    assert api.client.put(slot["upload_url"], content=wheel).status_code == 200
    return api.post(f"/environmentshub/{env_id}/wheels/{slot['wheel_id']}/finalize")


def test_a_metadata_bomb_is_refused_with_bounded_memory(api: Api) -> None:
    filename, wheel = _wheel(_head() + "Summary: " + "A" * (64 * 1024 * 1024) + "\n")
    assert len(wheel) < 512 * 1024  # 64 MiB of METADATA in a small wheel
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        refused = _upload_and_finalize(api, filename, wheel)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.status_code == 422, refused.text
    assert "inflates" in refused.json()["error"]["message"]
    assert peak < 16 * 1024 * 1024, peak  # far below the 64 MiB the member inflates to
    assert not list((api.settings.hub_dir() / "wheels").rglob("*.whl"))


@pytest.mark.parametrize(
    ("metadata", "members", "words"),
    [
        # Past 1 MiB without inflating much: refused by size, not by ratio.
        (_head() + "Summary: " + secrets.token_hex(600_000) + "\n", 0, "over 1 MiB"),
        (_head(), artifacts.MAX_MEMBERS + 1, "members"),
    ],
    # (named: an id of the random summary would differ on each xdist worker's collection)
    ids=["summary-over-1-MiB", "too-many-members"],
)
def test_oversized_metadata_and_too_many_members_are_refused(
    api: Api, metadata: str, members: int, words: str
) -> None:
    filename, wheel = _wheel(metadata, members=members)
    refused = _upload_and_finalize(api, filename, wheel)
    assert refused.status_code == 422 and words in refused.json()["error"]["message"]


def test_a_long_summary_is_stored_bounded(api: Api) -> None:
    filename, wheel = _wheel(
        _head("long-env") + "Summary: " + "s" * 200_000 + "\n", name="long-env"
    )
    assert _upload_and_finalize(api, filename, wheel, "long-env").status_code == 200
    from sqlalchemy import select

    from proctor.server.db.models import EnvironmentVersion

    with api.db.read() as session:
        details = session.scalars(select(EnvironmentVersion.details)).all()
    summaries = [d.get("summary", "") for d in details if d]
    assert summaries and all(len(s) <= artifacts.MAX_SUMMARY_CHARS for s in summaries)


def test_the_wheel_is_read_outside_any_write_transaction(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = artifacts.read_wheel
    wrote: list[str] = []

    def read_while_another_writer_writes(path: Any) -> artifacts.WheelFacts:
        # Another request's write, made while this wheel is inspected, must not wait for it.
        def write() -> None:
            wrote.append(api.create(name="meanwhile"))

        other = threading.Thread(target=write)
        other.start()
        other.join(timeout=60)
        assert not other.is_alive(), "a writer waited for the wheel's inspection"
        return real(path)

    monkeypatch.setattr(artifacts, "read_wheel", read_while_another_writer_writes)
    filename, wheel = _wheel(_head("calm-env"), name="calm-env")
    assert _upload_and_finalize(api, filename, wheel, "calm-env").status_code == 200
    assert len(wrote) == 1


@pytest.mark.parametrize(
    ("extra", "refusal"),
    [
        ("Version: not a version\n", "invalid METADATA .*'version'"),
        ("Requires-Dist: numpy >>= 1\n", "invalid METADATA .*'requires-dist'"),
    ],
)
def test_malformed_metadata_is_one_sentence_naming_the_field(
    tmp_path: Any, extra: str, refusal: str
) -> None:
    head = "Metadata-Version: 2.1\nName: odd-env\n" + ("" if "Version" in extra else "Version: 1\n")
    path = tmp_path / "odd_env-1-py3-none-any.whl"
    path.write_bytes(_wheel(head + extra, name="odd-env")[1])
    with pytest.raises(InvalidInput, match=refusal) as refused:
        artifacts.read_wheel(path)
    assert "\n" not in str(refused.value) and "push again" in str(refused.value)


def test_fields_newer_than_the_metadata_version_are_still_read(tmp_path: Any) -> None:
    # older setuptools and hatchling write License-File under Metadata-Version 2.1
    extra = "License-File: LICENSE\nRequires-Dist: numpy (>=1.0) ; extra == 'fast'\n"
    path = tmp_path / "odd_env-1-py3-none-any.whl"
    path.write_bytes(_wheel(_head("odd-env") + extra, name="odd-env")[1])
    facts = artifacts.read_wheel(path)
    assert (facts.name, facts.version) == ("odd-env", "0.1.0")
    assert facts.requires_dist == ['numpy>=1.0; extra == "fast"']
