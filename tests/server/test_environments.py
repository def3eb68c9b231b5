"""The environments hub over HTTP (in-process app, SQLite and PostgreSQL): installed
environments listed under the platform's owner, the public CLI's push protocol, versions,
visibility by user and team, and bad pushes that store nothing."""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from proctor.server.app import create_app
from tests.server.conftest import Api, make_settings

INSTALLED = {"alphabet-sort", "arithmetic", "reverse-text", "tool-calc"}


def make_wheel(
    name: str = "tiny-echo",
    version: str = "0.1.0",
    *,
    entry_points: tuple[str, ...] = ("tiny-echo",),
    marker: str = "",
) -> tuple[str, bytes]:
    """A minimal wheel (file name, bytes) providing `entry_points` as proctor environments."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        wheel.writestr(f"{dist}/__init__.py", f"def load_environment():\n    pass  # {marker}\n")
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        wheel.writestr(f"{info}/METADATA", metadata + "Requires-Dist: proctor\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nTag: py3-none-any\n")
        points = "".join(f"{ep} = {dist}:load_environment\n" for ep in entry_points)
        wheel.writestr(f"{info}/entry_points.txt", f"[proctor.environments]\n{points}")
        wheel.writestr(f"{info}/RECORD", "")
    return f"{dist}-{version}-py3-none-any.whl", buffer.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def push(
    api: Api,
    key: str | None = None,
    *,
    name: str = "tiny-echo",
    version: str = "0.1.0",
    content: str = "v1",
    resolve: dict[str, Any] | None = None,
    source: bool = True,
) -> dict[str, Any]:
    """Walk `prime env push`'s seven requests; returns every answer, by step."""
    filename, wheel = make_wheel(name, version, marker=content)
    content_hash = sha(content.encode())
    out: dict[str, Any] = {}
    out["resolve"] = api.post(
        "/environmentshub/resolve", key, json={"name": name, **(resolve or {})}
    )
    if out["resolve"].status_code != 200:
        return out
    env_id = out["resolve"].json()["data"]["id"]
    meta = {"description": f"{name} for tests", "tags": ["test"], "requires_dist": ["proctor"]}
    common = {"content_hash": content_hash, "semantic_version": version, "metadata": meta}
    body = {**common, "filename": filename, "sha256": sha(wheel), "size": len(wheel)}
    out["wheel"] = api.post(f"/environmentshub/{env_id}/wheels", key, json=body)
    if out["wheel"].status_code != 200:
        return out
    slot = out["wheel"].json()["data"]
    if slot["upload_url"]:
        out["wheel_put"] = api.client.put(slot["upload_url"], content=wheel)
        finalize = f"/environmentshub/{env_id}/wheels/{slot['wheel_id']}/finalize"
        out["wheel_finalize"] = api.post(finalize, key)
    tarball = f"source of {content}".encode()
    source_fields = (
        {"filename": f"{name}-{version}-{content_hash[:8]}.tar.gz", "sha256": sha(tarball)}
        if source
        else {}
    )
    out["version"] = api.post(
        f"/environmentshub/{env_id}/versions", key, json={**common, **source_fields}
    )
    if out["version"].status_code != 200:
        return out
    version_slot = out["version"].json()["data"]
    if version_slot["upload_url"]:
        out["source_put"] = api.client.put(version_slot["upload_url"], content=tarball)
    finalize = f"/environmentshub/{env_id}/versions/{version_slot['version_id']}/finalize"
    out["finalize"] = api.post(finalize, key)
    return out


def test_installed_environments_are_on_the_hub_for_every_user(api: Api) -> None:
    newcomer = api.key("newcomer")
    listed = api.get("/environmentshub/", newcomer, params={"limit": 50}).json()
    names = {(e["owner"]["name"], e["name"]) for e in listed["data"]}
    assert {("proctor", n) for n in INSTALLED} <= names
    assert listed["total_count"] >= len(INSTALLED)
    row = next(e for e in listed["data"] if e["name"] == "alphabet-sort")
    assert row["visibility"] == "PUBLIC" and row["latest_version"] == "0.1.0"
    for owner in ("proctor", "primeintellect"):  # the public CLI's official owner reads as ours
        latest = api.get(f"/environmentshub/{owner}/alphabet-sort/@latest", newcomer)
        assert latest.status_code == 200, latest.text
        data = latest.json()["data"]
        assert data["owner"] == {"name": "proctor", "type": "platform"}
        assert data["latest_version"]["semantic_version"] == "0.1.0"
        assert len(data["latest_version"]["content_hash"]) == 64
    # A bare name resolves to the installed one for anyone who ran proctor's, without
    # creating an entry (any other caller gets its own: tests/server/test_names.py).
    for key in (newcomer, api.key("other")):
        body = {"name": "alphabet-sort", "framework": "proctor"}
        resolved = api.post("/environmentshub/resolve", key, json=body)
        assert resolved.json()["data"]["id"] == row["id"]
        assert resolved.json()["data"]["created"] is False
    assert api.get("/environmentshub/newcomer/alphabet-sort/@latest", newcomer).status_code == 404


def test_listing_pages_filters_and_clamps(api: Api) -> None:
    everything = api.get("/environmentshub/", params={"limit": 100, "sort_by": "name"}).json()
    every_name = sorted(e["name"] for e in everything["data"])
    assert everything["total_count"] == len(every_name) and set(every_name) >= INSTALLED
    names = []
    for offset in range(0, len(every_name), 2):
        params = {"limit": 2, "offset": offset, "sort_by": "name", "sort_order": "asc"}
        names += [e["name"] for e in api.get("/environmentshub/", params=params).json()["data"]]
    assert names == every_name
    assert api.get("/environmentshub/", params={"limit": 5000}).json()["limit"] == 100
    found = api.get("/environmentshub/", params={"search": "REVERSE"}).json()["data"]
    assert [e["name"] for e in found] == ["reverse-text"]
    assert api.get("/environmentshub/", params={"owner": "nobody"}).json()["total_count"] == 0
    assert api.get("/environmentshub/", params={"sort_by": "x"}).status_code == 422


def test_push_publishes_versions_and_same_content_is_a_no_op(api: Api) -> None:
    alice = api.key("alice")
    first = push(api, alice)
    resolved = first["resolve"].json()["data"]
    assert resolved["created"] is True and resolved["owner"] == {"name": "alice", "type": "user"}
    for step in ("wheel", "wheel_put", "wheel_finalize", "version", "source_put", "finalize"):
        assert first[step].status_code == 200, (step, first[step].text)
    assert first["finalize"].json()["data"]["success"] is True
    latest = api.get("/environmentshub/alice/tiny-echo/@latest", alice).json()["data"]
    assert latest["visibility"] == "PRIVATE" and latest["semantic_version"] == "0.1.0"
    assert latest["entry_points"] == ["tiny-echo"] and latest["kind"] == "pushed"

    again = push(api, alice)  # same content: nothing to upload, nothing new
    assert again["resolve"].json()["data"]["created"] is False
    assert again["wheel"].json()["data"]["upload_url"] is None
    assert "already published" in again["finalize"].json()["data"]["message"]

    newer = push(api, alice, version="0.2.0", content="v2")
    assert newer["finalize"].json()["data"]["success"] is True
    versions = api.get("/environmentshub/alice/tiny-echo/versions", alice).json()["data"]
    assert [v["version"] for v in versions["versions"]] == ["0.2.0", "0.1.0"]
    assert versions["versions"][0]["size"] == 2  # wheel and source archive
    old = api.get("/environmentshub/alice/tiny-echo/@0.1.0", alice).json()["data"]
    assert (
        old["semantic_version"] == "0.1.0" and old["latest_version"]["semantic_version"] == "0.2.0"
    )
    status = api.get("/environmentshub/alice/tiny-echo/status", alice).json()["data"]
    assert status["latest_version"]["semantic_version"] == "0.2.0"
    listed = api.get("/environmentshub/", alice, params={"mine_only": True}).json()["data"]
    assert [(e["name"], e["latest_version"]) for e in listed] == [("tiny-echo", "0.2.0")]

    gone = api.request(
        "DELETE",
        f"/environmentshub/alice/tiny-echo/@{versions['versions'][0]['content_hash'][:12]}",
        alice,
    )
    assert gone.status_code == 200
    assert (
        api.get("/environmentshub/alice/tiny-echo/@latest", alice).json()["data"][
            "semantic_version"
        ]
        == "0.1.0"
    )
    assert api.request("DELETE", "/environmentshub/alice/tiny-echo", alice).status_code == 200
    assert api.get("/environmentshub/alice/tiny-echo/@latest", alice).status_code == 404
    assert not list((api.settings.hub_dir() / "wheels").glob("*/*.whl"))


def test_bad_pushes_answer_4xx_and_store_nothing(api: Api) -> None:
    alice = api.key("alice")
    push(api, alice)
    conflict = push(api, alice, content="other content, same version")
    assert conflict["wheel"].status_code == 409
    assert conflict["wheel"].json()["error"]["code"] == "version_conflict"
    versions = api.get("/environmentshub/alice/tiny-echo/versions", alice).json()["data"]
    assert len(versions["versions"]) == 1

    env_id = conflict["resolve"].json()["data"]["id"]
    filename, wheel = make_wheel(version="0.3.0", marker="x")
    body = {
        "content_hash": sha(b"v3"),
        "filename": filename,
        "sha256": sha(wheel),
        "size": len(wheel),
        "semantic_version": "0.3.0",
    }
    oversized = api.post(f"/environmentshub/{env_id}/wheels", alice, json={**body, "size": 1 << 40})
    assert oversized.status_code == 413 and "PROCTOR_HUB_MAX_ARTIFACT_BYTES" in oversized.text
    bad_name = api.post(
        f"/environmentshub/{env_id}/wheels", alice, json={**body, "filename": "../x.whl"}
    )
    assert bad_name.status_code == 422
    slot = api.post(f"/environmentshub/{env_id}/wheels", alice, json=body).json()["data"]
    tampered = api.client.put(slot["upload_url"], content=wheel[:-1] + b"!")
    assert tampered.status_code == 422 and "SHA-256" in tampered.json()["error"]["message"]
    forged = api.client.put(slot["upload_url"].rsplit("/", 1)[0] + "/forged", content=wheel)
    assert forged.status_code == 403
    early = api.post(f"/environmentshub/{env_id}/wheels/{slot['wheel_id']}/finalize", alice)
    assert early.status_code == 409
    announce = {k: v for k, v in body.items() if k not in ("filename", "sha256", "size")}
    version = api.post(f"/environmentshub/{env_id}/versions", alice, json=announce).json()["data"]
    unfinished = api.post(
        f"/environmentshub/{env_id}/versions/{version['version_id']}/finalize", alice
    )
    assert unfinished.status_code == 409
    assert api.get("/environmentshub/alice/tiny-echo/@0.3.0", alice).status_code == 404
    stored = list((api.settings.hub_dir() / "wheels").rglob("*"))
    assert not [p for p in stored if p.is_file() and p.name.startswith(".upload-")]
    assert len([p for p in stored if p.suffix == ".whl"]) == 1

    not_a_wheel = b"this is not a zip archive"
    body = {**body, "sha256": sha(not_a_wheel), "size": len(not_a_wheel)}
    slot = api.post(f"/environmentshub/{env_id}/wheels", alice, json=body).json()["data"]
    assert api.client.put(slot["upload_url"], content=not_a_wheel).status_code == 200
    broken = api.post(f"/environmentshub/{env_id}/wheels/{slot['wheel_id']}/finalize", alice)
    assert broken.status_code == 422 and "zip" in broken.json()["error"]["message"]
    assert len([p for p in (api.settings.hub_dir() / "wheels").rglob("*.whl")]) == 1


@pytest.fixture
def small_api(db_url: str, tmp_path: Path) -> Iterator[Api]:
    settings = make_settings(db_url, tmp_path, hub_max_artifact_bytes=2048)
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(client, app.state.db, settings)


def test_an_upload_past_the_size_cap_is_refused_while_it_streams(small_api: Api) -> None:
    api = small_api
    env_id = api.post("/environmentshub/resolve", json={"name": "big"}).json()["data"]["id"]
    data = b"x" * 5000
    body = {
        "content_hash": sha(b"big"),
        "filename": "big-1.0-py3-none-any.whl",
        "sha256": sha(data),
        "size": 1000,  # understated: the stream is what counts
        "semantic_version": "1.0",
    }
    slot = api.post(f"/environmentshub/{env_id}/wheels", json=body).json()["data"]
    refused = api.client.put(slot["upload_url"], content=data)
    assert refused.status_code == 413, refused.text
    assert not [p for p in api.settings.hub_dir().rglob("*") if p.is_file()]


def test_private_environments_are_invisible_to_other_teams(api: Api) -> None:
    alice = api.key("alice", team="red")
    carol = api.key("carol", team="red")
    bob = api.key("bob", team="blue")
    pushed = push(api, alice, resolve={"team_id": "red"})
    env = pushed["resolve"].json()["data"]
    assert env["owner"] == {"name": "red", "type": "team"} and env["visibility"] == "PRIVATE"
    assert pushed["finalize"].status_code == 200
    assert api.get("/environmentshub/red/tiny-echo/@latest", carol).status_code == 200
    hidden = [
        api.get("/environmentshub/red/tiny-echo/@latest", bob),
        api.get("/environmentshub/red/tiny-echo/status", bob),
        api.get("/environmentshub/red/tiny-echo/versions", bob),
        api.post("/environmentshub/lookup", bob, json={"id": env["id"]}),
        api.post("/environmentshub/resolve", bob, json={"name": "red/tiny-echo"}),
        api.post("/environmentshub/resolve", bob, json={"name": "tiny-echo", "owner_slug": "red"}),
        api.post(
            f"/environmentshub/{env['id']}/wheels",
            bob,
            json={"content_hash": "0" * 64, "filename": "a.whl", "sha256": "0" * 64, "size": 1},
        ),
        api.post(
            "/hosted-evaluations",
            bob,
            json={"environment_ids": [env["id"]], "inference_model": "demo"},
        ),
        api.post(
            "/hosted-evaluations",
            bob,
            json={"environment_ids": ["red/tiny-echo"], "inference_model": "demo"},
        ),
    ]
    assert [r.status_code for r in hidden] == [404] * len(hidden), [r.text for r in hidden]
    listed = api.get("/environmentshub/", bob, params={"limit": 100}).json()["data"]
    assert "tiny-echo" not in {e["name"] for e in listed}
    # Bob's own bare name is his, not red's.
    own = api.post("/environmentshub/resolve", bob, json={"name": "tiny-echo"}).json()["data"]
    assert own["owner"]["name"] == "bob" and own["created"] is True

    # Made public, everyone sees it, but only red may push to it.
    api.post(
        "/environmentshub/resolve", alice, json={"name": "red/tiny-echo", "visibility": "public"}
    )
    assert api.get("/environmentshub/red/tiny-echo/@latest", bob).status_code == 200
    refused = push(api, bob, version="0.9.0", content="bob's", resolve={"owner_slug": "red"})
    assert refused["wheel"].status_code == 403
    assert refused["wheel"].json()["error"]["code"] == "owner_forbidden"


def test_names_of_others_and_of_the_platform_are_refused(api: Api) -> None:
    bob = api.key("bob")
    installed = push(api, bob, name="alphabet-sort", resolve={"framework": "proctor"})
    assert installed["resolve"].json()["data"]["owner"]["name"] == "proctor"
    assert installed["wheel"].status_code == 403
    assert "installed with the server" in installed["wheel"].json()["error"]["message"]
    for body in (
        {"name": "proctor/new-thing"},
        {"name": "new-thing", "owner_slug": "carol"},
    ):
        answer = api.post("/environmentshub/resolve", bob, json=body)
        assert answer.status_code == 403, answer.text
    assert api.post("/environmentshub/resolve", bob, json={"name": "a b"}).status_code == 422
    assert (
        api.post(
            "/environmentshub/resolve", bob, json={"name": "x", "visibility": "open"}
        ).status_code
        == 422
    )


@pytest.mark.process  # the app's launcher starts the created runs' sandboxes
def test_a_hosted_run_of_a_pushed_environment_records_its_exact_package(api: Api) -> None:
    alice = api.key("alice")
    push(api, alice)
    push(api, alice, version="0.2.0", content="v2")
    for ref, version in (("alice/tiny-echo", "0.2.0"), ("tiny-echo@0.1.0", "0.1.0")):
        body = {"environment_ids": [ref], "inference_model": "demo"}
        created = api.post("/hosted-evaluations", alice, json=body)
        assert created.status_code == 200, created.text
        record = api.get(f"/evaluations/{created.json()['evaluation_id']}", alice).json()
        assert record["metadata"]["environment_ref"] == f"alice/tiny-echo@{version}"
        assert record["environment_names"] == ["tiny-echo"]
    missing = api.post(
        "/hosted-evaluations",
        alice,
        json={"environment_ids": ["no-such-env"], "inference_model": "m"},
    )
    assert missing.status_code == 404
    bad_version = api.post(
        "/hosted-evaluations",
        alice,
        json={"environment_ids": ["alice/tiny-echo@9.9"], "inference_model": "m"},
    )
    assert bad_version.status_code == 404
