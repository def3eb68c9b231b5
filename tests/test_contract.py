"""The wire contract has one owner: `proctor.contract` (STYLE.md rule 15).

Status sets and the sample's fields drifted before (a "closed" set with 5 members on one
side and 3 on the other; `docs/platform-api.md` listing a field never sent), so these tests
read the sources and fail on a copy.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from proctor.contract import SAMPLE_FIELDS, RunStatus, Sample, Status
from proctor.envs import Episode
from proctor.runs import project_sample

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "src" / "proctor" / "contract.py"
# Words that, two or more together in one literal, make a set of statuses.
STATUS_WORDS = {s.value for s in Status} | set(RunStatus.__args__)


def _string_members(node: ast.AST) -> list[str] | None:
    """The members of a set/tuple/list literal (a `Literal[...]`'s too) when all are strings."""
    if not isinstance(node, ast.Set | ast.Tuple | ast.List):
        return None
    values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
    if len(values) != len(node.elts) or not all(isinstance(v, str) for v in values):
        return None
    return values


def status_sets_outside_the_contract() -> list[str]:
    found = []
    for path in sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]):
        if path == CONTRACT or any(part.startswith(".") for part in path.relative_to(ROOT).parts):
            continue  # hidden folders hold no code of ours (bench/.venvs: the peers' venvs)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            members = _string_members(node)
            if members and len(members) >= 2 and set(members) <= STATUS_WORDS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {members}")
    return found


def test_status_sets_are_defined_only_in_the_contract() -> None:
    assert status_sets_outside_the_contract() == []


def test_the_guard_sees_a_status_set() -> None:
    source = 'CLOSED = frozenset({"FAILED", "TIMEOUT"})\nS = Literal["failed", "cancelled"]'
    tree = ast.parse(source)
    found = sorted(m for n in ast.walk(tree) if (m := _string_members(n)))
    assert found == [["FAILED", "TIMEOUT"], ["failed", "cancelled"]]


def documented_sample_fields() -> list[str]:
    text = (ROOT / "docs" / "platform-api.md").read_text(encoding="utf-8")
    section = text.split("### A sample", 1)[1].split("\n#", 1)[0]
    listed = section.split("plus each reward function", 1)[0]
    return re.findall(r"`([a-z_]+)`", listed)


def test_platform_api_lists_exactly_the_sample_fields() -> None:
    assert documented_sample_fields() == list(SAMPLE_FIELDS)


def test_every_sample_field_is_documented_in_the_model() -> None:
    for name, field in Sample.model_fields.items():
        assert field.description, f"Sample.{name} has no docstring"


def test_the_runs_sdk_builds_a_sample_with_the_contract_fields() -> None:
    episode = Episode(
        id="ep-1",
        env="alphabet-sort",
        example_id=3,
        rollout_number=1,
        task={"index": 3, "prompt": "sort: b a", "answer": "a b", "info": {"n": 2}},
        messages=[
            {"role": "user", "content": "sort: b a"},
            {"role": "assistant", "content": "a b"},
        ],
        rewards={"alphabet_sort": 1.0},
        reward=1.0,
        num_turns=1,
        is_completed=True,
    )
    sample = project_sample(episode.to_record())
    # the contract's fields in its order, then each reward function's score
    assert list(sample) == [*SAMPLE_FIELDS, "alphabet_sort"]
    parsed = Sample.model_validate(sample)
    assert parsed.env == "alphabet-sort" and parsed.num_turns == 1
    assert parsed.model_extra == {"alphabet_sort": 1.0}
