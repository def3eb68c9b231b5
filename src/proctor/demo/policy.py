"""The demo model's scripted policies, one per built-in environment.

A policy recognises its environment from the conversation (the task prompt's wording and
tags), answers mostly right, and makes seeded mistakes so rewards vary. Besides proctor's
built-ins it recognises some of verifiers' example environments, as `vf-eval` and the
verifiers driver run them: glossary and scratchpad (call the tool the prompt names, then
answer from its result), reverse_text (the instruction in the system prompt),
alphabet_sort (camel-case names, follow-ups that list the new names), proposer_solver
(proposes one of arithmetic's word problems in its JSON contract, then solves it) and
kuhn_poker (plays its card by a simple seeded strategy). Everything is a
pure function of the conversation and a `random.Random`, so the server can make replies
reproducible by seeding that generator from the request.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
import zlib
from functools import lru_cache
from typing import Any

from proctor.envs.builtin import (
    alphabet_sort,
    arithmetic,
    humaneval,
    math_problems,
    reverse_text,
    tool_calc,
)

Message = dict[str, Any]
Reply = tuple[Message, str]
"""The assistant message and its finish reason."""

GENERIC_REPLY = (
    "Hello! I am the proctor demo model, a scripted stand-in for a real model. I can only "
    "do the built-in environments' tasks (alphabet-sort, reverse-text, arithmetic, tool-calc, "
    "humaneval, math), and grade with the default judge prompt."
)


def _text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _say(content: str) -> Reply:
    return {"role": "assistant", "content": content}, "stop"


# --- alphabet-sort -------------------------------------------------------------------------

_SORT_BY = re.compile(r"by (FIRST|LAST) name")
_FIRST_NAMES = re.compile(r"by (?:FIRST|LAST) name: (.*?)\n\n", re.DOTALL)
_NEW_NAMES = re.compile(r"(?:New names|by (?:FIRST|LAST) name): (.*?)\n\n", re.DOTALL)


def _camel_key(name: str, sort_by: str) -> str:
    """verifiers' alphabet_sort key for a name written without spaces (`JohnSmith`)."""
    cut = next((i for i in range(1, len(name)) if name[i].isupper()), len(name))
    return name[:cut] if sort_by == "FIRST" else name[cut:]


def _sort_names(names: list[str], sort_by: str) -> list[str]:
    if names and not any(" " in n for n in names):
        return sorted(names, key=lambda n: _camel_key(n, sort_by))
    return alphabet_sort.sort_names(names, sort_by)


def _alphabet_sort(users: list[str], rng: random.Random) -> Reply:
    sort_by_match = _SORT_BY.search(users[0])
    sort_by = sort_by_match.group(1) if sort_by_match else "FIRST"
    seen: list[str] = []
    new: list[str] = []
    for turn, text in enumerate(users):
        found = (_FIRST_NAMES if turn == 0 else _NEW_NAMES).search(text)
        new = [n.strip() for n in found.group(1).split(",")] if found else []
        seen += new
    combined = len(users) > 1
    ordered = _sort_names(seen, sort_by)
    lines = [f"{n} {alphabet_sort.NEW_MARK}" if combined and n in new else n for n in ordered]
    roll = rng.random()
    if roll < 0.12 and len(lines) > 1:
        i = rng.randrange(len(lines) - 1)
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    elif roll < 0.2 and len(lines) > 1:
        del lines[rng.randrange(len(lines))]
    elif roll < 0.26 and combined:
        lines = [line.replace(f" {alphabet_sort.NEW_MARK}", "") for line in lines]
    elif roll < 0.3:
        return _say("Sure: " + ", ".join(ordered))  # forgot the tags
    tag = alphabet_sort.COMBINED_TAG if combined else alphabet_sort.FIRST_TAG
    body = "\n".join(lines)
    return _say(f"Sorted by {sort_by.lower()} name:\n<{tag}>\n{body}\n</{tag}>")


# --- reverse-text --------------------------------------------------------------------------


def _reverse_text(prompt: str, rng: random.Random) -> Reply:
    passage = prompt.split("\n\n", 1)[1].strip() if "\n\n" in prompt else prompt
    chars = list(passage[::-1])
    if chars and rng.random() < 0.4:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(chars))
            if rng.random() < 0.5:
                chars[i] = rng.choice(string.ascii_lowercase)
            else:
                del chars[i]
                if not chars:
                    break
    tag = reverse_text.TAG
    return _say(f"<{tag}>\n{''.join(chars)}\n</{tag}>")


# --- verifiers' example environments ------------------------------------------------------

_VF_REVERSE = "Reverse the text character-by-character."
# glossary: 'Use the `facts_lookup` tool to look up "Ada Lovelace", then reply with exactly
# what it returns inside <answer></answer> tags.'
_LOOK_UP = re.compile(r'Use the `(?P<tool>[\w.-]+)` tool to look up "(?P<name>[^"]+)"')
# scratchpad: 'Call the `scratchpad_roundtrip` tool with word="alpha". It returns ...'
_CALL_WITH = re.compile(r'Call the `(?P<tool>[\w.-]+)` tool with (?P<arg>\w+)="(?P<value>[^"]*)"')


def _offered(tools: list[dict[str, Any]] | None, wanted: str) -> str | None:
    """The offered tool's name that is (or ends with) `wanted`, e.g. behind a prefix."""
    names = [str((t.get("function") or {}).get("name") or "") for t in tools or ()]
    return next((n for n in names if n == wanted), None) or next(
        (n for n in names if n.endswith(wanted)), None
    )


def _tool_call(name: str, arguments: dict[str, Any], rng: random.Random) -> Reply:
    call = {
        "id": f"call_{rng.getrandbits(48):012x}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"


def _named_tool_task(
    messages: list[Message], prompt: str, tools: list[dict[str, Any]] | None, rng: random.Random
) -> Reply | None:
    """glossary and scratchpad: call the tool the prompt names, then answer from its result."""
    lookup, call_with = _LOOK_UP.search(prompt), _CALL_WITH.search(prompt)
    found = lookup or call_with
    if found is None:
        return None
    last = messages[-1]
    if last.get("role") == "tool":
        result = _text(last).strip()
        if rng.random() < 0.1:
            result = result[: max(1, len(result) // 2)]  # answered from half a memory
        return _say(f"<answer>{result}</answer>" if lookup else result)
    name = _offered(tools, found["tool"])
    if name is None or rng.random() < 0.1:
        # No such tool offered (or skipped it): guesses.
        guess = call_with["value"] if call_with else "I could not look that up."
        return _say(f"<answer>{guess}</answer>" if lookup else guess)
    arguments = {"name": found["name"]} if lookup else {found["arg"]: found["value"]}
    return _tool_call(name, arguments, rng)


# proposer_solver: the proposer's seat ends with a JSON contract; the solvers' prompt is the
# proposed problem with this suffix.
_PROPOSE = "word problem whose final answer is a single integer"
_SOLVE_SUFFIX = "End your reply with just the final integer."
_PROPOSER_NAMES = ("Ada", "Ben", "Cleo", "Dev", "Eve", "Finn")


def _propose(rng: random.Random) -> Reply:
    """An arithmetic word problem and its answer, as proposer_solver's JSON contract."""
    template = rng.choice(arithmetic.TEMPLATES)
    values = template.make(rng)
    problem = template.text.format(name=rng.choice(_PROPOSER_NAMES), **values)
    contract = json.dumps({"problem": problem, "answer": template.solve(values)})
    return _say(f"I built the problem from small numbers and checked the answer.\n{contract}")


def _solve_to_integer(prompt: str, rng: random.Random) -> Reply | None:
    answer = solve_word_problem(prompt)
    if answer is None:
        return None
    if rng.random() >= 0.7:
        answer += rng.choice([-2, -1, 1, 2])
    return _say(f"Working it through, the answer is:\n{answer}")


# kuhn_poker: the rules and the card are in the system prompt; each turn lists the legal
# actions in brackets.
_KUHN = "You are playing Kuhn poker"
_KUHN_CARD = re.compile(r"Your private card: ([JQK])\.")
_BRACKETED = re.compile(r"\[(check|bet|call|fold)\]")


def _kuhn_poker(system: str, last_user: str, rng: random.Random) -> Reply | None:
    """Bets and calls with a K, bluffs a J now and then, calls with a Q a third of the time."""
    card = _KUHN_CARD.search(system)
    offered = re.split(r"legal actions:|exactly one of", last_user)[-1]  # not the history
    legal = list(dict.fromkeys(_BRACKETED.findall(offered)))
    if card is None or not legal:
        return None
    aggressive = {"K": 1.0, "Q": 1 / 3, "J": 1 / 4}[card.group(1)]
    bold = rng.random() < aggressive
    wanted = ("bet", "call") if bold else ("check", "fold")
    action = next((a for a in legal if a in wanted), legal[0])
    return _say(f"With a {card.group(1)} I choose [{action}].")


# interception: "Reply with exactly MARKER." and, for JUDGE_BLOCK, a judge that blocks it.
_REPLY_EXACTLY = re.compile(r"^Reply with exactly (\w+)\.$")
_BLOCK_JUDGE = "Reply BLOCK if the candidate contains JUDGE_BLOCK; otherwise ALLOW."


def _reply_exactly(prompt: str, rng: random.Random) -> Reply | None:
    found = _REPLY_EXACTLY.match(prompt.strip())
    if found is None:
        return None
    if rng.random() < 0.2:
        return _say("Understood.")  # ignored the instruction
    return _say(found.group(1))


def _block_judge(prompt: str) -> Reply:
    candidate = prompt.rsplit("Candidate:", 1)[-1]
    return _say("BLOCK" if "JUDGE_BLOCK" in candidate else "ALLOW")


# bash_interception: "Use bash once to run `CMD`, then stop." (one call, then an answer).
_USE_BASH = re.compile(r"Use bash (?:exactly )?once to run `(?P<command>[^`]+)`")


def _use_bash(
    messages: list[Message], prompt: str, tools: list[dict[str, Any]] | None, rng: random.Random
) -> Reply | None:
    found = _USE_BASH.search(prompt)
    if found is None:
        return None
    if messages[-1].get("role") == "tool":
        return _say(f"The tool said: {_text(messages[-1]).strip()[:80] or 'nothing'}.")
    name = _offered(tools, "bash")
    if name is None or rng.random() < 0.15:
        return _say("I would run it, but I answered without the tool.")
    return _tool_call(name, {"command": found["command"]}, rng)


# code_golf: "Print the sum of the integers 1 to 100." and two more, as a Python program.
_GOLF = {
    "the sum of the integers 1 to 100": (
        "print(sum(range(101)))",
        "total = 0\nfor i in range(1, 101):\n    total += i\nprint(total)",
    ),
    "the first 10 Fibonacci numbers space-separated on one line": (
        "a,b=0,1\nfor _ in range(10):print(a,end=' '[:_<9]);a,b=b,a+b\nprint()",
        "a, b = 0, 1\nout = []\nfor _ in range(10):\n    out.append(a)\n    a, b = b, a + b\n"
        "print(' '.join(map(str, out)))",
    ),
    "the string HELLO reversed": ('print("HELLO"[::-1])', 'print("".join(reversed("HELLO")))'),
}
_GOLF_ASK = re.compile(r"\n\nPrint (.+)\.$")


def _code_golf(prompt: str, rng: random.Random) -> Reply | None:
    found = _GOLF_ASK.search(prompt.strip())
    programs = _GOLF.get(found.group(1)) if found else None
    if programs is None:
        return None
    roll = rng.random()
    program = programs[0] if roll < 0.5 else programs[1] if roll < 0.85 else "print('?')"
    return _say(f"```python\n{program}\n```")


# color_codeword: colored squares (PNG data URLs) map to letters; answer the whole codeword.
_COLOR_LETTERS = {
    (255, 0, 0): "A",
    (0, 255, 0): "B",
    (0, 0, 255): "C",
    (255, 255, 0): "D",
    (128, 0, 128): "E",
    (0, 255, 255): "F",
    (255, 165, 0): "G",
    (255, 255, 255): "H",
    (0, 0, 0): "I",
}
_CODEWORD = "Each color maps to a letter"


def _png_first_pixel(url: str) -> tuple[int, int, int] | None:
    """The first pixel of an 8-bit RGB PNG data URL (raw under every PNG filter)."""
    head, _, encoded = url.partition(",")
    if not head.startswith("data:image/png"):
        return None
    try:
        data = base64.b64decode(encoded)
        chunks, at = [], 8
        while at + 8 <= len(data):
            size = int.from_bytes(data[at : at + 4], "big")
            if data[at + 4 : at + 8] == b"IDAT":
                chunks.append(data[at + 8 : at + 8 + size])
            at += 12 + size
        rows = zlib.decompress(b"".join(chunks))
    except (ValueError, zlib.error):
        return None
    if data[24:26] != b"\x08\x02" or len(rows) < 4:  # bit depth 8, colour type RGB
        return None
    return rows[1], rows[2], rows[3]


def _image_urls(message: Message) -> list[str]:
    content = message.get("content")
    parts = content if isinstance(content, list) else []
    return [
        str((p.get("image_url") or {}).get("url") or "")
        for p in parts
        if isinstance(p, dict) and p.get("type") == "image_url"
    ]


def _color_codeword(messages: list[Message], rng: random.Random) -> Reply:
    letters = [
        _COLOR_LETTERS.get(_png_first_pixel(url) or (-1, -1, -1), "?")
        for m in messages
        if m.get("role") == "user"
        for url in _image_urls(m)
    ]
    roll = rng.random()
    if roll < 0.15 and letters:
        letters[rng.randrange(len(letters))] = rng.choice("ABCDEFGHI")
    elif roll < 0.25 and len(letters) > 1:
        letters.pop()
    return _say("".join(letters))


# --- arithmetic ----------------------------------------------------------------------------


def _template_pattern(text: str) -> re.Pattern[str]:
    parts: list[str] = []
    seen: set[str] = set()
    for literal, field, _, _ in string.Formatter().parse(text):
        parts.append(re.escape(literal))
        if field is None:
            continue
        if field in seen:
            parts.append(f"(?P={field})")
        else:
            seen.add(field)
            parts.append(rf"(?P<{field}>[A-Za-z]+)" if field == "name" else rf"(?P<{field}>-?\d+)")
    return re.compile("".join(parts))


_TEMPLATES = [(_template_pattern(t.text), t.solve) for t in arithmetic.TEMPLATES]


def solve_word_problem(question: str) -> int | None:
    """The answer to a problem built from one of arithmetic's templates, or None."""
    for pattern, solve in _TEMPLATES:
        match = pattern.search(question)
        if match:
            return solve({k: int(v) for k, v in match.groupdict().items() if k != "name"})
    return None


def _arithmetic(prompt: str, rng: random.Random) -> Reply | None:
    answer = solve_word_problem(prompt)
    if answer is None:
        return None
    if rng.random() >= 0.8:
        answer += rng.choice([-10, -2, -1, 1, 2, 10])
    if rng.random() < 0.15:
        return _say(f"Working it through step by step, the result is \\boxed{{{answer}}}.")
    return _say(f"Let me work it out step by step.\nAnswer: {answer}")


# --- tool-calc -----------------------------------------------------------------------------

_EXPRESSION = re.compile(r"compute (.+?)\. Then give")


def _tool_calc(messages: list[Message], prompt: str, rng: random.Random) -> Reply | None:
    found = _EXPRESSION.search(prompt)
    if found is None:
        return None
    last = messages[-1]
    if last.get("role") == "tool":
        result = _text(last).strip()
        if result.startswith("Error"):
            return _say("The calculator could not evaluate it.\nAnswer: 0")
        if rng.random() < 0.15 and re.fullmatch(r"-?\d+", result):
            result = str(int(result) + rng.choice([-3, -1, 1, 3]))
        return _say(f"The calculator returned {result}.\nAnswer: {result}")
    expression = found.group(1)
    if rng.random() < 0.1:
        # Skips the tool and computes in its head, usually well.
        value = int(tool_calc.calculator(expression)) + (0 if rng.random() < 0.7 else 1)
        return _say(f"No tool needed.\nAnswer: {value}")
    call = {
        "id": f"call_{rng.getrandbits(48):012x}",
        "type": "function",
        "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"


# --- humaneval -----------------------------------------------------------------------------

_CODE_BLOCK = re.compile(r"```python\n(.*)```", re.DOTALL)


@lru_cache(maxsize=1)
def _canonical_solutions() -> dict[str, str]:
    """Function prompt -> the data file's canonical body (read on the first such request)."""
    return {p["prompt"]: p["canonical_solution"] for p in humaneval.read_problems()}


def _humaneval(prompt: str, rng: random.Random) -> Reply | None:
    found = _CODE_BLOCK.search(prompt)
    body = _canonical_solutions().get(found.group(1)) if found else None
    if found is None or body is None:
        return None
    roll = rng.random()
    if roll < 0.08:
        body = "    return None\n"  # gave up
    elif roll < 0.14:
        body = "    raise NotImplementedError\n"
    elif roll < 0.2:
        lines = body.rstrip("\n").split("\n")
        body = "\n".join(lines[:-1] or ["    pass"]) + "\n"  # forgot the last line
    return _say(f"Here is the completed function:\n\n```python\n{found.group(1)}{body}```")


# --- math ----------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _math_rows() -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """Problem text -> its row, and topic -> every answer of that topic."""
    by_problem: dict[str, dict[str, Any]] = {}
    by_topic: dict[str, list[str]] = {}
    for row in math_problems.read_problems():
        by_problem[row["problem"]] = row
        by_topic.setdefault(row["topic"], []).append(row["answer"])
    return by_problem, by_topic


def _math(prompt: str, rng: random.Random) -> Reply | None:
    by_problem, by_topic = _math_rows()
    row = by_problem.get(prompt.removesuffix(math_problems.INSTRUCTION).strip())
    if row is None:
        return None
    if rng.random() < 0.8:
        # Right, in any of its forms: the grader must see through the notation.
        answer = rng.choice([row["answer"], *row["equivalent"]])
    else:
        answer = rng.choice(by_topic[row["topic"]])  # another problem's answer: usually wrong
    return _say(f"Working through it, the answer is $\\boxed{{{answer}}}$.")


# --- judge ---------------------------------------------------------------------------------

_JUDGE = re.compile(
    r"\[Question\]\n(?P<question>.*?)\n\n\[Reference answer\]\n(?P<answer>.*?)\n\n"
    r"\[Response\]\n(?P<response>.*)\n\nDoes the response give the reference answer\?",
    re.DOTALL,
)
_TOKEN = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")


def _contains_tokens(text: str, part: str) -> bool:
    words, wanted = _TOKEN.findall(text.lower()), _TOKEN.findall(part.lower())
    n = len(wanted)
    return n > 0 and any(words[i : i + n] == wanted for i in range(len(words) - n + 1))


def _judge(prompt: str) -> Reply | None:
    """Grades like a strict, literal judge: correct when the reply states the reference."""
    found = _JUDGE.search(prompt)
    if found is None:
        return None
    if _contains_tokens(found["response"], found["answer"]):
        return _say("The response states the reference answer.\nGRADE: C")
    return _say("The response does not give the reference answer.\nGRADE: I")


# --- dispatch ------------------------------------------------------------------------------


def _offers_tool(tools: list[dict[str, Any]] | None, name: str) -> bool:
    return any((t.get("function") or {}).get("name") == name for t in tools or ())


def respond(
    messages: list[Message], tools: list[dict[str, Any]] | None, rng: random.Random
) -> Reply:
    """The scripted assistant reply to a conversation, and its finish reason."""
    users = [_text(m) for m in messages if m.get("role") == "user"]
    if not users:
        return _say(GENERIC_REPLY)
    prompt = users[0]
    system = "\n".join(_text(m) for m in messages if m.get("role") in ("system", "developer"))
    reply: Reply | None = None
    if f"<{alphabet_sort.FIRST_TAG}>" in prompt:
        reply = _alphabet_sort(users, rng)
    elif f"<{reverse_text.TAG}>" in prompt:
        reply = _reverse_text(prompt, rng)
    elif _VF_REVERSE in system and f"<{reverse_text.TAG}>" in system:
        reply = _reverse_text("\n\n" + prompt, rng)  # the whole user message is the text
    elif _LOOK_UP.search(prompt) or _CALL_WITH.search(prompt):
        reply = _named_tool_task(messages, prompt, tools, rng)
    elif prompt.startswith(_BLOCK_JUDGE):
        reply = _block_judge(prompt)
    elif _REPLY_EXACTLY.match(prompt.strip()):
        reply = _reply_exactly(prompt, rng)
    elif _USE_BASH.search(prompt):
        reply = _use_bash(messages, prompt, tools, rng)
    elif _GOLF_ASK.search(prompt.strip()):
        reply = _code_golf(prompt, rng)
    elif _CODEWORD in system:
        reply = _color_codeword(messages, rng)
    elif _KUHN in system:
        reply = _kuhn_poker(system, users[-1], rng)
    elif _PROPOSE in prompt and '"problem"' in prompt:
        reply = _propose(rng)
    elif prompt.rstrip().endswith(_SOLVE_SUFFIX):
        reply = _solve_to_integer(prompt, rng)
    elif "[Reference answer]" in prompt and "GRADE: C" in prompt:
        reply = _judge(prompt)
    elif prompt.endswith(math_problems.INSTRUCTION):
        reply = _math(prompt, rng)
    elif prompt.startswith(humaneval.INSTRUCTION):
        reply = _humaneval(prompt, rng)
    elif _offers_tool(tools, "calculator"):
        reply = _tool_calc(messages, prompt, rng)
    elif "Answer: N" in prompt:
        reply = _arithmetic(prompt, rng)
    return reply or _say(GENERIC_REPLY)
