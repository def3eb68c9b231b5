"""One meaning of every figure on the pages: errored samples are counted as errored and never
binned, averaged or ranked as a reward; compare's baseline, swap and sort over all examples."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from tests.web.conftest import Web, tool_sample


@pytest.fixture
def web(module_web: Web) -> Iterator[Web]:
    """The module's app (`module_web`), signed out; each test works as a user of its own."""
    module_web.client.cookies.clear()
    yield module_web
    module_web.client.cookies.clear()


TIMEOUT = {"type": "ModelError", "message": "the model timed out"}
TERMINAL = ("COMPLETED", "FAILED")


def _run(web: Web, key: str, name: str, samples: list[dict[str, object]]) -> str:
    evaluation = web.api.create(key, name=name, dataset="designed")
    response = web.api.post(f"/evaluations/{evaluation}/samples", key, json={"samples": samples})
    assert response.is_success, response.text
    return evaluation


def test_errored_samples_are_in_no_histogram_count_or_mean(web: Web) -> None:
    key = web.api.key("dana", user="dana")
    # 10 examples x 10 rollouts; examples 0-3 errored in every rollout (stored with reward
    # 1.0, as some clients do), examples 4-9 errored in their 3 last rollouts (reward 0.0),
    # so 58 of 100 errored. Scored: examples 4-9, rollouts 1-7, reward 1 when rollout <= 3.
    samples = []
    for e in range(10):
        for r in range(1, 11):
            if e < 4:
                samples.append({**tool_sample(e, r, 1.0), "error": TIMEOUT})
            elif r > 7:
                samples.append({**tool_sample(e, r, 0.0), "error": TIMEOUT})
            else:
                samples.append(tool_sample(e, r, 1.0 if r <= 3 else 0.0))
    evaluation = _run(web, key, "errors", samples)
    web.login(key)
    data = web.client.get(f"/evaluations/{evaluation}?format=json").json()
    assert data["errored"] == 58 and data["errored_examples"] == 4
    assert sum(b["count"] for b in data["histogram"]) == 42
    assert (data["histogram"][0]["count"], data["histogram"][-1]["count"]) == (24, 18)
    examples = data["examples"]
    assert examples["examples"] == 6 and examples["max_rollouts"] == 7
    assert examples["mean_per_example"] == pytest.approx(3 / 7)
    assert sum(b["count"] for b in examples["mean_histogram"]) == 6
    reward = data["stats"]["reward"]
    assert reward["mean"] == pytest.approx(3 / 7) and reward["n_samples"] == 42
    assert (reward["n_errored"], reward["n_examples"], reward["n_errored_examples"]) == (58, 6, 4)
    pass_at = {row["k"]: row for row in data["stats"]["pass_at_k"]}
    assert pass_at[1]["value"] == pytest.approx(3 / 7) and pass_at[1]["n_examples"] == 6
    text = web.client.get(f"/evaluations/{evaluation}").text
    assert "4 examples errored in every rollout" in text
    assert "6 examples with a scored rollout" in text
    table = web.client.get(f"/evaluations/{evaluation}/samples?limit=10&format=json").json()
    assert {s["reward"] for s in table["table"]["samples"]} == {None}  # example 0: all errored


def test_an_all_errored_finished_run_says_so(web: Web) -> None:
    key = web.api.key("erin", user="erin")
    evaluation = _run(
        web, key, "broken", [{**tool_sample(e, 1, 0.0), "error": TIMEOUT} for e in range(5)]
    )
    assert web.api.post(f"/evaluations/{evaluation}/finalize", key, json={}).is_success
    deadline = time.monotonic() + 30
    while web.api.get(f"/evaluations/{evaluation}", key).json()["status"] not in TERMINAL:
        assert time.monotonic() < deadline, "the finalize task did not finish in 30 s"
        time.sleep(0.05)
    web.login(key)
    page = web.client.get(f"/evaluations/{evaluation}")
    assert 'id="all-errored"' in page.text and "All 5 samples errored" in page.text
    assert "No scored samples yet" not in page.text
    listing = web.client.get("/evaluations").text
    assert "all errored" in listing


@pytest.fixture(scope="module")
def pair(module_web: Web) -> tuple[str, str, str]:
    """fay's key and her two compared evaluations, posted once for the module (its compare
    tests only read them)."""
    web = module_web
    key = web.api.key("fay", user="fay")
    # 250 examples; B is better on most, much worse on examples 200-209; A errored in
    # every rollout of example 7.
    a = [tool_sample(e, 1, 0.5) for e in range(250)]
    a[7] = {**a[7], "error": TIMEOUT}
    b = [tool_sample(e, 1, 0.0 if 200 <= e < 210 else 1.0) for e in range(250)]
    return key, _run(web, key, "older-a", a), _run(web, key, "newer-b", b)


def test_compare_filters_all_examples_on_the_server_before_paging(
    web: Web, pair: tuple[str, str, str]
) -> None:
    key, a, b = pair
    web.login(key)
    query = f"/compare?ids={a},{b}&limit=5&format=json"
    # The ten regressions are examples 200-209: past the first page of 100 examples.
    worse = web.client.get(f"{query}&show=regressions").json()
    assert worse["total"] == 10 and worse["next_start"] == 5
    assert [r["example_id"] for r in worse["examples"]] == [200, 201, 202, 203, 204]
    assert "show=regressions" in (worse["next_query"] or "")
    better = web.client.get(f"{query}&show=improvements&sort=-diff").json()
    assert better["total"] == 240 and better["examples"][0]["example_id"] == 7
    errored = web.client.get(f"{query}&show=errored").json()
    assert [r["example_id"] for r in errored["examples"]] == [7] and errored["total"] == 1
    assert web.client.get(f"{query}&show=ties").json()["total"] == 0
    assert web.client.get(f"{query}&show=one-sided").json()["total"] == 0
    refused = web.client.get(f"{query}&show=bogus")
    assert refused.status_code == 400 and "Unknown filter" in refused.text
    page = web.client.get(f"/compare?ids={a},{b}&show=regressions").text
    assert '<option value="regressions" selected>' in page
    # The API lists the same rows, from the same function.
    api = web.api.get(
        f"/evaluations/compare?ids={a},{b}&show=regressions&sort=example&limit=5", key
    )
    assert api.json()["examples"]["rows"] == worse["examples"]


def test_compare_keeps_the_chosen_baseline_swaps_and_sorts_all_examples(
    web: Web, pair: tuple[str, str, str]
) -> None:
    key, a, b = pair
    web.login(key)
    # Ticked on the list (newest first there): the oldest is the baseline unless chosen.
    picked = web.client.get(f"/compare?pick={b}&pick={a}&format=json").json()
    assert [e["id"] for e in picked["evaluations"]] == [a, b]
    chosen = web.client.get(f"/compare?pick={a}&pick={b}&baseline={b}&format=json").json()
    assert [e["id"] for e in chosen["evaluations"]] == [b, a]
    assert chosen["paired"]["baseline"] == b
    swapped = web.client.get(f"/compare?{chosen['swap_query']}&format=json").json()
    assert [e["id"] for e in swapped["evaluations"]] == [a, b]
    assert swapped["paired"]["mean_diff"] == pytest.approx(-chosen["paired"]["mean_diff"])
    # Largest regressions first, over all 250 examples (not the 100 on the first page).
    worst = web.client.get(f"/compare?ids={a},{b}&sort=diff&limit=20&format=json").json()
    assert [r["example_id"] for r in worst["examples"][:10]] == list(range(200, 210))
    assert worst["total"] == 250 and worst["next_start"] == 20
    best = web.client.get(f"/compare?ids={a},{b}&sort=-diff&limit=1&format=json").json()
    assert best["examples"][0]["example_id"] == 7  # 1.0 against an all-errored 0
    # The all-errored example is shown as errored, and paired as 0 for A.
    row = web.client.get(f"/compare?ids={a},{b}&start=7&limit=1&format=json").json()
    example = row["examples"][0]
    assert example["errored"] == [True, False] and example["means"] == [None, 1.0]
    assert example["diff"] == 1.0
    paired = worst["paired"]
    assert paired["n_common"] == 250 and paired["errored_baseline"]["example_ids"] == [7]
    page = web.client.get(f"/compare?ids={a},{b}&start=7&limit=1").text
    assert "errored-example" in page and 'id="swap"' in page
    assert 'id="paired-vs-means"' in page
    # The paired difference and the difference of the headline means differ, and why.
    means = next(e for e in worst["metrics"] if e["name"] == "mean reward")["values"]
    assert worst["mean_difference"] == pytest.approx(means[1] - means[0])
    assert worst["mean_difference"] != pytest.approx(paired["mean_diff"])
    shown = re.search(r'id="paired-vs-means">Why not ([+-][0-9.]+)', page)
    assert shown and float(shown.group(1)) == pytest.approx(worst["mean_difference"], abs=1e-3)
