"""The verifiers driver in-process: which names it takes, its config errors, its episodes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from proctor.envs import list_environments, load_environment
from proctor.envs.verifiers import (
    VerifiersEnvironment,
    _resolve,
    installed_environments,
    is_verifiers_environment,
)
from proctor.envs.verifiers._environment import episode_from_verifiers
from proctor.envs.verifiers._harness_index import script_dependencies, write_simple_index
from proctor.errors import ConfigError
from proctor.projection import project_episode, project_record
from tests.envs.verifiers_fixtures import ENVS_DIR, SUBPROCESS_RUNTIME, use_vendored_envs
from tests.support import tools

tools.package("verifiers")


@pytest.fixture(autouse=True)
def vendored(monkeypatch: pytest.MonkeyPatch) -> None:
    use_vendored_envs(monkeypatch)


def test_an_installed_verifiers_taskset_loads_as_vf_eval_composes_it() -> None:
    env = load_environment("glossary", **SUBPROCESS_RUNTIME)
    assert isinstance(env, VerifiersEnvironment)
    assert env.vf_env.config.taskset.id == "glossary"
    assert env.vf_env.config.agent.runtime.type == "subprocess"
    tasks = env.taskset.select(2)
    assert [t.index for t in tasks] == [0, 1]
    assert "facts_lookup" in (tasks[0].prompt or "")


def test_a_verifiers_environment_wins_over_a_builtin_of_the_same_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert is_verifiers_environment("alphabet-sort")
    with caplog.at_level("WARNING"):
        env = load_environment("alphabet-sort", **SUBPROCESS_RUNTIME)
    assert isinstance(env, VerifiersEnvironment)
    assert "pass proctor/alphabet-sort for proctor's" in caplog.text
    builtin = load_environment("proctor/alphabet-sort")
    assert not isinstance(builtin, VerifiersEnvironment)
    assert builtin.name == "alphabet-sort"


def test_names_that_are_not_verifiers_environments_stay_proctors() -> None:
    for name in ("arithmetic", "math", "tool-calc", "no-such-env"):
        assert not is_verifiers_environment(name)


def test_verifiers_config_errors_are_one_sentence_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        load_environment("glossary", taskset={"no_such_setting": 1})
    message = str(info.value)
    assert "--env-args taskset.no_such_setting" in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match=r"drop taskset\.id"):
        load_environment("glossary", taskset={"id": "scratchpad"})


def test_without_verifiers_a_verifiers_environment_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [m for m in sys.modules if m == "glossary" or m.startswith("glossary.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "verifiers", None)  # `import verifiers` now fails
    real_find_spec = _resolve._find_spec
    monkeypatch.setattr(
        _resolve, "_find_spec", lambda m: None if m == "verifiers" else real_find_spec(m)
    )
    with pytest.raises(ConfigError) as info:
        load_environment("glossary")
    assert str(info.value) == (
        "glossary is a verifiers environment; install the extra to run it: "
        "pip install 'proctor[verifiers]'."
    )


def _verifiers_record(*, ok: bool = True) -> dict[str, Any]:
    """A verifiers `Episode.to_record()` of one single-turn trace."""
    return {
        "id": "ep-1",
        "env": {"id": "glossary"},
        "task": {"type": "GlossaryTask", "data": {"idx": 3, "prompt": "hi", "answer": "x"}},
        "ok": ok,
        "errors": [] if ok else [{"type": "EnvError", "message": "setup broke\nmore"}],
        "traces": [
            {
                "id": "tr-1",
                "agent": {"name": "agent", "trainable": True},
                "task": {"data": {"idx": 3, "prompt": "hi", "answer": "x"}},
                "nodes": [
                    {"message": {"role": "user", "content": "hi"}},
                    {"message": {"role": "assistant", "content": "x"}, "parent": 0},
                ],
                "calls": [
                    {"node": 1, "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
                ],
                "rewards": {"looked_up": {"score": 1.0, "weight": 0.5}},
                "metrics": {"chars": 1.0},
                "stop_condition": "agent_completed",
                "is_completed": True,
            }
        ],
    }


def test_a_verifiers_episode_becomes_one_episode_and_its_projected_sample() -> None:
    record = _verifiers_record()
    timing = {"start": 1.0, "end": 2.0, "duration_s": 1.0}
    episode = episode_from_verifiers(
        record, env="glossary", example_id=3, rollout_number=2, timing=timing
    )
    assert episode.ok and episode.id == "ep-1"
    assert (episode.reward, episode.rewards, episode.metrics) == (
        0.5,
        {"looked_up": 1.0},
        {"chars": 1.0},
    )
    assert episode.token_usage == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert episode.native is record
    # The platform sample is the one projection's, whichever side computes it.
    assert project_record(episode.to_record()) == project_episode(record, 2)[0]


def test_a_verifiers_episode_that_is_not_ok_is_an_errored_episode() -> None:
    episode = episode_from_verifiers(
        _verifiers_record(ok=False), env="glossary", example_id=3, rollout_number=1, timing={}
    )
    assert episode.error == {"type": "EnvError", "message": "setup broke", "stage": "rollout"}
    assert episode.reward == 0.0 and episode.rewards == {"looked_up": None}
    sample = project_record(episode.to_record())
    assert sample["error"] is not None


def test_the_harness_index_lists_each_project_once(tmp_path: Path) -> None:
    source = (
        '# /// script\n# requires-python = ">=3.10"\n'
        '# dependencies = ["openai", "mcp==2.0.0"]\n# ///\nprint(1)\n'
    )
    assert script_dependencies(source) == ["openai", "mcp==2.0.0"]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("openai-2.1.0-py3-none-any.whl", "typing_extensions-4.0-py3-none-any.whl"):
        (wheels / name).write_bytes(b"")
    write_simple_index(wheels, tmp_path / "simple")
    page = (tmp_path / "simple" / "typing-extensions" / "index.html").read_text()
    assert "typing_extensions-4.0-py3-none-any.whl" in page
    assert (tmp_path / "simple" / "openai" / "index.html").is_file()


def test_a_builtin_named_with_its_prefix_gets_one_run_directory() -> None:
    from proctor.eval.config import default_run_name

    assert default_run_name("proctor/alphabet-sort", "demo").startswith("proctor--alphabet-sort--")


def _install(site: Path, package: str, dist: str, version: str) -> None:
    """Install a vendored environment into `site` as pip does (package and dist-info)."""
    import shutil

    shutil.copytree(ENVS_DIR / package / package, site / package)
    info = site / f"{package}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\nRequires-Dist: verifiers\n"
    )
    (info / "top_level.txt").write_text(f"{package}\n")


def test_envs_list_shows_installed_verifiers_environments_beside_proctors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(tmp_path, "alphabet_sort", "alphabet-sort", "0.3.1")
    monkeypatch.syspath_prepend(str(tmp_path))
    listed = dict(installed_environments())
    assert listed["alphabet-sort"] == "alphabet-sort@0.3.1"
    # A vendored folder on the path is not an installed package; verifiers' own tasksets are.
    assert "glossary" not in listed
    bundled = [source for source in listed.values() if source.endswith("(bundled)")]
    assert bundled and all(s.startswith("verifiers@") for s in bundled)
    infos = {info.name: info for info in list_environments()}
    assert infos["alphabet-sort"].framework == "verifiers"
    assert infos["alphabet-sort"].entry_point == "alphabet-sort@0.3.1"
    # proctor's own, shadowed by the bare name, is listed under the name that runs it.
    assert infos["proctor/alphabet-sort"].framework == "proctor"
    assert infos["arithmetic"].framework == "proctor"


def test_a_verifiers_environment_knows_the_package_and_version_that_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A source checkout on the path: its pyproject.toml says which package it is.
    env = load_environment("glossary", **SUBPROCESS_RUNTIME)
    assert (env.package, env.version) == ("glossary", "0.1.0")
    _install(tmp_path, "scratchpad", "scratchpad", "2.0.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _resolve.package_of("scratchpad") == ("scratchpad", "2.0.0")


def test_a_verifiers_environment_runs_on_asyncios_loop_where_spawning_is_cheap() -> None:
    import asyncio

    from proctor.eval import event_loop

    async def asyncios_own() -> bool:
        return isinstance(asyncio.get_running_loop(), asyncio.SelectorEventLoop)

    env = load_environment("glossary", **SUBPROCESS_RUNTIME)
    assert event_loop.spawns_processes(env)
    assert event_loop.run(asyncios_own(), stdlib=True)


async def test_the_harness_environment_verifiers_prepares_is_compiled_to_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rollout's harness program is a fresh Python importing its script's dependencies:
    proctor has `uv` compile them when verifiers prepares the environment, so a program never
    compiles them from source, even where Python may not write its cache."""
    if "UV_DEFAULT_INDEX" not in os.environ:
        tools.missing("needs the harness index (UV_DEFAULT_INDEX), as scripts/test sets it")
    from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime

    monkeypatch.delenv("UV_COMPILE_BYTECODE", raising=False)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv"))
    load_environment("glossary", **SUBPROCESS_RUNTIME)
    assert os.environ["UV_COMPILE_BYTECODE"] == "1"

    # A harness script of its own (its content names its environment), prepared by verifiers.
    script = '# /// script\n# dependencies = ["sniffio"]\n# ///\nimport sniffio\n# ' + str(tmp_path)
    runtime = SubprocessRuntime(SubprocessConfig())
    await runtime.start()
    try:
        argv = await runtime.prepare_uv_script(script, activate=False)
    finally:
        await runtime.teardown()
    site = Path(argv[0]).parent.parent / "lib"
    assert list(site.glob("python3*/site-packages/sniffio/__pycache__/*.pyc"))

    # Set by the caller, it is theirs.
    monkeypatch.setenv("UV_COMPILE_BYTECODE", "0")
    load_environment("glossary", **SUBPROCESS_RUNTIME)
    assert os.environ["UV_COMPILE_BYTECODE"] == "0"


async def test_a_prepared_harness_environment_runs_the_chat_program_without_uv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a confined sandbox the launcher has built the chat harness program's environment
    outside it (`PROCTOR_SANDBOX_HARNESS`): verifiers runs the program with that environment's
    interpreter and never prepares one of its own; one built for other requirements is not
    used."""
    from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime

    from proctor.envs.verifiers._harness_index import REQUIREMENTS_FILE, chat_program
    from proctor.envs.verifiers._prepared_harness import VARIABLE, adopt_prepared_harness
    from proctor.sandboxes import confine, harness

    # The names the confinement builds and announces it by.
    assert REQUIREMENTS_FILE == harness.REQUIREMENTS_FILE and VARIABLE == confine.HARNESS_VARIABLE
    monkeypatch.setattr(SubprocessRuntime, "_interpreters", {})
    monkeypatch.setattr(SubprocessRuntime, "scripts_dir", str(tmp_path / "scripts"))

    async def no_uv(self: Any, argv: list[str], env: dict[str, str]) -> Any:
        raise AssertionError(f"verifiers prepared the program itself: {argv}")

    monkeypatch.setattr(SubprocessRuntime, "run", no_uv)
    prepared = tmp_path / "prepared"
    (prepared / "bin").mkdir(parents=True)
    (prepared / "bin" / "python").symlink_to(sys.executable)
    source = chat_program()
    (prepared / REQUIREMENTS_FILE).write_text("\n".join(script_dependencies(source)) + "\n")
    monkeypatch.setenv(VARIABLE, str(prepared))
    load_environment("glossary", **SUBPROCESS_RUNTIME)

    runtime = SubprocessRuntime(SubprocessConfig())
    argv = await runtime.prepare_uv_script(source)
    assert argv[-2:][0] == str(prepared / "bin" / "python")
    assert Path(argv[-1]).read_text() == source
    assert str(prepared) in argv  # its VIRTUAL_ENV and PATH

    monkeypatch.setattr(SubprocessRuntime, "_interpreters", {})
    (prepared / REQUIREMENTS_FILE).write_text("openai\n")
    assert adopt_prepared_harness() is None
    assert SubprocessRuntime._interpreters == {}
