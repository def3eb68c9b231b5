"""The `dataset` environment on a Hugging Face dataset, offline (#25 item 12): a directory
saved with `save_to_disk` (Arrow files), and a dataset id served from the local cache. The CLI
runs in this process (`cli_in_process`): what it reads and stores is the point."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.cli.test_first_hour_mistakes import refused
from tests.support.cli import cli_in_process

ROWS = {"prompt": ["What is 2+2?", "What is 3+4?"], "answer": ["4", "7"]}


def _save_to_disk_layout(directory: Path) -> None:
    """What `datasets.Dataset.save_to_disk` writes: Arrow stream files and two JSON files."""
    directory.mkdir(parents=True)
    table = pa.table(ROWS)
    arrow = str(directory / "data-00000-of-00001.arrow")
    with pa.OSFile(arrow, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    (directory / "dataset_info.json").write_text(json.dumps({"features": {}}))
    (directory / "state.json").write_text(json.dumps({"_split": None}))


def _evaluated(result_dir: Path) -> list[str]:
    lines = (result_dir / "traces.jsonl").read_text().splitlines()
    return sorted(json.loads(line)["task"]["answer"] for line in lines)


def test_a_saved_dataset_and_a_cached_hub_id_run_offline(demo_model: str, tmp_path: Path) -> None:
    saved = tmp_path / "qa-saved"
    _save_to_disk_layout(saved)
    args = ["eval", "dataset", "--no-push", "--client.base-url", demo_model]
    ran = cli_in_process(*args, "--env-args", json.dumps({"path": str(saved)}),
                         "--run.dir", "saved", home=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert _evaluated(tmp_path / "outputs" / "saved") == ["4", "7"]

    cache = tmp_path / "hf-cache"
    snapshot = cache / "datasets--someone--qa" / "snapshots" / "0123abcd" / "data"
    snapshot.mkdir(parents=True)
    pq.write_table(pa.table(ROWS), snapshot / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"prompt": ["x"], "answer": ["y"]}), snapshot / "test-00000.parquet")
    hub = cli_in_process(*args, "--env-args", '{"path": "someone/qa"}', "--run.dir", "hub",
                         home=tmp_path, env={"HF_HUB_CACHE": str(cache)})  # fmt: skip
    assert hub.returncode == 0, hub.stderr
    assert _evaluated(tmp_path / "outputs" / "hub") == ["4", "7"]  # the train split only

    missing = cli_in_process(*args, "--env-args", '{"path": "someone/other"}', home=tmp_path,
                             env={"HF_HUB_CACHE": str(cache)})  # fmt: skip
    refused(missing, "someone/other is not in the local cache", "downloads nothing")
