"""verifiers' harness environment: keyed by what it is built from, reused once ready, shown to
the sandbox read-only (the build itself runs in tests/e2e/test_verifiers_hosted.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from proctor.envs.verifiers import _harness_index, _prepared_harness
from proctor.sandboxes import confine, harness


def _index(folder: Path, requirements: str | None = "openai\nmcp==2.0.0\n") -> Path:
    page = folder / "simple" / "openai" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text('<a href="file:///wheels/openai-3.0-py3-none-any.whl">openai</a>\n')
    if requirements is not None:
        (folder / harness.REQUIREMENTS_FILE).write_text(requirements)
    return folder


def test_the_key_follows_the_requirements_and_the_index(tmp_path: Path) -> None:
    # The file `proctor envs harness-index` writes is the one the launcher reads, and the
    # driver reads the variable the confinement sets (named twice: the layers forbid an import).
    assert harness.REQUIREMENTS_FILE == _harness_index.REQUIREMENTS_FILE
    assert confine.HARNESS_VARIABLE == _prepared_harness.VARIABLE
    index = _index(tmp_path)
    wanted = harness.requirements(index)
    assert wanted == ["mcp==2.0.0", "openai"]
    key = harness.content_key(index, wanted)
    assert harness.content_key(index, wanted) == key
    assert harness.content_key(index, ["openai"]) != key
    (index / "simple" / "openai" / "index.html").write_text("<a>openai-3.1</a>\n")
    assert harness.content_key(index, wanted) != key


def test_it_is_built_once_and_then_reused_and_an_index_without_requirements_builds_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(harness, "_verifiers_installed", lambda: True)
    built: list[Path] = []

    def build(building: Path, index: Path, wanted: list[str]) -> bool:
        built.append(building)
        building.mkdir()
        return True

    monkeypatch.setattr(harness, "_build", build)
    index = _index(tmp_path / "index")
    envs = tmp_path / "envs"
    key = harness.content_key(index, harness.requirements(index))
    assert harness.prepare(index, envs) == envs / key
    assert harness.prepare(index, envs) == envs / key
    assert built == [envs / f"{key}.building"]
    assert f"reusing verifiers' harness environment {key[:12]}" in capsys.readouterr().err

    bare = _index(tmp_path / "bare", requirements=None)
    assert harness.prepare(bare, envs) is None
    assert "build it again with `proctor envs harness-index`" in capsys.readouterr().err
    assert built == [envs / f"{key}.building"]


def test_the_sandbox_sees_it_read_only_and_is_told_where(tmp_path: Path) -> None:
    prepared = tmp_path / "hosted-harness" / "0123abcd"
    prepared.mkdir(parents=True)
    workdir = tmp_path / "work"
    workdir.mkdir()
    policy = confine.Policy(command="true", name="e1")
    root = confine.build_root(
        policy, workdir, 2000001, tmp_path, [], {}, package_dir=None, harness_dir=prepared
    )
    try:
        inside = f"{confine.HARNESS_INSIDE}/0123abcd"
        at = root.args.index(str(prepared))
        assert root.args[at - 1 : at + 2] == ["--ro-bind", str(prepared), inside]
        (fd,) = (fd for fd in root.fds if b"PROCTOR_SANDBOX_HARNESS" in _read(fd))
        assert json.loads(_read(fd))[confine.HARNESS_VARIABLE] == inside
    finally:
        root.close()


def _read(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 1 << 20)
