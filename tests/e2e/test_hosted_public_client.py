"""The unmodified public `prime-evals` client starts, polls and cancels hosted evaluations
on a proctor server (PRIME_API_BASE_URL pointing at it, HOME a temp dir)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.durability import demo_model as serve_demo_model
from tests.e2e.hosted_helpers import group_alive, hosted_row, wait_closed
from tests.e2e.test_hub import prime_env
from tests.support.platform import Platform, start_platform

pytestmark = pytest.mark.e2e

SCRIPT = """
    import json, sys, time
    from prime_evals import APIClient, EvalsClient

    args = json.load(open(sys.argv[1]))
    evals = EvalsClient(APIClient())
    config = {"num_examples": 3, "rollouts_per_example": 2, "allow_sandbox_access": True,
              "allow_instances_access": False, "allow_tunnel_access": True,
              "api_base_url": args["model"], "sampling_args": {"temperature": 0.2}}
    done = evals.create_hosted_evaluation([args["env_id"]], "demo", config, name="pe-hosted")
    eid = (done.get("evaluation_ids") or [done["evaluation_id"]])[0]
    deadline = time.monotonic() + 90
    record = evals.get_evaluation(eid)
    while record["status"] not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
        assert time.monotonic() < deadline, record
        time.sleep(0.2)
        record = evals.get_evaluation(eid)
    slow = dict(config, api_base_url=args["slow_model"], num_examples=40, max_concurrent=1)
    running = evals.create_hosted_evaluation([args["env_id"]], "demo", slow)["evaluation_id"]
    while evals.get_evaluation(running)["status"] != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(1.0)
    cancelled = evals.cancel_hosted_evaluation(running)
    print(json.dumps({"created": done, "record": record, "running": running,
                      "cancelled": cancelled}))
"""


@pytest.fixture
def slow_model(tmp_path: Path) -> Iterator[str]:
    with serve_demo_model(tmp_path, latency_ms=300) as url:
        yield url


@pytest.fixture
def plat(tmp_path: Path) -> Iterator[Platform]:
    data_dir = tmp_path / "platform"
    data_dir.mkdir()
    platform = start_platform(data_dir, extra_env={"PROCTOR_HOSTED_STOP_GRACE_SECONDS": "1"})
    yield platform
    platform.process.stop()


def _run(platform: Platform, tmp_path: Path, args: dict[str, Any]) -> dict[str, Any]:
    (tmp_path / "client.py").write_text(textwrap.dedent(SCRIPT))
    (tmp_path / "args.json").write_text(json.dumps(args))
    env = prime_env(platform, platform.api_key, tmp_path / "home")
    done = subprocess.run(
        [sys.executable, str(tmp_path / "client.py"), str(tmp_path / "args.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_prime_evals_hosted_run_and_cancel(
    plat: Platform, demo_model: str, slow_model: str, tmp_path: Path
) -> None:
    client = plat.client()
    body = {"name": "alphabet-sort", "framework": "proctor"}
    env_id = client.post("/environmentshub/resolve", json=body).json()
    out = _run(
        plat,
        tmp_path,
        {"env_id": env_id["data"]["id"], "model": demo_model, "slow_model": slow_model},
    )
    record = out["record"]
    assert record["status"] == "COMPLETED" and record["total_samples"] == 6, record
    assert record["name"] == "pe-hosted" and record["is_hosted"] is True
    assert record["environment_names"] == ["alphabet-sort"]
    assert record["metadata"]["launcher"] == "proctor"
    assert record["metadata"]["num_examples"] == 3
    assert out["created"]["evaluation_ids"] == [record["evaluation_id"]]
    assert "message" in out["cancelled"]
    pid = hosted_row(plat, out["running"])["pid"]
    assert wait_closed(client, plat, out["running"])["status"] == "CANCELLED"
    assert not group_alive(pid)
