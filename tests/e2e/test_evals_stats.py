"""One number everywhere: the eval's closing line, `proctor evals get|compare`, the API.

A real server and the demo model over HTTP; the CLI runs in this process (`cli_in_process`):
what it prints is the point, not how it starts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import Finished, cli_in_process
from tests.support.platform import Platform, start_platform

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def plat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    platform = start_platform(tmp_path_factory.mktemp("platform"))
    yield platform
    platform.process.stop()


def proctor(plat: Platform, home: Path, *args: str) -> Finished:
    """`proctor ARGS` in this process, as a user of `plat` whose HOME is `home`."""
    online = {"PROCTOR_API_URL": plat.url, "PROCTOR_API_KEY": plat.api_key}
    return cli_in_process(*args, home=home, env=online)


def test_closing_line_get_and_compare_show_the_platforms_figures(
    plat: Platform, demo_model: str, tmp_path: Path
) -> None:
    ids, lines = [], []
    for name in ("a", "b"):
        result = proctor(
            plat, tmp_path, "eval", "arithmetic", "-n", "12", "-r", "3", "--no-serve",
            "--no-rich", "--client.base-url", demo_model, "-o", str(tmp_path / "out"),
            "--run.name", name, "--sampling.seed", "1" if name == "a" else "2",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        match = re.search(r"evaluation: \S+/evaluations/(\S+)", result.stdout)
        assert match, result.stdout
        ids.append(match.group(1))
        lines.append(result.stdout)

    for evaluation_id, stdout in zip(ids, lines, strict=True):
        got = proctor(plat, tmp_path, "evals", "get", evaluation_id)
        assert got.returncode == 0, got.stderr
        record = json.loads(got.stdout)
        stats = record["stats"]
        assert stats["reward"]["n_samples"] + stats["reward"]["n_errored"] == 36
        assert stats["reward"]["n_examples"] == 12
        # The eval computed the same headline from its own episodes.
        assert f"mean reward {stats['headline']}" in stdout, (stats, stdout)
        assert record["avg_score"] == pytest.approx(stats["reward"]["mean"])

    text = proctor(plat, tmp_path, "evals", "compare", *ids)
    assert text.returncode == 0, text.stderr
    answer = json.loads(proctor(plat, tmp_path, "evals", "compare", *ids, "--json").stdout)
    paired = answer["paired"]
    assert (paired["baseline"], paired["candidate"], paired["n_common"]) == (*ids, 12)
    assert paired["wins"] + paired["ties"] + paired["losses"] == 12
    assert f"B - A over 12 common examples: {paired['mean_diff']:+.3f}" in text.stdout
    assert f"wins {paired['wins']}, ties {paired['ties']}, losses {paired['losses']}" in text.stdout
    assert answer["evaluations"][0]["headline"] in text.stdout

    missing = proctor(plat, tmp_path, "evals", "compare", ids[0], "no-such-evaluation")
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "no-such-evaluation" in missing.stderr


def test_evals_list_prints_no_escape_sequence_from_an_evaluations_name(
    plat: Platform, tmp_path: Path
) -> None:
    hostile = "x\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m\u202eevil"
    with plat.client() as api:
        created = api.post("/evaluations/", json={"name": hostile})
        assert created.status_code == 201, created.text
    listed = proctor(plat, tmp_path, "evals", "list")
    assert listed.returncode == 0, listed.stderr
    assert "xredevil" in listed.stdout
    assert not any(c in listed.stdout for c in "\x1b\x07\u202e")


def test_evals_compare_refuses_evaluations_of_different_environments(
    plat: Platform, tmp_path: Path
) -> None:
    ids = []
    with plat.client() as api:
        for dataset in ("gsm8k", "math"):
            created = api.post("/evaluations/", json={"name": dataset, "dataset": dataset})
            assert created.status_code == 201, created.text
            evaluation_id = created.json()["evaluation_id"]
            sample = {"sample_id": "s0", "example_id": 0, "rollout_number": 1, "reward": 1.0}
            posted = api.post(f"/evaluations/{evaluation_id}/samples", json={"samples": [sample]})
            assert posted.is_success, posted.text
            ids.append(evaluation_id)
    refused = proctor(plat, tmp_path, "evals", "compare", *ids)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "cannot be compared: 'gsm8k' ran gsm8k and 'math' ran math" in refused.stderr
