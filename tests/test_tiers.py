"""`--dist loadgroup`, as scripts/test runs the suite, keeps an `xdist_group` on one worker
(the module-scoped servers and clusters the groups share start once)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

GROUPED = """
import os, pytest

@pytest.mark.xdist_group("shared")
@pytest.mark.parametrize("i", range(4))
def test_grouped(i):
    print("worker", os.environ["PYTEST_XDIST_WORKER"])
"""


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on the test modules in `folder` alone (none of the project's configuration),
    with the project's `tests` package importable; it must pass."""
    root = Path(__file__).resolve().parents[1]
    alone = ["-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir", str(folder)]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *alone, *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    """Two modules of one group, eight tests, two workers: all eight on one of them (pytest
    9.2 broke this silently with pytest-xdist 3.8, hence pyproject's pin)."""
    for name in ("test_one.py", "test_two.py"):
        (tmp_path / name).write_text(GROUPED)
    run = _pytest(tmp_path, "-n", "2", "--dist", "loadgroup", "-v")
    passed = re.findall(r"\[(gw\d)\] .*PASSED (\S+)", run.stdout)
    assert len(passed) == 8, run.stdout
    assert len({worker for worker, _ in passed}) == 1, run.stdout
    assert all(test.endswith("@shared") for _, test in passed), run.stdout


TIERED = """
import subprocess


def test_in_process():
    assert 1 + 1 == 2


def test_starts_a_process():
    assert subprocess.run(["true"]).returncode == 0
"""


@pytest.mark.parametrize(
    ("selection", "selected"),
    [
        (["-m", "not process"], ["test_in_process"]),
        (["-m", "process"], ["test_starts_a_process"]),
        ([], ["test_in_process", "test_starts_a_process"]),
    ],
)
def test_a_test_that_starts_a_process_is_in_the_process_tier(
    tmp_path: Path, selection: list[str], selected: list[str]
) -> None:
    """The marker is worked out from the test's source, with no decoration, in a run that
    selects by it; a run that does not select runs everything."""
    (tmp_path / "test_tiered.py").write_text(TIERED)
    run = _pytest(tmp_path, "-p", "tests.support.tiers", "--co", "-q", *selection)
    assert re.findall(r"::(\w+)", run.stdout) == selected, run.stdout
