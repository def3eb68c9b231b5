"""GET /evaluations/{id}/stats and /evaluations/compare over the real app and database."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.proportion import proportion_confint

from tests.server.conftest import Api
from tests.server.test_evaluations import wait_status


def _sample(
    example: int | None, rollout: int, reward: float | None, **extra: Any
) -> dict[str, Any]:
    return {
        "sample_id": f"e{example}-r{rollout}",
        "example_id": example,
        "rollout_number": rollout,
        "reward": reward,
        **extra,
    }


def _post(api: Api, evaluation_id: str, samples: list[dict[str, Any]], key: str | None = None):
    response = api.post(f"/evaluations/{evaluation_id}/samples", key, json={"samples": samples})
    assert response.is_success, response.text


def test_stats_are_the_clustered_mean_of_scored_samples(api: Api) -> None:
    evaluation_id = api.create()
    _post(
        api,
        evaluation_id,
        [
            _sample(0, 1, 1.0),
            _sample(0, 2, 1.0),
            _sample(1, 1, 0.0),
            _sample(1, 2, 0.0),
            # Errored: counted, not averaged (whether its reward is null, 0 or even 1).
            _sample(2, 1, None, error={"type": "Timeout", "message": "slow"}),
            _sample(2, 2, 0.0, error={"type": "Timeout", "message": "slow"}),
            _sample(3, 1, 1.0, error={"type": "Timeout", "message": "slow"}),
        ],
    )
    body = api.get(f"/evaluations/{evaluation_id}/stats").json()
    reward = body["reward"]
    assert reward["mean"] == 0.5
    assert reward["se"] == pytest.approx(0.5)  # clustered; naive would be sqrt(1/12)
    assert reward["naive_se"] == pytest.approx(math.sqrt(1 / 12))
    # 0/1 rewards: Wilson's interval on the effective size p(1-p)/SE^2 = 1.
    assert reward["ci_method"] == "wilson" and reward["df"] == 1
    assert reward["ci95"] == pytest.approx(list(proportion_confint(0.5, 1, method="wilson")))
    assert (reward["n_samples"], reward["n_errored"], reward["n_examples"]) == (4, 3, 2)
    assert reward["n_errored_examples"] == 2
    low, high = reward["ci95"]
    assert body["headline"] == (
        f"0.500 (95% CI {low:.3f} to {high:.3f}), 2 examples \u00d7 2 rollouts"
    )
    assert body["label"] == "mean reward" and "errored" in body["covers"]
    assert body["pass_threshold"] == 1.0 and body["pass_threshold_source"] == "default"
    assert body["pass_at_k"] == [
        {"k": 1, "value": 0.5, "n_examples": 2},
        {"k": 2, "value": 0.5, "n_examples": 2},
    ]
    # The record's avg_score is the same number.
    assert api.get(f"/evaluations/{evaluation_id}").json()["avg_score"] == 0.5
    low = api.get(f"/evaluations/{evaluation_id}/stats?pass_threshold=0").json()
    assert [row["value"] for row in low["pass_at_k"]] == [1.0, 1.0]


def test_stats_with_unequal_rollouts_and_samples_without_example(api: Api) -> None:
    evaluation_id = api.create()
    _post(
        api,
        evaluation_id,
        [
            _sample(0, 1, 1.0),
            _sample(0, 2, 0.0),
            _sample(0, 3, 1.0),
            _sample(None, 1, 0.0),
            _sample(1, 1, 1.0),
            _sample(1, 2, 1.0),
        ],
    )
    reward = api.get(f"/evaluations/{evaluation_id}/stats").json()["reward"]
    assert reward["mean"] == pytest.approx(2 / 3)
    assert reward["se"] == pytest.approx(math.sqrt(1 / 27))
    assert reward["n_examples"] == 3 and reward["rollouts_per_example"] == 3
    assert reward["min_rollouts_per_example"] == 1


def test_stats_change_as_samples_arrive_and_after_finalize(api: Api) -> None:
    evaluation_id = api.create()
    _post(api, evaluation_id, [_sample(0, 1, 1.0)])
    assert api.get(f"/evaluations/{evaluation_id}/stats").json()["reward"]["se"] is None
    _post(api, evaluation_id, [_sample(1, 1, 0.0)])
    first = api.get(f"/evaluations/{evaluation_id}/stats").json()
    assert first["reward"]["mean"] == 0.5 and first["reward"]["se"] == pytest.approx(0.5)
    api.post(f"/evaluations/{evaluation_id}/finalize", json={})
    wait_status(api, evaluation_id, "COMPLETED")
    done = api.get(f"/evaluations/{evaluation_id}/stats").json()
    assert done["status"] == "COMPLETED" and done["reward"] == first["reward"]


def test_stats_total_tokens_and_latency_of_numbers_only(api: Api) -> None:
    evaluation_id = api.create()
    usage = {"prompt_tokens": 30, "completion_tokens": 10}
    _post(
        api,
        evaluation_id,
        [
            _sample(0, 1, 1.0, token_usage=usage, timing={"model_s": 1.5, "duration_s": 2.0}),
            _sample(0, 2, 0.0, token_usage=usage, timing={"model_s": 0.5, "duration_s": 1.0}),
            # Stored as sent: odd types are skipped, not a 500.
            _sample(1, 1, 1.0, token_usage={"prompt_tokens": "many"}, timing=[1, 2]),
            _sample(1, 2, 1.0, token_usage=None, timing={"model_s": 1e308, "duration_s": True}),
        ],
    )
    totals = api.get(f"/evaluations/{evaluation_id}/stats").json()["usage"]
    assert totals["prompt_tokens"] == 60 and totals["completion_tokens"] == 20
    assert totals["duration_s"] == 3.0
    assert totals["model_s"] == pytest.approx(1e308)


def test_compare_pairs_common_examples_and_lists_one_sided_ones(api: Api) -> None:
    baseline, candidate = api.create(name="a"), api.create(name="b")
    _post(api, baseline, [_sample(1, 1, 0.5), _sample(2, 1, 1.0), _sample(3, 1, 0.0)])
    _post(api, baseline, [_sample(4, 1, 0.25)])
    _post(api, candidate, [_sample(1, 1, 1.0), _sample(2, 1, 1.0), _sample(3, 1, 0.5)])
    _post(api, candidate, [_sample(5, 1, 1.0)])
    response = api.get(f"/evaluations/compare?ids={baseline},{candidate}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert [e["evaluation_id"] for e in body["evaluations"]] == [baseline, candidate]
    paired = body["paired"]
    assert (paired["baseline"], paired["candidate"]) == (baseline, candidate)
    assert paired["n_common"] == 3
    assert paired["mean_diff"] == pytest.approx(1 / 3)
    assert paired["se"] == pytest.approx(1 / 6)
    # A paired t-test on 2 degrees of freedom (the normal gave 0.0455).
    oracle = scipy_stats.ttest_rel([1.0, 1.0, 0.5], [0.5, 1.0, 0.0])
    assert paired["p_value"] == pytest.approx(oracle.pvalue, rel=1e-10) and paired["df"] == 2
    interval = oracle.confidence_interval(0.95)
    assert paired["ci95"] == pytest.approx([interval.low, interval.high], rel=1e-10)
    assert (paired["wins"], paired["ties"], paired["losses"]) == (2, 1, 0)
    power = scipy_stats.t.ppf(0.975, 2) + scipy_stats.t.ppf(0.8, 2)
    assert paired["mde80"] == pytest.approx(power / 6, rel=1e-10)
    assert paired["only_baseline"] == {"count": 1, "example_ids": [4]}
    assert paired["only_candidate"] == {"count": 1, "example_ids": [5]}


def test_compare_and_stats_refuse_bad_input_and_hide_other_users(api: Api) -> None:
    mine = api.key("mine", user="alice")
    theirs = api.key("theirs", user="bob")
    own, other = api.create(mine), api.create(theirs)
    assert api.get(f"/evaluations/{other}/stats", mine).status_code == 404
    assert api.get(f"/evaluations/compare?ids={own},{other}", mine).status_code == 404
    assert api.get("/evaluations/compare?ids=nope,alsonope", mine).status_code == 404
    for query in ("", "?ids=", f"?ids={own}", f"?ids={own},{own}", "?ids=" + ",".join("abcdefg")):
        response = api.get(f"/evaluations/compare{query}", mine)
        assert 400 <= response.status_code < 500, (query, response.text)
        assert "detail" in response.json() or "error" in response.json()
    bad = api.get(f"/evaluations/{own}/stats?pass_threshold=high", mine)
    assert bad.status_code == 422


def test_pass_mark_is_one_by_default_declared_or_set_never_the_best_reward(api: Api) -> None:
    zeros = api.create(name="zeros")
    _post(api, zeros, [_sample(e, r, 0.0) for e in range(3) for r in range(3)])
    body = api.get(f"/evaluations/{zeros}/stats").json()
    # The old default (the best reward reached, 0.0 here) made every pass@k 1.000.
    assert [row["value"] for row in body["pass_at_k"]] == [0.0, 0.0, 0.0]
    assert (body["pass_threshold"], body["pass_threshold_source"]) == (1.0, "default")
    declared = api.create(name="declared", metadata={"max_reward": 0.5})
    _post(api, declared, [_sample(0, 1, 0.5), _sample(0, 2, 0.25), _sample(1, 1, 0.5)])
    body = api.get(f"/evaluations/{declared}/stats").json()
    assert (body["pass_threshold"], body["pass_threshold_source"]) == (0.5, "declared")
    assert body["pass_at_k"][0] == {"k": 1, "value": 0.75, "n_examples": 2}
    chosen = api.get(f"/evaluations/{declared}/stats?pass_threshold=0.2").json()
    assert (chosen["pass_threshold"], chosen["pass_threshold_source"]) == (0.2, "set")


def test_compare_uses_one_pass_mark_on_both_sides(api: Api) -> None:
    # Continuous rewards with different best values (0.97 and 0.85): one mark for both.
    a, b = api.create(name="a"), api.create(name="b")
    _post(api, a, [_sample(e, 1, 0.97 if e == 0 else 0.5) for e in range(4)])
    _post(api, b, [_sample(e, 1, 0.85 if e == 0 else 0.6) for e in range(4)])
    body = api.get(f"/evaluations/compare?ids={a},{b}").json()
    assert body["pass_threshold"] == 1.0 and body["pass_threshold_source"] == "default"
    assert [e["pass_threshold"] for e in body["evaluations"]] == [1.0, 1.0]
    assert [e["pass_at_k"][0]["value"] for e in body["evaluations"]] == [0.0, 0.0]
    set_mark = api.get(f"/evaluations/compare?ids={a},{b}&pass_threshold=0.8").json()
    assert [e["pass_at_k"][0]["value"] for e in set_mark["evaluations"]] == [0.25, 0.25]
    assert set_mark["pass_threshold_source"] == "set"


@pytest.mark.parametrize(
    ("first", "second", "needle"),
    [
        ({"dataset": "gsm8k"}, {"dataset": "math"}, "ran gsm8k"),
        (
            {"dataset": "gsm8k", "metadata": {"env_args": {"split": "test"}}},
            {"dataset": "gsm8k", "metadata": {"env_args": {"split": "train"}}},
            "env_args",
        ),
        (
            {"dataset": "gsm8k", "metadata": {"env_version": "0.1.0"}},
            {"dataset": "gsm8k", "metadata": {"env_version": "0.2.0"}},
            "version 0.2.0",
        ),
    ],
)
def test_compare_refuses_evaluations_that_do_not_compare(
    api: Api, first: dict[str, Any], second: dict[str, Any], needle: str
) -> None:
    a, b = api.create(name="a", **first), api.create(name="b", **second)
    _post(api, a, [_sample(e, 1, 1.0) for e in range(3)])
    _post(api, b, [_sample(e, 1, 0.0) for e in range(3)])
    response = api.get(f"/evaluations/compare?ids={a},{b}")
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "not_comparable" and needle in error["message"]
    assert "same environment at the same version with the same env_args" in error["message"]


def test_compare_refuses_evaluations_sharing_no_example_and_counts_all_errored_ones(
    api: Api,
) -> None:
    a, b, c = api.create(name="a"), api.create(name="b"), api.create(name="c")
    _post(api, a, [_sample(e, 1, 1.0) for e in range(3)])
    _post(api, b, [_sample(e, 1, 0.0) for e in range(10, 13)])
    refused = api.get(f"/evaluations/compare?ids={a},{b}")
    assert refused.status_code == 400 and "share no example id" in refused.text
    # c errored in every rollout of example 2: paired as 0 on c's side, not dropped.
    timeout = {"type": "Timeout", "message": "slow"}
    _post(api, c, [_sample(0, 1, 1.0), _sample(1, 1, 1.0), _sample(2, 1, 1.0, error=timeout)])
    paired = api.get(f"/evaluations/compare?ids={a},{c}").json()["paired"]
    assert paired["n_common"] == 3 and paired["only_baseline"]["count"] == 0
    assert paired["errored_candidate"] == {"count": 1, "example_ids": [2]}
    assert paired["mean_diff"] == pytest.approx(-1 / 3) and paired["losses"] == 1
    assert (paired["mean_baseline"], paired["mean_candidate"]) == pytest.approx((1.0, 2 / 3))


def _regressions_pair(api: Api) -> tuple[str, str]:
    # 150 examples: B is better on most, worse on examples 120-124 (past a first page of
    # 100), ties on 0-9; A errored in every rollout of example 11; example 149 only in B.
    a, b = api.create(name="a"), api.create(name="b")
    _post(api, a, [_sample(e, 1, 0.5) for e in range(149) if e != 11])
    _post(api, a, [_sample(11, 1, 0.0, error={"type": "Timeout", "message": "timed out"})])
    _post(api, b, [_sample(e, 1, 0.0 if 120 <= e < 125 else (0.5 if e < 10 else 1.0))
                   for e in range(150)])  # fmt: skip
    return a, b


def test_compare_show_filters_and_sorts_every_example_as_the_page_does(api: Api) -> None:
    a, b = _regressions_pair(api)
    base = f"/evaluations/compare?ids={a},{b}"
    assert "examples" not in api.get(base).json() or api.get(base).json()["examples"] is None
    worse = api.get(f"{base}&show=regressions&sort=diff&limit=3").json()["examples"]
    assert (worse["show"], worse["sort"], worse["total"], worse["next_start"]) == (
        "regressions", "diff", 5, 3,
    )  # fmt: skip
    assert [r["example_id"] for r in worse["rows"]] == [120, 121, 122]
    assert worse["rows"][0] == {
        "example_id": 120, "means": [0.5, 0.0], "errored": [False, False],
        "present": [True, True], "diff": -0.5, "spread": 0.5,
    }  # fmt: skip
    rest = api.get(f"{base}&show=regressions&sort=diff&limit=3&start=3").json()["examples"]
    assert [r["example_id"] for r in rest["rows"]] == [123, 124] and rest["next_start"] is None
    better = api.get(f"{base}&show=improvements&sort=-diff&limit=2").json()["examples"]
    # The all-errored example counts as 0 on A's side: B - A = 1.0, the largest.
    assert better["total"] == 150 - 10 - 5 - 1 and better["rows"][0]["example_id"] == 11
    assert api.get(f"{base}&show=ties").json()["examples"]["total"] == 10
    errored = api.get(f"{base}&show=errored").json()["examples"]
    assert [(r["example_id"], r["errored"]) for r in errored["rows"]] == [(11, [True, False])]
    one_sided = api.get(f"{base}&show=one-sided").json()["examples"]
    assert [(r["example_id"], r["present"], r["diff"]) for r in one_sided["rows"]] == [
        (149, [False, True], None)
    ]
    listed = api.get(f"{base}&sort=example&limit=1000").json()["examples"]
    assert listed["show"] == "all" and listed["total"] == 150 and len(listed["rows"]) == 150
    for query, word in (("show=bogus", "Unknown filter"), ("sort=bogus", "Unknown sort")):
        refused = api.get(f"{base}&{query}")
        assert refused.status_code == 400 and word in refused.text, refused.text
    assert api.get(f"{base}&show=ties&limit=0").status_code == 422
    assert api.get(f"{base}&show=ties&start=-1").status_code == 422


def test_evals_compare_show_lists_the_apis_examples(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from proctor.cli import evals_cmd
    from proctor.runs._client import PlatformClient
    from proctor.sandboxes import remote
    from proctor.server.evaluations import stats as evaluation_stats
    from tests.support.platform import BOOTSTRAP_KEY

    # The CLI's choices are the platform's: one list of filters and sorts.
    assert evals_cmd.COMPARE_SHOWS == evaluation_stats.COMPARE_FILTERS
    assert evals_cmd.COMPARE_SORTS == evaluation_stats.COMPARE_ORDERS
    a, b = _regressions_pair(api)
    monkeypatch.setattr(
        remote,
        "connect",
        lambda: PlatformClient("http://testserver", BOOTSTRAP_KEY, http=api.client),
    )
    assert evals_cmd.run(["compare", a, b, "--show", "regressions", "--limit", "3"]) == 0
    out = capsys.readouterr().out
    # Largest regressions first by default, three of five listed.
    assert "regressions (B below A): 5 (largest regressions first; 3 shown)" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("12")]
    assert rows == [["120", "0.500", "0.000", "-0.500"], ["121", "0.500", "0.000", "-0.500"],
                    ["122", "0.500", "0.000", "-0.500"]]  # fmt: skip
    assert "... 2 more (raise --limit)" in out
    assert evals_cmd.run(["compare", a, b, "--show", "errored"]) == 0
    out = capsys.readouterr().out
    assert "examples errored in every rollout on a side: 1 (by example id; all shown)" in out
    assert ["11", "error", "1.000", "+1.000"] in [line.split() for line in out.splitlines()]
    assert evals_cmd.run(["compare", a, b, "--show", "one-sided", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [r["example_id"] for r in answer["examples"]["rows"]] == [149]
    assert evals_cmd.run(["compare", a, b]) == 0
    assert "EXAMPLE" not in capsys.readouterr().out
