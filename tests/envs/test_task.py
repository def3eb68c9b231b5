"""Tasks and tasksets: determinism, selection, the infinite-stream rule."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from proctor.envs import Task, Taskset
from proctor.errors import ConfigError


def _make_stream() -> Iterator[Task]:
    return (Task(index=i, prompt=f"task {i}", answer=str(i)) for i in itertools.count())


def test_finite_select_takes_the_first_n_and_all_by_default() -> None:
    tasks = [Task(index=i, prompt=f"p{i}") for i in range(5)]
    taskset = Taskset(tasks)
    assert not taskset.infinite
    assert len(taskset) == 5
    assert [t.index for t in taskset.select(3)] == [0, 1, 2]
    assert [t.index for t in taskset.select(None)] == [0, 1, 2, 3, 4]
    assert len(taskset.select(50)) == 5


def test_infinite_stream_needs_n_and_restarts_the_same_sequence() -> None:
    taskset = Taskset.stream(_make_stream, name="counting")
    assert taskset.infinite
    with pytest.raises(TypeError):
        len(taskset)
    with pytest.raises(ConfigError, match=r"counting is an infinite stream of tasks: pass -n N"):
        taskset.select(None)
    first = taskset.select(4)
    assert [t.prompt for t in first] == ["task 0", "task 1", "task 2", "task 3"]
    assert taskset.select(4) == first


def test_negative_n_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="-n N"):
        Taskset([Task(index=0, prompt="x")]).select(-1)


def test_task_record_round_trip_and_opening_messages() -> None:
    task = Task(index=3, prompt="hello", answer="42", info={"k": [1, 2]})
    record = task.to_record()
    assert record == {"index": 3, "prompt": "hello", "answer": "42", "info": {"k": [1, 2]}}
    assert Task.from_record(record) == task
    assert task.opening_messages("be brief") == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    chat = Task(index=0, messages=[{"role": "user", "content": "hi"}])
    opening = chat.opening_messages()
    opening.append({"role": "assistant", "content": "yo"})
    opening[0]["content"] = "changed"
    assert chat.messages == [{"role": "user", "content": "hi"}], "the task must not be mutated"
    assert "messages" in chat.to_record() and "prompt" not in chat.to_record()
