"""What bench/faults.py and bench/faults_servers.py share: one schedule's tally, the check of
a hosted (sharded) evaluation, and the report's lines."""

from __future__ import annotations

import os
import platform
import re
import time
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from tests.support.platform import Platform

COUNTED = ("samples", "expected", "stored", "duplicated", "lost", "false_status", "adopted")
"""The tallies summed over a benchmark's schedules."""

Load = tuple[tuple[float, float, float], tuple[float, float, float]]


@dataclass
class Outcome:
    """One schedule: what ran, what the platform holds, what went wrong."""

    index: int
    faults: list[str]
    samples: int
    """Samples the schedule's runs set out to make."""
    expected: int = 0
    stored: int = 0
    duplicated: int = 0
    lost: int = 0
    false_status: int = 0
    adopted: int = 0
    """Sandboxes adopted by a launcher other than the one that started them."""
    status: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def count(self, expected: Collection[Any], stored: Sequence[Any]) -> None:
        """Add one run's expected and stored keys (sample ids or pairs) to the tally."""
        held = set(stored)
        self.expected += len(set(expected))
        self.stored += len(held)
        self.duplicated += len(stored) - len(held)
        self.lost += len(set(expected) - held)

    def line(self) -> str:
        return (
            f"{self.index:3d} {'+'.join(self.faults):<36} samples={self.samples:3d} "
            f"expected={self.expected:3d} stored={self.stored:3d} dup={self.duplicated} "
            f"lost={self.lost} false={self.false_status} adopted={self.adopted} "
            f"{self.status} {self.seconds:.0f}s {'; '.join(self.notes)}"
        )


def totals(outcomes: Sequence[Outcome]) -> dict[str, int]:
    return {k: sum(getattr(o, k) for o in outcomes) for k in COUNTED}


def total_line(outcomes: Sequence[Outcome], wall: float, load: Load) -> str:
    t = totals(outcomes)
    return (
        f"TOTAL schedules={len(outcomes)} samples={t['samples']} expected={t['expected']} "
        f"stored={t['stored']} duplicated={t['duplicated']} lost={t['lost']} "
        f"false_statuses={t['false_status']} adopted={t['adopted']} wall={wall:.0f}s "
        f"load={load[0][0]:.1f}->{load[1][0]:.1f}"
    )


def machine_line(wall: float, load: Load) -> str:
    before, after = load
    return (
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other work (load "
        f"average {before[0]:.1f} / {before[1]:.1f} / {before[2]:.1f} at the start, "
        f"{after[0]:.1f} / {after[1]:.1f} / {after[2]:.1f} at the end), Python "
        f"{platform.python_version()}; {wall:.0f} s wall, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."
    )


def totals_table(outcomes: Sequence[Outcome], title: str = "schedules") -> list[str]:
    t = totals(outcomes)
    return [
        f"| {title} | samples run | expected | stored | duplicated | lost | false statuses "
        "| sandboxes adopted |",
        "|---|---|---|---|---|---|---|---|",
        f"| {len(outcomes)} | {t['samples']} | {t['expected']} | {t['stored']} "
        f"| {t['duplicated']} | {t['lost']} | {t['false_status']} | {t['adopted']} |",
    ]


def faults_line(outcomes: Sequence[Outcome], faults: Sequence[str]) -> str:
    return "Faults per schedule: " + ", ".join(
        f"`{f}` {sum(o.faults.count(f) for o in outcomes)}" for f in faults
    )


def schedule_table(outcomes: Sequence[Outcome]) -> list[str]:
    lines = [
        "| # | faults | samples | expected | stored | dup | lost | false | adopted | status "
        "| s | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.index} | {' + '.join(o.faults)} | {o.samples} | {o.expected} | {o.stored} "
            f"| {o.duplicated} | {o.lost} | {o.false_status} | {o.adopted} | {o.status} "
            f"| {o.seconds:.0f} | {'; '.join(o.notes)} |"
        )
    return lines


# -- hosted evaluations ------------------------------------------------------------------


def stored_pairs(plat: Platform, eid: str) -> list[tuple[int, int]]:
    """Every (example, rollout) pair the platform holds for `eid`, with repeats."""
    pairs: list[tuple[int, int]] = []
    with plat.client() as c:
        page = 1
        while True:
            r = c.get(f"/evaluations/{eid}/samples", params={"page": page, "limit": 500})
            r.raise_for_status()
            body = r.json()
            pairs += [(s["example_id"], s["rollout_number"]) for s in body["samples"]]
            if not body["has_more"]:
                return pairs
            page += 1


def launcher_rows(database_url: str, eid: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A hosted evaluation's claim row and its shards' rows (by index), from the database."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            hosted = conn.execute(
                text(
                    "SELECT launcher_id, attempt, ended_at, sandbox_handle "
                    "FROM hosted_evaluations WHERE evaluation_id = :e"
                ),
                {"e": eid},
            ).mappings()
            shards = conn.execute(
                text(
                    "SELECT shard, state, attempt, sandbox_handle, error FROM hosted_shards "
                    "WHERE evaluation_id = :e ORDER BY shard"
                ),
                {"e": eid},
            ).mappings()
            return dict(next(iter(hosted))), [dict(s) for s in shards]
    finally:
        engine.dispose()


def check_hosted(
    out: Outcome,
    plat: Platform,
    database_url: str,
    eid: str,
    examples: int,
    rollouts: int,
    kills: Counter[int] | None = None,
) -> dict[str, Any]:
    """Tally a closed hosted evaluation: every (example, rollout) pair stored once, COMPLETED
    with that count, claimed once; a shard killed k times ran k + 1 times. Returns its record."""
    expected = {(e, r) for e in range(examples) for r in range(1, rollouts + 1)}
    out.count(expected, stored_pairs(plat, eid))
    with plat.client() as c:
        record = dict(c.get(f"/evaluations/{eid}").json())
    claim, shards = launcher_rows(database_url, eid)
    out.duplicated += int(claim["attempt"]) - 1  # started more than once
    if record["status"] != "COMPLETED" or record["total_samples"] != len(expected):
        out.false_status += 1
        out.notes.append(f"hosted {record['status']}: {record.get('error_message')}")
    if claim["ended_at"] is None:
        out.notes.append("hosted left open")
    if shards:
        attempts = [int(s["attempt"]) for s in shards]
        out.notes.append(f"{len(shards)} shards, attempts {'/'.join(map(str, attempts))}")
        kills = kills or Counter()
        for index, ran in enumerate(attempts):
            if ran != kills[index] + 1:
                why = str(shards[index]["error"] or "").splitlines()[:1]
                out.notes.append(
                    f"shard {index} killed {kills[index]}x but ran {ran}x (last error: {why})"
                )
    return record


def write_sections(path: Path, head: list[str] | None, sections: dict[str, list[str]]) -> None:
    """Write a report's first part (`head`) and its `## ` sections, keeping from the file
    already there what this run did not produce (so earlier rows stay)."""
    old = path.read_text() if path.exists() else ""
    parts = re.split(r"(?m)^(?=## )", old)
    kept = {part.splitlines()[0]: part.rstrip("\n") for part in parts[1:]}
    blocks = ["\n".join(head) if head is not None else parts[0].rstrip("\n")]
    for heading in dict.fromkeys([*kept, *sections]):
        blocks.append("\n".join(sections[heading]) if heading in sections else kept[heading])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(b for b in blocks if b) + "\n")


SHARDED_HEADING = "## Sharded schedules"
"""The section of a results file that the sharded schedules write."""


def report(
    heading: str,
    command: str,
    description: str,
    outcomes: Sequence[Outcome],
    faults: Sequence[str],
    fault_note: str,
    wall: float,
    load: Load,
    *,
    title: str = "schedules",
) -> list[str]:
    """A report's lines: what ran, the machine, the totals and a row per schedule."""
    return [
        heading,
        "",
        f"Command: {command}.",
        "",
        description,
        "",
        machine_line(wall, load),
        "",
        *totals_table(outcomes, title),
        "",
        faults_line(outcomes, faults) + fault_note,
        "",
        *schedule_table(outcomes),
    ]


def write_results(
    path: Path,
    plain: Sequence[Outcome],
    sharded: Sequence[Outcome],
    wall: float,
    load: Load,
    head: list[str],
    section: list[str],
) -> None:
    """Print the totals; write `head` when plain schedules ran and the sharded section when
    sharded ones did, keeping the rest of the file."""
    print(total_line([*plain, *sharded], wall, load))
    write_sections(path, head if plain else None, {SHARDED_HEADING: section} if sharded else {})


def command(args: Any, *, servers: bool = False) -> str:
    """The command line that ran, as the report shows it."""
    env = "PROCTOR_TEST_POSTGRES_URL=... " if servers else ""
    return (
        f"`{env}.venv/bin/python bench/faults.py{' --servers' if servers else ''} "
        f"--schedules {args.schedules} --sharded {args.sharded} --seed {args.seed} "
        f"--min-samples {args.min_samples} --max-samples {args.max_samples}`"
    )
