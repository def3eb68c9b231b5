"""The arithmetic of every figure proctor reports: means, clustered errors, pass@k, pairs.

Pure functions on counts and sums, with no imports from the engine or the server, so the
eval's closing line, the platform's statistics (`proctor.server.evaluations.stats`), the
dashboard and the CLI share one formula each. `docs/statistics.md` states every formula with
its reference; `tests/test_stats.py` checks each against SciPy and statsmodels.

One meaning of every figure:

- A sample is **scored** when it has a reward and no error. Every mean, histogram, count of
  examples and pass@k is over scored samples; errored samples are counted apart, never
  averaged, binned or passed as a reward.
- The headline mean's standard error is clustered by example (Liang-Zeger with the C/(C-1)
  factor, statsmodels' cluster-robust SE). Its 95% interval uses Student's t on C-1 degrees
  of freedom; for binary rewards it is Wilson's score interval on the effective sample size;
  for rewards inside [0, 1] it never leaves [0, 1]. With fewer than two examples, or a spread
  of 0 that is not a proportion, there is no interval and `no_interval` says why.
- pass@k is Chen et al.'s (2021) unbiased estimator over examples with at least k scored
  rollouts, at a pass mark `threshold` (1.0 unless the environment declares its maximum
  reward or the user sets one).
- Two evaluations are compared on per-example differences: Student's t interval and
  two-sided p-value on n-1 degrees of freedom, and the smallest difference the examples
  detect at 80% power. An example that errored in every rollout of one evaluation counts
  there as `ERRORED_EXAMPLE_VALUE` (0.0, a failure), so dropping hard examples never
  flatters a side.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from statistics import NormalDist

_NORMAL = NormalDist()
Z95 = _NORMAL.inv_cdf(0.975)
TIMES = "\N{MULTIPLICATION SIGN}"
TIE_TOLERANCE = 1e-9
"""Per-example means closer than this are a tie (float sums of equal rewards may differ)."""
DEFAULT_PASS_MARK = 1.0
"""pass@k's pass mark when neither the environment nor the user names one."""
ERRORED_EXAMPLE_VALUE = 0.0
"""What an example that errored in every rollout counts as in a paired comparison."""
UNIT_RANGE = (0.0, 1.0)


# Student's t (no SciPy at run time): the regularized incomplete beta function by its
# continued fraction (Numerical Recipes, 3rd ed., section 6.4), checked against SciPy.


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            step = d * c
            h *= step
        if abs(step - 1.0) < 1e-16:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom."""
    if not math.isfinite(t):
        return 0.0
    return _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = t_two_sided_p(t, df) / 2.0
    return 1.0 - tail if t > 0 else tail


def t_density(t: float, df: float) -> float:
    """Student's t density with `df` degrees of freedom at `t`."""
    log_front = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_front - (df + 1.0) / 2.0 * math.log1p(t * t / df))


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The `p` quantile of Student's t with `df` degrees of freedom: Newton's method on
    `t_cdf` from the normal quantile (a few steps; a live run's degrees of freedom change
    with every batch, so this is computed on each poll), else bisection."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    t, last = _NORMAL.inv_cdf(p), math.inf
    for _ in range(40):
        density = t_density(t, df)
        if not density > 0.0:
            break
        step = (t_cdf(t, df) - p) / density
        if abs(step) >= last and last <= 1e-9 * max(1.0, t):
            return t  # no longer shrinking: at the precision of `t_cdf`
        t, last = t - step, abs(step)
        if not t > 0.0 or not math.isfinite(t):
            break
        if last <= 1e-14 * max(1.0, t):
            return t
    return _t_quantile_bisection(p, df)


def _t_quantile_bisection(p: float, df: float) -> float:
    low, high = 0.0, max(1.0, _NORMAL.inv_cdf(p))
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low <= 1e-13 * max(1.0, high):
            break
    return (low + high) / 2.0


def t95(df: float) -> float:
    """The two-sided 95% quantile of Student's t on `df` degrees of freedom."""
    return t_quantile(0.975, df)


@dataclass(slots=True)
class Moments:
    """Sums from which the mean and both standard errors follow; add examples one at a time.

    Everything is additive, so a database can return it from one grouped query and two
    partial moments merge with `+`.
    """

    n: int = 0
    """Scored samples."""
    clusters: int = 0
    """Examples with at least one scored sample."""
    total: float = 0.0
    """Sum of the rewards."""
    total_sq: float = 0.0
    """Sum of the squared rewards (for the naive, unclustered error)."""
    cluster_sq: float = 0.0
    """Sum over examples of (sum of the example's rewards) squared."""
    cluster_n_total: float = 0.0
    """Sum over examples of (rollouts x sum of rewards)."""
    cluster_n_sq: int = 0
    """Sum over examples of rollouts squared."""
    max_rollouts: int = 0
    min_rollouts: int = 0
    low: float | None = None
    """The lowest scored reward."""
    high: float | None = None
    """The highest scored reward."""
    binary: bool = True
    """Every scored reward is 0 or 1 (a proportion: Wilson's interval applies)."""

    def add_example(self, rewards: Iterable[float]) -> None:
        """Count one example's scored rewards."""
        values = list(rewards)
        if values:
            self.observe(values)
            self.add_totals(len(values), math.fsum(values), math.fsum(v * v for v in values))

    def observe(self, rewards: Iterable[float]) -> None:
        """Note the range of scored rewards and whether each is 0 or 1 (`add_example` does
        it; callers adding sums note their rewards, or their range, themselves)."""
        for value in rewards:
            self.observe_range(value, value, binary=value in (0.0, 1.0))

    def observe_range(self, low: float, high: float, *, binary: bool) -> None:
        """Note that scored rewards span [low, high], all 0 or 1 if `binary`."""
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)
        self.binary = self.binary and binary

    def add_totals(self, n: int, total: float, total_sq: float, examples: int = 1) -> None:
        """Count `examples` examples that each have `n` rewards summing to `total`.

        `total` and `total_sq` are per example; several examples are added at once only
        when they share them (use `add_groups` for a grouped query's rows).
        """
        if n <= 0 or examples <= 0:
            return
        self.add_groups(n, examples, examples * total, examples * total_sq, examples * total**2)

    def add_groups(
        self, n: int, examples: int, total: float, total_sq: float, cluster_sq: float
    ) -> None:
        """Count `examples` examples of `n` rewards each, given the group's sums.

        Args:
            n: Scored rollouts of each example in the group.
            examples: How many examples the group has.
            total: Sum of all their rewards.
            total_sq: Sum of all their squared rewards.
            cluster_sq: Sum over the group's examples of the square of each example's sum.
        """
        if n <= 0 or examples <= 0:
            return
        self.n += n * examples
        self.total += total
        self.total_sq += total_sq
        self.cluster_sq += cluster_sq
        self.cluster_n_total += n * total
        self.cluster_n_sq += n * n * examples
        self.max_rollouts = max(self.max_rollouts, n)
        self.min_rollouts = n if self.clusters == 0 else min(self.min_rollouts, n)
        self.clusters += examples

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    def naive_se(self) -> float | None:
        """Standard error treating every sample as independent (for contrast only)."""
        if self.n < 2:
            return None
        mean = self.total / self.n
        variance = max(self.total_sq - self.n * mean * mean, 0.0) / (self.n - 1)
        return math.sqrt(variance / self.n)

    def clustered_se(self) -> float | None:
        """Standard error of the mean with the rollouts of one example as a cluster."""
        if self.clusters < 2:
            return None
        mean = self.total / self.n
        # sum_i (s_i - n_i * mean)^2, expanded so it needs only the additive sums.
        residual = self.cluster_sq - 2 * mean * self.cluster_n_total + mean**2 * self.cluster_n_sq
        c = self.clusters
        variance = c / (c - 1) * max(residual, 0.0) / (self.n**2)
        return math.sqrt(variance)


@dataclass(frozen=True, slots=True)
class MeanEstimate:
    """A mean with its clustered standard error and 95% interval (or why there is none)."""

    mean: float | None
    se: float | None
    ci95: tuple[float, float] | None
    n_samples: int
    n_examples: int
    min_rollouts: int
    max_rollouts: int
    df: int | None = None
    """Degrees of freedom of the interval: examples - 1."""
    method: str | None = None
    """How the interval was made: `student-t`, `student-t, kept in [0, 1]` or `wilson`."""
    no_interval: str | None = None
    """Why there is no interval (one example, a spread of 0, no scored samples)."""

    @property
    def half_width(self) -> float | None:
        """Half the interval's width (its `±` when it is symmetric)."""
        return None if self.ci95 is None else (self.ci95[1] - self.ci95[0]) / 2

    @property
    def symmetric(self) -> bool:
        return self.method == "student-t"

    def to_json(self) -> dict[str, object]:
        return {
            "mean": self.mean,
            "se": self.se,
            "ci95": None if self.ci95 is None else list(self.ci95),
            "ci_method": self.method,
            "df": self.df,
            "no_interval": self.no_interval,
            "n_samples": self.n_samples,
            "n_examples": self.n_examples,
            "rollouts_per_example": self.max_rollouts,
            "min_rollouts_per_example": self.min_rollouts,
        }


NO_SCORED = "no scored samples"
ONE_EXAMPLE = "one example: the spread between examples cannot be estimated"
NO_SPREAD = (
    "every scored reward is the same, so the standard error is 0 and an interval would "
    "claim certainty"
)


def t_interval(mean: float, se: float, df: int) -> tuple[float, float]:
    """`mean ± t(0.975, df) * se`."""
    half = t95(df) * se
    return (mean - half, mean + half)


def wilson(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a proportion `p` of `n` (possibly effective) trials."""
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def effective_n(p: float, se: float | None, n_samples: int, n_examples: int) -> float:
    """Trials a clustered proportion is worth: p(1-p)/SE^2, at most the samples.

    With p at 0 or 1 the clustered SE is 0 and says nothing; then each example counts once
    (its rollouts as one observation), the cautious choice.
    """
    if se is None or se <= 0 or not 0.0 < p < 1.0:
        return float(n_examples)
    return min(float(n_samples), p * (1 - p) / (se * se))


def estimate(moments: Moments) -> MeanEstimate:
    """The headline mean, its clustered SE and 95% interval from `moments`."""
    mean = moments.mean
    se = moments.clustered_se()
    ci: tuple[float, float] | None = None
    df = method = reason = None
    if mean is None:
        reason = NO_SCORED
    elif se is None:
        reason = ONE_EXAMPLE
    elif moments.binary and moments.low is not None:
        df, method = moments.clusters - 1, "wilson"
        ci = wilson(mean, effective_n(mean, se, moments.n, moments.clusters))
    elif se <= 0:
        df, reason = moments.clusters - 1, NO_SPREAD
    else:
        df, method = moments.clusters - 1, "student-t"
        low, high = t_interval(mean, se, df)
        in_unit = (
            moments.low is not None
            and moments.high is not None
            and moments.low >= UNIT_RANGE[0]
            and moments.high <= UNIT_RANGE[1]
        )
        if in_unit and (low < UNIT_RANGE[0] or high > UNIT_RANGE[1]):
            low, high = max(low, UNIT_RANGE[0]), min(high, UNIT_RANGE[1])
            method = "student-t, kept in [0, 1]"
        ci = (low, high)
    return MeanEstimate(
        mean=mean,
        se=se,
        ci95=ci,
        n_samples=moments.n,
        n_examples=moments.clusters,
        min_rollouts=moments.min_rollouts,
        max_rollouts=moments.max_rollouts,
        df=df,
        method=method,
        no_interval=reason,
    )


def rollouts_label(low: int, high: int) -> str:
    """`"4"`, or `"2-4"` when examples have unequal scored rollouts."""
    return str(high) if low == high else f"{low}-{high}"


def interval_text(est: MeanEstimate, digits: int = 3) -> str:
    """`± 0.031 (95% CI)`, `95% CI [0.700, 0.890]`, or `no interval: one example`."""
    if est.ci95 is None:
        short = {ONE_EXAMPLE: "one example", NO_SPREAD: "all rewards equal", NO_SCORED: ""}
        reason = short.get(est.no_interval or "", est.no_interval or "")
        return f"(no interval: {reason})" if reason else ""
    if est.symmetric:
        return f"± {est.half_width:.{digits}f} (95% CI)"
    low, high = est.ci95
    return f"(95% CI {low:.{digits}f} to {high:.{digits}f})"


def headline(est: MeanEstimate, digits: int = 3) -> str:
    """`0.812 ± 0.031 (95% CI), 200 examples x 4 rollouts` (with a multiplication sign);
    `(95% CI 0.700 to 0.890)` for an interval that is not symmetric."""
    if est.mean is None:
        return NO_SCORED
    rollouts = rollouts_label(est.min_rollouts, est.max_rollouts)
    examples = f"{est.n_examples} example{'s' if est.n_examples != 1 else ''}"
    spread = interval_text(est, digits)
    word = "rollout" if rollouts == "1" else "rollouts"
    mean = f"{est.mean:.{digits}f} {spread}" if spread else f"{est.mean:.{digits}f}"
    return f"{mean}, {examples} {TIMES} {rollouts} {word}"


# pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one example with `n` rollouts of which `c` passed (Chen et al.)."""
    if n - c < k:
        return 1.0
    # 1 - C(n-c, k) / C(n, k), as a product so large n does not overflow.
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_ks(max_rollouts: int) -> list[int]:
    """The k values shown: powers of two up to the rollouts per example, and that number."""
    if max_rollouts < 1:
        return []
    ks = [1]
    while ks[-1] * 2 <= max_rollouts:
        ks.append(ks[-1] * 2)
    if ks[-1] != max_rollouts:
        ks.append(max_rollouts)
    return ks


def pass_at_k_table(shapes: Mapping[tuple[int, int], int]) -> list[tuple[int, float, int]]:
    """`(k, pass@k, examples counted)` for each k; `shapes` counts examples by (n, passed)."""
    if not shapes:
        return []
    table = []
    for k in pass_ks(max(n for n, _ in shapes)):
        eligible = [(n, c, m) for (n, c), m in shapes.items() if n >= k]
        count = sum(m for *_, m in eligible)
        value = math.fsum(pass_at_k(n, c, k) * m for n, c, m in eligible) / count
        table.append((k, value, count))
    return table


# Paired comparison


@dataclass(frozen=True, slots=True)
class Paired:
    """Candidate B against baseline A over the examples both hold."""

    n_common: int
    mean_diff: float | None
    """Mean over common examples of (B's example mean - A's example mean)."""
    se: float | None
    ci95: tuple[float, float] | None
    """Student's t interval on `df` degrees of freedom."""
    p_value: float | None
    """Two-sided paired t-test; None with fewer than two common examples or SE 0."""
    wins: int
    """Common examples where B's mean is above A's."""
    ties: int
    losses: int
    mde80: float | None
    """Smallest true difference these examples detect with 80% power at the 5% level."""
    df: int | None = None
    no_interval: str | None = None
    """Why there is no interval, p-value or MDE."""
    mean_baseline: float | None = None
    """Mean over the common examples of A's example means (the pair's own A)."""
    mean_candidate: float | None = None
    errored_baseline: list[int] = field(default_factory=list)
    """Common examples that errored in every rollout of A (counted as ERRORED_EXAMPLE_VALUE)."""
    errored_candidate: list[int] = field(default_factory=list)
    only_baseline: list[int] = field(default_factory=list)
    only_candidate: list[int] = field(default_factory=list)


FEW_COMMON = "fewer than 2 common examples: the spread of the differences cannot be estimated"
SAME_DIFFERENCE = (
    "every common example differs by the same amount, so the standard error is 0 and a "
    "p-value would claim certainty"
)


def paired(baseline: Mapping[int, float | None], candidate: Mapping[int, float | None]) -> Paired:
    """The paired comparison of two evaluations' per-example mean rewards.

    A mean of None is an example that errored in every rollout; it counts as
    `ERRORED_EXAMPLE_VALUE` (a failure) on its side.
    """
    common = sorted(baseline.keys() & candidate.keys())

    def value(means: Mapping[int, float | None], example: int) -> float:
        mean = means[example]
        return ERRORED_EXAMPLE_VALUE if mean is None else mean

    a = [value(baseline, e) for e in common]
    b = [value(candidate, e) for e in common]
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    wins = sum(1 for d in diffs if d > TIE_TOLERANCE)
    losses = sum(1 for d in diffs if d < -TIE_TOLERANCE)
    n = len(diffs)
    mean = math.fsum(diffs) / n if n else None
    se = p_value = mde = None
    ci: tuple[float, float] | None = None
    df = n - 1 if n >= 2 else None
    reason: str | None = FEW_COMMON
    if df is not None and mean is not None:
        variance = math.fsum((d - mean) ** 2 for d in diffs) / df
        se = math.sqrt(variance / n)
        if se > TIE_TOLERANCE * max(1.0, abs(mean)):
            reason = None
            ci = t_interval(mean, se, df)
            p_value = t_two_sided_p(mean / se, df)
            mde = (t95(df) + t_quantile(0.80, df)) * se
        else:
            se, reason = 0.0, SAME_DIFFERENCE
    return Paired(
        n_common=n,
        mean_diff=mean,
        se=se,
        ci95=ci,
        p_value=p_value,
        wins=wins,
        ties=n - wins - losses,
        losses=losses,
        mde80=mde,
        df=df,
        no_interval=reason,
        mean_baseline=math.fsum(a) / n if n else None,
        mean_candidate=math.fsum(b) / n if n else None,
        errored_baseline=[e for e in common if baseline[e] is None],
        errored_candidate=[e for e in common if candidate[e] is None],
        only_baseline=sorted(baseline.keys() - candidate.keys()),
        only_candidate=sorted(candidate.keys() - baseline.keys()),
    )
