"""A new user walks the README top to bottom (#25): an empty HOME, only the README's own
commands, in its order, each checked for its exit code and the lines that matter.

The package is the one installed for the tests (the README's `pip install -e .` is what made
it); ports are free ones, handed over the way the README says (`--port`, `PROCTOR_PORT`,
`PROCTOR_MODEL_BASE_URL`, `--api-base-url`), and `pk_...` / `ID` are what earlier commands
printed. A README that gains, drops or reorders a command fails here until this walk says
what the new user should see.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http
from tests.test_docs import README, ROOT

pytestmark = pytest.mark.e2e

SKIPPED = {
    "python3 -m venv .venv": "the tests' own venv is that venv",
    ".venv/bin/pip install -e .": "the package under test is installed",
    "bash scripts/test": "this is scripts/test",
}


def readme_commands() -> list[str]:
    """Every command of the README's bash blocks, in order, without comments; `a && b` split."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", README.read_text(), re.M | re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            commands += [part.strip() for part in line.split("&&") if part.strip()]
    return commands


@dataclass
class Step:
    command: str
    """The README's command, as written."""
    exit_code: int
    says: tuple[str, ...]
    """Text the output (stdout and stderr together) must hold."""


WALK = [
    Step("python3 -m venv .venv", 0, ()),
    Step(".venv/bin/pip install -e .", 0, ()),
    Step(".venv/bin/proctor quickstart", 0, ("COMPLETED", "mean reward", "dashboard: http")),
    Step("bash scripts/test", 0, ()),
    Step("proctor envs list", 0, ("alphabet-sort", "reverse-text", "tool-calc")),
    Step(
        "proctor eval reverse-text -n 50 -r 4 --no-push --run.dir rt",
        0,
        ("completed: 200/200 episodes, mean reward", "outputs/rt"),
    ),
    Step(
        "proctor eval reverse-text -n 50 -r 4 --no-push --run.dir rt --resume",
        0,
        ("completed: 200/200 episodes",),
    ),
    Step("proctor eval humaneval -n 20 --no-push", 0, ("completed: 20/20 episodes",)),
    Step(
        "proctor eval dataset --env-args "
        """'{"path": "docs/examples/word_problems.jsonl", "reward": "judge"}' -r 2 --no-push""",
        0,
        ("completed: 6/6 episodes, mean reward 1.000",),
    ),
    Step("proctor keys create --name me --admin", 0, ("created key", "pk_")),
    Step("proctor server &", 0, ()),
    Step("export PROCTOR_API_URL=http://127.0.0.1:8000 PROCTOR_API_KEY=pk_...", 0, ()),
    Step("proctor eval alphabet-sort -n 50 -r 4", 0, ("200/200 episodes", "mean reward")),
    Step("proctor evals list", 0, ("COMPLETED",)),
    Step(
        "proctor hosted run arithmetic -m demo -n 20 -r 2 --follow",
        0,
        ("COMPLETED", "samples: 40", "mean reward"),
    ),
    Step("proctor hosted logs ID", 0, ("finalized",)),
    # The evaluation has ended: cancel says so in one line (exit 1), as a user would see it.
    Step("proctor hosted cancel ID", 1, ("has already ended", "nothing to cancel")),
]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    yield home


def test_the_readme_lists_the_commands_this_walk_checks() -> None:
    assert readme_commands() == [step.command for step in WALK]


def test_a_new_user_walks_the_readme(home: Path, tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PROCTOR_", "OPENAI_"))}
    env = {**base, "HOME": str(home)}
    server_port, model_port = free_port(), free_port()
    started: list[ManagedProcess] = []
    said: dict[str, str] = {}  # what earlier commands printed: the key, the hosted id

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=env, cwd=home, capture_output=True, text=True, timeout=240)

    # "In one shell `proctor demo-model`": the tour's model, where the README's next
    # commands find it (PROCTOR_MODEL_BASE_URL stands in for its default port 8001).
    model = ManagedProcess(
        [*PROCTOR, "demo-model", "--port", str(model_port)], tmp_path / "model.log", env=env
    )
    started.append(model.start())
    model_url = f"http://127.0.0.1:{model_port}/v1"
    try:
        wait_http(f"{model_url}/models", proc=model.proc)
        for step in WALK:
            if step.command in SKIPPED:
                continue
            words = shlex.split(step.command)
            if words[0] == "export":
                for pair in words[1:]:
                    name, value = pair.split("=", 1)
                    value = value.replace("pk_...", said["key"])
                    env[name] = value.replace(":8000", f":{server_port}")
                continue
            words = [said["id"] if w == "ID" else w for w in words]
            # The README's example files are the clone's (the user runs it from there).
            words = [w.replace("docs/examples/", f"{ROOT}/docs/examples/") for w in words]
            argv = [*PROCTOR, *words[1:]]
            if step.command == ".venv/bin/proctor quickstart":
                # --exit, --port and --model-port as the README names them: stop once done.
                argv += ["--exit", "--port", str(free_port()), "--model-port", str(free_port())]
            if words[:2] == ["proctor", "eval"] and "PROCTOR_MODEL_BASE_URL" not in env:
                env["PROCTOR_MODEL_BASE_URL"] = model_url
            if words[:3] == ["proctor", "hosted", "run"]:
                argv += ["--api-base-url", model_url]  # "--api-base-url names another endpoint"
            if words[-1] == "&":
                server = ManagedProcess(
                    argv[:-1],
                    tmp_path / "server.log",
                    env={**env, "PROCTOR_PORT": str(server_port)},
                )
                started.append(server.start())
                wait_http(f"http://127.0.0.1:{server_port}/healthz", proc=server.proc, timeout=60)
                continue
            done = run(argv)
            output = done.stdout + done.stderr
            assert done.returncode == step.exit_code, (step.command, output)
            assert "Traceback" not in output, (step.command, output)
            for text in step.says:
                assert text in output, (step.command, text, output)
            if words[:3] == ["proctor", "keys", "create"]:
                said["key"] = done.stdout.split()[0]
            if words[:3] == ["proctor", "hosted", "run"]:
                said["id"] = done.stdout.split()[0]
    finally:
        for proc in reversed(started):
            proc.stop()
    # The walk left the user's home as the README says: the run directories and ~/.proctor.
    assert (home / "outputs" / "rt" / "traces.jsonl").is_file()
    assert (home / ".proctor" / "proctor.db").is_file()
