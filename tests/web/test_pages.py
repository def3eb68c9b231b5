"""Dashboard pages in-process: sign-in, visibility, every page and its JSON twin, bad input."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from proctor.server.web import session as web_session
from tests.web.conftest import Seeded, SeededWeb, Web


@pytest.fixture
def web(fresh_web: SeededWeb) -> Web:
    """The tests here share one app per backend, seeded once (`seeded_web`), signed out."""
    return fresh_web.web


@pytest.fixture
def seeded(fresh_web: SeededWeb) -> Seeded:
    """The ids and keys of that app's seeded data."""
    return fresh_web.seeded


def test_pages_redirect_to_sign_in_without_a_session(web: Web) -> None:
    for path in ("/evaluations?status=RUNNING", "/evaluations/x", "/compare?ids=a,b"):
        response = web.client.get(path, follow_redirects=False)
        assert response.status_code == 303
        assert response.headers["location"].startswith("/login?next=%2F")
    assert web.client.get("/", follow_redirects=False).headers["location"] == "/evaluations"
    twin = web.client.get("/evaluations?format=json")
    assert twin.status_code == 401 and twin.json()["error"]["code"] == "login_required"


def test_sign_in_sets_a_signed_http_only_cookie_without_the_key(web: Web, seeded: Seeded) -> None:
    bad = web.client.post("/login", data={"api_key": "pk_wrong"}, follow_redirects=False)
    assert bad.status_code == 401 and "invalid or revoked" in bad.text
    response = web.client.post(
        "/login",
        data={"api_key": seeded.alice_key, "next": "/evaluations?status=COMPLETED"},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/evaluations?status=COMPLETED"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "samesite=lax" in cookie.lower()
    assert seeded.alice_key not in cookie and seeded.alice_key[3:20] not in cookie
    # An off-site `next` is not followed (no open redirect).
    evil = web.client.post(
        "/login",
        data={"api_key": seeded.alice_key, "next": "//evil.example/"},
        follow_redirects=False,
    )
    assert evil.headers["location"] == "/evaluations"


def test_cookie_is_secure_on_https_and_loopback(web: Web, seeded: Seeded) -> None:
    for base in ("https://proctor.test", "http://127.0.0.1:8000"):
        response = web.client.post(
            f"{base}/login", data={"api_key": seeded.alice_key}, follow_redirects=False
        )
        assert "Secure" in response.headers["set-cookie"], base


def test_scoped_keys_cannot_sign_in(web: Web, seeded: Seeded) -> None:
    scoped = web.api.key("sandbox", user="alice", evaluation=seeded.own)
    response = web.client.post("/login", data={"api_key": scoped}, follow_redirects=False)
    assert response.status_code == 401 and "limited to one evaluation" in response.text


def test_tampered_expired_and_revoked_sessions_are_refused(web: Web) -> None:
    # A key of alice's own: the test revokes it, and the module's other tests use hers.
    web.login(web.api.key("alice-revoked-key", user="alice", team="blue"))
    assert web.client.get("/evaluations").status_code == 200
    value = web.client.cookies[web_session.COOKIE_NAME]
    web.client.cookies.clear()
    web.client.cookies.set(web_session.COOKIE_NAME, value[:-2] + "xx")
    assert web.client.get("/evaluations", follow_redirects=False).status_code == 303
    secret = web_session.session_secret(web.api.settings)
    session_id = web_session.read_cookie_value(secret, value)
    assert session_id is not None
    with web.api.db.write() as session:
        key_id = web_session.live_key_id(session, session_id)
        assert key_id is not None
        later = datetime.now(UTC) + timedelta(seconds=web_session.SESSION_MAX_AGE_S + 1)
        assert web_session.live_key_id(session, session_id, now=later) is None
    web.client.cookies.clear()
    web.client.cookies.set(web_session.COOKIE_NAME, value)
    assert web.client.get("/evaluations").status_code == 200
    from proctor.server.auth import service as auth

    with web.api.db.write() as session:
        auth.revoke_key(session, key_id)
    assert web.client.get("/evaluations", follow_redirects=False).status_code == 303


def test_sign_out_clears_the_session(web: Web, seeded: Seeded) -> None:
    web.login(seeded.alice_key)
    assert "Sign out" in web.client.get("/logout").text
    response = web.client.post("/logout", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/login"
    assert web.client.get("/evaluations", follow_redirects=False).status_code == 303


def test_sign_out_revokes_the_session_server_side(web: Web, seeded: Seeded) -> None:
    web.login(seeded.alice_key)
    copied = web.client.cookies[web_session.COOKIE_NAME]
    assert web.client.post("/logout", follow_redirects=False).status_code == 303
    # The same cookie, replayed after sign-out (as a thief who copied it would), is refused.
    web.client.cookies.set(web_session.COOKIE_NAME, copied)
    refused = web.client.get("/evaluations", follow_redirects=False)
    assert refused.status_code == 303 and refused.headers["location"].startswith("/login")
    # Another sign-in of the same key is a new session and works.
    web.login(seeded.alice_key)
    assert web.client.get("/evaluations").status_code == 200


def test_signed_in_pages_are_not_stored(web: Web, seeded: Seeded) -> None:
    web.login(seeded.alice_key)
    for path in ("/evaluations", f"/evaluations/{seeded.own}", "/login"):
        response = web.client.get(path)
        assert response.status_code == 200 and response.headers["cache-control"] == "no-store"
    assert "no-store" not in web.client.get("/static/dashboard.css").headers["cache-control"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://testserver:8081"},  # another port of the same host
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://testserver:8081"},
        {"Sec-Fetch-Site": "cross-site"},
    ],
)
def test_forged_sign_in_and_sign_out_are_refused(
    web: Web, seeded: Seeded, headers: dict[str, str]
) -> None:
    # Login CSRF: another origin posting its own key must not sign this browser in.
    forged = web.client.post(
        "/login",
        data={"api_key": seeded.bob_key, "next": "/evaluations"},
        headers={**headers, "Accept": "text/html"},
        follow_redirects=False,
    )
    assert forged.status_code == 403 and "another site or port" in forged.text
    assert "set-cookie" not in forged.headers
    web.login(seeded.alice_key)
    refused = web.client.post("/logout", headers=headers, follow_redirects=False)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "cross_site_request"
    assert web.client.get("/evaluations").status_code == 200  # still signed in


def test_same_origin_forms_pass_the_guard(web: Web, seeded: Seeded) -> None:
    same = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}
    response = web.client.post(
        "/login", data={"api_key": seeded.alice_key}, headers=same, follow_redirects=False
    )
    assert response.status_code == 303
    only_origin = web.client.post(
        "/logout", headers={"Origin": "http://testserver"}, follow_redirects=False
    )
    assert only_origin.status_code == 303


def test_list_shows_own_and_team_evaluations_only(web: Web, seeded: Seeded) -> None:
    web.login(seeded.alice_key)
    page = web.client.get("/evaluations")
    assert page.status_code == 200
    for name in ("alice-calc", "alice-calc-b", "blue-team-run"):
        assert name in page.text
    assert "red-secret-run" not in page.text
    assert "data-poll-s=" in page.text  # alice-calc-b and blue-team-run still run
    data = web.client.get("/evaluations?format=json").json()
    assert [e["name"] for e in data["evaluations"]] == [
        "blue-team-run",
        "alice-calc-b",
        "alice-calc",
    ]
    assert data["total"] == 3 and data["live"] is True
    assert re.fullmatch(r"app;dur=\d+\.\d", page.headers["server-timing"])
    # The JSON twin and the API list come from the same service call.
    api = web.api.get("/evaluations/", seeded.alice_key).json()
    assert [e["id"] for e in api["evaluations"]] == [e["id"] for e in data["evaluations"]]


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("status=COMPLETED", ["alice-calc"]),
        ("model=demo-b", ["alice-calc-b"]),
        ("environment=tool-calc", ["alice-calc-b", "alice-calc"]),
        ("hosted=yes", []),
        ("hosted=no&status=RUNNING&limit=1", ["blue-team-run"]),
        ("status=&model=&hosted=", ["blue-team-run", "alice-calc-b", "alice-calc"]),
        ("skip=2", ["alice-calc"]),
    ],
)
def test_list_filters_and_pages(web: Web, seeded: Seeded, query: str, names: list[str]) -> None:
    web.login(seeded.alice_key)
    data = web.client.get(f"/evaluations?{query}&format=json").json()
    assert [e["name"] for e in data["evaluations"]] == names


def test_the_newest_page_of_the_list_watches_for_new_evaluations_an_older_one_does_not(
    web: Web,
    seeded: Seeded,
) -> None:
    web.login(seeded.alice_key)
    newest = web.client.get("/evaluations?status=COMPLETED")
    assert "alice-calc" in newest.text and "data-poll-s=" in newest.text
    assert "new ones as they start" in newest.text
    older = web.client.get("/evaluations?status=COMPLETED&skip=1")
    assert "data-poll-s=" not in older.text


def test_evaluation_page_shows_stats_histogram_and_pass_at_k(web: Web, seeded: Seeded) -> None:
    web.login(seeded.alice_key)
    page = web.client.get(f"/evaluations/{seeded.own}")
    assert page.status_code == 200
    text = page.text
    assert "alice-calc" in text and "COMPLETED" in text and "<svg" in text
    assert 'id="pass-at-k"' in text and 'id="reward-means"' in text
    assert "the model timed out" in text  # the errored sample in the table
    data = web.client.get(f"/evaluations/{seeded.own}?format=json").json()
    # Scored samples only: the errored s-4-4, stored with reward 1.0, is in no bar.
    assert sum(b["count"] for b in data["histogram"]) == 19
    assert data["histogram"][0]["count"] == 6 and data["histogram"][-1]["count"] == 13
    assert data["errored"] == 1 and data["errored_examples"] == 0
    errored_row = [s for s in data["table"]["samples"] if s["has_error"]]
    assert [(s["sample_id"], s["reward"]) for s in errored_row] == [("s-4-4", None)]
    assert '<span class="bad">error</span>' in text
    examples = data["examples"]
    assert examples["examples"] == 5 and examples["max_rollouts"] == 4
    # Scored samples only: example 4's errored rollout is left out (19 of 20 are scored).
    # Examples pass 3, 3, 2, 3 of 4 rollouts and 2 of 3: pass@1 is the mean share, pass@2
    # averages 1 - C(n-c, 2)/C(n, 2) (one example has 2 failures of 4: 1 - 1/6), pass@4
    # counts the four examples with 4 scored rollouts.
    stats = data["stats"]
    assert stats["reward"]["mean"] == pytest.approx(13 / 19)
    assert (stats["reward"]["n_samples"], stats["reward"]["n_errored"]) == (19, 1)
    assert stats["pass_threshold"] == 1.0
    pass_at = {row["k"]: (row["value"], row["n_examples"]) for row in stats["pass_at_k"]}
    assert pass_at[1] == (pytest.approx((0.75 * 3 + 0.5 + 2 / 3) / 5), 5)
    assert pass_at[2] == (pytest.approx((4 + 5 / 6) / 5), 5)
    assert pass_at[4] == (1.0, 4)
    # The same figures the API answers, and the same headline in the page.
    api_stats = web.api.get(f"/evaluations/{seeded.own}/stats", seeded.alice_key).json()
    assert api_stats == stats
    assert html.escape(stats["headline"]) in page.text or stats["headline"] in page.text
    assert "errored samples are counted" in page.text
    assert 'name="pass_threshold"' in page.text
    # The header is the API's record, from the same service call.
    record = web.api.get(f"/evaluations/{seeded.own}", seeded.alice_key).json()
    for key in ("id", "status", "total_samples", "avg_score", "metrics", "created_at"):
        assert data["evaluation"][key] == record[key]
    assert record["viewer_url"].endswith(f"/evaluations/{seeded.own}")
    strict = web.client.get(f"/evaluations/{seeded.own}?format=json&pass_threshold=2").json()
    assert [row["value"] for row in strict["stats"]["pass_at_k"]] == [0.0, 0.0, 0.0]


def test_single_rollout_runs_have_no_pass_at_k(web: Web, seeded: Seeded) -> None:
    web.login(seeded.alice_key)
    data = web.client.get(f"/evaluations/{seeded.second}?format=json").json()
    assert data["examples"] is None and data["logs"] is None
    assert data["evaluation"]["live"] is True
    assert "data-poll-s=" in web.client.get(f"/evaluations/{seeded.second}").text


def test_hosted_evaluation_shows_its_sandbox_logs(web: Web, tmp_path: Path) -> None:
    # A user of its own: a new evaluation in alice's list would change what the others read.
    carol = web.api.key("carol-key", user="carol", team="green")
    web.login(carol)
    hosted_id = web.hosted(carol, num_examples=2, rollouts_per_example=1)
    before = web.client.get(f"/evaluations/{hosted_id}")
    assert "Sandbox logs" in before.text and "(no output yet)" in before.text
    assert "data-poll-s=" in before.text  # PENDING: the page follows the run
    # Play the sandbox: a local-backend handle whose log file has some output.
    log = tmp_path / "sandbox.log"
    log.write_text("starting proctor eval\nrollout 1/2 done <ok>\n")
    web.play_sandbox(hosted_id, log)
    page = web.client.get(f"/evaluations/{hosted_id}")
    assert "rollout 1/2 done &lt;ok&gt;" in page.text and "(following)" in page.text
    data = web.client.get(f"/evaluations/{hosted_id}?format=json").json()
    assert data["logs"] == log.read_text()
    assert data["evaluation"]["is_hosted"] is True and data["evaluation"]["status"] == "PENDING"
    listed = web.client.get("/evaluations?hosted=yes&format=json").json()["evaluations"]
    assert [e["id"] for e in listed] == [hosted_id]


def _sample_ids(web: Web, path: str) -> list[str]:
    response = web.client.get(path + ("&" if "?" in path else "?") + "format=json")
    assert response.status_code == 200, response.text
    return [s["sample_id"] for s in response.json()["table"]["samples"]]


def test_samples_table_pages_sorts_and_filters(web: Web, seeded: Seeded) -> None:
    web.login(seeded.alice_key)
    base = f"/evaluations/{seeded.own}/samples"
    first = _sample_ids(web, f"{base}?limit=8")
    second = _sample_ids(web, f"{base}?limit=8&page=2")
    third = _sample_ids(web, f"{base}?limit=8&page=3")
    assert len(first) == 8 and len(second) == 8 and len(third) == 4
    assert not set(first) & set(second)
    data = web.client.get(f"{base}?limit=8&page=3&format=json").json()
    assert data["table"]["has_more"] is False
    low = web.client.get(f"{base}?sort=reward&limit=7&format=json").json()["table"]["samples"]
    assert [s["reward"] for s in low] == [0.0] * 6 + [1.0]
    # Errored samples are never ranked by the reward stored with them (s-4-4 has 1.0).
    high = web.client.get(f"{base}?sort=-reward&limit=13&format=json").json()
    assert {s["reward"] for s in high["table"]["samples"]} == {1.0}
    assert _sample_ids(web, f"{base}?errored=yes") == ["s-4-4"]
    by_reward = _sample_ids(web, f"{base}?example=3&sort=-reward")
    assert by_reward == ["s-3-4", "s-3-2", "s-3-1", "s-3-3"]  # ties: newest first
    page = web.client.get(f"{base}?example=3")
    assert page.status_code == 200 and "s-3-1" in page.text and "s-2-1" not in page.text


def test_sample_page_renders_the_transcript_with_tool_calls(web: Web, seeded: Seeded) -> None:
    web.login(seeded.alice_key)
    page = web.client.get(f"/evaluations/{seeded.own}/samples/s-2-3")
    assert page.status_code == 200
    text_html = html.unescape(page.text)
    for text in ("role-system", "role-user", "role-tool", "→ add", "call_2_3", "The answer is 4."):
        assert text in text_html
    assert re.search(r'"a": 2,\s+"b": 2', text_html)  # arguments pretty-printed
    data = web.client.get(f"/evaluations/{seeded.own}/samples/s-2-3?format=json").json()
    sample = data["sample"]
    assert sample["rewards"] == {"correct_answer": 1.0}
    assert sample["metrics"] == {"num_tool_calls": 1}
    assert sample["token_usage"] == {"prompt_tokens": 31, "completion_tokens": 12}
    assert sample["timing"]["generation_ms"] == 120.5
    assert [m["role"] for m in sample["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    errored = web.client.get(f"/evaluations/{seeded.own}/samples/s-4-4")
    assert "ModelError: the model timed out" in errored.text


def test_compare_highlights_per_example_differences(web: Web, seeded: Seeded) -> None:
    web.login(seeded.alice_key)
    data = web.client.get(f"/compare?ids={seeded.own},{seeded.second}&format=json").json()
    assert data["environment"] == "tool-calc"
    assert [e["name"] for e in data["evaluations"]] == ["alice-calc", "alice-calc-b"]
    by_example = {row["example_id"]: row for row in data["examples"]}
    assert by_example[0]["means"] == [0.75, 1.0]
    assert by_example[2]["means"] == [0.5, 1.0] and by_example[2]["spread"] == 0.5
    # Scored samples only: example 4's errored rollout is not in its mean.
    assert by_example[4]["means"] == [pytest.approx(2 / 3), 0.5]
    assert by_example[2]["diff"] == 0.5 and by_example[4]["diff"] == pytest.approx(0.5 - 2 / 3)
    paired = data["paired"]
    assert paired["baseline"] == seeded.own and paired["candidate"] == seeded.second
    assert paired["n_common"] == 5 and paired["wins"] + paired["ties"] + paired["losses"] == 5
    rows = {row["name"]: row for row in data["metrics"]}
    assert rows["samples"]["values"] == [20, 5] and rows["samples"]["differs"] is True
    page = web.client.get(f"/compare?pick={seeded.own}&pick={seeded.second}")
    assert page.status_code == 200 and 'class="num best"' in page.text
    base = f"/compare?ids={seeded.own},{seeded.second}&limit=2&format=json"
    first = web.client.get(base).json()
    assert [r["example_id"] for r in first["examples"]] == [0, 1] and first["next_start"] == 2
    second = web.client.get(f"{base}&start=2").json()
    assert [r["example_id"] for r in second["examples"]] == [2, 3]
    last = web.client.get(f"{base}&start=4").json()
    assert [r["example_id"] for r in last["examples"]] == [4] and last["next_start"] is None
    assert "next →" in web.client.get(f"/compare?ids={seeded.own},{seeded.second}&limit=2").text


def test_other_teams_and_unknown_ids_answer_a_404_page(web: Web, seeded: Seeded) -> None:
    web.login(seeded.alice_key)
    for path in (
        f"/evaluations/{seeded.other}",
        "/evaluations/no-such-id",
        f"/evaluations/{seeded.own}/samples/no-such-sample",
        f"/evaluations/{seeded.other}/samples",
        f"/compare?ids={seeded.own},{seeded.other}",
    ):
        response = web.client.get(path)
        assert response.status_code == 404, path
        assert "text/html" in response.headers["content-type"]
        assert "Not found" in response.text and "red-secret-run" not in response.text
    twin = web.client.get(f"/evaluations/{seeded.other}?format=json")
    assert twin.status_code == 404 and twin.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("/evaluations?status=DONE", "Unknown status 'DONE'"),
        ("/evaluations?hosted=maybe", "'hosted' must be yes or no"),
        ("/evaluations?skip=-1", "'skip' is invalid"),
        ("/evaluations?limit=0", "'limit' is invalid"),
        ("/evaluations?format=xml", "'format' must be json or html"),
        ("/evaluations/{own}?page=0", "'page' is invalid"),
        ("/evaluations/{own}?page=abc", "'page' is invalid"),
        ("/evaluations/{own}?sort=name", "Unknown sort 'name'"),
        ("/evaluations/{own}/samples?example=x", "'example' must be an integer"),
        ("/evaluations/{own}?pass_threshold=high", "'pass_threshold' must be a number"),
        ("/compare?ids={own}", "Compare needs 2 to 6"),
        ("/compare?ids={own},{second}&start=x", "'start' must be an integer"),
        ("/compare?ids={own},{second}&sort=name", "Unknown sort 'name'"),
        ("/compare?ids={own},{team}", "cannot be compared: 'alice-calc' ran tool-calc"),
    ],
)
def test_bad_query_parameters_answer_a_clear_400(
    web: Web, seeded: Seeded, path: str, needle: str
) -> None:
    web.login(seeded.alice_key)
    response = web.client.get(path.format(own=seeded.own, team=seeded.team, second=seeded.second))
    assert response.status_code == 400, response.text
    assert needle in html.unescape(response.text) and "Bad request" in response.text
    assert "Traceback" not in response.text


def test_static_files_are_served_from_the_package(web: Web) -> None:
    css = web.client.get("/static/dashboard.css")
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    assert web.client.get("/static/../session.py").status_code == 404
    assert web.client.get("/static/nope.js").status_code == 404
