"""Math answers checked as mathematics (math-verify), and the built-in math environment."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from proctor.envs import SingleTurnEnv, Task, Taskset, load_environment, math_answer, verify_math
from proctor.envs.builtin import math_problems
from proctor.errors import ConfigError
from proctor.testing import ScriptedClient
from tests.envs.chat import OpenAIAdapter

EQUIVALENT = [
    ("The answer is \\boxed{0.5}", "\\frac{1}{2}"),
    ("So $\\dfrac{2}{4}$.", "\\frac{1}{2}"),
    ("Answer: 1/2", "\\frac{1}{2}"),
    ("\\boxed{\\sqrt{72}}", "6\\sqrt{2}"),
    ("The area is \\boxed{35 \\text{ cm}^2}", "35"),
    ("It is $35\\ \\mathrm{cm}^2$", "35"),
    ("\\boxed{\\pi \\cdot 25}", "25\\pi"),
    ("\\boxed{3, 2}", "2, 3"),
    ("$x = 2$ or $x = 3$", "\\{2, 3\\}"),
    ("\\boxed{(x+1)^2}", "x^2+2x+1"),
    ("so x = -1.5", "-\\frac{3}{2}"),
    ("I get \\boxed{3.0}", "3"),
    ("First 7, then \\boxed{12}; the 7 was a step.", "12"),
]
NOT_EQUIVALENT = [
    ("\\boxed{0.6}", "\\frac{1}{2}"),
    ("\\boxed{6\\sqrt{3}}", "6\\sqrt{2}"),
    ("\\boxed{2}", "2, 3"),
    ("\\boxed{x^2+1}", "x^2+2x+1"),
    ("I do not know.", "12"),
    ("", "1"),
]


@pytest.mark.parametrize(("response", "answer"), EQUIVALENT)
def test_equivalent_answers_match(response: str, answer: str) -> None:
    assert verify_math(response, answer)


@pytest.mark.parametrize(("response", "answer"), NOT_EQUIVALENT)
def test_different_answers_do_not_match(response: str, answer: str) -> None:
    assert not verify_math(response, answer)


def test_every_shipped_equivalent_form_is_accepted() -> None:
    rows = math_problems.read_problems()
    assert len(rows) == 225
    refused = [
        (row["answer"], form)
        for row in rows[::3]
        for form in [row["answer"], *row["equivalent"]]
        if not verify_math(f"The answer is $\\boxed{{{form}}}$.", row["answer"])
    ]
    assert refused == []


async def test_a_broken_reference_is_a_scoring_error_not_a_zero() -> None:
    env = SingleTurnEnv(
        name="m",
        taskset=Taskset([Task(index=0, prompt="p", answer="\\frac{")]),
        rubric=[math_answer],
    )
    episode = await env.rollout(
        env.taskset.select()[0], ScriptedClient(["\\boxed{1}"]), episode_id="m", rollout_number=1
    )
    assert episode.rewards == {"math_answer": None}
    assert episode.error is not None and episode.error["stage"] == "scoring"
    assert "could not be read as mathematics" in episode.error["message"]


async def test_a_comparison_past_its_timeout_is_an_error_and_the_first_use_is_not_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    from proctor.envs import _math

    def slow_on(text: str) -> Callable[[str, str], bool]:
        def verify(response: str, answer: str) -> bool:
            time.sleep(0.6 if response == text else 0.0)
            return True

        return verify

    # math-verify's first use (sympy, its grammars) may take seconds under load: not counted.
    _math._warmed_up.cache_clear()
    monkeypatch.setattr(_math, "verify_math", slow_on("$1$"))
    assert await _math.verify_math_async("\\boxed{2}", "2", timeout_s=0.3)
    # A comparison that takes too long is an error, never a guess.
    monkeypatch.setattr(_math, "verify_math", slow_on("\\boxed{2}"))
    with pytest.raises(TimeoutError, match=r"comparing the answer took more than 0\.3s"):
        await _math.verify_math_async("\\boxed{2}", "2", timeout_s=0.3)
    _math._warmed_up.cache_clear()


def test_topics_filter_and_unknown_topics() -> None:
    env = load_environment("math", topics=["radicals"])
    assert len(env.taskset) == 25
    assert all(t.info["topic"] == "radicals" for t in env.taskset)
    with pytest.raises(ConfigError, match="unknown topics nope"):
        load_environment("math", topics=["nope"])


@pytest.fixture
async def client(demo_model: str) -> AsyncIterator[OpenAIAdapter]:
    adapter = OpenAIAdapter(demo_model)
    yield adapter
    await adapter.close()


@pytest.mark.e2e
async def test_the_demo_model_answers_mostly_right_in_many_notations(client: OpenAIAdapter) -> None:
    env = load_environment("math")
    tasks = env.taskset.select(60)
    episodes = await asyncio.gather(
        *(env.rollout(t, client, episode_id=f"m{t.index}", rollout_number=1) for t in tasks)
    )
    assert all(e.ok for e in episodes), [e.error for e in episodes if e.error]
    rewards = [e.reward for e in episodes]
    assert set(rewards) == {0.0, 1.0}
    assert sum(rewards) / len(rewards) > 0.6
