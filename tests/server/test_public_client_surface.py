"""What the public clients read besides the hub: the dashboard link they print, `/user/teams`
fields, `--env owner/name` filters and page sizes above the caps (clamped, not refused)."""

from __future__ import annotations

from tests.server.conftest import Api


def test_the_dashboard_link_clients_print_opens_the_evaluation_after_sign_in(api: Api) -> None:
    evaluation_id = api.create(name="linked")
    link = f"/dashboard/evaluations/{evaluation_id}"
    first = api.client.get(link, follow_redirects=False)
    assert first.status_code == 307 and first.headers["location"] == f"/evaluations/{evaluation_id}"
    page = api.client.get(link, follow_redirects=False, headers={"Accept": "text/html"})
    signed_out = api.client.get(page.headers["location"], follow_redirects=False)
    assert signed_out.status_code == 303 and "/login" in signed_out.headers["location"]
    signed_in = api.client.post(
        "/login", data={"api_key": api.headers()["Authorization"][7:], "next": link}
    )
    assert signed_in.status_code == 200 and "linked" in signed_in.text


def test_user_teams_carry_role_and_created_at_and_page(api: Api) -> None:
    alice = api.key("alice", team="red")
    api.key("alice-2", user="alice", team="blue")
    answer = api.get("/user/teams", alice).json()
    assert answer["total_count"] == 2
    assert [(t["teamId"], t["slug"], t["role"]) for t in answer["data"]] == [
        ("blue", "blue", "member"),
        ("red", "red", "member"),
    ]
    assert all(t["createdAt"] for t in answer["data"])
    page = api.get("/user/teams", alice, params={"offset": 1, "limit": 5000}).json()
    assert [t["teamId"] for t in page["data"]] == ["red"] and page["limit"] == 100


def test_env_owner_name_filters_and_page_sizes_above_the_caps(api: Api) -> None:
    alice = api.key("alice")
    installed = api.post(
        "/environmentshub/resolve", alice, json={"name": "alphabet-sort", "framework": "proctor"}
    )
    own = api.post("/environmentshub/resolve", alice, json={"name": "alice/alphabet-sort"})
    first = api.create(
        alice, name="on-installed", environments=[{"id": installed.json()["data"]["id"]}]
    )
    api.create(alice, name="on-own", environments=[{"id": own.json()["data"]["id"]}])
    by_slug = api.get(
        "/evaluations/", alice, params={"environment_name": "proctor/alphabet-sort"}
    ).json()
    assert [e["evaluation_id"] for e in by_slug["evaluations"]] == [first]
    by_name = api.get("/evaluations/", alice, params={"environment_name": "alphabet-sort"}).json()
    assert by_name["total"] == 2
    nobody = api.get("/evaluations/", alice, params={"environment_name": "nobody/alphabet-sort"})
    assert nobody.json()["total"] == 0
    clamped = api.get("/evaluations/", alice, params={"limit": 501})
    assert clamped.status_code == 200
    samples = api.get(f"/evaluations/{first}/samples", alice, params={"limit": 1001})
    assert samples.status_code == 200 and samples.json()["limit"] == 1000
