"""Docs stay true (STYLE.md rule 14).

Every command of `proctor`, each subcommand and flag, every setting of the server, the hosted
launcher and the runs client (as its `PROCTOR_*` variable), every `PROCTOR_*` variable the
code reads and every `EvalConfig` field appear in README.md or docs/. The README keeps its
set-up commands, relative links resolve, and the plugin example of docs/environments.md
installs and runs.

What is "documented" is read from the code itself (the `COMMANDS` table, the argparse
parsers caught while `proctor CMD --help` runs in-process, the pydantic models), so adding
a command, flag or setting without docs fails here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from pydantic import AliasChoices, BaseModel
from pydantic_settings import BaseSettings

from proctor.cli._parser import help_default
from proctor.cli.main import COMMANDS, main
from proctor.eval import parse_eval_args
from proctor.eval.config import EvalConfig
from proctor.runs import ClientSettings
from proctor.server.hosted.settings import LauncherSettings
from proctor.server.settings import Settings
from tests.support.procs import PROCTOR

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLI_DOC = ROOT / "docs" / "cli.md"
CONFIG_DOC = ROOT / "docs" / "configuration.md"
ENV_DOC = ROOT / "docs" / "environments.md"

SETUP_COMMANDS = (
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/proctor quickstart",
    "bash scripts/test",
)


def all_docs() -> str:
    """README.md and every page under docs/, as one text."""
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    return "\n".join(p.read_text(encoding="utf-8") for p in pages)


def cli_sections(text: str) -> dict[str, str]:
    """docs/cli.md split at its `## proctor CMD` headings: {"eval": section text, ...}."""
    sections: dict[str, str] = {}
    for match in re.finditer(r"^## proctor (\S+)\n(.*?)(?=^## |\Z)", text, re.M | re.S):
        sections[match.group(1)] = match.group(2)
    return sections


def mentions(text: str, flag: str) -> bool:
    """Whether `flag` occurs in `text` as a whole word (`--id` is not `--identity`)."""
    return re.search(rf"(?<![\w.-]){re.escape(flag)}(?![\w.-])", text) is not None


# --- what the code offers -------------------------------------------------------------------


def help_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser whose help `proctor ARGV --help` prints, caught in-process."""
    caught: list[argparse.ArgumentParser] = []

    def catch(self: argparse.ArgumentParser, file: object = None) -> None:
        caught.append(self)

    # argparse exits after printing help; the parser has been caught by then
    with (
        mock.patch.object(argparse.ArgumentParser, "print_help", catch),
        contextlib.suppress(SystemExit),
    ):
        main([*argv, "--help"])
    assert caught, f"`proctor {' '.join(argv)} --help` printed no argparse help"
    return caught[-1]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser | None]:
    """Subparsers by name, plus positional choices that act as one (`server migrate`)."""
    found: dict[str, argparse.ArgumentParser | None] = {}
    for action in parser._actions:
        if isinstance(action.choices, dict):
            found.update(action.choices)
        elif not action.option_strings and action.choices:
            found.update(dict.fromkeys(str(c) for c in action.choices))
    return found


def long_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The parser's visible `--flags`, `--help` left out."""
    return {
        flag
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    }


def command_flags(name: str) -> set[str]:
    """Every visible long flag of `proctor NAME` and of its subcommands."""
    parser = help_parser([name])
    flags = long_flags(parser)
    for sub in subcommands(parser).values():
        if sub is not None:
            flags |= long_flags(sub)
    return flags


def eval_fields(model: type[BaseModel] = EvalConfig, prefix: str = "") -> dict[str, str]:
    """`EvalConfig` field paths and their flags: {"client.base_url": "--client.base-url"}."""
    fields: dict[str, str] = {}
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and extra.get("cli") is False:
            continue
        path = f"{prefix}{name}"
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields.update(eval_fields(annotation, f"{path}."))
        else:
            fields[path] = "--" + path.replace("_", "-")
    return fields


def env_variables(settings: type[BaseSettings]) -> dict[str, list[str]]:
    """The environment variables that fill each field of a settings class, by field."""
    prefix = str(settings.model_config.get("env_prefix", ""))
    names: dict[str, list[str]] = {}
    for field, info in settings.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names[field] = [c for c in alias.choices if isinstance(c, str)]
        elif isinstance(alias, str):
            names[field] = [alias]
        else:
            names[field] = [f"{prefix}{field}".upper()]
    return names


def env_names(settings: type[BaseSettings]) -> list[str]:
    """Every environment variable of a settings class."""
    return [name for names in env_variables(settings).values() for name in names]


def source_variables() -> set[str]:
    """Every complete `PROCTOR_*` name written in the package's source."""
    pattern = re.compile(r"\bPROCTOR_[A-Z0-9_]*[A-Z0-9]\b")
    found: set[str] = set()
    for path in (ROOT / "src" / "proctor").rglob("*.py"):
        found.update(pattern.findall(path.read_text(encoding="utf-8")))
    return found


def missing_settings(settings: type[BaseSettings], text: str) -> list[str]:
    """The settings' variables that `text` never mentions."""
    return [name for name in env_names(settings) if not mentions(text, name)]


def missing_commands(commands: dict[str, tuple[str, str]], sections: dict[str, str]) -> list[str]:
    """Commands without a `## proctor NAME` section in docs/cli.md."""
    return [name for name in commands if name not in sections]


def documented_defaults(text: str) -> dict[str, str]:
    """The default column of configuration.md's tables: {"PROCTOR_PORT": " `8000`", ...}.

    Variable tables have the default just before the meaning; eval field tables last.
    """
    rows = re.findall(r"^\| `([\w.]+)`(?: \(or `\w+`\))? \|(.*)$", text, re.M)
    return {
        name: cells.split(" | ")[-2 if name.startswith("PROCTOR_") else -1] for name, cells in rows
    }


def shown(value: object) -> str:
    """A default as the docs write it: `true`, `0.25`, `15`, `~/.proctor`."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def defaults_that_differ(model: type[BaseModel], names: dict[str, str], text: str) -> list[str]:
    """Fields whose plain default (no factory, not None) is not what the docs' table says."""
    documented = documented_defaults(text)
    wrong = []
    for field, info in model.model_fields.items():
        default = info.default
        if default is None or info.default_factory is not None or info.is_required():
            continue
        cell = documented.get(names[field], "")
        if shown(default) not in cell:
            wrong.append(f"{names[field]}: code {shown(default)!r}, docs {cell.strip()!r}")
    return wrong


# EvalConfig and its sub-models, with the dotted prefix of their fields
EVAL_MODELS = [("", EvalConfig)] + [
    (f"{name}.", info.annotation)
    for name, info in EvalConfig.model_fields.items()
    if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
]


def example_commands() -> list[list[str]]:
    """Every `proctor ...` command in the bash blocks of README.md and docs/, as argv."""
    commands = []
    for page in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.M | re.S):
            for line in block.splitlines():
                for part in line.split(" #")[0].split("&&"):
                    words = shlex.split(part.strip().rstrip("&"))
                    if words and words[0] in ("proctor", ".venv/bin/proctor"):
                        commands.append(words[1:])
    return commands


def help_defaults(parser: argparse.ArgumentParser) -> dict[str, str]:
    """{"--port": "8001", ...}: the `(default: X)` each option's help shows, as --help prints it."""
    formatter = parser._get_formatter()
    shown: dict[str, str] = {}
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        text = " ".join(formatter._expand_help(action).split())
        if (default := help_default(text)) is not None:
            shown[max(action.option_strings, key=len)] = default.replace("`", "")
    return shown


def doc_defaults(section: str) -> dict[str, str]:
    """{"--port": "8001", ...}: the default column of a docs table, backticks dropped.

    Only the first `--flag` of a row's first cell counts (`--push` of `--push / --no-push`).
    `off` (a switch), `unset` and `none` (nothing is sent or set) mean no default to show.
    """
    found: dict[str, str] = {}
    header = re.search(r"^\| flag \| default \| meaning \|$", section, re.M)
    if header is None:
        return found
    for row in re.findall(r"^\| (.+?) \| (.*?) \| .* \|$", section[header.end() :], re.M):
        flag = re.search(r"--[\w.-]+", row[0])
        if flag and row[1].strip() not in ("", "required", "off", "unset", "none"):
            found[flag.group(0)] = row[1].replace("`", "").strip()
    return found


def documented_parsers() -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, docs text) for every command and subcommand docs/cli.md has a section for."""
    found = []
    for name, section in cli_sections(CLI_DOC.read_text()).items():
        parser = help_parser([name])
        subs = {k: v for k, v in subcommands(parser).items() if v is not None}
        parts = re.split(rf"^### proctor {re.escape(name)} (\S+)\n", section, flags=re.M)
        found.append((name, parser, parts[0]))
        for sub, text in zip(parts[1::2], parts[2::2], strict=True):
            if sub in subs:
                found.append((f"{name} {sub}", subs[sub], text))
    return found


# --- the checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "parser", "text"), documented_parsers(), ids=[n for n, _, _ in documented_parsers()]
)
def test_help_shows_the_defaults_the_docs_list(
    name: str, parser: argparse.ArgumentParser, text: str
) -> None:
    # Both come from one source: the parser (its defaults, or the help text where a setting
    # decides), so `proctor NAME --help` and docs/cli.md cannot tell different stories.
    documented, shown = doc_defaults(text), help_defaults(parser)
    if not documented:
        return  # a section without a defaults table (its prose names them)
    assert {f: documented.get(f) for f in shown} == shown
    assert {f: shown.get(f) for f in documented} == documented


def test_a_drifted_default_is_caught() -> None:
    parser = help_parser(["demo-model"])
    section = cli_sections(CLI_DOC.read_text())["demo-model"]
    assert doc_defaults(section)["--port"] == help_defaults(parser)["--port"] == "8001"
    drifted = section.replace("| `--port` | 8001 |", "| `--port` | 8002 |")
    assert doc_defaults(drifted)["--port"] == "8002"


def test_every_command_has_a_section_and_a_readme_row() -> None:
    assert missing_commands(COMMANDS, cli_sections(CLI_DOC.read_text())) == []
    readme = README.read_text()
    assert [n for n in COMMANDS if f"`proctor {n}" not in readme] == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_and_flag_is_documented(name: str) -> None:
    section = cli_sections(CLI_DOC.read_text()).get(name, "")
    subs = subcommands(help_parser([name]))
    assert [s for s in subs if f"proctor {name} {s}" not in section] == []
    readme_row = next(
        (line for line in README.read_text().splitlines() if line.startswith(f"| `proctor {name}")),
        "",
    )
    assert [s for s in subs if f"`{s}`" not in readme_row] == []
    assert sorted(f for f in command_flags(name) if not mentions(section, f)) == []


def test_every_eval_config_field_is_a_documented_flag() -> None:
    fields = eval_fields()
    parser_flags = long_flags(help_parser(["eval"]))
    # The walk above must mirror how proctor.eval.args names flags, or it proves nothing.
    assert set(fields.values()) - {"--env"} <= parser_flags
    eval_section = cli_sections(CLI_DOC.read_text())["eval"]
    config_doc = CONFIG_DOC.read_text()
    assert [f for f in fields.values() if f != "--env" and not mentions(eval_section, f)] == []
    assert [p for p in fields if f"`{p}`" not in config_doc] == []


@pytest.mark.parametrize("settings", [Settings, LauncherSettings, ClientSettings])
def test_every_setting_is_documented(settings: type[BaseSettings]) -> None:
    assert missing_settings(settings, CONFIG_DOC.read_text()) == []


@pytest.mark.parametrize("settings", [Settings, LauncherSettings, ClientSettings])
def test_documented_setting_defaults_match_the_code(settings: type[BaseSettings]) -> None:
    names = {field: variables[0] for field, variables in env_variables(settings).items()}
    assert defaults_that_differ(settings, names, CONFIG_DOC.read_text()) == []


@pytest.mark.parametrize(("prefix", "model"), EVAL_MODELS, ids=[m.__name__ for _, m in EVAL_MODELS])
def test_documented_eval_defaults_match_the_code(prefix: str, model: type[BaseModel]) -> None:
    names = {field: f"{prefix}{field}" for field in model.model_fields}
    section = CONFIG_DOC.read_text().split("\n## Eval config\n")[1].split("\n## ")[0]
    assert defaults_that_differ(model, names, section) == []


def test_client_settings_file_keys_are_documented() -> None:
    config_doc = CONFIG_DOC.read_text()
    assert [k for k in ClientSettings.model_fields if f"`{k}`" not in config_doc] == []


def test_every_variable_the_code_reads_is_documented() -> None:
    docs = all_docs()
    assert sorted(v for v in source_variables() if not mentions(docs, v)) == []


def test_an_undocumented_setting_or_command_is_caught() -> None:
    class Grown(Settings):
        brand_new_knob: int = 3
        """A setting nobody documented yet."""

    assert missing_settings(Grown, CONFIG_DOC.read_text()) == ["PROCTOR_BRAND_NEW_KNOB"]
    drifted = CONFIG_DOC.read_text().replace(
        "| `PROCTOR_PORT` | `8000` |", "| `PROCTOR_PORT` | `80` |"
    )
    names = {field: variables[0] for field, variables in env_variables(Settings).items()}
    assert defaults_that_differ(Settings, names, drifted) == [
        "PROCTOR_PORT: code '8000', docs '`80`'"
    ]
    grown = {**COMMANDS, "frobnicate": ("frobnicate_cmd", "Frobnicate.")}
    assert missing_commands(grown, cli_sections(CLI_DOC.read_text())) == ["frobnicate"]
    assert not mentions("`--client.base-url`", "--client")
    assert not mentions("--identity", "--id")


def test_readme_keeps_its_setup_commands() -> None:
    readme = README.read_text()
    for command in SETUP_COMMANDS:
        assert f"\n{command}\n" in readme
    assert (ROOT / "scripts" / "test").is_file()


def test_relative_links_resolve() -> None:
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


@pytest.mark.parametrize("argv", example_commands(), ids=" ".join)
def test_example_commands_parse(argv: list[str]) -> None:
    # Parsed, not run: an example with a flag that does not exist (any more) fails here.
    # A batch system's variables stand for numbers there (`--shard $I/$N` in docs/scale.md).
    argv = [
        a.replace("$SLURM_ARRAY_TASK_ID", "0").replace("$SLURM_ARRAY_TASK_COUNT", "8") for a in argv
    ]
    if argv[0] == "eval":
        parse_eval_args(argv[1:])
    else:
        help_parser(argv[:1]).parse_args(argv[1:])


def test_the_readme_has_example_commands() -> None:
    assert {argv[0] for argv in example_commands()} >= {"eval", "server", "hosted", "quickstart"}


# --- the plugin example -----------------------------------------------------------------------


def code_block(text: str, language: str, containing: str) -> str:
    """The first fenced block of `language` in `text` that contains `containing`."""
    for block in re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S):
        if containing in block:
            return str(block)
    raise AssertionError(f"no ```{language} block with {containing!r}")


@pytest.mark.e2e
def test_the_environment_example_installs_and_runs(demo_model: str, tmp_path: Path) -> None:
    import tomllib

    text = ENV_DOC.read_text()
    module = code_block(text, "python", "def load_environment")
    project = tomllib.loads(code_block(text, "toml", "proctor.environments"))
    entry_points = project["project"]["entry-points"]["proctor.environments"]
    (name, target), *_ = entry_points.items()

    # Installed as pip would: the module plus a dist-info that declares the entry point.
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{target.split(':')[0]}.py").write_text(module)
    dist = site / "proctor_word_count-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: proctor-word-count\nVersion: 0.1.0\n"
    )
    (dist / "entry_points.txt").write_text(f"[proctor.environments]\n{name} = {target}\n")
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    listed = subprocess.run(
        [*PROCTOR, "envs", "list", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    info = {i["name"]: i for i in json.loads(listed.stdout)}[name]
    assert info["kind"] == "finite" and info["size"] == 3, info

    out = tmp_path / "out"
    ran = subprocess.run(
        [
            *PROCTOR,
            "eval",
            name,
            "--env-args",
            '{"repeat": 2}',
            "-r",
            "2",
            "--no-push",
            "--no-rich",
            "-o",
            str(out),
            "--run.dir",
            "wc",
            "--client.base-url",
            demo_model,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    records = [json.loads(line) for line in (out / "wc" / "traces.jsonl").read_text().splitlines()]
    assert len(records) == 12
    assert all(r["ok"] for r in records)
    # The demo model does not know this task: it is scored, and scores 0.
    assert {r["rewards"]["exact_count"] for r in records} == {0.0}
    assert all(r["metrics"]["reply_chars"] > 0 for r in records)


@pytest.mark.e2e
def test_the_readme_library_example_runs(demo_model: str, tmp_path: Path) -> None:
    code = code_block(README.read_text(), "python", "run_eval")
    env = {"PROCTOR_MODEL_BASE_URL": demo_model, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    first, second = ran.stdout.splitlines()
    assert first == "arithmetic 1000 tasks"
    status, _reward, run_dir = second.split()
    assert status == "completed"
    assert len((tmp_path / run_dir / "traces.jsonl").read_text().splitlines()) == 10


def test_the_docs_say_what_a_429_does_to_the_cap() -> None:
    """cli.md once said "by 10%" while engine.md and the code halve it (#25)."""
    import inspect

    from proctor.models.limiter import AdaptiveLimiter

    decrease = inspect.signature(AdaptiveLimiter).parameters["decrease"].default
    assert decrease == 0.5
    for page in ("cli.md", "engine.md"):
        text = " ".join((ROOT / "docs" / page).read_text().split())
        assert "429" in text and "halves the cap" in text, page
        assert "by 10%" not in text, page
