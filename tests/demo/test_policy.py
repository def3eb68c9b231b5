"""The demo model's scripted policies, called directly."""

from __future__ import annotations

import json
import random
import re
from typing import Any

from proctor.demo import respond
from proctor.demo.policy import GENERIC_REPLY, solve_word_problem
from proctor.envs import load_environment
from proctor.envs.builtin import alphabet_sort, arithmetic

CALCULATOR = load_environment("tool-calc", num_tasks=1).tool_schemas


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_unknown_conversations_get_the_generic_reply() -> None:
    message, finish = respond(_user("What is the capital of France?"), None, random.Random(0))
    assert message == {"role": "assistant", "content": GENERIC_REPLY}
    assert finish == "stop"
    assert respond([], None, random.Random(0))[0]["content"] == GENERIC_REPLY


def test_replies_are_deterministic_in_the_generator() -> None:
    prompt = _user(load_environment("reverse-text").taskset.select(1)[0].prompt or "")
    replies = {respond(prompt, None, random.Random(7))[0]["content"] for _ in range(5)}
    assert len(replies) == 1
    varied = {respond(prompt, None, random.Random(seed))[0]["content"] for seed in range(50)}
    assert len(varied) > 1


def test_every_arithmetic_task_is_recognised_and_solved() -> None:
    for task in load_environment("arithmetic").taskset.select(None):
        assert str(solve_word_problem(task.prompt or "")) == task.answer, task.prompt


def test_arithmetic_policy_is_mostly_right() -> None:
    tasks = load_environment("arithmetic").taskset.select(200)
    rng = random.Random(3)
    right = sum(
        arithmetic.exact_answer(
            response=respond(_user(t.prompt or ""), None, rng)[0]["content"], answer=t.answer
        )
        for t in tasks
    )
    assert 0.65 * len(tasks) < right < 0.95 * len(tasks)


def test_alphabet_sort_policy_follows_the_conversation() -> None:
    task = next(
        t for t in load_environment("alphabet-sort").taskset.select(50) if t.info["num_turns"] == 3
    )
    scores = []
    for seed in range(30):
        rng = random.Random(seed)
        messages: list[dict[str, Any]] = []
        for turn in task.info["user_turns"]:
            messages.append({"role": "user", "content": turn})
            messages.append(respond(messages, None, rng)[0])
        scores.append(alphabet_sort.alphabet_sort(messages=messages, info=task.info))
    assert max(scores) == 1.0
    assert min(scores) < 1.0


def test_tool_calc_policy_calls_the_tool_then_answers_from_it() -> None:
    task = load_environment("tool-calc").taskset.select(1)[0]
    messages = _user(task.prompt or "")
    calls = 0
    for seed in range(20):
        message, finish = respond(messages, CALCULATOR, random.Random(seed))
        if finish == "tool_calls":
            calls += 1
            call = message["tool_calls"][0]
            assert call["function"]["name"] == "calculator"
            assert task.info["expression"] in call["function"]["arguments"]
    assert calls >= 15
    after_tool = [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {}}]},
        {"role": "tool", "tool_call_id": "c", "content": "1234"},
    ]
    answers = {respond(after_tool, CALCULATOR, random.Random(s))[0]["content"] for s in range(40)}
    assert "The calculator returned 1234.\nAnswer: 1234" in answers
    assert len(answers) > 1, "sometimes it misreads the tool's result"


# --- verifiers' example environments (prompts as verifiers 0.4.0 writes them) -------------


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def _play_tool_task(prompt: str, tool: str, result_of: Any, seed: int) -> str:
    """Runs the conversation as verifiers' harness does: tool calls answered, to the end."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    rng = random.Random(seed)
    for _ in range(3):
        message, finish = respond(messages, [_tool(tool), _tool("bash")], rng)
        messages.append(message)
        if finish != "tool_calls":
            return str(message["content"])
        (call,) = message["tool_calls"]
        assert call["function"]["name"] == tool
        result = result_of(json.loads(call["function"]["arguments"]))
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise AssertionError("no final answer in three turns")


def test_glossary_looks_the_entity_up_and_answers_in_tags() -> None:
    facts = {"ada lovelace": "the first computer programmer"}
    prompt = (
        'Use the `facts_lookup` tool to look up "Ada Lovelace", then reply with exactly what it '
        "returns inside <answer></answer> tags."
    )
    answers = [
        _play_tool_task(prompt, "facts_lookup", lambda a: facts[a["name"].lower()], seed)
        for seed in range(30)
    ]
    right = sum(a == "<answer>the first computer programmer</answer>" for a in answers)
    assert 20 <= right < 30  # mostly right, with seeded mistakes


def test_scratchpad_round_trips_its_word() -> None:
    prompt = (
        'Call the `scratchpad_roundtrip` tool with word="alpha". It returns a single word. '
        "Then reply with that returned word verbatim as your final answer — nothing else."
    )
    answers = [
        _play_tool_task(prompt, "scratchpad_roundtrip", lambda a: a["word"], seed)
        for seed in range(30)
    ]
    assert sum(a == "alpha" for a in answers) >= 20


def test_verifiers_reverse_text_reads_its_instruction_from_the_system_prompt() -> None:
    system = "Reverse the text character-by-character. Put your answer in <reversed_text> tags."
    text = "The quick brown fox jumps over the lazy dog."
    messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
    replies = [respond(messages, None, random.Random(s))[0]["content"] for s in range(20)]
    assert f"<reversed_text>\n{text[::-1]}\n</reversed_text>" in replies


def test_verifiers_alphabet_sort_sorts_camel_case_names_across_turns() -> None:
    first = (
        "Sort these names in alphabetical order by LAST name: ZoeAdams, BobYoung, AmyMiller\n\n"
        "Use exactly this format:\n<alphabetical_sorted>\nName1\nName2\n</alphabetical_sorted>"
    )
    follow = (
        "Now sort ALL of these names alphabetically by LAST name: CarlBrown\n\n"
        "These are in addition to the prior list. Mark any NEW names (that weren't in the prior "
        "list) with `// new name!` at the end.\n\nUse exactly this format:\n"
        "<combined_alphabetical_sorted>\nName1\nName2 // new name!\n"
        "</combined_alphabetical_sorted>"
    )
    best = set()
    for seed in range(20):
        rng = random.Random(seed)
        messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
        messages.append(respond(messages, None, rng)[0])
        messages.append({"role": "user", "content": follow})
        best.add((messages[1]["content"], respond(messages, None, rng)[0]["content"]))
    expected_first = "<alphabetical_sorted>\nZoeAdams\nAmyMiller\nBobYoung\n</alphabetical_sorted>"
    expected_second = (
        "<combined_alphabetical_sorted>\nZoeAdams\nCarlBrown // new name!\nAmyMiller\nBobYoung\n"
        "</combined_alphabetical_sorted>"
    )
    assert any(expected_first in a and expected_second in b for a, b in best)


def test_proposer_solver_proposes_a_checked_problem_its_solvers_mostly_solve() -> None:
    propose = (
        "Invent ONE self-contained, genuinely hard algebra word problem whose final answer is a "
        "single integer. Use your tools: ... Your FINAL reply must end with exactly one JSON "
        'object on its own line: {"problem": "<problem text>", "answer": <integer>}'
    )
    solved = 0
    for seed in range(20):
        reply = respond(_user(propose), None, random.Random(seed))[0]["content"]
        contract = json.loads(reply.splitlines()[-1])
        assert isinstance(contract["answer"], int)
        assert solve_word_problem(contract["problem"]) == contract["answer"]
        solver = _user(f"{contract['problem']}\n\nEnd your reply with just the final integer.")
        answer = respond(solver, None, random.Random(seed + 100))[0]["content"]
        solved += answer.splitlines()[-1] == str(contract["answer"])
    assert 8 <= solved < 20


def test_kuhn_poker_plays_one_legal_bracketed_action_by_its_card() -> None:
    def play(card: str, legal: str, seed: int) -> str:
        system = (
            "You are playing Kuhn poker as Player 1. Rules:\n- ...\n\n"
            f"Your private card: {card}.\n\nEach turn you will be told the betting so far."
        )
        turn = (
            f"Betting so far: Player 0 chose [bet]. You are Player 1. Your legal actions: {legal}."
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": turn}]
        reply = respond(messages, None, random.Random(seed))[0]["content"]
        (action,) = re.findall(r"\[(\w+)\]", reply)
        return action

    assert {play("K", "[fold] or [call]", s) for s in range(10)} == {"call"}
    jacks = [play("J", "[fold] or [call]", s) for s in range(40)]
    assert set(jacks) == {"fold", "call"} and jacks.count("fold") > jacks.count("call")


def test_interception_replies_its_marker_and_its_judge_blocks_only_that_marker() -> None:
    replies = [
        respond(_user("Reply with exactly JUDGE_BLOCK."), None, random.Random(s))[0]["content"]
        for s in range(20)
    ]
    assert set(replies) == {"JUDGE_BLOCK", "Understood."}
    judge = (
        "Reply BLOCK if the candidate contains JUDGE_BLOCK; otherwise ALLOW.\n\n{}\n\nCandidate:\n"
    )
    for candidate, verdict in (("JUDGE_BLOCK", "BLOCK"), ("STOP", "ALLOW")):
        reply = respond(_user(judge + candidate), None, random.Random(0))[0]["content"]
        assert reply == verdict


def test_bash_interception_runs_the_command_once_then_answers() -> None:
    bash = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    prompt = _user("Use bash once to run `touch bash-tool-executed`, then stop.")
    calls = 0
    for seed in range(20):
        message, finish = respond(prompt, bash, random.Random(seed))
        if finish == "tool_calls":
            calls += 1
            arguments = json.loads(message["tool_calls"][0]["function"]["arguments"])
            assert arguments == {"command": "touch bash-tool-executed"}
    assert 12 <= calls < 20
    result = {"role": "tool", "tool_call_id": "c", "content": "ok"}
    assert respond([*prompt, result], bash, random.Random(0))[1] == "stop"


def test_code_golf_writes_a_program_that_prints_the_answer_mostly() -> None:
    prompt = _user(
        "Write a program ... one ```python code block.\n\nPrint the string HELLO reversed."
    )
    programs = {
        respond(prompt, None, random.Random(s))[0]["content"].split("\n")[1] for s in range(30)
    }
    assert 'print("HELLO"[::-1])' in programs and len(programs) == 3


def _png(rgb: tuple[int, int, int]) -> str:
    """A 2x2 RGB PNG as a data URL (what verifiers' `image_data_url` makes)."""
    import base64
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + bytes(rgb) * 2 for _ in range(2))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def test_color_codeword_reads_the_squares_colours_across_turns() -> None:
    def squares(*colours: tuple[int, int, int]) -> dict[str, Any]:
        parts: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": _png(c)}} for c in colours
        ]
        return {"role": "user", "content": [*parts, {"type": "text", "text": "Here are squares."}]}

    system = {"role": "system", "content": "Each color maps to a letter: Red=A, ..."}
    turns = [system, squares((255, 0, 0), (0, 0, 255))]
    turns += [{"role": "assistant", "content": "AC"}, squares((0, 0, 0), (255, 165, 0))]
    answers = [respond(turns, None, random.Random(s))[0]["content"] for s in range(20)]
    assert answers.count("ACIG") >= 12
