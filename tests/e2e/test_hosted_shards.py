"""A sharded hosted evaluation end to end on local sandboxes: a real server whose launcher
runs N `proctor eval --shard I/N --run.attach` sandboxes against a slow demo model.

tests/e2e/test_ray_cluster.py runs the same on a three-node Ray cluster.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.e2e.durability import demo_model
from tests.e2e.hosted_helpers import (
    LAUNCHER_ENV,
    cli_env,
    create_hosted,
    hosted_logs,
    hosted_run,
    shard_rows,
    stored_pairs,
    wait_closed,
    wait_shard_storing,
    wait_status,
)
from tests.support.platform import Platform, start_platform
from tests.support.procs import PROCTOR

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A demo model that waits 200 ms before each answer, so shards run for seconds."""
    with demo_model(tmp_path_factory.mktemp("slow-model"), latency_ms=200) as url:
        yield url


@pytest.fixture(scope="module")
def plat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    platform = start_platform(tmp_path_factory.mktemp("shards-platform"), extra_env=LAUNCHER_ENV)
    yield platform
    platform.process.stop()


def test_sharded_run_is_exact_though_a_shard_is_killed_mid_run(
    plat: Platform, slow_model: str, tmp_path: Path
) -> None:
    client = plat.client()
    evaluation_id = create_hosted(
        client,
        num_examples=8,
        rollouts_per_example=2,
        shards=3,
        max_concurrent=2,
        api_base_url=slow_model,
    )
    # Shard 1's sandbox is killed (its whole process group) once it has stored samples.
    wait_shard_storing(client, evaluation_id, 1, 3)
    pid = int(str(shard_rows(plat, evaluation_id)[1]["sandbox_handle"]).partition("@")[0])
    os.killpg(pid, 9)
    done = wait_closed(client, plat, evaluation_id, timeout=240)
    log_text = hosted_logs(client, evaluation_id)
    assert done["status"] == "COMPLETED", (done["error_message"], log_text)
    assert done["total_samples"] == 16
    pairs = stored_pairs(client, evaluation_id)
    assert pairs == Counter({(e, r): 1 for e in range(8) for r in (1, 2)})
    assert isinstance(done["metrics"].get("avg_reward"), float)
    rows = shard_rows(plat, evaluation_id)
    assert [(r["state"], r["attempt"]) for r in rows] == [("done", 1), ("done", 2), ("done", 1)]
    assert "exit code" in rows[1]["error"]
    # The dashboard shows each shard beside the whole's progress.
    with httpx.Client(base_url=plat.url, timeout=30) as web:
        login = web.post("/login", data={"api_key": plat.api_key, "next": "/evaluations"})
        assert login.status_code == 303, login.text
        # The cookie is Secure (loopback counts as secure for browsers, not for httpx's jar).
        cookie = {"Cookie": f"proctor_session={login.cookies['proctor_session']}"}
        path = f"/evaluations/{evaluation_id}"
        page = web.get(path, params={"format": "json"}, headers=cookie).json()
        html = web.get(path, headers=cookie).text
    assert page["progress"]["done"] == page["progress"]["expected"] == 16
    assert [(s["index"], s["state"], s["attempt"], s["samples"]) for s in page["shards"]] == [
        (0, "done", 1, 6),
        (1, "done", 2, 5),
        (2, "done", 1, 5),
    ]
    assert page["shards"][1]["error"].startswith("exit code") and 'id="shards"' in html
    # The CLI shows each shard's log and progress.
    env = cli_env(plat, tmp_path)
    logs = subprocess.run(
        [*PROCTOR, "hosted", "logs", evaluation_id], env=env, capture_output=True, text=True
    )
    assert logs.returncode == 0, logs.stderr
    assert "== 3 shards: 16 of 16 samples ==" in logs.stdout
    assert "== shard 1/3: done, attempt 2, 5 of 5 samples ==" in logs.stdout
    one = subprocess.run(
        [*PROCTOR, "hosted", "logs", evaluation_id, "--shard", "2"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert one.returncode == 0 and "shard 2/3 done" in one.stdout + one.stderr


def test_cli_runs_shards_and_follows_each_shards_log(
    plat: Platform, slow_model: str, tmp_path: Path
) -> None:
    env = cli_env(plat, tmp_path)
    run = subprocess.run(
        hosted_run(
            "alphabet-sort", "-n", "4", "-r", "1", "--api-base-url", slow_model, "--shards", "2"
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    evaluation_id = run.stdout.splitlines()[0].strip()
    assert "[0/2] " in run.stdout and "[1/2] " in run.stdout
    record = wait_status(plat.client(), evaluation_id, ("COMPLETED",))
    assert record["total_samples"] == 4 and record["metadata"]["shards"] == 2
