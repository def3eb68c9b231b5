"""dataset: evaluate on your own questions and answers from a JSONL, CSV or Parquet file.

`path` may also be a Hugging Face dataset: a directory saved with `save_to_disk`, a
snapshot of Parquet files, or a dataset id (`owner/name`) already in the local Hugging Face
cache (`split` picks one split, default `train`); nothing is downloaded. Single turn, no code
to write:

    proctor eval dataset --env-args '{"path": "data.jsonl", "prompt": "question",
                                      "answer": "answer", "reward": "math"}'

Each row becomes a task: the `prompt` column is the user message (or, in JSONL and Parquet,
a list of chat messages), the `answer` column the reference, every other column the task's
info. `reward` picks the grading: `exact` (the final answer, normalised, equals the
reference), `math` (equal as mathematics, math-verify) or `judge` (a judge model grades it;
`judge_template` replaces the default prompt). A bad file is refused before the run with one
line naming the file, the row and the column.
"""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path
from typing import Any

from proctor.envs import (
    Judge,
    ScoreFunction,
    SingleTurnEnv,
    Task,
    Taskset,
    judge_reward,
    math_answer,
    reward,
)
from proctor.errors import ConfigError

FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
REWARDS = ("exact", "math", "judge")
_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
_ANSWER_LINE = re.compile(
    r"^\s*(?:final\s+)?answer\s*[:=]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE
)


def final_answer(text: str) -> str:
    """The reply's final answer: its last `\\boxed{}`, else its last `Answer: ...` line, else
    the whole reply."""
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1]
    lines = _ANSWER_LINE.findall(text)
    return lines[-1] if lines else text


def normalise(text: str) -> str:
    """Case-folded, whitespace collapsed, without surrounding quotes, `$` or a final period."""
    text = " ".join(str(text).split()).casefold()
    return text.strip("\"'`$ ").rstrip(".").strip()


@reward(name="exact_answer")
def exact_answer(response: str, answer: Any) -> float:
    """1.0 when the reply's final answer, normalised, equals the reference, else 0.0."""
    return 1.0 if normalise(final_answer(response)) == normalise(answer) else 0.0


def _read_jsonl(path: Path) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append((f"line {number}", json.loads(line)))
            except ValueError as e:
                raise ConfigError(
                    f"{path} line {number} is not valid JSON ({e}); fix or remove that line"
                ) from None
    return rows


def _read_csv(path: Path) -> tuple[list[str], list[tuple[str, Any]]]:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        rows = []
        for row in reader:
            if None in row:  # more cells than the header has columns
                raise ConfigError(
                    f"{path} row {reader.line_num} has more cells than the header's "
                    f"{len(columns)} columns; quote cells that contain commas"
                )
            if any(value is None for value in row.values()):  # fewer: DictReader fills None
                missing = sum(value is None for value in row.values())
                raise ConfigError(
                    f"{path} row {reader.line_num} has {len(columns) - missing} cells, fewer "
                    f"than the header's {len(columns)} columns; fill in the missing cells "
                    "(an empty cell is written as two commas)"
                )
            rows.append((f"row {reader.line_num}", dict(row)))
    return columns, rows


def _read_parquet(path: Path) -> list[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            "reading Parquet needs pyarrow, which is not installed; install it "
            "(pip install pyarrow) or convert the file to JSONL"
        ) from None
    try:
        table = pq.read_table(path)
    except Exception as e:
        raise ConfigError(f"{path} is not a readable Parquet file ({e})") from None
    return [(f"row {i + 1}", row) for i, row in enumerate(table.to_pylist())]


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
"""`owner/name`: a Hugging Face dataset id, served from the local cache."""


def hub_snapshot(dataset_id: str) -> Path:
    """The newest snapshot of a Hugging Face dataset in the local cache (`$HF_HUB_CACHE`, else
    `$HF_HOME/hub`, else `~/.cache/huggingface/hub`); nothing is downloaded.

    Raises:
        ConfigError: the cache holds no snapshot of it.
    """
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    cache = Path(os.environ.get("HF_HUB_CACHE") or home / "hub")
    snapshots = cache / f"datasets--{dataset_id.replace('/', '--')}" / "snapshots"
    found = (
        sorted(snapshots.glob("*"), key=lambda p: p.stat().st_mtime) if snapshots.is_dir() else []
    )
    if not found:
        raise ConfigError(
            f"the Hugging Face dataset {dataset_id} is not in the local cache ({cache}); proctor "
            "downloads nothing: fetch it once (`huggingface-cli download --repo-type dataset "
            f"{dataset_id}`) or pass the path of a saved dataset or a Parquet file"
        )
    return found[-1]


def _read_dataset_dir(directory: Path, split: str) -> list[tuple[str, dict[str, Any]]]:
    """Rows of a saved Hugging Face dataset (`save_to_disk`: Arrow files) or a snapshot of one
    (Parquet files), of `split` when the directory holds several."""
    files = sorted(p for p in directory.rglob("*") if p.suffix in (".arrow", ".parquet"))
    of_split = [
        p
        for p in files
        if split in p.relative_to(directory).parts[:-1] or p.name.startswith(f"{split}-")
    ]
    files = of_split or files
    if not files:
        raise ConfigError(
            f"{directory} holds no .arrow or .parquet files; pass a dataset saved with "
            "save_to_disk, a snapshot of one, or a JSONL, CSV or Parquet file"
        )
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            "reading a saved dataset needs pyarrow: pip install 'proctor[datasets]'"
        ) from None
    rows: list[tuple[str, dict[str, Any]]] = []
    for file in files:
        try:
            if file.suffix == ".parquet":
                table = pq.read_table(file)
            else:
                with pa.memory_map(str(file)) as source:
                    table = pa.ipc.open_stream(source).read_all()
        except Exception as e:
            raise ConfigError(f"{file} is not a readable dataset file ({e})") from None
        name = file.relative_to(directory)
        rows += [(f"{name} row {i + 1}", row) for i, row in enumerate(table.to_pylist())]
    if not rows:
        raise ConfigError(f"{directory} holds no rows; pick another dataset or split")
    return rows


def read_rows(
    path: Path, file_format: str | None = None, split: str = "train"
) -> list[tuple[str, dict[str, Any]]]:
    """The file's rows as `(where, row)` pairs ("line 3", "row 3") for error messages.

    `path` may also be a directory holding a saved Hugging Face dataset or a snapshot of one,
    or a Hugging Face dataset id (`owner/name`) found in the local cache; `split` picks one
    split of those.

    Raises:
        ConfigError: the file is missing, of an unknown format, empty, or not well-formed.
    """
    if path.is_dir() or (not path.exists() and _HUB_ID.fullmatch(str(path))):
        return _read_dataset_dir(hub_snapshot(str(path)) if not path.exists() else path, split)
    if not path.is_file():
        raise ConfigError(
            f"no such file: {path}; pass an existing file as --env-args '{{\"path\": ...}}'"
        )
    kind = file_format or FORMATS.get(path.suffix.lower())
    if kind not in FORMATS.values():
        raise ConfigError(
            f"cannot tell the format of {path}; name it .jsonl, .csv or .parquet, or pass "
            '"format": "jsonl" | "csv" | "parquet" in --env-args'
        )
    columns: list[str] | None = None
    if kind == "jsonl":
        rows = _read_jsonl(path)
    elif kind == "csv":
        columns, rows = _read_csv(path)
    else:
        rows = _read_parquet(path)
    if not rows:
        raise ConfigError(f"{path} holds no rows; add some or pick another file")
    for where, row in rows:
        if not isinstance(row, dict):
            raise ConfigError(
                f"{path} {where} is a JSON {type(row).__name__}, not an object; "
                'write each row as {"column": value, ...}'
            )
    if columns is not None and not columns:
        raise ConfigError(f"{path} has no header row; its first line must name the columns")
    return rows


def _check_columns(path: Path, columns: list[str], *wanted: str) -> None:
    for column in wanted:
        if column not in columns:
            raise ConfigError(
                f"{path} has no column {column!r} (its columns: {', '.join(columns) or 'none'}); "
                'name the right one in --env-args, e.g. \'{"prompt": "question"}\''
            )


def _task(
    path: Path, where: str, index: int, row: dict[str, Any], prompt: str, answer: str
) -> Task:
    for column in (prompt, answer):
        if column not in row:
            raise ConfigError(
                f"{path} {where} has no {column!r} (it has: {', '.join(row) or 'nothing'}); "
                "fix the row or name the right column in --env-args"
            )
    text = row[prompt]
    info = {k: v for k, v in row.items() if k not in (prompt, answer)}
    if isinstance(text, list):
        if not text or not all(isinstance(m, dict) and "role" in m for m in text):
            raise ConfigError(
                f"{path} {where}: {prompt!r} is a list but not of chat messages "
                '({"role": ..., "content": ...})'
            )
        return Task(index=index, messages=text, answer=row[answer], info=info)
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(
            f"{path} {where}: {prompt!r} must be non-empty text (got {str(text)[:40]!r})"
        )
    return Task(index=index, prompt=text, answer=row[answer], info=info)


def make_rubric(kind: str, judge_template: str | None) -> list[ScoreFunction]:
    """The reward for `exact`, `math` or `judge`."""
    if kind == "exact":
        return [exact_answer]
    if kind == "math":
        return [math_answer]
    if kind == "judge":
        return [judge_reward(judge_template or Judge.DEFAULT_TEMPLATE)]
    raise ConfigError(f"unknown reward {kind!r}; pick one of {', '.join(REWARDS)}")


def load_environment(
    *,
    path: str | None = None,
    prompt: str = "prompt",
    answer: str = "answer",
    reward: str = "exact",
    format: str | None = None,
    split: str = "train",
    system_prompt: str | None = None,
    judge_template: str | None = None,
) -> SingleTurnEnv:
    """Tasks from the file at `path` (see the module docstring for the arguments).

    Without a `path` the environment has no tasks (so `proctor envs list` can show it).
    """
    rubric = make_rubric(reward, judge_template)
    tasks: list[Task] = []
    if path is not None:
        file = Path(path).expanduser()
        rows = read_rows(file, format, split)
        if rows and FORMATS.get(file.suffix.lower(), format) == "csv":
            _check_columns(file, list(rows[0][1]), prompt, answer)
        tasks = [
            _task(file, where, index, row, prompt, answer)
            for index, (where, row) in enumerate(rows)
        ]
    return SingleTurnEnv(
        name="dataset",
        description='Your own JSONL/CSV/Parquet rows: --env-args \'{"path": "data.jsonl"}\'.',
        taskset=Taskset(tasks),
        rubric=rubric,
        system_prompt=system_prompt,
    )
