"""The change recipes of docs/architecture.md ("Where a change is made"), walked on a copy.

For each recipe, `src/`, `docs/`, `tests/`, `pyproject.toml` and `README.md` are copied to
a temporary tree; the recipe's edits are made to the files it names (small insertions at
anchors that must each occur once, so a recipe that drifts from the code fails here); the
recipe's own test is written beside them; and pytest runs in that tree, importing the
edited `src/`. Each walk asserts that the change reached everywhere the recipe promises and
that exactly the files the recipe lists changed, as many as it counts.
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
COPIED = ("src", "docs", "tests")
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info")


def recipe(title: str) -> tuple[int, list[str]]:
    """The file count a recipe states and the files its numbered steps name, in order."""
    text = ARCHITECTURE.read_text(encoding="utf-8").split("\n## Where a change is made\n")[1]
    block = text.split(f"**{title}** (", 1)[1].split("\n**", 1)[0]
    stated = re.match(r"(\d+) files", block)
    assert stated, f"the recipe {title!r} states no file count"
    return int(stated.group(1)), re.findall(r"^\d+\. `([^`]+)`", block, re.M)


class Tree:
    """A copy of the project that a recipe is applied to."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for part in COPIED:
            shutil.copytree(ROOT / part, root / part, ignore=SKIPPED)
        for file in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / file, root / file)
        self.tests: set[str] = set()

    def edit(self, path: str, anchor: str, text: str, *, replace: bool = False) -> None:
        """Insert `text` right after `anchor` (or in its place), which occurs once in `path`."""
        file = self.root / path
        source = file.read_text(encoding="utf-8")
        assert source.count(anchor) == 1, f"{path}: the anchor {anchor!r} is not there once"
        file.write_text(
            source.replace(anchor, text if replace else anchor + text), encoding="utf-8"
        )

    def create(self, path: str, text: str) -> None:
        file = self.root / path
        assert not file.exists(), f"{path} exists already"
        file.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")

    def add_test(self, path: str, text: str) -> None:
        """The recipe's "plus a test": not one of the files it counts."""
        self.create(path, text)
        self.tests.add(path)

    def changed(self) -> list[str]:
        """The files under `src/` and `docs/` that differ from the project's (or are new)."""
        found = []
        for part in ("src", "docs"):
            for file in sorted((self.root / part).rglob("*")):
                if not file.is_file() or "__pycache__" in file.parts:
                    continue
                path = file.relative_to(self.root).as_posix()
                original = ROOT / path
                if not original.exists() or not filecmp.cmp(file, original, shallow=False):
                    found.append(path)
        return found

    def pytest(self, *paths: str) -> None:
        """Run pytest on `paths` in this tree, importing its `src/`; fail with its output."""
        # The suite's own knobs (PROCTOR_TEST_*: PostgreSQL, tools) pass; proctor's settings not.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("PROCTOR_") or k.startswith("PROCTOR_TEST_")
        }
        env["PYTHONPATH"] = os.pathsep.join([str(self.root / "src"), str(self.root)])
        env["HOME"] = str(self.root / "home")
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *paths],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]

    def holds(self, title: str, **placeholders: str) -> None:
        """The files changed are exactly the ones the recipe names, as many as it counts."""
        count, named = recipe(title)
        for key, value in placeholders.items():
            named = [n.replace(f"<{key}>", value) for n in named]
        assert len(named) == count, f"{title!r} counts {count} files but names {named}"
        assert sorted(self.changed()) == sorted(named)


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path / "tree")


def test_add_a_sample_field(tree: Tree) -> None:
    """The field reaches the sample `run_eval` pushes through the runs SDK and the one the
    traces service projects from a verifiers episode; the docs list it."""
    tree.edit(
        "src/proctor/contract.py",
        '    """The number of model calls made."""\n',
        '    succeeded: bool | None = None\n    """The episode ended without an error."""\n',
    )
    tree.edit(
        "src/proctor/projection.py",
        '        "num_turns": record.get("num_turns"),\n',
        '        "succeeded": record.get("ok"),\n',
    )
    tree.edit(
        "src/proctor/projection.py",
        '        "info": dict(info) if isinstance(info, dict) and info else None,\n',
        '        "succeeded": not errors,\n',
    )
    tree.edit("docs/platform-api.md", "`num_turns` (int), ", "`succeeded` (bool), ")
    tree.add_test(
        "tests/server/test_walk_sample_field.py",
        """
        from pathlib import Path

        from fastapi.testclient import TestClient

        from proctor import runs
        from proctor.eval import EvalConfig, run_eval
        from proctor.testing import ScriptedClient
        from tests.server.conftest import PUBLIC_URL, Api
        from tests.server.test_traces import episode, jsonl, upload
        from tests.support.platform import BOOTSTRAP_KEY


        def test_the_field_reaches_every_path(api: Api, tmp_path: Path) -> None:
            run = runs.init(
                name="walk", environments=["reverse-text"], model="scripted",
                config={"env": "reverse-text"}, api_url=PUBLIC_URL, api_key=BOOTSTRAP_KEY,
                run_dir=tmp_path / "run", http=api.client,
            )
            config = EvalConfig(
                env="reverse-text", model="scripted", num_examples=2,
                output_dir=str(tmp_path / "out"),
            )
            run_eval(config, client=ScriptedClient(lambda m, t: "olleh"), platform=run)
            pushed = api.get(f"/evaluations/{run.id}/samples").json()["samples"]
            assert [s["succeeded"] for s in pushed] == [True, True]

            traced = api.create()
            client = TestClient(
                api.client.app, base_url=f"{PUBLIC_URL}/api/v1",
                headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"},
            )
            answer = upload(client, jsonl([episode("ep-walk", traced, 0, 1.0)]))
            assert answer.status_code == 201, answer.text
            projected = api.get(f"/evaluations/{traced}/samples").json()["samples"]
            assert [s["succeeded"] for s in projected] == [True]
        """,
    )
    tree.holds("Add a sample field")
    tree.pytest("tests/server/test_walk_sample_field.py", "tests/test_contract.py")


def test_add_a_sandbox_backend(tree: Tree) -> None:
    """`PROCTOR_HOSTED_SANDBOX` (or `--sandbox`) picks the new backend, its own option is
    read from `PROCTOR_HOSTED_<NAME>_<OPTION>` and validated at start-up, `proctor config`
    shows it, and the docs' checks pass."""
    tree.create(
        "src/proctor/sandboxes/echo.py",
        '''
        """The `echo` sandbox backend: local processes, each greeted first."""

        from __future__ import annotations

        from typing import Literal

        from pydantic import BaseModel

        from proctor.sandboxes import local
        from proctor.sandboxes.sandbox import BackendName, SandboxHandle


        class Config(BaseModel):
            """The echo backend's options."""

            type: Literal["echo"] = "echo"
            """The backend's name."""
            greeting: str
            """What each sandbox hears first (`PROCTOR_HOSTED_ECHO_GREETING`)."""
            isolation: local.Isolation = "bwrap"
            """The launcher's `isolation`."""


        class EchoSandbox(local.LocalSandbox):
            """A local sandbox that knows its greeting."""

            name: BackendName = "echo"

            def __init__(self, greeting: str, isolation: local.Isolation) -> None:
                super().__init__(isolation=isolation)
                self.greeting = greeting


        def create(config: Config) -> EchoSandbox:
            """The backend for `config`."""
            return EchoSandbox(config.greeting, config.isolation)


        def handle_token(handle: SandboxHandle) -> str:
            """The local backend's format."""
            return local.handle_token(handle)


        def handle_from_token(token: str, *, log_path: str | None) -> SandboxHandle:
            """The handle `handle_token` wrote."""
            found = local.handle_from_token(token, log_path=log_path)
            return SandboxHandle("echo", found.ref, found.started_at, found.log_path)
        ''',
    )
    tree.edit(
        "src/proctor/sandboxes/backends.py",
        "from proctor.sandboxes import local, ray_jobs\n",
        "from proctor.sandboxes import echo, local, ray_jobs\n",
        replace=True,
    )
    tree.edit(
        "src/proctor/sandboxes/backends.py",
        "local.Config | ray_jobs.Config",
        "local.Config | ray_jobs.Config | echo.Config",
        replace=True,
    )
    tree.edit(
        "docs/configuration.md",
        "`local` processes or `ray` jobs;",
        "`local` processes, `ray` jobs or `echo` greeters;",
        replace=True,
    )
    tree.edit(
        "docs/configuration.md",
        "| `PROCTOR_HOSTED_ISOLATION` |",
        "| `PROCTOR_HOSTED_ECHO_GREETING` | unset | what each `echo` sandbox hears first, "
        "required for `echo` |\n| `PROCTOR_HOSTED_ISOLATION` |",
        replace=True,
    )
    tree.edit(
        "docs/cli.md",
        "| sandbox backend: `local` processes or `ray` jobs |",
        "| sandbox backend: `local` processes, `ray` jobs or `echo` greeters |",
        replace=True,
    )
    tree.add_test(
        "tests/sandboxes/test_walk_backend.py",
        """
        import pytest

        from proctor.cli._settings_report import launcher_section
        from proctor.errors import ConfigError
        from proctor.sandboxes import backends
        from proctor.sandboxes.echo import EchoSandbox
        from proctor.sandboxes.sandbox import SandboxHandle
        from proctor.server.hosted.settings import LauncherSettings


        def test_the_backend_is_chosen_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
            assert backends.backend_types() == ("local", "ray", "echo")
            monkeypatch.setenv("PROCTOR_HOSTED_SANDBOX", "echo")
            monkeypatch.setenv("PROCTOR_HOSTED_ECHO_GREETING", "hello")
            monkeypatch.setenv("PROCTOR_HOSTED_ISOLATION", "none")
            backend = LauncherSettings.load().backend()
            assert isinstance(backend, EchoSandbox)
            assert (backend.greeting, backend.isolation) == ("hello", "none")
            rows = {row.name: row.value for row in launcher_section().rows}
            assert rows["PROCTOR_HOSTED_ECHO_GREETING"] == "hello"
            # the logs endpoint of a server whose own launcher runs another backend
            other = LauncherSettings.load(sandbox="local").backend("echo")
            assert isinstance(other, EchoSandbox)
            handle = SandboxHandle("echo", "42", 1.5, "/data/e1.log")
            token = handle.token()
            assert SandboxHandle.from_token("echo", token, log_path="/data/e1.log") == handle


        def test_its_option_is_checked_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
            monkeypatch.delenv("PROCTOR_HOSTED_SANDBOX", raising=False)
            with pytest.raises(ConfigError, match="PROCTOR_HOSTED_ECHO_GREETING"):
                LauncherSettings.load(sandbox="echo")  # as `proctor launcher --sandbox echo`
        """,
    )
    tree.holds("Add a sandbox backend", name="echo")
    tree.pytest(
        "tests/sandboxes/test_walk_backend.py",
        "tests/sandboxes/test_backends.py::test_every_backend_option_is_documented",
        "tests/test_docs.py::test_every_setting_is_documented",
        "tests/test_docs.py::test_documented_setting_defaults_match_the_code",
        "tests/test_docs.py::test_every_variable_the_code_reads_is_documented",
        "tests/test_architecture.py",
    )


def test_add_an_eval_option_that_hosted_runs_honour(tree: Tree) -> None:
    """The option is a `proctor eval` flag and `@ file.toml` key, a `proctor hosted run` flag
    and an `eval_config` key, and reaches the sandbox's `eval.toml`; the docs' checks pass."""
    tree.edit(
        "src/proctor/eval/config.py",
        '    """Log debug detail (each retry, each episode)."""\n',
        '    label: str | None = None\n    """A label the run records."""\n',
    )
    tree.edit(
        "src/proctor/sandboxes/command.py",
        '    """Log debug detail in the sandbox (`proctor eval --verbose`)."""\n',
        '    label: str | None = None\n    """A label the run records (`--label`)."""\n',
    )
    tree.edit(
        "src/proctor/sandboxes/command.py", '    "verbose": "verbose",\n', '    "label": "label",\n'
    )
    tree.edit(
        "docs/configuration.md",
        "| `verbose` | false | `--verbose` |\n",
        "| `label` | none | `--label` |\n",
    )
    tree.edit(
        "docs/configuration.md",
        "| `verbose` | `-v`, `--verbose` | false |\n",
        "| `label` | `--label` | unset |\n",
    )
    tree.edit(
        "docs/cli.md",
        "| `-v`, `--verbose` | off | log debug detail (each retry, each episode) |\n",
        "| `--label` | unset | a label the run records |\n",
    )
    tree.edit(
        "docs/cli.md",
        "| `-v`, `--verbose` | off | log debug detail in the sandbox |\n",
        "| `--label` | unset | a label the run records |\n",
    )
    tree.add_test(
        "tests/sandboxes/test_walk_eval_option.py",
        """
        from pathlib import Path

        from proctor.cli.hosted_cmd import hosted_overrides
        from proctor.eval.args import parse_eval_args
        from proctor.sandboxes.command import HostedEvalConfig, eval_toml, wire_config


        def test_the_option_reaches_the_sandbox(tmp_path: Path) -> None:
            assert parse_eval_args(["reverse-text", "--label", "a"]).label == "a"
            overrides, _ = hosted_overrides(["reverse-text", "-m", "m", "--label", "b"])
            wire = wire_config(overrides)  # what `proctor hosted run` sends
            assert wire["label"] == "b"
            hosted = HostedEvalConfig.model_validate(wire)
            toml = tmp_path / "eval.toml"
            toml.write_text(eval_toml(hosted, environment="reverse-text", model="m"))
            assert parse_eval_args(["@", str(toml)]).label == "b"  # what the sandbox runs
        """,
    )
    tree.holds("Add an eval option that hosted runs honour")
    tree.pytest(
        "tests/sandboxes/test_walk_eval_option.py",
        "tests/sandboxes/test_command.py",
        "tests/test_docs.py::test_every_eval_config_field_is_a_documented_flag",
        "tests/test_docs.py::test_every_subcommand_and_flag_is_documented",
        "tests/test_docs.py::test_documented_eval_defaults_match_the_code",
    )


def test_add_an_environment_driver(tree: Tree) -> None:
    """The new driver is exported by `proctor.envs` and runs a rollout."""
    tree.create(
        "src/proctor/envs/_echo.py",
        '''
        """The echo driver: the model answers, hears its answer back, and answers again."""

        from __future__ import annotations

        from proctor.envs._environment import Environment
        from proctor.envs._episode import COMPLETED, Episode
        from proctor.envs._task import Task
        from proctor.models.types import ChatClient


        class EchoEnv(Environment):
            """Two model turns: the second one hears the first answer back."""

            async def converse(self, task: Task, client: ChatClient, episode: Episode) -> None:
                await self.ask_model(client, episode)
                echoed = episode.messages[-1].get("content") or ""
                episode.messages.append({"role": "user", "content": echoed})
                await self.ask_model(client, episode)
                episode.stop_condition = COMPLETED
                episode.is_completed = True
        ''',
    )
    tree.edit(
        "src/proctor/envs/__init__.py",
        "from proctor.envs._code import CodeEnv\n",
        "from proctor.envs._echo import EchoEnv\n",
    )
    tree.edit("src/proctor/envs/__init__.py", '    "CodeEnv",\n', '    "EchoEnv",\n')
    tree.edit(
        "docs/environments.md",
        "| `MultiTurnEnv(user=, max_turns=, ...)` |",
        "| `EchoEnv(...)` | the model answers, hears its answer back, and answers again |\n"
        "| `MultiTurnEnv(user=, max_turns=, ...)` |",
        replace=True,
    )
    tree.add_test(
        "tests/envs/test_walk_driver.py",
        """
        from proctor.envs import EchoEnv, Task, Taskset
        from proctor.testing import ScriptedClient


        async def test_the_driver_runs_a_rollout() -> None:
            env = EchoEnv(name="echo", taskset=Taskset([Task(index=0, prompt="hi", answer="hi")]))
            client = ScriptedClient(["hi", "hi"])
            task = env.taskset.select(1)[0]
            episode = await env.rollout(task, client, episode_id="ep-1", rollout_number=1)
            assert episode.ok and episode.num_turns == 2 and episode.is_completed
            roles = [m["role"] for m in episode.messages]
            assert roles == ["user", "assistant", "user", "assistant"]
        """,
    )
    tree.holds("Add an environment driver", driver="echo")
    tree.pytest("tests/envs/test_walk_driver.py", "tests/test_public_api.py")
