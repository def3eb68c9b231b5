"""Keys, teams and scopes: who may see and change which evaluation."""

from __future__ import annotations

import hashlib

from proctor.server.db.models import ApiKey
from tests.server.conftest import Api
from tests.server.test_traces import episode, jsonl


def test_every_api_call_needs_a_valid_key(api: Api) -> None:
    evaluation_id = api.create()
    no_key = api.client.get(f"/api/v1/evaluations/{evaluation_id}")
    assert no_key.status_code == 401
    assert no_key.json()["error"]["code"] == "unauthenticated"
    wrong = api.get(f"/evaluations/{evaluation_id}", key="pk_wrong")
    assert wrong.status_code == 401
    assert api.client.get("/healthz").status_code == 200


def test_x_api_key_header_is_accepted(api: Api) -> None:
    key = api.key("alice")
    response = api.client.get("/api/v1/evaluations/", headers={"x-api-key": key})
    assert response.status_code == 200


def test_revoked_keys_stop_working(api: Api) -> None:
    from proctor.server.auth import service

    key = api.key("bob")
    assert api.get("/evaluations/", key).status_code == 200
    with api.db.write() as session:
        service.revoke_key(session, service.display_prefix(key))
    response = api.get("/evaluations/", key)
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


def test_users_see_their_own_and_their_teams_evaluations_only(api: Api) -> None:
    alice = api.key("alice", team="red")
    carol = api.key("carol", team="red")
    mallory = api.key("mallory", team="blue")
    personal = api.create(alice, name="alice-personal")
    shared = api.create(alice, name="red-shared", team_id="red")
    blue = api.create(mallory, name="blue-only", team_id="blue")

    assert api.get(f"/evaluations/{shared}", carol).status_code == 200
    hidden = api.get(f"/evaluations/{personal}", carol)
    assert hidden.status_code == 404
    assert "visible" in hidden.json()["detail"]
    assert api.get(f"/evaluations/{blue}", alice).status_code == 404
    # Writes to another team's run look exactly like an unknown id.
    assert api.post(f"/evaluations/{blue}/samples", alice, json={"samples": []}).status_code == 404
    assert api.put(f"/evaluations/{blue}", alice, json={"name": "x"}).status_code == 404
    assert api.post(f"/evaluations/{blue}/finalize", alice, json={}).status_code == 404

    names = {e["name"] for e in api.get("/evaluations/", carol).json()["evaluations"]}
    assert names == {"red-shared"}
    team_only = api.get("/evaluations/", alice, params={"team_id": "red"}).json()
    assert [e["name"] for e in team_only["evaluations"]] == ["red-shared"]
    all_for_admin = api.get("/evaluations/").json()
    assert all_for_admin["total"] == 3


def test_team_ids_the_user_is_not_in_are_refused(api: Api) -> None:
    alice = api.key("alice", team="red")
    api.key("mallory", team="blue")
    response = api.post("/evaluations/", alice, json={"name": "x", "team_id": "blue"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "team_forbidden"
    personal = api.post("/evaluations/", alice, json={"name": "x", "team_id": ""})
    assert personal.status_code == 201
    record = api.get(f"/evaluations/{personal.json()['evaluation_id']}", alice).json()
    assert record["team_id"] is None


def test_scoped_keys_reach_their_evaluation_and_nothing_else(api: Api) -> None:
    from proctor.server.auth import service

    owner = api.key("owner")
    target = api.create(owner, name="target")
    other = api.create(owner, name="other")
    with api.db.write() as session:
        user_id = session.get(ApiKey, _key_id(api, owner)).user_id  # type: ignore[union-attr]
        scoped = service.mint_scoped_key(session, target, user_id)

    assert api.get(f"/evaluations/{target}", scoped).status_code == 200
    samples = {"samples": [{"sample_id": "s1", "reward": 1.0}]}
    assert api.post(f"/evaluations/{target}/samples", scoped, json=samples).status_code == 200
    assert api.get(f"/evaluations/{target}/samples", scoped).status_code == 200
    assert api.put(f"/evaluations/{target}", scoped, json={"metrics": {"a": 1}}).status_code == 200
    # Trace uploads: the key's own evaluation only (any other is a 403 `forbidden`, the code
    # the public traces client reads; never `service_not_enabled`, which would reroute them).
    for evaluation, status in ((target, 201), (other, 403)):
        body = jsonl([episode(f"ep-{evaluation}", evaluation, 0, 1.0)])
        traces = api.post(
            "/traces",
            scoped,
            headers={
                "Idempotency-Key": "sha256:" + hashlib.sha256(body).hexdigest(),
                "X-Prime-Line-Format": "episode",
            },
            files={"metadata": (None, b'{"schema_version":1}'), "traces": ("t.jsonl", body)},
        )
        assert traces.status_code == status, traces.text
    assert traces.json()["error"]["code"] == "forbidden"
    assert api.post(f"/evaluations/{target}/finalize", scoped, json={}).status_code == 200

    denied = [
        api.get(f"/evaluations/{other}", scoped),
        api.post(f"/evaluations/{other}/samples", scoped, json=samples),
        api.put(f"/evaluations/{other}", scoped, json={"status": "FAILED"}),
        api.get("/evaluations/", scoped),
        api.post("/evaluations/", scoped, json={"name": "new"}),
        api.post("/environmentshub/resolve", scoped, json={"name": "env"}),
        api.get("/user/whoami", scoped),
    ]
    for response in denied:
        assert response.status_code == 403, response.request.url
        assert response.json()["error"]["code"] == "scope_denied"


def _key_id(api: Api, secret: str) -> str:
    from sqlalchemy import select

    from proctor.server.auth import service

    with api.db.read() as session:
        key_id = session.scalar(
            select(ApiKey.id).where(ApiKey.key_hash == service.hash_key(secret))
        )
    assert key_id is not None
    return key_id


def test_bootstrap_key_is_created_only_on_an_empty_database(api: Api) -> None:
    from proctor.server.auth import service

    with api.db.write() as session:
        assert not service.ensure_bootstrap_key(session, "pk-another-bootstrap")
    assert api.get("/evaluations/", "pk-another-bootstrap").status_code == 401


def test_keys_are_stored_hashed(api: Api) -> None:
    from sqlalchemy import select

    from proctor.server.auth import service

    secret = api.key("dave")
    assert secret.startswith("pk_") and len(secret) > 40
    with api.db.read() as session:
        stored = list(session.scalars(select(ApiKey.key_hash)))
    assert secret not in stored and service.hash_key(secret) in stored


def test_whoami_lists_the_users_teams(api: Api) -> None:
    alice = api.key("alice", team="red")
    body = api.get("/user/whoami", alice).json()["data"]
    assert body["slug"] == "alice" and [t["teamId"] for t in body["teams"]] == ["red"]
    assert [t["slug"] for t in api.get("/user/teams", alice).json()["data"]] == ["red"]


def test_a_scoped_key_made_by_the_cli_service_acts_as_the_evaluations_owner(api: Api) -> None:
    owner = api.key("owner")
    target = api.create(owner, name="target")
    scoped = api.key("sandbox-key", evaluation=target)
    assert api.get(f"/evaluations/{target}", scoped).status_code == 200
    assert api.get("/evaluations/", scoped).status_code == 403
