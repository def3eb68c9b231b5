"""What a name means to whoever pushes results (#20 item 4): prime's order (own, team,
platform), proctor's built-ins only for runs of proctor's own, and each evaluation records
the `owner/name@version` that ran.

Against a real `proctor server` process, with proctor's runs SDK and the public `prime-runs`
client (which `vf-eval` pushes through) as the callers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import proctor.runs
from tests.server.test_compat_public_clients import PRIME_RUNS_SCRIPT, _episodes, _run_client
from tests.server.test_traces import _user_key
from tests.support.platform import Platform, start_platform

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def plat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    data = tmp_path_factory.mktemp("names")
    platform = start_platform(data, extra_env={"PROCTOR_HOSTED_IN_SERVER": "false"})
    yield platform
    platform.process.stop()


def _record(plat: Platform, evaluation_id: str) -> dict[str, Any]:
    with plat.client() as client:
        answer = client.get(f"/evaluations/{evaluation_id}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())


def _installed_version(plat: Platform, name: str) -> str:
    with plat.client() as client:
        data = client.get(f"/environmentshub/proctor/{name}/@latest").json()["data"]
    return str(data["latest_version"]["semantic_version"])


def _sdk_run(
    plat: Platform, tmp_path: Path, framework: str, env: str = "reverse-text"
) -> dict[str, Any]:
    run = proctor.runs.init(
        name=f"sdk-{framework}",
        environments=[env],
        model="m",
        config={},
        mode="online",
        api_url=plat.url,
        api_key=plat.api_key,
        run_dir=tmp_path / framework / env,
        framework=framework,
    )
    run.finish()
    return _record(plat, run.id)


def test_proctor_runs_of_a_built_in_are_filed_under_it_with_its_version(
    plat: Platform, tmp_path: Path
) -> None:
    record = _sdk_run(plat, tmp_path, "proctor")
    version = _installed_version(plat, "reverse-text")
    assert record["environments"][0]["ref"] == f"proctor/reverse-text@{version}"
    assert record["framework"] == "proctor"


def test_another_reverse_text_is_never_filed_under_the_built_in(
    plat: Platform, tmp_path: Path
) -> None:
    with plat.client() as client:
        me = client.get("/user/whoami").json()["data"]["slug"]
    # verifiers' reverse-text run by proctor's verifiers driver ...
    record = _sdk_run(plat, tmp_path, "verifiers")
    assert record["environments"][0]["ref"] == f"{me}/reverse-text"
    assert record["framework"] == "verifiers"
    # The version the client ran, when it says (`name@version`), is recorded with it.
    again = _sdk_run(plat, tmp_path, "verifiers", "reverse-text@0.1.3")
    assert again["environments"][0]["ref"] == f"{me}/reverse-text@0.1.3"
    assert again["environments"][0]["id"] == record["environments"][0]["id"]
    assert again["dataset"] == "reverse-text"
    # ... and by vf-eval, through the public prime-runs client: the caller's own entry too.
    out = _run_client(
        plat,
        tmp_path / "prime-runs",
        PRIME_RUNS_SCRIPT,
        {"episodes": _episodes("vf"), "init": {"name": "vf", "environments": ["reverse-text"]}},
    )
    assert out["failed"] == {} and out["errors"] == []
    pushed = _record(plat, out["id"])
    assert pushed["environments"][0]["ref"] == f"{me}/reverse-text"
    assert pushed["environments"][0]["id"] == record["environments"][0]["id"]
    # Neither is filed under the built-in.
    with plat.client() as client:
        filed = client.get("/evaluations/", params={"environment_name": "proctor/reverse-text"})
    under_built_in = {e["evaluation_id"] for e in filed.json()["evaluations"]}
    assert not {record["evaluation_id"], out["id"]} & under_built_in


def test_a_bare_name_follows_own_then_team_then_platform(plat: Platform) -> None:
    alice = _user_key(plat, "alice", team="names-team")
    bob = _user_key(plat, "bob", team="names-team")
    team = {"team_id": "names-team"}

    def resolve(key: str, **body: Any) -> dict[str, Any]:
        with plat.client(key) as client:
            answer = client.post("/environmentshub/resolve", json=body)
        assert answer.status_code == 200, answer.text
        return dict(answer.json()["data"])

    def owner(data: dict[str, Any]) -> str:
        return str(data["owner"]["name"])

    # Only the team has it: the team's.
    assert owner(resolve(bob, name="shared-x", **team)) == "names-team"
    assert owner(resolve(alice, name="shared-x", **team)) == "names-team"
    # Her own comes first once she has one.
    assert owner(resolve(alice, name="alice/shared-x")) == "alice"
    assert owner(resolve(alice, name="shared-x", **team)) == "alice"
    assert owner(resolve(bob, name="shared-x", **team)) == "names-team"
    # The platform's comes last (for a run of proctor's own).
    assert owner(resolve(alice, name="alphabet-sort", framework="proctor")) == "proctor"
    resolve(alice, name="alice/alphabet-sort")
    assert owner(resolve(alice, name="alphabet-sort", framework="proctor")) == "alice"


def test_resolve_answers_the_same_over_plain_http(plat: Platform) -> None:
    """Without `framework` (prime-evals, `prime env push`), a built-in's name is the
    caller's own; with `framework: proctor`, the built-in."""
    headers = {"Authorization": f"Bearer {plat.api_key}"}
    with httpx.Client(base_url=f"{plat.url}/api/v1", headers=headers) as http:
        ours = http.post(
            "/environmentshub/resolve", json={"name": "tool-calc", "framework": "proctor"}
        )
        bare = http.post("/environmentshub/resolve", json={"name": "tool-calc"})
    assert bare.status_code == ours.status_code == 200
    assert bare.json()["data"]["owner"]["type"] == "user"
    assert ours.json()["data"]["owner"] == {"name": "proctor", "type": "platform"}


def test_a_hosted_run_of_a_built_in_records_what_it_runs(plat: Platform) -> None:
    with plat.client() as client:
        created = client.post(
            "/hosted-evaluations",
            json={"environment_ids": ["alphabet-sort"], "inference_model": "m"},
        )
        assert created.status_code in (200, 201), created.text
        evaluation_id = created.json()["evaluation_id"]
    record = _record(plat, evaluation_id)
    version = _installed_version(plat, "alphabet-sort")
    assert record["metadata"]["environment_ref"] == f"proctor/alphabet-sort@{version}"
    assert record["environments"][0]["ref"] == f"proctor/alphabet-sort@{version}"


def test_proctor_eval_of_a_verifiers_environment_files_under_the_callers_own(
    plat: Platform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's platform run carries the environment's framework (a verifiers
    environment says `verifiers`), so a verifiers reverse-text is not filed as the built-in."""
    from proctor.eval.platform_run import open_platform_run

    monkeypatch.setenv("PROCTOR_API_URL", plat.url)
    monkeypatch.setenv("PROCTOR_API_KEY", plat.api_key)
    run = open_platform_run(
        push=True,
        attach=None,
        name="engine-vf",
        environment="reverse-text",
        model="m",
        config={},
        run_dir=tmp_path / "run",
        framework="verifiers",
    )
    run.finish()
    record = _record(plat, run.id)
    assert record["framework"] == "verifiers"
    assert not record["environments"][0]["ref"].startswith("proctor/")
