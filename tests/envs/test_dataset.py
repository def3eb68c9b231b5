"""dataset: your own rows from JSONL, CSV or Parquet, and a clear refusal of bad files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from proctor.envs import load_environment
from proctor.envs.builtin.dataset import exact_answer, final_answer
from proctor.errors import ConfigError
from tests.support.procs import PROCTOR

ROWS = [
    {"question": "What is 6 * 7?", "answer": "42", "level": 1},
    {"question": "Capital of France?", "answer": "Paris", "level": 2},
]


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def load(path: Path, **args: object) -> list:
    env = load_environment("dataset", path=str(path), prompt="question", **args)
    return env.taskset.select()


def test_jsonl_rows_become_tasks(tmp_path: Path) -> None:
    tasks = load(write_jsonl(tmp_path / "qa.jsonl", ROWS))
    assert [(t.prompt, t.answer, t.info) for t in tasks] == [
        ("What is 6 * 7?", "42", {"level": 1}),
        ("Capital of France?", "Paris", {"level": 2}),
    ]


def test_csv_rows_become_tasks(tmp_path: Path) -> None:
    path = tmp_path / "qa.csv"
    path.write_text('question,answer,level\n"What is 6 * 7, exactly?",42,1\n')
    (task,) = load(path)
    assert (task.prompt, task.answer, task.info) == (
        "What is 6 * 7, exactly?",
        "42",
        {"level": "1"},
    )


def test_parquet_rows_become_tasks(tmp_path: Path) -> None:
    path = tmp_path / "qa.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    tasks = load(path)
    assert [t.answer for t in tasks] == ["42", "Paris"] and tasks[1].info == {"level": 2}


def test_a_prompt_may_be_chat_messages(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    (task,) = load(write_jsonl(tmp_path / "m.jsonl", [{"question": messages, "answer": "hi"}]))
    assert task.messages == messages and task.prompt is None


def test_exact_answer_reads_the_final_answer() -> None:
    assert final_answer("Thinking...\nAnswer: Paris.") == "Paris."
    assert final_answer("so \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert exact_answer.func(response="The answer is:\nanswer: paris", answer="Paris") == 1.0
    assert exact_answer.func(response="  42. ", answer=42) == 1.0
    assert exact_answer.func(response="Answer: Lyon", answer="Paris") == 0.0


BAD_FILES = [
    ("missing.jsonl", None, "no such file"),
    ("data.txt", "whatever", "cannot tell the format"),
    ("empty.jsonl", "", "holds no rows"),
    ("bad.jsonl", '{"question": "q", "answer": "a"}\n{"question": no}\n', "line 2 is not valid"),
    ("list.jsonl", '["q", "a"]\n', "line 1 is a JSON list, not an object"),
    ("nocol.jsonl", '{"question": "q", "answer": "a"}\n{"q": "x"}\n', "line 2 has no 'question'"),
    ("blank.jsonl", '{"question": "  ", "answer": "a"}\n', "'question' must be non-empty text"),
    ("nocol.csv", "q,answer\nx,1\n", "has no column 'question' (its columns: q, answer)"),
    ("cells.csv", "question,answer\nwhat, is,this\n", "row 2 has more cells than the header"),
    ("broken.parquet", "not parquet", "is not a readable Parquet file"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "content", "message"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_files_are_refused_naming_the_row_and_column(
    tmp_path: Path, name: str, content: str | None, message: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        load(path)
    assert str(path) in str(e.value) or "format" in str(e.value)


def test_an_unknown_reward_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown reward 'fuzzy'; pick one of exact, math, judge"):
        load(write_jsonl(tmp_path / "qa.jsonl", ROWS), reward="fuzzy")


def test_listed_without_a_path() -> None:
    env = load_environment("dataset")
    assert len(env.taskset) == 0 and "path" in env.description


@pytest.mark.e2e
@pytest.mark.parametrize("reward", ["exact", "math"])
def test_eval_on_a_csv_file_against_the_demo_model(
    demo_model: str, tmp_path: Path, reward: str
) -> None:
    # Arithmetic questions, which the demo model answers (mostly right) with "Answer: N".
    tasks = load_environment("arithmetic").taskset.select(12)
    data = tmp_path / "qa.csv"
    data.write_text("question,answer\n" + "".join(f'"{t.prompt}",{t.answer}\n' for t in tasks))
    args = json.dumps({"path": str(data), "prompt": "question", "reward": reward})
    out = tmp_path / "out"
    ran = subprocess.run(
        [*PROCTOR, "eval", "dataset", "--env-args", args, "--no-push", "--no-rich", "-o",
         str(out), "--run.dir", "mine", "--client.base-url", demo_model],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    lines = (out / "mine" / "traces.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 12 and all(r["ok"] for r in records)
    rewards = [r["reward"] for r in records]
    assert sum(rewards) / len(rewards) > 0.5


def test_a_bad_file_stops_the_eval_with_one_line(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "qa.jsonl", [{"q": "x", "answer": "y"}])
    ran = subprocess.run(
        [*PROCTOR, "eval", "dataset", "--env-args", json.dumps({"path": str(data)}), "--no-push",
         "-o", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 2
    assert "line 1 has no 'prompt'" in ran.stderr and "Traceback" not in ran.stderr
    assert not (tmp_path / "out").exists()
