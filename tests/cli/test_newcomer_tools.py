"""#25 item 12, through the CLI (in this process, against a real server and demo model): the
tools a newcomer reaches for — the earlier runs, an evaluation's samples as a file, a "did you
mean" for an environment's name."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq

from tests.cli.test_first_hour_mistakes import refused
from tests.support.cli import cli_in_process
from tests.support.platform import Platform


def test_runs_list_shows_each_run_its_progress_status_and_evaluation(
    demo_model: str, platform: Platform, tmp_path: Path
) -> None:
    online = {"PROCTOR_API_URL": platform.url, "PROCTOR_API_KEY": platform.api_key}
    model = ["--client.base-url", demo_model]
    pushed = cli_in_process(
        "eval", "reverse-text", "-n", "3", "--run.dir", "pushed", *model, home=tmp_path, env=online
    )
    assert pushed.returncode == 0, pushed.stderr
    local = cli_in_process(
        "eval", "arithmetic", "-n", "4", "--no-push", "--run.dir", "cut", *model, home=tmp_path
    )
    assert local.returncode == 0, local.stderr
    traces = tmp_path / "outputs" / "cut" / "traces.jsonl"
    traces.write_text("".join(traces.read_text().splitlines(keepends=True)[:2]))  # as if killed

    listed = cli_in_process("runs", "list", home=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    with platform.client() as http:
        [evaluation] = http.get("/evaluations").json()["evaluations"]
    assert rows["pushed"] == [
        "pushed",
        "reverse-text",
        "demo",
        "3/3",
        "completed",
        evaluation["evaluation_id"],
    ]
    assert rows["cut"] == ["cut", "arithmetic", "demo", "2/4", "incomplete", "-"]
    assert "--run.dir NAME --resume" in listed.stderr
    as_json = json.loads(cli_in_process("runs", "list", "--json", home=tmp_path).stdout)
    assert {r["name"]: r["episodes"] for r in as_json} == {"pushed": 3, "cut": 2}
    empty = cli_in_process("runs", "list", "-o", "nowhere", home=tmp_path)
    assert empty.returncode == 0 and "no runs in nowhere/" in empty.stderr


def test_evals_export_writes_jsonl_csv_and_parquet(
    demo_model: str, platform: Platform, tmp_path: Path
) -> None:
    online = {"PROCTOR_API_URL": platform.url, "PROCTOR_API_KEY": platform.api_key}
    ran = cli_in_process(
        "eval",
        "arithmetic",
        "-n",
        "4",
        "-r",
        "2",
        "--client.base-url",
        demo_model,
        home=tmp_path,
        env=online,
    )
    assert ran.returncode == 0, ran.stderr
    with platform.client() as http:
        [evaluation] = http.get("/evaluations").json()["evaluations"]
    eid = evaluation["evaluation_id"]

    as_jsonl = cli_in_process("evals", "export", eid, home=tmp_path, env=online)
    assert as_jsonl.returncode == 0, as_jsonl.stderr
    assert f"wrote 8 sample(s) of evaluation {eid} to {eid}.jsonl" in as_jsonl.stderr
    samples = [json.loads(line) for line in (tmp_path / f"{eid}.jsonl").read_text().splitlines()]
    assert len(samples) == 8 and all("reward" in s for s in samples)

    as_csv = cli_in_process(
        "evals", "export", eid, "--format", "csv", "-o", "s.csv", home=tmp_path, env=online
    )
    assert as_csv.returncode == 0, as_csv.stderr
    with (tmp_path / "s.csv").open(newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 8
    assert sorted(float(r["reward"]) for r in table) == sorted(s["reward"] for s in samples)

    as_parquet = cli_in_process(
        "evals", "export", eid, "-o", "s.parquet", home=tmp_path, env=online
    )
    assert as_parquet.returncode == 0, as_parquet.stderr
    parquet = pq.read_table(tmp_path / "s.parquet")
    assert parquet.num_rows == 8
    assert sorted(parquet.column("reward").to_pylist()) == sorted(s["reward"] for s in samples)

    unknown = cli_in_process("evals", "export", "no-such-id", home=tmp_path, env=online)
    assert unknown.returncode != 0 and "Traceback" not in unknown.stderr


def test_a_mistyped_environment_gets_did_you_mean(tmp_path: Path) -> None:
    typo = cli_in_process("eval", "revers-text", "-n", "1", "--no-push", home=tmp_path)
    refused(typo, "no environment named 'revers-text'", "did you mean reverse-text?")
