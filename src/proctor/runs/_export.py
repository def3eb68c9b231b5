"""An evaluation's samples as a file: JSON lines, CSV or Parquet (`proctor evals export`).

JSON lines keep each sample as the platform returns it. CSV and Parquet are tables: one
column per scalar field, one `metric.<name>` column per metric, and the nested fields
(messages, info, ...) as JSON text. Parquet needs pyarrow (`pip install 'proctor[parquet]'`).
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TextIO

from proctor.errors import ConfigError
from proctor.runs._client import PlatformClient

ExportFormat = Literal["jsonl", "csv", "parquet"]
FORMATS: tuple[ExportFormat, ...] = ("jsonl", "csv", "parquet")
PAGE_SIZE = 1000
"""Samples per request (the platform's largest page)."""


def iter_samples(client: PlatformClient, evaluation_id: str) -> Iterator[dict[str, Any]]:
    """Every sample of the evaluation, page by page, in the platform's order."""
    page = 1
    while True:
        answer = client.call(
            "GET", f"/evaluations/{evaluation_id}/samples?page={page}&limit={PAGE_SIZE}"
        )
        yield from answer.get("samples") or []
        if not answer.get("has_more"):
            return
        page += 1


def flat_row(sample: dict[str, Any]) -> dict[str, Any]:
    """A sample as one table row: scalars as they are, metrics spread, the rest as JSON."""
    row: dict[str, Any] = {}
    for key, value in sample.items():
        if key == "metrics" and isinstance(value, dict):
            for name, number in value.items():
                row[f"metric.{name}"] = number
        elif isinstance(value, dict | list):
            row[key] = json.dumps(value, ensure_ascii=False)
        else:
            row[key] = value
    return row


def export_evaluation(
    client: PlatformClient, evaluation_id: str, target: Path | None, *, format: ExportFormat
) -> int:
    """Write the evaluation's samples to `target` (None: stdout, not for Parquet); returns
    how many were written.

    Raises:
        ConfigError: Parquet to stdout, or without pyarrow installed.
        PlatformError: the platform did not answer or refused (unknown id, another team's).
    """
    if format == "parquet":
        if target is None:
            raise ConfigError("Parquet is binary: pass -o FILE.parquet instead of stdout")
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError(
                "writing Parquet needs pyarrow: pip install 'proctor[parquet]', or pick "
                "--format jsonl or csv"
            ) from None
    samples = iter_samples(client, evaluation_id)
    if format == "parquet":
        assert target is not None
        return _write_parquet(samples, target)
    if target is None:
        return _write_text(samples, sys.stdout, format)
    with target.open("w", encoding="utf-8", newline="") as out:
        return _write_text(samples, out, format)


def _write_text(samples: Iterator[dict[str, Any]], out: TextIO, format: ExportFormat) -> int:
    count = 0
    if format == "jsonl":
        for sample in samples:
            out.write(json.dumps(sample, ensure_ascii=False) + "\n")
            count += 1
        return count
    rows = [flat_row(s) for s in samples]  # the header needs every row's columns
    writer = csv.DictWriter(out, fieldnames=_columns(rows), extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return len(rows)


def _write_parquet(samples: Iterator[dict[str, Any]], target: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [flat_row(s) for s in samples]
    columns = _columns(rows)
    table = pa.table({c: _column([r.get(c) for r in rows]) for c in columns})
    pq.write_table(table, target)
    return len(rows)


def _column(values: list[Any]) -> Any:
    """One Parquet column: numbers stay numbers; a column of mixed kinds becomes text."""
    import pyarrow as pa

    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every column, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)
