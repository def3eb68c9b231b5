"""`proctor runs export RUN_DIR` writes what `prime eval push` reads: the real prime CLI 0.18.0
pushes it, and pushing it again to that evaluation stores no sample twice."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from tests.e2e.test_hub import make_key, prime
from tests.support.platform import Platform
from tests.support.procs import PROCTOR

pytestmark = pytest.mark.e2e


def test_export_then_prime_eval_push_twice_stores_each_sample_once(
    platform: Platform, demo_model: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRIME_", "PROCTOR_"))}
    env["HOME"] = str(tmp_path / "home")
    out = tmp_path / "out"
    args = ["eval", "alphabet-sort", "-n", "3", "-r", "2", "--no-serve", "--no-rich", "--no-push"]
    args += ["--client.base-url", demo_model, "-o", str(out), "--run.name", "local"]
    ran = subprocess.run([*PROCTOR, *args], env=env, capture_output=True, text=True, timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run_dir = out / "local"

    exported = subprocess.run(
        [*PROCTOR, "runs", "export", str(run_dir)], env=env, capture_output=True, text=True
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert "prime eval push" in exported.stdout
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["env_id"] == "alphabet-sort" and metadata["model"] == "demo"
    assert metadata["num_examples"] == 3 and metadata["rollouts_per_example"] == 2
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and len({r["sample_id"] for r in rows}) == 6
    assert all(r["id"] == r["example_id"] for r in rows)

    nia = make_key(platform, "nia")
    home = tmp_path / "prime-home"
    first = prime(
        platform, nia, home, "eval", "push", str(run_dir), "--env", "primeintellect/alphabet-sort"
    )
    assert first.returncode == 0, first.stdout + first.stderr
    found = re.search(r"Evaluation ID:\s*(\S+)", first.stdout)
    assert found, first.stdout
    eval_id = found.group(1)
    again = prime(platform, nia, home, "eval", "push", str(run_dir), "--eval", eval_id)
    assert again.returncode == 0, again.stdout + again.stderr

    with platform.client(nia) as api:
        record = api.get(f"/evaluations/{eval_id}").json()
        samples = api.get(f"/evaluations/{eval_id}/samples", params={"limit": 100}).json()
    assert record["status"] == "COMPLETED" and record["total_samples"] == 6, record
    assert sorted(s["sample_id"] for s in samples["samples"]) == sorted(
        r["sample_id"] for r in rows
    )
    assert record["environment_names"] == ["alphabet-sort"]
    rewards = sorted(s["reward"] for s in samples["samples"])
    assert rewards == sorted(r["reward"] for r in rows)
