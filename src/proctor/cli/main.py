"""Entry point of the `proctor` console script: dispatches to one module per command.

Each command module exposes `run(argv: list[str]) -> int`. Modules are imported lazily so
`proctor --help` and light commands start fast.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

from proctor.cli._terminal import SafeStream
from proctor.errors import ProctorError

# command name -> (module under proctor.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("eval_cmd", "Run an environment against a model and write a run directory."),
    "envs": ("envs_cmd", "List the installed environments."),
    "demo-model": ("demo_model_cmd", "Serve the scripted demo model over OpenAI-compatible HTTP."),
    "runs": ("runs_cmd", "Work with local run directories (list, sync, export)."),
    "server": ("server_cmd", "Run the platform server (REST API + dashboard)."),
    "keys": ("keys_cmd", "Create, list and revoke API keys."),
    "teams": ("teams_cmd", "Create teams and manage their members."),
    "launcher": ("launcher_cmd", "Run the hosted-evaluation launcher as its own process."),
    "hosted": ("hosted_cmd", "Start, follow and cancel hosted evaluations."),
    "evals": ("evals_cmd", "List, show, export, rename and delete evaluations on the platform."),
    "quickstart": ("quickstart_cmd", "Start a server, the demo model and one hosted eval."),
    "config": ("config_cmd", "Show every effective setting and where it was read."),
}


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: proctor [--version] COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += [
        "",
        "options:",
        "  -h, --help  show this help and exit",
        "  --version   print the installed version and exit",
        "",
        "Run `proctor COMMAND --help` for a command's options.",
    ]
    return "\n".join(lines)


EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a Unix tool stopped by a closed pipe (`| head`) exits with."""


def main(argv: list[str] | None = None) -> int:
    """Run one proctor command and return its exit code."""
    stdout, stderr = sys.stdout, sys.stderr
    # Everything printed passes `_terminal.clean`: no escape sequence from an evaluation's
    # name, an error message or a sandbox log reaches the terminal.
    sys.stdout, sys.stderr = SafeStream(stdout), SafeStream(stderr)
    try:
        try:
            return _dispatch(list(sys.argv[1:] if argv is None else argv))
        finally:
            sys.stdout.flush()  # a closed pipe surfaces here (also after --help), not at exit
            sys.stdout, sys.stderr = stdout, stderr
    except BrokenPipeError:
        # The reader (`| head`) has gone: stop quietly. Point stdout at /dev/null so the
        # interpreter's own flush at exit does not print "Exception ignored ...".
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _dispatch(args: list[str]) -> int:
    if not args:
        print(_usage(), file=sys.stderr)
        return 2
    if args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if args[0] == "--version":
        from proctor import __version__

        print(f"proctor {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(
            f"proctor: unknown command {name!r}; run `proctor --help` for the list.",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(f"proctor.cli.{COMMANDS[name][0]}")
    try:
        return int(module.run(rest))
    except ProctorError as e:
        logging.getLogger("proctor").debug("command failed", exc_info=True)
        print(f"proctor {name}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"proctor {name}: interrupted.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
