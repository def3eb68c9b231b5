"""proctor.stats against values worked by hand, and the interval's coverage in simulation."""

from __future__ import annotations

import math
import random

import pytest

from proctor import stats


def _moments(*examples: list[float]) -> stats.Moments:
    moments = stats.Moments()
    for rewards in examples:
        moments.add_example(rewards)
    return moments


def test_clustered_and_naive_errors_differ_when_rollouts_agree() -> None:
    # Two examples, each answered the same way twice: 4 samples but really 2 observations.
    moments = _moments([1.0, 1.0], [0.0, 0.0])
    assert moments.mean == 0.5
    # Naive: s^2 = 4 * 0.25 / 3 = 1/3, se = sqrt(1/3 / 4).
    assert moments.naive_se() == pytest.approx(math.sqrt(1 / 12))
    # Clustered: residuals (2 - 1, 0 - 1), 2/(2-1) * 2 / 4^2 = 1/4.
    assert moments.clustered_se() == pytest.approx(0.5)


def test_one_rollout_per_example_is_the_ordinary_standard_error() -> None:
    rewards = [0.0, 0.5, 1.0, 1.0, 0.25]
    moments = _moments(*([r] for r in rewards))
    mean = sum(rewards) / 5
    s2 = sum((r - mean) ** 2 for r in rewards) / 4
    assert moments.clustered_se() == pytest.approx(math.sqrt(s2 / 5))
    assert moments.naive_se() == pytest.approx(moments.clustered_se())


def test_unequal_rollouts_per_example() -> None:
    # n_i = 3, 1, 2; sums 2, 0, 2; mean 4/6. Residuals s_i - n_i*m: 0, -2/3, 2/3.
    moments = _moments([1.0, 0.0, 1.0], [0.0], [1.0, 1.0])
    assert moments.mean == pytest.approx(2 / 3)
    assert moments.clustered_se() == pytest.approx(math.sqrt(1.5 * (8 / 9) / 36))
    estimate = stats.estimate(moments)
    assert (estimate.n_samples, estimate.n_examples) == (6, 3)
    assert (estimate.min_rollouts, estimate.max_rollouts) == (1, 3)
    assert estimate.ci95 == pytest.approx(
        (2 / 3 - 1.959964 * math.sqrt(1 / 27), 2 / 3 + 1.959964 * math.sqrt(1 / 27))
    )
    assert estimate.to_json()["rollouts_per_example"] == "1-3"


def test_grouped_sums_equal_example_by_example() -> None:
    # What a grouped database query returns: examples sharing a rollout count summed together.
    one = _moments([1.0, 0.5], [0.0, 0.5], [1.0])
    grouped = stats.Moments()
    grouped.add_groups(2, 2, total=2.0, total_sq=1.5, cluster_sq=1.5**2 + 0.5**2)
    grouped.add_groups(1, 1, total=1.0, total_sq=1.0, cluster_sq=1.0)
    assert grouped.mean == pytest.approx(one.mean)
    assert grouped.clustered_se() == pytest.approx(one.clustered_se())
    assert grouped.naive_se() == pytest.approx(one.naive_se())


def test_headline_text() -> None:
    estimate = stats.estimate(_moments([1.0, 1.0], [0.0, 0.0]))
    assert stats.headline(estimate) == "0.500 ± 0.980 (95% CI), 2 examples \u00d7 2 rollouts"
    single = stats.estimate(_moments([1.0]))
    assert single.se is None and stats.headline(single) == "1.000, 1 example \u00d7 1 rollout"
    assert stats.headline(stats.estimate(stats.Moments())) == "no scored samples"


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 0, 1, 0.0),
        (4, 1, 1, 0.25),
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (4, 2, 2, 1 - 1 / 6),
        (4, 3, 2, 1.0),
        (200, 1, 1, 1 / 200),
    ],
)
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int, k: int, expected: float) -> None:
    assert stats.pass_at_k(n, c, k) == pytest.approx(expected)
    assert stats.pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_table_counts_only_examples_with_k_rollouts() -> None:
    # Two examples of 4 rollouts (1 and 2 passed), one of 1 rollout (passed).
    table = stats.pass_at_k_table({(4, 1): 1, (4, 2): 1, (1, 1): 1})
    assert [k for k, *_ in table] == [1, 2, 4]
    k1, k2, k4 = table
    assert k1[1] == pytest.approx((0.25 + 0.5 + 1.0) / 3) and k1[2] == 3
    assert k2[1] == pytest.approx((0.5 + 5 / 6) / 2) and k2[2] == 2
    assert k4[1] == pytest.approx(1.0)


def test_paired_difference_ties_and_one_sided_examples() -> None:
    baseline = {1: 0.5, 2: 1.0, 3: 0.0, 4: 0.25}
    candidate = {1: 1.0, 2: 1.0, 3: 0.5, 5: 1.0}
    result = stats.paired(baseline, candidate)
    # Common 1, 2, 3: differences 0.5, 0, 0.5; mean 1/3, s^2 = 1/12, se = 1/6, z = 2.
    assert result.n_common == 3
    assert result.mean_diff == pytest.approx(1 / 3)
    assert result.se == pytest.approx(1 / 6)
    assert result.p_value == pytest.approx(2 * (1 - 0.9772498680518208))
    assert (result.wins, result.ties, result.losses) == (2, 1, 0)
    assert result.mde80 == pytest.approx((1.959964 + 0.841621) / 6, rel=1e-5)
    assert result.only_baseline == [4] and result.only_candidate == [5]
    assert result.ci95 == pytest.approx((1 / 3 - 1.959964 / 6, 1 / 3 + 1.959964 / 6))


def test_paired_identical_runs_and_too_few_examples() -> None:
    same = stats.paired({1: 0.5, 2: 1.0}, {1: 0.5, 2: 1.0})
    assert same.mean_diff == 0.0 and same.se == 0.0 and same.p_value == 1.0
    assert (same.wins, same.ties, same.losses) == (0, 2, 0)
    # Float sums of equal rewards may differ in the last bit: still a tie.
    assert stats.paired({1: 0.1 + 0.2}, {1: 0.3}).ties == 1
    lone = stats.paired({1: 0.0}, {1: 1.0, 2: 1.0})
    assert lone.n_common == 1 and lone.se is None and lone.p_value is None
    assert lone.wins == 1 and lone.only_candidate == [2]


def _simulated_run(
    rng: random.Random, examples: list[float], rollouts: int
) -> tuple[stats.Moments, dict[int, float]]:
    moments = stats.Moments()
    means = {}
    for index, p in enumerate(examples):
        rewards = [1.0 if rng.random() < p else 0.0 for _ in range(rollouts)]
        moments.add_example(rewards)
        means[index] = sum(rewards) / rollouts
    return moments, means


def test_interval_covers_the_true_mean_at_the_nominal_rate() -> None:
    # Examples are drawn from a super-population of easy and hard ones (true mean 0.5);
    # rollouts of one example agree, so the naive interval is too narrow and the clustered
    # one is right.
    rng = random.Random(20240101)
    trials, clustered_hits, naive_hits = 800, 0, 0
    for _ in range(trials):
        difficulty = [0.9 if rng.random() < 0.5 else 0.1 for _ in range(60)]
        moments, _ = _simulated_run(rng, difficulty, rollouts=4)
        mean = moments.mean
        assert mean is not None
        for se, hit in ((moments.clustered_se(), "c"), (moments.naive_se(), "n")):
            assert se is not None
            covered = abs(mean - 0.5) <= stats.Z95 * se
            if covered and hit == "c":
                clustered_hits += 1
            elif covered:
                naive_hits += 1
    assert 0.925 <= clustered_hits / trials <= 0.975
    assert naive_hits / trials < 0.90


def test_paired_interval_covers_the_true_difference() -> None:
    # B is better by 0.1 on every example's success rate: the true mean difference is 0.1.
    rng = random.Random(7)
    trials, hits = 600, 0
    for _ in range(trials):
        base = [rng.uniform(0.1, 0.8) for _ in range(80)]
        _, a = _simulated_run(rng, base, rollouts=3)
        _, b = _simulated_run(rng, [p + 0.1 for p in base], rollouts=3)
        result = stats.paired(a, b)
        assert result.ci95 is not None
        hits += result.ci95[0] <= 0.1 <= result.ci95[1]
    assert 0.925 <= hits / trials <= 0.975
