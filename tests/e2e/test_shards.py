"""One evaluation in shards: `evals create`, N `eval --shard I/N --run.attach`, `evals finalize`.

Real server, demo model and CLI processes; the shards run at the same time.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e.durability import env_without_client_vars
from tests.support.platform import Platform, start_platform
from tests.support.procs import PROCTOR

pytestmark = pytest.mark.e2e

EVAL_ARGS = ["alphabet-sort", "-n", "5", "-r", "3", "--no-rich"]


@pytest.fixture(scope="module")
def plat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    platform = start_platform(tmp_path_factory.mktemp("platform"))
    yield platform
    platform.process.stop()


def client_env(plat: Platform, home: Path) -> dict[str, str]:
    return env_without_client_vars(
        HOME=str(home), PROCTOR_API_URL=plat.url, PROCTOR_API_KEY=plat.api_key
    )


def proctor(
    environ: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROCTOR, *args], env=environ, capture_output=True, text=True, timeout=timeout
    )


def start_shard(
    environ: dict[str, str], demo_model: str, out: Path, eid: str, shard: str
) -> subprocess.Popen[str]:
    args = [*EVAL_ARGS, "--client.base-url", demo_model, "-o", str(out)]
    args += ["--run.name", f"shard-{shard.replace('/', 'of')}", "--shard", shard]
    return subprocess.Popen(
        [*PROCTOR, "eval", *args, "--run.attach", eid],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stored_samples(plat: Platform, eid: str) -> list[dict[str, object]]:
    samples: list[dict[str, object]] = []
    with plat.client() as c:
        page = 1
        while True:
            r = c.get(f"/evaluations/{eid}/samples", params={"page": page, "limit": 100})
            r.raise_for_status()
            samples += r.json()["samples"]
            if not r.json()["has_more"]:
                return samples
            page += 1


def status(plat: Platform, eid: str) -> str:
    with plat.client() as c:
        return str(c.get(f"/evaluations/{eid}").json()["status"])


def test_three_shards_fill_one_evaluation_exactly_once(
    plat: Platform, demo_model: str, tmp_path: Path
) -> None:
    environ = client_env(plat, tmp_path / "home")
    created = proctor(environ, "evals", "create", *EVAL_ARGS)
    assert created.returncode == 0, created.stderr
    eid = created.stdout.strip()
    assert "waits for 15 samples" in created.stderr

    shards = [start_shard(environ, demo_model, tmp_path, eid, f"{i}/3") for i in range(3)]
    for i, shard in enumerate(shards):
        _, err = shard.communicate(timeout=180)
        assert shard.returncode == 0, err
        assert f"shard {i}/3 done" in err
    # No shard closed it: the evaluation waits for its finalizer.
    assert status(plat, eid) == "RUNNING"

    pairs = Counter((s["example_id"], s["rollout_number"]) for s in stored_samples(plat, eid))
    assert pairs == Counter({(e, r): 1 for e in range(5) for r in range(1, 4)})

    # A shard run again (a scheduler's retry) stores nothing twice.
    again = start_shard(environ, demo_model, tmp_path / "retry", eid, "1/3")
    _, err = again.communicate(timeout=180)
    assert again.returncode == 0, err
    assert len(stored_samples(plat, eid)) == 15

    done = proctor(environ, "evals", "finalize", eid)
    assert done.returncode == 0, done.stderr
    assert f"evaluation {eid} finalized" in done.stdout


def test_finalize_refuses_while_a_shard_is_missing(
    plat: Platform, demo_model: str, tmp_path: Path
) -> None:
    environ = client_env(plat, tmp_path / "home")
    eid = proctor(environ, "evals", "create", *EVAL_ARGS).stdout.strip()
    only = start_shard(environ, demo_model, tmp_path, eid, "0/2")
    _, err = only.communicate(timeout=180)
    assert only.returncode == 0, err

    refused = proctor(environ, "evals", "finalize", eid)
    assert refused.returncode != 0
    assert f"evaluation {eid} holds 8 of 15 samples" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert status(plat, eid) == "RUNNING"


def test_a_shard_without_attach_is_refused_before_anything_runs(tmp_path: Path) -> None:
    environ = env_without_client_vars(HOME=str(tmp_path))
    result = proctor(environ, "eval", *EVAL_ARGS, "--shard", "0/2", "-o", str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "--shard runs one slice of an evaluation, so it needs --run.attach ID" in result.stderr
    assert not any(tmp_path.glob("alphabet-sort*"))


@pytest.mark.parametrize("shard", ["2/2", "1", "a/b", "-1/2"])
def test_a_malformed_shard_names_the_flag(shard: str, tmp_path: Path) -> None:
    environ = env_without_client_vars(HOME=str(tmp_path))
    result = proctor(environ, "eval", *EVAL_ARGS, f"--shard={shard}", "--run.attach", "x")
    assert result.returncode == 2, result.stderr
    assert "--shard" in result.stderr and "I/N" in result.stderr
    assert "Traceback" not in result.stderr
