"""tool-calc: compute arithmetic expressions with a `calculator` tool.

Tool use. The model is offered `calculator(expression)` (a safe `ast`-based evaluator, no
`eval`) and must give the final result as `Answer: N`. Reward: the right answer; metric
`used_calculator`: whether it called the tool at all.
"""

from __future__ import annotations

import ast
import operator
import random
from collections.abc import Callable
from typing import Any

from proctor.envs import Task, Taskset, ToolEnv, metric, reward
from proctor.envs.builtin.arithmetic import parse_answer

INSTRUCTION = (
    "Use the calculator tool to compute {expression}. "
    "Then give the result on the last line as 'Answer: N'."
)

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
MAX_EXPONENT = 64
MAX_LENGTH = 200


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        if isinstance(node.value, bool):
            raise ValueError("booleans are not numbers here")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponents above {MAX_EXPONENT} are not supported")
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"unsupported syntax: {ast.dump(node)[:60]}")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: Numbers with + - * / // % ** and parentheses, e.g. "(3 + 4) * 12".
    """
    if len(expression) > MAX_LENGTH:
        raise ValueError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from e
    result = _evaluate(tree)
    if isinstance(result, float) and result.is_integer():
        result = int(result)
    return str(result)


def make_expression(rng: random.Random) -> str:
    """A random expression of 2-4 whole numbers with + - * and maybe parentheses."""
    expression = str(rng.randint(2, 99))
    for _ in range(rng.randint(1, 3)):
        op = rng.choice(["+", "-", "*"])
        operand = rng.randint(2, 30) if op == "*" else rng.randint(2, 99)
        if op == "*" and rng.random() < 0.5:
            expression = f"({expression}) * {operand}"
        else:
            expression = f"{expression} {op} {operand}"
    return expression


def make_tasks(num_tasks: int, seed: int) -> list[Task]:
    """`num_tasks` expressions; deterministic in `seed`."""
    rng = random.Random(f"tool-calc:{seed}")
    tasks = []
    for index in range(num_tasks):
        expression = make_expression(rng)
        tasks.append(
            Task(
                index=index,
                prompt=INSTRUCTION.format(expression=expression),
                answer=calculator(expression),
                info={"expression": expression},
            )
        )
    return tasks


@reward(weight=1.0)
def correct_answer(response: str, answer: str) -> float:
    """1.0 when the final reply's answer equals the expression's value."""
    return 1.0 if parse_answer(response) == answer else 0.0


@metric
def used_calculator(messages: list[dict[str, Any]]) -> float:
    """1.0 when the model called the calculator at least once."""
    for message in messages:
        for call in message.get("tool_calls") or ():
            if (call.get("function") or {}).get("name") == "calculator":
                return 1.0
    return 0.0


def load_environment(
    *, num_tasks: int = 1000, seed: int = 0, max_tool_turns: int = 4, tool_timeout_s: float = 5.0
) -> ToolEnv:
    """The tool-calc environment (`num_tasks` expressions)."""
    if num_tasks < 1:
        raise ValueError("num_tasks must be at least 1")
    return ToolEnv(
        name="tool-calc",
        description="Compute expressions by calling a calculator tool (tool use).",
        taskset=Taskset(make_tasks(num_tasks, seed)),
        rubric=[correct_answer, used_calculator],
        tools=[calculator],
        max_tool_turns=max_tool_turns,
        tool_timeout_s=tool_timeout_s,
    )
