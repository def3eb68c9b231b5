"""`proctor eval --run.attach`: real server and demo model, the CLI in this process
(`cli_in_process`), following DESIGN.md's table."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e.durability import env_without_client_vars
from tests.support.cli import Finished, cli_in_process
from tests.support.platform import Platform, start_platform
from tests.support.procs import free_port

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def plat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    platform = start_platform(tmp_path_factory.mktemp("platform"))
    yield platform
    platform.process.stop()


def run_eval(plat: Platform, demo_model: str, out: Path, *flags: str, **env: str) -> Finished:
    """`proctor eval alphabet-sort -n 1 -r 1 --no-serve --no-rich ...` against `plat`, in this
    process (what it prints, exits with and stores is the point), HOME `out/home`."""
    platform = {"PROCTOR_API_URL": plat.url, "PROCTOR_API_KEY": plat.api_key}
    own = {k: v for k, v in env_without_client_vars().items() if k.startswith("PROCTOR_")}
    home = out / "home"
    home.mkdir(parents=True, exist_ok=True)
    args = ["eval", "alphabet-sort", "-n", "1", "-r", "1", "--no-serve", "--no-rich"]
    args += ["--client.base-url", demo_model, "-o", str(out), "--run.name", "r", *flags]
    return cli_in_process(*args, home=home, env={**own, **platform, **env})


def launcher_evaluation(plat: Platform) -> tuple[str, str]:
    """Create an evaluation as the hosted launcher does; its id and its raw metadata JSON."""
    with plat.client() as c:
        r = c.post(
            "/evaluations/",
            json={
                "name": "hosted",
                "environments": [],
                "tags": [],
                "metadata": {"launcher": "hosted-smoke"},
            },
        )
        r.raise_for_status()
        eid = str(r.json()["evaluation_id"])
    return eid, metadata_json(plat, eid)


def evaluation(plat: Platform, eid: str) -> dict[str, object]:
    with plat.client() as c:
        r = c.get(f"/evaluations/{eid}")
        r.raise_for_status()
        return dict(r.json())


def metadata_json(plat: Platform, eid: str) -> str:
    return json.dumps(evaluation(plat, eid)["metadata"])


def evaluation_ids(plat: Platform) -> set[str]:
    ids: set[str] = set()
    with plat.client() as c:
        while True:
            r = c.get("/evaluations/", params={"skip": len(ids), "limit": 100})
            r.raise_for_status()
            page = r.json()["evaluations"]
            ids |= {e["evaluation_id"] for e in page}
            if not page or len(ids) >= r.json()["total"]:
                return ids


def last_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    return stderr.strip().splitlines()[-1]


def test_attached_eval_lands_in_the_launchers_evaluation(
    plat: Platform, demo_model: str, tmp_path: Path
) -> None:
    eid, metadata = launcher_evaluation(plat)
    before = evaluation_ids(plat)
    result = run_eval(plat, demo_model, tmp_path, "--run.attach", eid)
    assert result.returncode == 0, result.stderr
    record = evaluation(plat, eid)
    assert record["total_samples"] == 1
    assert record["status"] in ("PROCESSING", "COMPLETED")
    assert metadata_json(plat, eid) == metadata == '{"launcher": "hosted-smoke"}'
    metrics = record["metrics"]
    assert isinstance(metrics, dict)
    assert {"avg_reward", "avg_metrics", "avg_error"} <= set(metrics)
    assert "alphabet_sort" in metrics["avg_metrics"]
    assert evaluation_ids(plat) == before  # no second evaluation
    # The platform's id names the run everywhere: config, every episode, the summary line.
    run_dir = tmp_path / "r"
    assert tomllib.loads((run_dir / "config.toml").read_text())["run"]["id"] == eid
    (trace,) = [json.loads(line) for line in (run_dir / "traces.jsonl").read_text().splitlines()]
    assert trace["run"]["id"] == eid
    assert f"evaluation: {record['viewer_url']}" in result.stdout


def test_without_attach_the_eval_creates_its_own_run(
    plat: Platform, demo_model: str, tmp_path: Path
) -> None:
    before = evaluation_ids(plat)
    result = run_eval(plat, demo_model, tmp_path)
    assert result.returncode == 0, result.stderr
    (eid,) = evaluation_ids(plat) - before
    record = evaluation(plat, eid)
    assert record["total_samples"] == 1
    assert record["status"] in ("PROCESSING", "COMPLETED")
    assert record["environment_names"] == ["alphabet-sort"]
    assert record["metadata"]["env"] == "alphabet-sort"  # type: ignore[index]
    assert "alphabet_sort" in record["metrics"]["avg_metrics"]  # type: ignore[index]
    assert tomllib.loads((tmp_path / "r" / "config.toml").read_text())["run"]["id"] == eid
    assert f"evaluation: {record['viewer_url']}" in result.stdout


def _nothing_ran(tmp_path: Path) -> bool:
    traces = tmp_path / "r" / "traces.jsonl"
    return not traces.exists() or traces.stat().st_size == 0


def test_attach_with_no_push_is_a_config_error(
    plat: Platform, demo_model: str, tmp_path: Path
) -> None:
    eid, _ = launcher_evaluation(plat)
    result = run_eval(plat, demo_model, tmp_path, "--run.attach", eid, "--no-push")
    assert result.returncode == 2
    assert "drop --no-push" in last_line(result.stderr)
    assert _nothing_ran(tmp_path)


def test_attach_refuses_the_kill_switch(plat: Platform, demo_model: str, tmp_path: Path) -> None:
    eid, _ = launcher_evaluation(plat)
    result = run_eval(plat, demo_model, tmp_path, "--run.attach", eid, PROCTOR_RUNS_MODE="disabled")
    assert result.returncode != 0
    assert "PROCTOR_RUNS_MODE=disabled" in last_line(result.stderr)
    assert _nothing_ran(tmp_path)
    assert evaluation(plat, eid)["total_samples"] in (0, None)


@pytest.mark.parametrize("case", ["unknown", "finalized", "bad-key", "unreachable"])
def test_a_failed_attach_stops_before_the_first_rollout(
    plat: Platform, demo_model: str, tmp_path: Path, case: str
) -> None:
    eid, _ = launcher_evaluation(plat)
    env: dict[str, str] = {}
    expected = {
        "unknown": "has no evaluation with this id",
        "finalized": "already",
        "bad-key": "PROCTOR_API_KEY",
        "unreachable": "unreachable",
    }[case]
    if case == "unknown":
        eid = "11111111-2222-3333-4444-555555555555"
    elif case == "finalized":
        with plat.client() as c:
            c.post(f"/evaluations/{eid}/finalize", json={}).raise_for_status()
    elif case == "bad-key":
        env["PROCTOR_API_KEY"] = "pk-wrong"
    else:
        env["PROCTOR_API_URL"] = f"http://127.0.0.1:{free_port()}"
    before = evaluation_ids(plat)
    result = run_eval(plat, demo_model, tmp_path, "--run.attach", eid, **env)
    assert result.returncode != 0
    line = last_line(result.stderr)
    assert line.startswith("proctor eval: cannot attach to evaluation") and expected in line
    assert _nothing_ran(tmp_path)
    assert evaluation_ids(plat) == before


@pytest.mark.parametrize("how", ["--no-push", "kill-switch", "unreachable"])
def test_without_attach_an_unpushed_run_stays_local(
    plat: Platform, demo_model: str, tmp_path: Path, how: str
) -> None:
    flags = ["--no-push"] if how == "--no-push" else []
    env = {
        "--no-push": {},
        "kill-switch": {"PROCTOR_RUNS_MODE": "disabled"},
        "unreachable": {"PROCTOR_API_URL": f"http://127.0.0.1:{free_port()}"},
    }[how]
    before = evaluation_ids(plat)
    result = run_eval(plat, demo_model, tmp_path, *flags, **env)
    # Unreachable: the run is kept for a later `proctor runs sync` (exit 75 says so).
    assert result.returncode == (75 if how == "unreachable" else 0), result.stderr
    assert evaluation_ids(plat) == before
    run_id = tomllib.loads((tmp_path / "r" / "config.toml").read_text())["run"]["id"]
    assert run_id.startswith("offline-" if how == "unreachable" else "local-")
    assert "evaluation:" not in result.stdout
    if how == "unreachable":
        assert "goes on offline" in result.stderr
        assert result.stderr.strip().endswith(f"proctor runs sync {tmp_path / 'r'}")
