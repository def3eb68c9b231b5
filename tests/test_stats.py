"""proctor.stats against values worked by hand, SciPy and statsmodels as oracles, and the
intervals' coverage in simulation (docs/statistics.md states each formula)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats as scipy_stats
from statsmodels.stats.proportion import proportion_confint

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
    # 0/1 rewards: Wilson's interval on the effective size p(1-p)/SE^2 = (2/9)/(1/27) = 6.
    assert estimate.method == "wilson" and estimate.df == 2
    low, high = proportion_confint(4, 6, alpha=0.05, method="wilson")
    assert estimate.ci95 == pytest.approx((low, high), abs=1e-12)
    assert estimate.to_json()["rollouts_per_example"] == 3
    assert estimate.to_json()["min_rollouts_per_example"] == 1


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
    estimate = stats.estimate(
        _moments([0.5, 0.6], [0.4, 0.5], [0.55, 0.45], [0.6, 0.5], [0.45, 0.4], [0.5, 0.6])
    )
    half = scipy_stats.t.ppf(0.975, 5) * estimate.se
    assert estimate.method == "student-t" and estimate.half_width == pytest.approx(half)
    assert stats.headline(estimate) == (
        f"0.504 \u00b1 {half:.3f} (95% CI), 6 examples \u00d7 2 rollouts"
    )
    binary = stats.estimate(_moments([1.0, 1.0], [0.0, 0.0]))
    low, high = binary.ci95 or (0, 0)
    assert stats.headline(binary) == (
        f"0.500 (95% CI {low:.3f} to {high:.3f}), 2 examples \u00d7 2 rollouts"
    )
    single = stats.estimate(_moments([0.4]))
    assert single.se is None and single.no_interval == stats.ONE_EXAMPLE
    assert stats.headline(single) == "0.400 (no interval: one example), 1 example \u00d7 1 rollout"
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
    # Common 1, 2, 3: differences 0.5, 0, 0.5; mean 1/3, s^2 = 1/12, se = 1/6, t = 2 on 2 df.
    assert result.n_common == 3 and result.df == 2
    assert result.mean_diff == pytest.approx(1 / 3)
    assert result.se == pytest.approx(1 / 6)
    oracle = scipy_stats.ttest_rel([1.0, 1.0, 0.5], [0.5, 1.0, 0.0])
    assert result.p_value == pytest.approx(oracle.pvalue, rel=1e-10)
    interval = oracle.confidence_interval(0.95)
    assert result.ci95 == pytest.approx((interval.low, interval.high), rel=1e-10)
    assert (result.wins, result.ties, result.losses) == (2, 1, 0)
    power = scipy_stats.t.ppf(0.975, 2) + scipy_stats.t.ppf(0.80, 2)
    assert result.mde80 == pytest.approx(power / 6, rel=1e-10)
    assert result.only_baseline == [4] and result.only_candidate == [5]
    assert (result.mean_baseline, result.mean_candidate) == pytest.approx((0.5, 2.5 / 3))


def test_paired_identical_runs_and_too_few_examples() -> None:
    same = stats.paired({1: 0.5, 2: 1.0}, {1: 0.5, 2: 1.0})
    assert same.mean_diff == 0.0 and same.se == 0.0
    assert same.p_value is None and same.ci95 is None and same.mde80 is None
    assert same.no_interval == stats.SAME_DIFFERENCE
    assert (same.wins, same.ties, same.losses) == (0, 2, 0)
    # Every example better by the same 0.1: SE 0, so no p-value claiming certainty either.
    shifted = stats.paired({e: 0.1 * e for e in range(5)}, {e: 0.1 * e + 0.1 for e in range(5)})
    assert shifted.mean_diff == pytest.approx(0.1) and shifted.p_value is None
    assert shifted.no_interval == stats.SAME_DIFFERENCE and shifted.wins == 5
    # Float sums of equal rewards may differ in the last bit: still a tie.
    assert stats.paired({1: 0.1 + 0.2}, {1: 0.3}).ties == 1
    lone = stats.paired({1: 0.0}, {1: 1.0, 2: 1.0})
    assert lone.n_common == 1 and lone.se is None and lone.p_value is None
    assert lone.no_interval == stats.FEW_COMMON
    assert lone.wins == 1 and lone.only_candidate == [2]


def test_an_example_errored_in_every_rollout_counts_as_a_failure_on_its_side() -> None:
    # Example 3 errored in every rollout of A: it is paired, as 0 on A's side, not dropped.
    result = stats.paired({1: 0.5, 2: 0.5, 3: None}, {1: 0.5, 2: 1.0, 3: 1.0})
    assert result.n_common == 3 and result.errored_baseline == [3]
    assert result.errored_candidate == [] and result.only_baseline == []
    oracle = scipy_stats.ttest_rel([0.5, 1.0, 1.0], [0.5, 0.5, 0.0])
    assert result.mean_diff == pytest.approx(0.5) and result.wins == 2
    assert result.p_value == pytest.approx(oracle.pvalue, rel=1e-10)
    both = stats.paired({1: None, 2: 0.0}, {1: None, 2: 1.0})
    assert both.ties == 1 and both.errored_baseline == both.errored_candidate == [1]


@pytest.mark.parametrize("df", [1, 2, 3, 5, 9, 10, 29, 37, 120, 1000])
def test_student_t_matches_scipy(df: int) -> None:
    for p in (0.6, 0.8, 0.9, 0.975, 0.995):
        assert stats.t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-10)
        assert stats.t_quantile(1 - p, df) == pytest.approx(scipy_stats.t.ppf(1 - p, df), rel=1e-10)
    for t in (0.0, 0.3, 1.0, 2.2, 4.0, 12.0):
        assert stats.t_two_sided_p(t, df) == pytest.approx(
            2 * scipy_stats.t.sf(t, df), rel=1e-10, abs=1e-300
        )
        assert stats.t_cdf(-t, df) == pytest.approx(scipy_stats.t.cdf(-t, df), rel=1e-10)
        assert stats.t_density(t, df) == pytest.approx(scipy_stats.t.pdf(t, df), rel=1e-10)


def test_clustered_error_and_t_interval_match_statsmodels_at_ten_examples() -> None:
    rng = random.Random(3)
    rewards, groups = [], []
    for example in range(10):
        base = rng.uniform(0.1, 0.9)
        for _ in range(1 + example % 3):
            rewards.append(min(max(base + rng.uniform(-0.1, 0.1), 0.0), 1.0))
            groups.append(example)
    moments = stats.Moments()
    for example in range(10):
        moments.add_example([r for r, g in zip(rewards, groups, strict=True) if g == example])
    fit = sm.OLS(np.array(rewards), np.ones((len(rewards), 1))).fit(
        cov_type="cluster", cov_kwds={"groups": np.array(groups)}, use_t=True, df_correction=True
    )
    estimate = stats.estimate(moments)
    assert estimate.mean == pytest.approx(fit.params[0], rel=1e-12)
    assert estimate.se == pytest.approx(fit.bse[0], rel=1e-10)
    # Student's t on examples - 1 = 9 degrees of freedom, as statsmodels' cluster t.
    assert estimate.df == 9 and estimate.method == "student-t"
    low, high = fit.conf_int(alpha=0.05)[0]
    assert estimate.ci95 == pytest.approx((low, high), rel=1e-10)


def test_one_rollout_per_example_interval_is_the_one_sample_t_interval() -> None:
    rewards = [0.2, 0.4, 0.45, 0.5, 0.55, 0.6, 0.3, 0.35, 0.7, 0.25]
    estimate = stats.estimate(_moments(*([r] for r in rewards)))
    oracle = scipy_stats.ttest_1samp(rewards, 0.0).confidence_interval(0.95)
    assert estimate.ci95 == pytest.approx((oracle.low, oracle.high), rel=1e-10)
    # 13% wider than the normal interval this replaced (t(9) = 2.262 against 1.960).
    assert estimate.half_width / (stats.Z95 * estimate.se) == pytest.approx(1.154, abs=1e-3)


def test_all_equal_rewards_give_no_interval_but_a_proportion_gets_wilsons() -> None:
    flat = stats.estimate(_moments(*([0.5] for _ in range(10))))
    assert flat.se == 0.0 and flat.ci95 is None and flat.no_interval == stats.NO_SPREAD
    assert "no interval: all rewards equal" in stats.headline(flat)
    solved = stats.estimate(_moments(*([1.0] for _ in range(10))))
    assert solved.method == "wilson"
    assert solved.ci95 == pytest.approx(proportion_confint(10, 10, method="wilson"), abs=1e-12)
    # Four rollouts each, all 0: each example counts once (rollouts of one example agree).
    failed = stats.estimate(_moments(*([0.0] * 4 for _ in range(10))))
    assert failed.ci95 == pytest.approx(proportion_confint(0, 10, method="wilson"), abs=1e-12)


def test_intervals_of_rewards_in_zero_one_stay_in_it() -> None:
    estimate = stats.estimate(_moments([1.0], [1.0], [0.95], [1.0], [0.9]))
    assert estimate.method == "student-t, kept in [0, 1]"
    assert estimate.ci95 is not None and estimate.ci95[1] == 1.0
    assert estimate.ci95[0] == pytest.approx(
        estimate.mean - scipy_stats.t.ppf(0.975, 4) * estimate.se
    )
    # Rewards outside [0, 1] are not bounded by it.
    wide = stats.estimate(_moments([2.0], [1.9], [2.0], [1.95]))
    assert wide.method == "student-t" and wide.ci95 is not None and wide.ci95[1] > 2.0


def test_binary_interval_covers_the_true_rate_at_small_samples() -> None:
    rng = random.Random(11)
    trials, hits = 1000, 0
    for _ in range(trials):
        moments = _moments(*([1.0 if rng.random() < 0.15 else 0.0] for _ in range(12)))
        estimate = stats.estimate(moments)
        assert estimate.ci95 is not None
        hits += estimate.ci95[0] <= 0.15 <= estimate.ci95[1]
    assert hits / trials >= 0.90


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
