"""Test support: episode records shaped like `Episode.to_record()`, platform queries."""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.platform import Platform


def make_record(
    index: int,
    *,
    run_id: str | None = None,
    reward: float = 1.0,
    error: dict[str, Any] | None = None,
    rollout: int = 1,
) -> dict[str, Any]:
    """One alphabet-sort-like episode record."""
    prompt = f"Sort these names alphabetically: Zed{index}, Amy, Bob"
    return {
        "id": uuid.uuid4().hex,
        "env": "alphabet-sort",
        "example_id": index,
        "rollout_number": rollout,
        "task": {"index": index, "prompt": prompt, "answer": "Amy, Bob, Zed", "info": {"n": 3}},
        "messages": [
            {"role": "system", "content": "You sort names."},
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": "<sorted>Amy, Bob, Zed</sorted>"},
        ],
        "rewards": {"alphabet_sort": reward},
        "metrics": {"num_names": 3.0},
        "reward": reward,
        "timing": {"start": 1.0, "end": 2.0, "duration_s": 1.0},
        "token_usage": {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40},
        "error": error,
        "stop_condition": "completed" if error is None else "model_error",
        "is_completed": error is None,
        "is_truncated": False,
        "num_turns": 1,
        "run": {"id": run_id, "name": "test"} if run_id else None,
        "ok": error is None,
    }


def create_launcher_evaluation(plat: Platform, **metadata: object) -> str:
    """Create an evaluation the way the hosted launcher does; return its id."""
    with plat.client() as c:
        r = c.post(
            "/evaluations/",
            json={"name": "launched", "environments": [], "tags": [], "metadata": metadata},
        )
        r.raise_for_status()
        return str(r.json()["evaluation_id"])


def get_evaluation(plat: Platform, evaluation_id: str) -> dict[str, object]:
    with plat.client() as c:
        r = c.get(f"/evaluations/{evaluation_id}")
        r.raise_for_status()
        return dict(r.json())


def all_samples(plat: Platform, evaluation_id: str) -> list[dict[str, object]]:
    """Every stored sample of an evaluation, following pages."""
    samples: list[dict[str, object]] = []
    with plat.client() as c:
        page = 1
        while True:
            r = c.get(f"/evaluations/{evaluation_id}/samples", params={"page": page, "limit": 500})
            r.raise_for_status()
            body = r.json()
            samples += body["samples"]
            if not body.get("has_more"):
                return samples
            page += 1


def evaluation_count(plat: Platform) -> int:
    with plat.client() as c:
        r = c.get("/evaluations/", params={"limit": 1})
        r.raise_for_status()
        return int(r.json()["total"])
