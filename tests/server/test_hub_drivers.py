"""Push time decides whether proctor can run a wheel: a `proctor.environments` entry point,
or a verifiers v1 environment as `vf-eval` resolves it (read, never run); anything else is
refused in one sentence before the version is published."""

from __future__ import annotations

import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from proctor.server.environments import artifacts
from proctor.server.environments.drivers import Driver, driver_of
from proctor.server.errors import InvalidInput
from tests.server.conftest import Api
from tests.server.test_environments import sha

TASKSET = """\
import verifiers.v1 as vf


class GlossaryTaskset(vf.Taskset[vf.Task]):
    pass
"""
INIT = "from glossary.taskset import GlossaryTaskset\n\n__all__ = ['GlossaryTaskset']\n"
LEGACY = "import verifiers as vf\n\n\ndef load_environment(**kw):\n    return vf.Environment()\n"


def _wheel(
    tmp_path: Path, files: dict[str, str], *, name: str = "glossary", requires: str = "verifiers"
) -> Path:
    info = f"{name}-0.1.0.dist-info"
    path = tmp_path / f"{name}-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
        head = f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n"
        wheel.writestr(f"{info}/METADATA", head + f"Requires-Dist: {requires}\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nTag: py3-none-any\n")
    return path


def _installed(versions: dict[str, str]) -> object:
    def version(name: str) -> str:
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    return version


def _driver(path: Path, name: str = "glossary", **versions: str) -> Driver:
    facts = artifacts.read_wheel(path)
    return driver_of(
        path,
        facts,
        name=name,
        label=f"alice/{name}@0.1.0",
        installed=_installed(versions or {"verifiers": "0.4.0"}),  # type: ignore[arg-type]
    )


V1 = {"glossary/__init__.py": INIT, "glossary/taskset.py": TASKSET}


def test_a_verifiers_v1_package_runs_through_the_verifiers_driver(tmp_path: Path) -> None:
    assert _driver(_wheel(tmp_path, V1)) == Driver("verifiers", "glossary")


def test_a_taskset_re_exported_from_verifiers_counts(tmp_path: Path) -> None:
    init = "from verifiers.v1.tasksets.gsm8k import Gsm8kTaskset\n\n__all__ = ['Gsm8kTaskset']\n"
    wheel = _wheel(tmp_path, {"glossary/__init__.py": init})
    assert _driver(wheel) == Driver("verifiers", "glossary")


@pytest.mark.parametrize(
    ("files", "name", "words"),
    [
        (V1, "other-name", "no module 'other_name'"),
        ({"glossary/__init__.py": LEGACY}, "glossary", "older verifiers environment"),
        ({"glossary/__init__.py": TASKSET}, "glossary", "exports no Taskset"),
        ({"glossary/__init__.py": "X = 1\n__all__ = ['X']\n"}, "glossary", "neither"),
    ],
)
def test_what_proctor_cannot_run_is_refused_in_one_sentence(
    tmp_path: Path, files: dict[str, str], name: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        _driver(_wheel(tmp_path, files), name)
    message = str(refused.value)
    assert words in message and message.count(". ") == 0 and message.endswith("again.")


def test_a_platform_without_verifiers_refuses_naming_the_extra(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"installs proctor\[verifiers\]"):
        _driver(_wheel(tmp_path, V1), openai="2.8.0")


def test_a_requirement_that_would_replace_proctors_own_packages_is_refused(
    tmp_path: Path,
) -> None:
    wheel = _wheel(tmp_path, V1, requires="verifiers>=0.5")
    with pytest.raises(InvalidInput, match=r"verifiers>=0.5 \(proctor runs verifiers 0.4.0\)"):
        _driver(wheel)
    assert _driver(_wheel(tmp_path, V1, requires="verifiers>=0.4,<0.5")).kind == "verifiers"


def test_the_hub_refuses_an_unrunnable_push_at_the_wheel_and_publishes_nothing(
    api: Api, tmp_path: Path
) -> None:
    path = _wheel(tmp_path, {"plain/__init__.py": "X = 1\n"}, name="plain")
    data = path.read_bytes()
    env_id = api.post("/environmentshub/resolve", json={"name": "plain"}).json()["data"]["id"]
    body = {
        "content_hash": sha(data),
        "semantic_version": "0.1.0",
        "metadata": {},
        "filename": path.name,
        "sha256": sha(data),
        "size": len(data),
    }
    slot = api.post(f"/environmentshub/{env_id}/wheels", json=body).json()["data"]
    assert api.client.put(slot["upload_url"], content=data).status_code == 200
    refused = api.post(f"/environmentshub/{env_id}/wheels/{slot['wheel_id']}/finalize")
    assert refused.status_code == 422, refused.text
    message = refused.json()["error"]["message"]
    assert "/plain@0.1.0 is neither a proctor environment" in message
    assert not list((api.settings.hub_dir() / "wheels").rglob("*.whl"))


def test_a_wheel_with_syntax_errors_is_refused(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"glossary/__init__.py": "def broken(:\n"})
    with pytest.raises(InvalidInput, match="not valid Python"):
        _driver(wheel)
