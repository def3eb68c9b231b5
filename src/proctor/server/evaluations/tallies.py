"""Running statistics: the sums every figure of an evaluation needs, kept as samples arrive.

Each stored batch is folded in the same transaction as its insert (`samples.append_samples`,
under the evaluation's row lock), and only the rows it actually inserted, so a replayed
batch never counts twice. Three places hold the sums:

- `example_tallies`: per example, its samples, scored samples, passes at the tallied mark
  and the sum and sum of squares of its scored rewards (the paired comparison's per-example
  means come from here, one row per example instead of a pass over every sample);
- `shape_tallies`: scored examples grouped by (scored rollouts, passes, bin of the mean on
  [0, 1]) with their sums; the clustered mean, pass@k and the per-example histogram read
  these few rows, however many samples there are;
- `evaluations.tallies` (JSON): errored samples and examples, the examples-less samples
  (each its own example), rewards not 0 or 1, the reward histogram on [0, 1] and the token
  and timing totals.

A reader uses them when they answer exactly its question: the pass mark they were kept at,
and the [0, 1] histogram range (a reward outside it widens the range); otherwise
`proctor.server.evaluations.stats` recomputes from the samples, as it does for an evaluation
whose tallies were never built. Migration 0010 built them for evaluations stored before.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from proctor import stats
from proctor.server.db.models import ExampleTally, SampleRow, ShapeTally

HISTOGRAM_BUCKETS = 20
"""Bars of the reward and per-example histograms."""
UNIT_WIDTH = (1.0 - 0.0) / HISTOGRAM_BUCKETS
UNIT_EDGES = [0.0 + i * UNIT_WIDTH for i in range(HISTOGRAM_BUCKETS)] + [1.0]
"""The bars' edges on [0, 1], computed as the dashboard computes them."""
USAGE_FIELDS = {
    "prompt_tokens": ("token_usage", "prompt_tokens"),
    "completion_tokens": ("token_usage", "completion_tokens"),
    "duration_s": ("timing", "duration_s"),
    "model_s": ("timing", "model_s"),
}
"""The usage totals: name -> (object, field) in each sample's JSON."""
REBUILD_CHUNK = 5000

_EXAMPLES = cast(Table, ExampleTally.__table__)
_SHAPES = cast(Table, ShapeTally.__table__)
ShapeRows = list[tuple[tuple[int, int, int], int, float, float, float, float]]
"""`shape_rows`' answer: `((scored, passed, mean bin), examples, sum, sum_sq, cluster_sq, sum
of means)` rows (the readers take it, so one read serves them all)."""
_EXAMPLE_COLUMNS = ("samples", "scored", "passed", "total", "total_sq")
_SHAPE_COLUMNS = ("examples", "total", "total_sq", "cluster_sq", "mean_sum")


def declared_max_reward(metadata_raw: str | None) -> float | None:
    """The maximum reward an evaluation's metadata declares (`max_reward`), if a number."""
    try:
        metadata = json.loads(metadata_raw or "{}")
    except ValueError:
        return None
    value = metadata.get("max_reward") if isinstance(metadata, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def default_mark(metadata_raw: str | None) -> float:
    """The pass mark an evaluation's tallies are kept at: its declared maximum, else 1.0."""
    declared = declared_max_reward(metadata_raw)
    return stats.DEFAULT_PASS_MARK if declared is None else declared


def usage_of(sample: Mapping[str, Any]) -> tuple[float, ...]:
    """A sample's usage numbers in `USAGE_FIELDS` order (0 where absent or not a number)."""
    values = []
    for part, name in USAGE_FIELDS.values():
        holder = sample.get(part)
        value = holder.get(name) if isinstance(holder, dict) else None
        number = 0.0
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
        values.append(number)
    return tuple(values)


@dataclass
class Tallies:
    """The per-evaluation part of the running statistics (`evaluations.tallies`)."""

    mark: float
    """The pass mark `passed` counts are kept at."""
    errored: int = 0
    """Samples with an error."""
    errored_examples: int = 0
    """Examples with samples, none of them scored."""
    nonbinary: int = 0
    """Scored rewards other than 0 and 1."""
    singles: list[float] = field(default_factory=lambda: [0, 0, 0.0, 0.0])
    """Scored samples without an example id (each its own example): count, passed, sum,
    sum of squares."""
    usage: list[float] = field(default_factory=lambda: [0.0] * len(USAGE_FIELDS))
    bins: list[int] = field(default_factory=lambda: [0] * HISTOGRAM_BUCKETS)
    """Scored rewards in each bar of [0, 1] (`UNIT_EDGES`; rewards outside are not binned)."""
    shapes: list[list[float]] | None = None
    """A copy of the evaluation's `shape_tallies` rows as the last fold left them
    (`[scored, passed, mean bin, *_SHAPE_COLUMNS]` each), so a reader of the evaluation row
    needs no other query; None where no fold wrote it (tallies built before it was kept):
    read the table."""

    def to_json(self) -> str:
        value: dict[str, Any] = {
            "mark": self.mark,
            "errored": self.errored,
            "errored_examples": self.errored_examples,
            "nonbinary": self.nonbinary,
            "singles": self.singles,
            "usage": self.usage,
            "bins": self.bins,
        }
        if self.shapes is not None:
            value["shapes"] = self.shapes
        return json.dumps(value)

    @classmethod
    def from_json(cls, text: str) -> Tallies:
        value = json.loads(text)
        return cls(
            mark=float(value["mark"]),
            errored=int(value["errored"]),
            errored_examples=int(value["errored_examples"]),
            nonbinary=int(value["nonbinary"]),
            singles=list(value["singles"]),
            usage=[float(v) for v in value["usage"]],
            bins=[int(v) for v in value["bins"]],
            shapes=value.get("shapes"),
        )

    def usage_totals(self) -> dict[str, float]:
        """The usage sums by name (a sum no float holds reads as 0, as a recount does)."""
        return {
            name: value if math.isfinite(value) else 0.0
            for name, value in zip(USAGE_FIELDS, self.usage, strict=True)
        }


def load(tallies_json: str | None) -> Tallies | None:
    """The tallies stored on an evaluation; None when they were never built."""
    return None if tallies_json is None else Tallies.from_json(tallies_json)


def unit_bin(value: float) -> int:
    """The bar of [0, 1] holding `value` (the last bar is closed), as the histogram query
    bins it: `edges[i] <= value < edges[i + 1]`."""
    return min(bisect.bisect_right(UNIT_EDGES, value) - 1, HISTOGRAM_BUCKETS - 1)


def _mean_bin(mean: float) -> int:
    # As the per-example query bins a mean: floor((mean - low) / width), clamped into range.
    scaled = (mean - 0.0) / UNIT_WIDTH
    if not math.isfinite(scaled):
        return 0 if scaled < 0 else HISTOGRAM_BUCKETS - 1
    return min(max(math.floor(scaled), 0), HISTOGRAM_BUCKETS - 1)


def _shape(state: Sequence[float]) -> tuple[tuple[int, int, int], tuple[float, ...]] | None:
    _, scored, passed, total, total_sq = state
    if not scored:
        return None
    mean = total / scored
    key = (int(scored), int(passed), _mean_bin(mean))
    return key, (1, total, total_sq, total * total, mean)


def _upsert(
    connection: Connection, table: Any, keys: list[str], rows: list[dict[str, Any]]
) -> None:
    if not rows:
        return
    insert = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
    statement = insert(table)
    values = {c: statement.excluded[c] for c in rows[0] if c not in keys}
    connection.execute(statement.on_conflict_do_update(index_elements=keys, set_=values), rows)


def fold(
    connection: Connection,
    evaluation_id: str,
    tallies: Tallies,
    rows: Iterable[Mapping[str, Any]],
    usages: Iterable[Sequence[float]],
) -> None:
    """Count newly stored samples (`example_id`, `reward`, `has_error` of each row, and its
    `usage_of` numbers) into the tallies: the tables here, `tallies` in memory (the caller
    stores it with the evaluation row, in the same transaction)."""
    deltas: dict[int, list[float]] = {}
    for row, usage in zip(rows, usages, strict=True):
        reward, has_error = row["reward"], bool(row["has_error"])
        scored = reward is not None and not has_error
        tallies.errored += has_error
        tallies.usage = [a + b for a, b in zip(tallies.usage, usage, strict=True)]
        passed = scored and reward >= tallies.mark
        if scored:
            tallies.nonbinary += reward not in (0.0, 1.0)
            if 0.0 <= reward <= 1.0:
                tallies.bins[unit_bin(reward)] += 1
        example = row["example_id"]
        if example is None:
            if scored:
                count, passes, total, total_sq = tallies.singles
                tallies.singles = [
                    count + 1,
                    passes + passed,
                    total + reward,
                    total_sq + reward * reward,
                ]
            continue
        delta = deltas.setdefault(example, [0, 0, 0, 0.0, 0.0])
        delta[0] += 1
        if scored:
            delta[1] += 1
            delta[2] += passed
            delta[3] += reward
            delta[4] += reward * reward
    if not deltas:
        return
    old = _example_states(connection, evaluation_id, list(deltas))
    shape_deltas: dict[tuple[int, int, int], list[float]] = {}

    def move(state: Sequence[float], sign: int) -> None:
        shape = _shape(state)
        if shape is not None:
            key, parts = shape
            target = shape_deltas.setdefault(key, [0, 0.0, 0.0, 0.0, 0.0])
            for i, part in enumerate(parts):
                target[i] += sign * part

    updated = []
    for example, delta in deltas.items():
        before = old.get(example)
        after = delta if before is None else [a + b for a, b in zip(before, delta, strict=True)]
        if before is not None:
            move(before, -1)
            tallies.errored_examples -= before[0] > 0 and before[1] == 0
        move(after, +1)
        tallies.errored_examples += after[1] == 0
        updated.append(
            {"evaluation_id": evaluation_id, "example_id": example}
            | dict(zip(_EXAMPLE_COLUMNS, after, strict=True))
        )
    _upsert(connection, _EXAMPLES, ["evaluation_id", "example_id"], updated)
    tallies.shapes = _apply_shapes(connection, evaluation_id, shape_deltas)


def _example_states(
    connection: Connection, evaluation_id: str, examples: list[int]
) -> dict[int, list[float]]:
    columns = [_EXAMPLES.c[c] for c in _EXAMPLE_COLUMNS]
    found: dict[int, list[float]] = {}
    # Chunks keep the IN list within every database's parameter limit.
    for start in range(0, len(examples), 500):
        rows = connection.execute(
            select(_EXAMPLES.c.example_id, *columns).where(
                _EXAMPLES.c.evaluation_id == evaluation_id,
                _EXAMPLES.c.example_id.in_(examples[start : start + 500]),
            )
        )
        found.update({int(e): list(rest) for e, *rest in rows})
    return found


def _apply_shapes(
    connection: Connection, evaluation_id: str, deltas: dict[tuple[int, int, int], list[float]]
) -> list[list[float]]:
    """Add the deltas to the shape rows; returns every row as it now stands (for
    `Tallies.shapes`)."""
    current = {key: list(values) for key, *values in shape_rows(connection, evaluation_id)}
    keep, gone = [], []
    for key, delta in deltas.items():
        values = [a + b for a, b in zip(current.get(key, [0] * 5), delta, strict=True)]
        scored, passed, mean_bin = key
        where = {"evaluation_id": evaluation_id, "scored": scored, "passed": passed}
        where["mean_bin"] = mean_bin
        if values[0] <= 0:
            # The last example left this shape: drop the row (and its float residue).
            if key in current:
                gone.append(where)
            current.pop(key, None)
        elif delta[0] or any(delta[1:]):
            keep.append(where | dict(zip(_SHAPE_COLUMNS, values, strict=True)))
            current[key] = values
    if gone:
        connection.execute(
            delete(_SHAPES).where(
                _SHAPES.c.evaluation_id == bindparam("evaluation_id"),
                _SHAPES.c.scored == bindparam("scored"),
                _SHAPES.c.passed == bindparam("passed"),
                _SHAPES.c.mean_bin == bindparam("mean_bin"),
            ),
            gone,
        )
    _upsert(connection, _SHAPES, ["evaluation_id", "scored", "passed", "mean_bin"], keep)
    return [[*key, *values] for key, values in sorted(current.items())]


def kept_shape_rows(tallies: Tallies) -> ShapeRows | None:
    """`shape_rows` from the copy the tallies keep; None when they keep none."""
    if tallies.shapes is None:
        return None
    return [
        ((int(n), int(c), int(b)), int(k), float(s), float(ss), float(cs), float(m))
        for n, c, b, k, s, ss, cs, m in tallies.shapes
    ]


def shape_rows(connection: Connection, evaluation_id: str) -> ShapeRows:
    """`((scored, passed, mean bin), examples, sum, sum_sq, cluster_sq, sum of means)` rows."""
    rows = connection.execute(
        select(
            _SHAPES.c.scored,
            _SHAPES.c.passed,
            _SHAPES.c.mean_bin,
            *(_SHAPES.c[c] for c in _SHAPE_COLUMNS),
        ).where(_SHAPES.c.evaluation_id == evaluation_id)
    )
    return [
        ((int(n), int(c), int(b)), int(k), float(s), float(ss), float(cs), float(m))
        for n, c, b, k, s, ss, cs, m in rows
    ]


def example_groups(
    shapes: ShapeRows, tallies: Tallies
) -> list[tuple[int, int, int, float, float, float]]:
    """What `repository.example_groups` returns at the tallied mark, from the tallies (the
    evaluation's `shape_rows` and its `Tallies`): `(rollouts, passed, examples, sum, sum_sq,
    sum_ex_sq)` per shape."""
    grouped: dict[tuple[int, int], list[float]] = {}
    for (n, c, _), k, s, ss, cs, _ in shapes:
        group = grouped.setdefault((n, c), [0, 0.0, 0.0, 0.0])
        for i, part in enumerate((k, s, ss, cs)):
            group[i] += part
    rows = [(n, c, int(k), s, ss, cs) for (n, c), (k, s, ss, cs) in grouped.items()]
    count, passes, total, total_sq = tallies.singles
    if count:
        # Each single is one example of one rollout: its squared sum is its squared reward.
        fails = int(count) - int(passes)
        rows.append(
            (1, 0, fails, total, total_sq, total_sq)
            if fails
            else (1, 1, int(passes), total, total_sq, total_sq)
        )
        if fails and passes:
            rows.append((1, 1, int(passes), 0.0, 0.0, 0.0))
    return rows


def example_shapes(shapes: ShapeRows) -> list[tuple[int, int, int, int, float]]:
    """What `repository.example_shapes` returns for the [0, 1] range at the tallied mark,
    from the evaluation's `shape_rows`: `(rollouts, passed, mean bin, examples, sum of
    means)`."""
    return [(n, c, b, k, m) for (n, c, b), k, _, _, _, m in shapes]


def example_means(connection: Connection, evaluation_id: str) -> dict[int, float | None]:
    """Mean scored reward of each example; None for one that errored in every rollout."""
    rows = connection.execute(
        select(_EXAMPLES.c.example_id, _EXAMPLES.c.scored, _EXAMPLES.c.total).where(
            _EXAMPLES.c.evaluation_id == evaluation_id
        )
    )
    return {int(e): (float(t) / n if n else None) for e, n, t in rows}


def rebuild(connection: Connection, evaluation_id: str, mark: float) -> Tallies:
    """Count an evaluation's stored samples afresh (the backfill; the caller stores the
    returned tallies on the evaluation row). One pass over the samples, in chunks."""
    connection.execute(delete(_EXAMPLES).where(_EXAMPLES.c.evaluation_id == evaluation_id))
    connection.execute(delete(_SHAPES).where(_SHAPES.c.evaluation_id == evaluation_id))
    tallies = Tallies(mark=mark)
    samples = cast(Table, SampleRow.__table__)
    after = 0
    while True:
        chunk = connection.execute(
            select(
                samples.c.seq,
                samples.c.example_id,
                samples.c.reward,
                samples.c.has_error,
                samples.c.data,
            )
            .where(samples.c.evaluation_id == evaluation_id, samples.c.seq > after)
            .order_by(samples.c.seq)
            .limit(REBUILD_CHUNK)
        ).all()
        if not chunk:
            return tallies
        rows = [{"example_id": e, "reward": r, "has_error": h} for _, e, r, h, _ in chunk]
        fold(connection, evaluation_id, tallies, rows, [_usage_of_text(d) for *_, d in chunk])
        after = chunk[-1][0]


def _usage_of_text(data: str) -> tuple[float, ...]:
    try:
        sample = json.loads(data)
    except ValueError:
        return (0.0,) * len(USAGE_FIELDS)
    return usage_of(sample) if isinstance(sample, dict) else (0.0,) * len(USAGE_FIELDS)
