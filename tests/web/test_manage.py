"""The evaluation page's rename and delete controls (#25 item 12): shown to the keys that may
use them, confirmed, and refused to the others."""

from __future__ import annotations

from tests.web.conftest import Web


def test_the_owner_renames_and_deletes_from_the_page(web: Web) -> None:
    seeded = web.seed()
    web.login(seeded.alice_key)
    page = web.client.get(f"/evaluations/{seeded.own}")
    assert 'id="rename"' in page.text and 'id="delete"' in page.text
    renamed = web.client.post(
        f"/evaluations/{seeded.own}/rename", data={"name": "calc, take two"}, follow_redirects=False
    )
    assert renamed.status_code == 303
    assert web.api.get(f"/evaluations/{seeded.own}", seeded.alice_key).json()["name"] == (
        "calc, take two"
    )
    unconfirmed = web.client.post(f"/evaluations/{seeded.own}/delete", follow_redirects=False)
    assert unconfirmed.status_code == 400
    deleted = web.client.post(
        f"/evaluations/{seeded.own}/delete", data={"confirm": "yes"}, follow_redirects=False
    )
    assert deleted.status_code == 303 and deleted.headers["location"] == "/"
    assert web.api.get(f"/evaluations/{seeded.own}", seeded.alice_key).status_code == 404
    assert "alice-calc-b" in web.client.get("/evaluations").text


def test_a_team_member_may_neither_rename_nor_delete(web: Web) -> None:
    seeded = web.seed()
    carol = web.api.key("carol-key", user="carol", team="blue")
    web.login(carol)
    page = web.client.get(f"/evaluations/{seeded.team}")
    assert page.status_code == 200
    assert 'id="rename"' not in page.text and 'id="delete"' not in page.text
    renaming = web.client.post(
        f"/evaluations/{seeded.team}/rename", data={"name": "mine"}, follow_redirects=False
    )
    assert renaming.status_code == 403 and "may rename it" in renaming.text
    refused = web.client.post(
        f"/evaluations/{seeded.team}/delete", data={"confirm": "yes"}, follow_redirects=False
    )
    assert refused.status_code == 403
    assert web.api.get(f"/evaluations/{seeded.team}", seeded.alice_key).status_code == 200
    stranger = web.client.post(
        f"/evaluations/{seeded.other}/delete", data={"confirm": "yes"}, follow_redirects=False
    )
    assert stranger.status_code == 404  # another team's: not even visible
