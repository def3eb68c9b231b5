"""The arithmetic of every figure proctor reports: means, clustered errors, pass@k, pairs.

Pure functions on counts and sums, with no imports from the engine or the server, so the
eval's closing line and the platform's statistics (`proctor.server.evaluations.stats`) share
one formula each. After Miller, "Adding Error Bars to Evals" (2024):

- The headline mean is over scored samples (a reward and no error); errored ones are counted
  apart, never averaged as 0.
- Its standard error is clustered by example: the rollouts of one example are not
  independent draws, so the variance is built from per-example residual sums
  (Liang-Zeger with the C/(C-1) small-sample factor; with one rollout per example it is the
  ordinary s/sqrt(n)).
- Two evaluations are compared on the per-example differences of their means over the
  examples both scored, with a normal interval, a two-sided p-value and the smallest
  difference those examples detect at 80% power.
- pass@k is Chen et al.'s (2021) unbiased estimator, averaged over the examples with at
  least k scored rollouts.

Intervals use the normal quantile (1.96): with fewer than ~30 examples they are a little
narrow, which the page says by always showing the example count next to them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from statistics import NormalDist

_NORMAL = NormalDist()
Z95 = _NORMAL.inv_cdf(0.975)
Z80 = _NORMAL.inv_cdf(0.80)
TIMES = "\N{MULTIPLICATION SIGN}"
TIE_TOLERANCE = 1e-9
"""Per-example means closer than this are a tie (float sums of equal rewards may differ)."""


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

    def add_example(self, rewards: Iterable[float]) -> None:
        """Count one example's scored rewards."""
        values = list(rewards)
        if values:
            self.add_totals(len(values), math.fsum(values), math.fsum(v * v for v in values))

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
    """A mean with its clustered standard error and 95% interval."""

    mean: float | None
    se: float | None
    ci95: tuple[float, float] | None
    n_samples: int
    n_examples: int
    min_rollouts: int
    max_rollouts: int

    @property
    def half_width(self) -> float | None:
        return None if self.se is None else Z95 * self.se

    def to_json(self) -> dict[str, object]:
        return {
            "mean": self.mean,
            "se": self.se,
            "ci95": None if self.ci95 is None else list(self.ci95),
            "n_samples": self.n_samples,
            "n_examples": self.n_examples,
            "rollouts_per_example": rollouts_label(self.min_rollouts, self.max_rollouts),
        }


def interval(mean: float, se: float | None) -> tuple[float, float] | None:
    """The 95% normal interval around `mean`."""
    return None if se is None else (mean - Z95 * se, mean + Z95 * se)


def estimate(moments: Moments) -> MeanEstimate:
    """The headline mean, its clustered SE and 95% interval from `moments`."""
    mean = moments.mean
    se = moments.clustered_se()
    return MeanEstimate(
        mean=mean,
        se=se,
        ci95=None if mean is None else interval(mean, se),
        n_samples=moments.n,
        n_examples=moments.clusters,
        min_rollouts=moments.min_rollouts,
        max_rollouts=moments.max_rollouts,
    )


def rollouts_label(low: int, high: int) -> str:
    """`"4"`, or `"2-4"` when examples have unequal scored rollouts."""
    return str(high) if low == high else f"{low}-{high}"


def headline(est: MeanEstimate, digits: int = 3) -> str:
    """`0.812 ± 0.031 (95% CI), 200 examples x 4 rollouts` (with a multiplication sign)."""
    if est.mean is None:
        return "no scored samples"
    half = est.half_width
    rollouts = rollouts_label(est.min_rollouts, est.max_rollouts)
    examples = f"{est.n_examples} example{'s' if est.n_examples != 1 else ''}"
    spread = "" if half is None else f" ± {half:.{digits}f} (95% CI)"
    word = "rollout" if rollouts == "1" else "rollouts"
    return f"{est.mean:.{digits}f}{spread}, {examples} {TIMES} {rollouts} {word}"


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
    """Candidate B against baseline A over the examples both scored."""

    n_common: int
    mean_diff: float | None
    """Mean over common examples of (B's example mean - A's example mean)."""
    se: float | None
    ci95: tuple[float, float] | None
    p_value: float | None
    """Two-sided, normal approximation; None with fewer than two common examples."""
    wins: int
    """Common examples where B's mean is above A's."""
    ties: int
    losses: int
    mde80: float | None
    """Smallest true difference these examples detect with 80% power at the 5% level."""
    only_baseline: list[int] = field(default_factory=list)
    only_candidate: list[int] = field(default_factory=list)


def paired(baseline: Mapping[int, float], candidate: Mapping[int, float]) -> Paired:
    """The paired comparison of two evaluations' per-example mean rewards."""
    common = sorted(baseline.keys() & candidate.keys())
    diffs = [candidate[e] - baseline[e] for e in common]
    wins = sum(1 for d in diffs if d > TIE_TOLERANCE)
    losses = sum(1 for d in diffs if d < -TIE_TOLERANCE)
    n = len(diffs)
    mean = math.fsum(diffs) / n if n else None
    se = p_value = mde = None
    if n >= 2 and mean is not None:
        variance = math.fsum((d - mean) ** 2 for d in diffs) / (n - 1)
        se = math.sqrt(variance / n)
        if se > 0:
            p_value = 2 * (1 - _NORMAL.cdf(abs(mean) / se))
        else:
            p_value = 1.0 if abs(mean) <= TIE_TOLERANCE else 0.0
        mde = (Z95 + Z80) * se
    return Paired(
        n_common=n,
        mean_diff=mean,
        se=se,
        ci95=None if mean is None else interval(mean, se),
        p_value=p_value,
        wins=wins,
        ties=n - wins - losses,
        losses=losses,
        mde80=mde,
        only_baseline=sorted(baseline.keys() - candidate.keys()),
        only_candidate=sorted(candidate.keys() - baseline.keys()),
    )
