"""Where the test suite's CPU goes, per test and per module: a pytest plugin and its report.

The plugin writes, per test, the CPU of the pytest process (an xdist worker) and of every
descendant it waited for during that test (`RUSAGE_CHILDREN`): the servers, CLI runs and
sandboxes a test starts and stops. A module-scoped fixture's processes count towards the
module's last test, so read the per-module lines. Daemons nobody waits for (Ray's, PostgreSQL's
backends) and the workers' start-up and collection are not in it.

    PYTHONPATH=bench PYTEST_ADDOPTS="-p pytest_cpu" PROCTOR_TEST_CPU_DIR=/tmp/cpu \
        bash scripts/test -q
    python bench/pytest_cpu.py /tmp/cpu

(Tests that run pytest themselves, tests/test_tiers.py and tests/test_recipes.py, fail with
the plugin in PYTEST_ADDOPTS: their inner pytest cannot import it from their folder.)
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

_log: IO[str] | None = None


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, waited.ru_utime + waited.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    global _log
    if _log is None:
        folder = Path(os.environ.get("PROCTOR_TEST_CPU_DIR", "/tmp/proctor-test-cpu"))
        folder.mkdir(parents=True, exist_ok=True)
        _log = (folder / f"{os.getpid()}.jsonl").open("a")
    own, waited, start = *_cpu(), time.monotonic()
    yield
    own_after, waited_after = _cpu()
    row = {"test": item.nodeid, "own": own_after - own, "waited": waited_after - waited}
    _log.write(json.dumps({**row, "wall": time.monotonic() - start}) + "\n")
    _log.flush()


def report(folder: Path, top: int = 30) -> None:
    rows: list[dict[str, Any]] = [
        json.loads(line) for path in folder.glob("*.jsonl") for line in path.open()
    ]
    modules: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for row in rows:
        module = modules[row["test"].split("::")[0]]
        module[0] += 1
        module[1] += row["own"] + row["waited"]
        module[2] += row["waited"]
    total = sum(m[1] for m in modules.values())
    print(f"{len(rows)} tests, {total:.1f} CPU-s (theirs and their waited-for processes')")
    print(f"{'CPU-s':>8} {'in procs':>8} {'tests':>5}  module")
    for name, (count, cpu, waited) in sorted(modules.items(), key=lambda m: -m[1][1])[:top]:
        print(f"{cpu:8.1f} {waited:8.1f} {int(count):5d}  {name}")


if __name__ == "__main__":
    report(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/proctor-test-cpu"))
