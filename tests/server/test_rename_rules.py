"""A rename follows delete's team rule (#25 item 12): a new `name` in `PUT /evaluations/{id}`
is for the evaluation's owner, an admin of its team or a platform admin. Whatever a public
client PUTs as another writer (the name the evaluation has, or no name) keeps working."""

from __future__ import annotations

from proctor.server.auth import service as auth
from tests.server.conftest import Api
from tests.support.platform import BOOTSTRAP_KEY


def test_a_new_name_is_for_the_owner_a_team_admin_or_a_platform_admin(api: Api) -> None:
    alice = api.key("alice", user="alice", team="blue")
    carol = api.key("carol", user="carol", team="blue")
    dave = api.key("dave", user="dave", team="blue")
    with api.db.write() as session:
        auth.add_member(session, "blue", "dave", role="admin")
    evaluation_id = api.create(alice, name="calc", team_id="blue")
    path = f"/evaluations/{evaluation_id}"

    refused = api.put(path, carol, json={"name": "carol's now", "description": "x"})
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "forbidden"
    assert error["message"] == (
        f"only the owner of evaluation {evaluation_id}, an admin of its team or a platform "
        "admin may rename it; ask one of them, or send the name it has"
    )
    record = api.get(path, alice).json()
    assert record["name"] == "calc" and record["description"] is None  # nothing applied

    # A member's PUT as the public clients send it (PE update_evaluation: the name it has,
    # tags always) and one with no name at all still write.
    same = api.put(path, carol, json={"name": "calc", "tags": ["by-carol"], "metrics": {"m": 1}})
    assert same.status_code == 200, same.text
    assert api.put(path, carol, json={"description": "carol's note"}).status_code == 200
    record = api.get(path, alice).json()
    assert (record["name"], record["tags"], record["description"]) == (
        "calc",
        ["by-carol"],
        "carol's note",
    )

    # The owner, a key scoped to the evaluation (a hosted sandbox writes as its owner), a team
    # admin and a platform admin rename it.
    scoped = api.key("sandbox", user="alice", evaluation=evaluation_id)
    for key, name in (
        (alice, "by the owner"),
        (scoped, "by its sandbox"),
        (dave, "by a team admin"),
        (BOOTSTRAP_KEY, "by a platform admin"),
    ):
        renamed = api.put(path, key, json={"name": name})
        assert renamed.status_code == 200, (name, renamed.text)
        assert api.get(path, alice).json()["name"] == name
