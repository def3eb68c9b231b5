"""Requests that race on one evaluation get one consistent answer, on SQLite and PostgreSQL
(the `api` fixture runs each test on both): a cancel against a finalize has exactly one
winner, and concurrent creates with one Idempotency-Key create one evaluation."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tests.server.conftest import Api
from tests.server.test_evaluations import wait_status


def _together(calls: list[Callable[[], None]]) -> None:
    """Run the calls in threads released at once; every thread ends within the deadline."""
    barrier = threading.Barrier(len(calls), timeout=30)

    def released(call: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            barrier.wait()
            call()

        return run

    threads = [threading.Thread(target=released(call)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()


def test_cancel_and_finalize_racing_have_exactly_one_winner(api: Api) -> None:
    winners = {"finalize": 0, "cancel": 0}
    for _ in range(100):
        evaluation_id = api.create()
        path = f"/evaluations/{evaluation_id}"
        api.post(f"{path}/samples", json={"samples": [{"sample_id": "a", "reward": 1.0}]})
        answers: dict[str, int] = {}

        def finalize(path: str = path, answers: dict[str, int] = answers) -> None:
            answers["finalize"] = api.post(f"{path}/finalize", json={}).status_code

        def cancel(path: str = path, answers: dict[str, int] = answers) -> None:
            answers["cancel"] = api.put(path, json={"status": "CANCELLED"}).status_code

        _together([finalize, cancel])
        assert sorted(answers.values()) == [200, 409], answers
        winner = "finalize" if answers["finalize"] == 200 else "cancel"
        winners[winner] += 1
        wait_status(api, evaluation_id, "COMPLETED" if winner == "finalize" else "CANCELLED")
    assert sum(winners.values()) == 100


def test_concurrent_creates_with_one_idempotency_key_answer_the_same(api: Api) -> None:
    lock = threading.Lock()
    for round_number in range(3):
        key = f"run-dir-key-{round_number}"
        answers: list[tuple[int, str]] = []

        def create(key: str = key, answers: list[tuple[int, str]] = answers) -> None:
            response = api.post(
                "/evaluations/", json={"name": "same"}, headers={"Idempotency-Key": key}
            )
            body = response.json()
            with lock:
                answers.append((response.status_code, str(body.get("evaluation_id"))))

        _together([create] * 30)
        assert len(answers) == 30
        assert {status for status, _ in answers} == {201}, answers
        assert len({evaluation_id for _, evaluation_id in answers}) == 1, answers
    assert api.get("/evaluations/").json()["total"] == 3
