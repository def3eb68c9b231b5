"""Samples: idempotent append, verbatim storage, paging, and refusals that store nothing."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from proctor.server.boundary import page_max
from tests.server.conftest import Api


def post_samples(api: Api, evaluation_id: str, samples: list[Any], key: str | None = None) -> Any:
    return api.post(f"/evaluations/{evaluation_id}/samples", key, json={"samples": samples})


def stored(api: Api, evaluation_id: str, limit: int = 1000) -> list[dict[str, Any]]:
    page = api.get(f"/evaluations/{evaluation_id}/samples", params={"limit": limit}).json()
    return list(page["samples"])


def test_replayed_samples_are_stored_once_and_count_as_success(api: Api) -> None:
    evaluation_id = api.create()
    batch = [{"sample_id": "a", "reward": 1.0}, {"sample_id": "b", "reward": 0.0}]
    first = post_samples(api, evaluation_id, batch)
    assert first.status_code == 200 and first.json()["inserted"] == 2
    replay = post_samples(api, evaluation_id, [*batch, {"sample_id": "c", "reward": 0.5}])
    assert replay.status_code == 200
    assert replay.json() | {"evaluation_id": evaluation_id} == {
        "evaluation_id": evaluation_id,
        "received": 3,
        "inserted": 1,
        "duplicates": 2,
        "total_samples": 3,
    }
    in_batch = post_samples(api, evaluation_id, [{"sample_id": "d"}, {"sample_id": "d"}])
    assert in_batch.json()["inserted"] == 1
    record = api.get(f"/evaluations/{evaluation_id}").json()
    assert record["total_samples"] == 4
    assert [s["sample_id"] for s in stored(api, evaluation_id)] == ["a", "b", "c", "d"]


def test_samples_are_kept_exactly_as_sent_with_unknown_keys(api: Api) -> None:
    evaluation_id = api.create()
    sample = '{"sample_id":"x", "alphabet_sort": 0.8, "custom":{"deep":[1, 2.50]},"reward":0.8}'
    response = api.post(
        f"/evaluations/{evaluation_id}/samples", content=('{"samples": [' + sample + "]}").encode()
    )
    assert response.status_code == 200
    raw = api.get(f"/evaluations/{evaluation_id}/samples").content.decode()
    assert sample in raw


def test_samples_page_is_a_dense_range_with_has_more(api: Api) -> None:
    evaluation_id = api.create()
    post_samples(api, evaluation_id, [{"sample_id": f"s{i}", "example_id": i} for i in range(7)])
    post_samples(api, evaluation_id, [{"sample_id": "s3"}, {"sample_id": "s7", "example_id": 7}])
    pages = [
        api.get(f"/evaluations/{evaluation_id}/samples", params={"page": p, "limit": 3}).json()
        for p in (1, 2, 3, 4)
    ]
    assert [[s["example_id"] for s in page["samples"]] for page in pages] == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7],
        [],
    ]
    assert [page["has_more"] for page in pages] == [True, True, False, False]
    # The last page the schema allows is empty; its window still fits a 32-bit row position.
    far = api.get(
        f"/evaluations/{evaluation_id}/samples", params={"page": page_max(1000), "limit": 1000}
    )
    assert far.status_code == 200 and far.json()["samples"] == []
    assert all(page["total"] == 8 and page["limit"] == 3 for page in pages)
    assert pages[1]["page"] == 2


def test_empty_batch_and_trailing_slash_are_accepted_without_redirect(api: Api) -> None:
    evaluation_id = api.create()
    assert post_samples(api, evaluation_id, []).status_code == 200
    response = api.post(
        f"/evaluations/{evaluation_id}/samples/",
        json={"samples": [{"sample_id": "z"}]},
        follow_redirects=False,
    )
    assert response.status_code == 200 and response.json()["inserted"] == 1


def test_non_finite_numbers_are_refused_and_nothing_is_stored(api: Api) -> None:
    evaluation_id = api.create()
    for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
        body = '{"samples": [{"sample_id": "ok"}, {"sample_id": "bad", "reward": ' + literal + "}]}"
        response = api.post(f"/evaluations/{evaluation_id}/samples", content=body.encode())
        assert response.status_code == 422, literal
        assert response.json()["error"]["code"] == "non_finite_number"
    assert api.get(f"/evaluations/{evaluation_id}").json()["total_samples"] == 0


def test_malformed_samples_are_refused_as_a_whole(api: Api) -> None:
    evaluation_id = api.create()
    bad_batches: list[Any] = [
        [{"sample_id": "ok"}, "not an object"],
        [{"sample_id": "ok"}, {"sample_id": "r", "reward": "high"}],
        [{"sample_id": "ok"}, {"sample_id": "e", "example_id": 1.5}],
        [{"sample_id": "ok"}, {"sample_id": ["list"]}],
        [{"sample_id": "ok"}, {"sample_id": "x" * 201}],
    ]
    for batch in bad_batches:
        response = post_samples(api, evaluation_id, batch)
        assert response.status_code == 422, batch
        assert "samples[1]" in response.json()["error"]["message"]
    for body in (b'{"samples": {}}', b'{"rows": []}', b"[]", b'{"samples": [1,]}', b"{"):
        response = api.post(f"/evaluations/{evaluation_id}/samples", content=body)
        assert response.status_code == 422, body
        assert set(response.json()) == {"error", "detail"}
    assert api.get(f"/evaluations/{evaluation_id}").json()["total_samples"] == 0


def test_bodies_over_the_cap_answer_413(api: Api) -> None:
    evaluation_id = api.create()
    api.settings.max_request_bytes = 10_000
    big = {"samples": [{"sample_id": "big", "blob": "x" * 20_000}]}
    response = post_samples(api, evaluation_id, big["samples"])
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"

    def chunks() -> Any:  # no Content-Length: the streaming cap must catch it
        yield json.dumps(big).encode()

    streamed = api.post(f"/evaluations/{evaluation_id}/samples", content=chunks())
    assert streamed.status_code == 413
    # The cap covers every route, also those whose body FastAPI parses itself.
    resolve = api.post("/environmentshub/resolve", json={"name": "x" * 20_000})
    assert resolve.status_code == 413
    assert resolve.json()["error"]["code"] == "payload_too_large"
    assert api.get(f"/evaluations/{evaluation_id}").json()["total_samples"] == 0


def test_closed_runs_take_no_new_samples_but_replays_succeed(api: Api) -> None:
    failed = api.create()
    api.put(f"/evaluations/{failed}", json={"status": "FAILED"})
    response = post_samples(api, failed, [{"sample_id": "late"}])
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "evaluation_closed"
    completed = api.create()
    post_samples(api, completed, [{"sample_id": "a", "reward": 1.0}])
    api.post(f"/evaluations/{completed}/finalize", json={})
    before = api.get(f"/evaluations/{completed}").json()
    refused = post_samples(api, completed, [{"sample_id": "a"}, {"sample_id": "new", "reward": 0}])
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "evaluation_closed"
    replay = post_samples(api, completed, [{"sample_id": "a", "reward": 1.0}])
    assert replay.status_code == 200 and replay.json()["inserted"] == 0
    after = api.get(f"/evaluations/{completed}").json()
    assert after["status"] == "COMPLETED"
    assert (
        (after["total_samples"], after["avg_score"])
        == (1, 1.0)
        == (
            before["total_samples"],
            before["avg_score"],
        )
    )
    assert [s["sample_id"] for s in stored(api, completed)] == ["a"]


def test_rewards_that_overflow_their_sum_give_a_null_mean_never_infinity(api: Api) -> None:
    evaluation_id = api.create()
    response = post_samples(
        api,
        evaluation_id,
        [{"sample_id": "a", "reward": 1e308}, {"sample_id": "b", "reward": 1e308}],
    )
    assert response.status_code == 200, response.text
    api.post(f"/evaluations/{evaluation_id}/finalize", json={})
    for path in (f"/evaluations/{evaluation_id}", "/evaluations/"):
        text = api.get(path).text
        assert "Infinity" not in text and "NaN" not in text
        json.loads(text, parse_constant=lambda c: pytest.fail(f"emitted {c}"))
    record = api.get(f"/evaluations/{evaluation_id}").json()
    assert record["avg_score"] is None and record["max_score"] == 1e308
    huge = post_samples(api, evaluation_id, [{"sample_id": "c", "reward": 10**400}])
    assert huge.status_code == 422 and "samples[0].reward" in huge.json()["error"]["message"]


def test_reopen_revives_a_runs_own_closing_and_counts_attempts(api: Api) -> None:
    evaluation_id = api.create()
    api.put(f"/evaluations/{evaluation_id}", json={"status": "CANCELLED"})
    answer = api.post(f"/evaluations/{evaluation_id}/reopen")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"evaluation_id": evaluation_id, "status": "RUNNING", "attempts": 2}
    assert post_samples(api, evaluation_id, [{"sample_id": "x"}]).status_code == 200
    api.post(f"/evaluations/{evaluation_id}/finalize", json={})
    closed = api.post(f"/evaluations/{evaluation_id}/reopen")
    assert closed.status_code == 409 and closed.json()["error"]["code"] == "evaluation_closed"
    assert api.get(f"/evaluations/{evaluation_id}").json()["attempts"] == 2


def test_sample_ids_page_through_what_is_stored(api: Api) -> None:
    evaluation_id = api.create()
    post_samples(api, evaluation_id, [{"sample_id": f"s{i}"} for i in range(25)])
    ids: list[str] = []
    after: int | None = 0
    while after is not None:
        page = api.get(
            f"/evaluations/{evaluation_id}/sample_ids", params={"after": after, "limit": 10}
        ).json()
        ids += page["sample_ids"]
        after = page["next_after"]
        assert page["total"] == 25
    assert ids == [f"s{i}" for i in range(25)]


def test_a_create_replayed_with_its_idempotency_key_makes_one_evaluation(api: Api) -> None:
    body = {"name": "offline", "environments": [], "tags": []}
    first = api.post("/evaluations/", json=body, headers={"Idempotency-Key": "run-dir-key-1"})
    again = api.post("/evaluations/", json=body, headers={"Idempotency-Key": "run-dir-key-1"})
    other = api.post("/evaluations/", json=body, headers={"Idempotency-Key": "run-dir-key-2"})
    assert first.status_code == again.status_code == 201
    assert first.json()["evaluation_id"] == again.json()["evaluation_id"]
    assert other.json()["evaluation_id"] != first.json()["evaluation_id"]


def test_concurrent_writers_get_dense_sequence_numbers(api: Api) -> None:
    evaluation_id = api.create()

    def writer(w: int) -> None:
        batches = [
            [{"sample_id": f"w{w}-{b}-{i}", "reward": i / 10} for i in range(10)] for b in range(5)
        ]
        for batch in batches:
            response = api.post(f"/evaluations/{evaluation_id}/samples", json={"samples": batch})
            assert response.status_code == 200, response.text

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(writer, range(4)))
    record = api.get(f"/evaluations/{evaluation_id}").json()
    assert record["total_samples"] == 200
    assert record["min_score"] == 0.0 and record["max_score"] == 0.9
    ids = [s["sample_id"] for s in stored(api, evaluation_id)]
    assert len(ids) == len(set(ids)) == 200


def test_replays_inside_a_batch_leave_no_holes_in_the_order(api: Api) -> None:
    evaluation_id = api.create()
    post_samples(api, evaluation_id, [{"sample_id": "a"}, {"sample_id": "b"}])
    batch = [{"sample_id": s} for s in ("x", "a", "y", "b", "z")]
    assert post_samples(api, evaluation_id, batch).json()["inserted"] == 3
    pages = [
        api.get(f"/evaluations/{evaluation_id}/samples", params={"page": p, "limit": 2}).json()
        for p in (1, 2, 3)
    ]
    assert [[s["sample_id"] for s in page["samples"]] for page in pages] == [
        ["a", "b"],
        ["x", "y"],
        ["z"],
    ]
