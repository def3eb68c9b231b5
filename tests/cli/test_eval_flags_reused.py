"""`proctor hosted run` and `proctor quickstart` take `proctor eval`'s flags (one definition,
in proctor.eval.args): the same names, help and defaults, and what they send is the hosted
`eval_config` those flags mean."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from proctor.cli.hosted_cmd import _eval_config, _parser
from proctor.errors import ConfigError
from proctor.eval.args import build_parser
from tests.test_docs import help_parser


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        flag: action
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for flag in action.option_strings
    }


@pytest.mark.parametrize("command", [["hosted", "run"], ["quickstart"]])
def test_shared_flags_have_evals_names_help_and_defaults(command: list[str]) -> None:
    evals = _options(build_parser())
    theirs = _options(help_parser(command))
    shared = sorted(set(theirs) & set(evals) - {"-h", "--help", "-m", "--model"})
    assert {"-n", "--num-examples", "-r", "--rollouts-per-example", "-c"} <= set(shared)
    assert "--sampling.temperature" in shared
    for flag in shared:
        mine, eval_action = theirs[flag], evals[flag]
        assert mine.option_strings == eval_action.option_strings, flag
        if command == ["quickstart"] and flag in ("-n", "--num-examples"):
            # alphabet-sort has no end: quickstart's one default of its own, shown as such.
            assert (
                mine.help
                == "number of tasks to evaluate; required for infinite tasksets (default: 20)"
            )
            continue
        if command == ["hosted", "run"] and flag in ("--client.base-url", "--client.api-key-var"):
            # The same text, but the default is the sandbox's to decide, and the help says so.
            before = eval_action.help.split(" (default:")[0].split(" (unset:")[0].rstrip(". ")
            assert (
                mine.help.startswith(f"{before} (default: ") and "read in the sandbox" in mine.help
            )
            continue
        assert mine.help == eval_action.help, flag


def _sent(*argv: str) -> dict[str, object]:
    return _eval_config(_parser().parse_args(["run", "reverse-text", "-m", "demo", *argv]))


def test_hosted_run_sends_what_evals_flags_mean() -> None:
    assert _sent() == {"num_examples": -1, "rollouts_per_example": 1}  # eval's defaults
    sent = _sent(
        "-n", "4", "-r", "2", "-c", "8", "--sampling.temperature", "0.5",
        "--sampling.stop", '["x"]', "--env-args", '{"a": 1}', "--client.max-retries", "2",
        "-v", "--timeout-minutes", "3",
    )  # fmt: skip
    assert sent == {
        "num_examples": 4,
        "rollouts_per_example": 2,
        "max_concurrent": 8,
        "sampling_args": {"temperature": 0.5, "stop": ["x"]},
        "env_args": {"a": 1},
        "max_retries": 2,
        "verbose": True,
        "timeout_minutes": 3.0,
    }


def test_hosted_run_keeps_the_public_clients_spellings() -> None:
    sent = _sent(
        "--rollouts", "3", "--api-base-url", "http://127.0.0.1:1/v1", "--api-key-var", "K",
        "--sampling-args", '{"temperature": 0.1, "top_p": 0.9}', "--sampling.temperature", "0.7",
    )  # fmt: skip
    assert sent == {
        "num_examples": -1,
        "rollouts_per_example": 3,
        "api_base_url": "http://127.0.0.1:1/v1",
        "api_key_var": "K",
        "sampling_args": {"temperature": 0.7, "top_p": 0.9},  # the eval flag wins
    }


def test_hosted_run_refuses_a_bad_value_in_evals_words() -> None:
    with pytest.raises(ConfigError, match=r"^-n/--num-examples must be at least 1 \(got 0\)$"):
        _sent("-n", "0")
    with pytest.raises(ConfigError, match=r"^-r/--rollouts-per-example must be a whole number"):
        _sent("-r", "x")


def test_hosted_run_secrets_travel_in_the_body_not_as_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_TOKEN", "s3cret")
    assert _sent("--secret", "MY_TOKEN")["custom_secrets"] == {"MY_TOKEN": "s3cret"}


def test_quickstart_sends_its_count_and_evals_other_defaults() -> None:
    from proctor.cli import quickstart_cmd
    from proctor.eval.args import check_overrides, given_overrides
    from proctor.sandboxes.command import wire_config

    def sent(*argv: str) -> dict[str, Any]:
        args = quickstart_cmd._parser().parse_args(list(argv))
        return wire_config(check_overrides(given_overrides(args, quickstart_cmd.QUICKSTART_FIELDS)))

    assert sent() == {"num_examples": 20, "rollouts_per_example": 1}
    assert sent("-n", "5", "--rollouts", "2", "--sampling.seed", "3") == {
        "num_examples": 5,
        "rollouts_per_example": 2,
        "sampling_args": {"seed": 3},
    }
