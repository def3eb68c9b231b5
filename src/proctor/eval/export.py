"""Export a run directory in the layout `prime eval push` and `vf-eval` read.

`metadata.json` holds the run's environment, model, sizes and `avg_<name>` for the reward and
each metric (`prime eval push` turns those into the evaluation's metrics); `results.jsonl`
holds one sample per episode, exactly as proctor sends it to the platform, with its
`sample_id` (the episode id), `example_id` (also as `id`) and `rollout_number`. Because every
row carries its `sample_id`, pushing the same export again stores no sample twice.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from proctor.errors import RunDirError
from proctor.eval.run_dir import CONFIG_FILE, RunDirectory
from proctor.projection import encode_sample, example_of, project_episode, project_record

METADATA_FILE = "metadata.json"
RESULTS_FILE = "results.jsonl"


@dataclass(frozen=True)
class Exported:
    """What an export wrote."""

    metadata_path: Path
    results_path: Path
    samples: int
    env: str
    model: str


def _samples(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Platform samples of the run's episode records (proctor's and verifiers' both)."""
    samples: list[dict[str, Any]] = []
    rollouts: dict[Any, int] = defaultdict(int)
    for record in records:
        if isinstance(record.get("traces"), list):  # a verifiers episode
            rollouts[example_of(record)] += 1
            samples += project_episode(record, rollouts[example_of(record)])
        elif "id" in record:
            samples.append(project_record(record))
    for sample in samples:
        sample.setdefault("id", sample.get("example_id"))
    return samples


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _averages(samples: list[dict[str, Any]]) -> dict[str, float]:
    """`avg_reward` and `avg_<metric>` over the samples that ran without an error."""
    sums: dict[str, list[float]] = defaultdict(list)
    for sample in samples:
        if sample.get("error"):
            continue
        if (reward := _finite(sample.get("reward"))) is not None:
            sums["reward"].append(reward)
        for name, value in (sample.get("metrics") or {}).items():
            if (number := _finite(value)) is not None:
                sums[str(name)].append(number)
    return {f"avg_{name}": sum(values) / len(values) for name, values in sums.items() if values}


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def export_run(run_dir: Path, out_dir: Path | None = None) -> Exported:
    """Write `metadata.json` and `results.jsonl` for the run in `run_dir` (into `out_dir`,
    default the run dir itself).

    Raises:
        RunDirError: `run_dir` holds no run (no config.toml) or no finished episode.
    """
    run = RunDirectory(run_dir)
    if not run.config_path.is_file():
        raise RunDirError(
            f"{run_dir} holds no run (no {CONFIG_FILE}); pass the run directory `proctor eval` "
            "printed"
        )
    config = run.saved_config()
    samples = _samples(run.load_records())
    if not samples:
        raise RunDirError(f"{run_dir} holds no finished episode yet; export it once it has one")
    env, model = str(config.get("env") or ""), str(config.get("model") or "")
    examples = {s.get("example_id") for s in samples}
    metadata: dict[str, Any] = {
        "env_id": env,
        "env_args": config.get("env_args") or {},
        "model": model,
        "num_examples": len(examples),
        "rollouts_per_example": config.get("rollouts_per_example") or 1,
        "sampling_args": config.get("sampling") or {},
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "framework": "proctor",
        **_averages(samples),
    }
    run_id = (config.get("run") or {}).get("id")
    if run_id:
        metadata["proctor_evaluation_id"] = run_id
    target = out_dir or run_dir
    target.mkdir(parents=True, exist_ok=True)
    metadata_path, results_path = target / METADATA_FILE, target / RESULTS_FILE
    # Non-finite numbers become null, as in what is sent to the platform.
    lines = "".join(encode_sample(sample).decode("utf-8") + "\n" for sample in samples)
    _write_atomically(results_path, lines)
    _write_atomically(metadata_path, json.dumps(metadata, indent=2, allow_nan=False) + "\n")
    return Exported(metadata_path, results_path, len(samples), env, model)
