"""Reward histograms of one evaluation for its page (the figures are in evaluations.stats).

Both histograms and the example count are over scored samples only (a reward and no error,
as every figure in `proctor.stats`): an errored sample is counted as errored, never binned.

Everything here works on aggregates the database returns (bucket counts, per-example rollout
counts), never on samples, so a page costs the same at 100 or 100,000 samples.
"""

from __future__ import annotations

import html
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache
from markupsafe import Markup
from sqlalchemy.orm import Session

from proctor.server.db.models import Evaluation
from proctor.server.evaluations import service, tallies

HISTOGRAM_BUCKETS = tallies.HISTOGRAM_BUCKETS
CACHE_ENTRIES = 256


@dataclass(frozen=True)
class Bucket:
    """One histogram bar: rewards in `[low, high)` (the last bar includes `high`)."""

    low: float
    high: float
    count: int


@dataclass(frozen=True)
class ExampleSummary:
    """Per-example figures of a run with several rollouts per example."""

    examples: int
    """How many distinct examples have a scored sample."""
    max_rollouts: int
    """Most rollouts any example has."""
    mean_per_example: float | None
    """Mean over examples of each example's mean scored reward."""
    mean_histogram: list[Bucket]
    """Histogram of the per-example mean rewards."""


def reward_range(evaluation: Evaluation) -> tuple[float, float]:
    """The histogram's range: [0, 1] widened to the run's min and max reward."""
    low = min(0.0, evaluation.min_score if evaluation.min_score is not None else 0.0)
    high = max(1.0, evaluation.max_score if evaluation.max_score is not None else 1.0)
    return low, high


def _edges(low: float, high: float) -> list[float]:
    width = (high - low) / HISTOGRAM_BUCKETS
    return [low + i * width for i in range(HISTOGRAM_BUCKETS)] + [high]


def reward_histogram(session: Session, evaluation: Evaluation) -> list[Bucket]:
    """The evaluation's reward histogram (one counted index range per bar)."""
    edges = _edges(*reward_range(evaluation))
    counts = service.reward_histogram(session, evaluation, edges=edges)
    return [Bucket(lo, hi, n) for lo, hi, n in zip(edges, edges[1:], counts, strict=False)]


def example_summary(
    session: Session, evaluation: Evaluation, *, threshold: float
) -> ExampleSummary | None:
    """Per-example figures, or None unless some example has several rollouts."""
    low, high = reward_range(evaluation)
    width = (high - low) / HISTOGRAM_BUCKETS
    rows = service.example_shapes(session, evaluation, threshold=threshold, low=low, width=width)
    if not rows or max(n for n, *_ in rows) < 2:
        return None
    # Examples sharing (rollouts, passes) share pass@k: weight by how many there are.
    shapes = Counter[tuple[int, int]]()
    mean_counts = Counter[int]()
    mean_sum = 0.0
    for n, passed, bucket, examples, sum_of_means in rows:
        shapes[(n, passed)] += examples
        # The maximum mean lands one past the last bar; clamp it (and any stray) in range.
        mean_counts[min(max(bucket, 0), HISTOGRAM_BUCKETS - 1)] += examples
        mean_sum += sum_of_means
    max_rollouts = max(n for n, _ in shapes)
    edges = _edges(low, high)
    total_examples = sum(shapes.values())
    return ExampleSummary(
        examples=total_examples,
        max_rollouts=max_rollouts,
        mean_per_example=mean_sum / total_examples,
        mean_histogram=[
            Bucket(edges[i], edges[i + 1], mean_counts.get(i, 0)) for i in range(HISTOGRAM_BUCKETS)
        ],
    )


@dataclass(frozen=True)
class EvaluationStats:
    """Everything the evaluation page computes from samples."""

    histogram: list[Bucket]
    examples: ExampleSummary | None
    errored: int
    errored_examples: int
    """Examples that errored in every rollout (in neither histogram)."""


_cache: LRUCache[tuple[Any, ...], EvaluationStats] = LRUCache(maxsize=CACHE_ENTRIES)
_cache_lock = threading.Lock()
"""The server's request threads share the cache; the lock guards it (not the computing)."""


def evaluation_stats(
    session: Session, evaluation: Evaluation, *, threshold: float
) -> EvaluationStats:
    """The page's statistics, cached per evaluation state.

    The key holds the sample counter and `updated_at`, which change with every stored batch
    and status change, so a cached entry is never stale; a finished run is computed once.
    (Evaluation ids are random UUIDs, so two databases never share a key.)
    """
    key = (
        evaluation.id,
        evaluation.total_samples,
        evaluation.status,
        evaluation.updated_at,
        threshold,
    )
    with _cache_lock:
        found = _cache.get(key)
    if found is not None:
        return found
    computed = EvaluationStats(
        histogram=reward_histogram(session, evaluation),
        examples=example_summary(session, evaluation, threshold=threshold),
        errored=service.count_errored(session, evaluation),
        errored_examples=service.errored_examples(session, evaluation),
    )
    with _cache_lock:
        _cache[key] = computed
    return computed


def histogram_svg(
    buckets: list[Bucket], *, label: str, width: int = 520, height: int = 150
) -> Markup:
    """An inline SVG bar chart of `buckets` (templates call it); the text in it is numbers or
    escaped."""
    pad_left, pad_bottom, pad_top = 36, 22, 8
    plot_w, plot_h = width - pad_left - 8, height - pad_bottom - pad_top
    peak = max((b.count for b in buckets), default=0) or 1
    bar_w = plot_w / max(len(buckets), 1)
    parts = [
        f'<svg class="histogram" role="img" aria-label="{html.escape(label)}" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{pad_left}" y1="{pad_top + plot_h}" x2="{width - 8}" '
        f'y2="{pad_top + plot_h}" class="axis"/>',
        f'<text x="{pad_left - 4}" y="{pad_top + 8}" text-anchor="end" class="tick">{peak}</text>',
        f'<text x="{pad_left - 4}" y="{pad_top + plot_h}" text-anchor="end" class="tick">0</text>',
    ]
    for i, bucket in enumerate(buckets):
        bar_h = plot_h * bucket.count / peak
        x = pad_left + i * bar_w
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{pad_top + plot_h - bar_h:.1f}" width="{bar_w - 2:.1f}" '
            f'height="{bar_h:.1f}" class="bar"><title>[{bucket.low:.2f}, {bucket.high:.2f}): '
            f"{bucket.count}</title></rect>"
        )
    if buckets:
        for x, value, anchor in (
            (pad_left, buckets[0].low, "start"),
            (pad_left + plot_w / 2, (buckets[0].low + buckets[-1].high) / 2, "middle"),
            (pad_left + plot_w, buckets[-1].high, "end"),
        ):
            parts.append(
                f'<text x="{x:.1f}" y="{height - 6}" text-anchor="{anchor}" '
                f'class="tick">{value:.2f}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))
