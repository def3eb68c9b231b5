"""The environments hub: resolve is get-or-create, lookup and @latest find it again."""

from __future__ import annotations

from tests.server.conftest import Api


def test_resolve_is_get_or_create_and_lookup_finds_it(api: Api) -> None:
    first = api.post("/environmentshub/resolve", json={"name": "alphabet-sort"})
    assert first.status_code == 200
    env = first.json()["data"]
    again = api.post("/environmentshub/resolve", json={"name": "alphabet-sort"}).json()["data"]
    assert again["id"] == env["id"] and env["name"] == "alphabet-sort"
    found = api.post("/environmentshub/lookup", json={"id": env["id"]})
    assert found.status_code == 200 and found.json()["data"]["id"] == env["id"]
    latest = api.get(f"/environmentshub/{env['owner']}/alphabet-sort/@latest")
    assert latest.status_code == 200
    assert latest.json()["data"]["id"] == env["id"]
    assert "latest_version" in latest.json()["data"]


def test_unknown_environments_answer_404(api: Api) -> None:
    assert api.post("/environmentshub/lookup", json={"id": "nope"}).status_code == 404
    response = api.get("/environmentshub/admin/nope/@latest")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_team_resolve_owns_the_environment_by_team(api: Api) -> None:
    alice = api.key("alice", team="red")
    env = api.post(
        "/environmentshub/resolve", alice, json={"name": "arith", "team_id": "red"}
    ).json()["data"]
    assert env["owner"] == "red" and env["team_id"] == "red"
    personal = api.post("/environmentshub/resolve", alice, json={"name": "arith", "team_id": ""})
    assert personal.json()["data"]["owner"] == "alice"
    assert personal.json()["data"]["id"] != env["id"]
    assert api.post("/environmentshub/resolve", alice, json={"name": ""}).status_code == 422
