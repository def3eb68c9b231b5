"""`proctor demo-model`: serve the scripted demo model over OpenAI-compatible HTTP."""

from __future__ import annotations

import argparse

from proctor.cli._parser import CommandParser, port_number
from proctor.errors import ConfigError


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="proctor demo-model",
        description="Serve the scripted demo model (a stand-in for a real endpoint) on loopback.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind")
    parser.add_argument(
        "--port", type=port_number, default=8001, help="TCP port; 0 picks a free one"
    )
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="delay before each answer, in milliseconds"
    )
    parser.add_argument(
        "--error-rate", type=float, default=0.0, help="share of requests answered 429/500 (0-1)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the mistakes and the errors")
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=None,
        metavar="RPS",
        help="answer at most RPS chat requests per second; above it HTTP 429 with Retry-After",
    )
    return parser


def run(argv: list[str]) -> int:
    """Parse the flags and serve until SIGINT, SIGTERM or SIGHUP (exit 130, 143, 129)."""
    args = _parser().parse_args(argv)
    # Imported after parsing: aiohttp and pydantic would make `--help` and bad flags slow.
    from pydantic import ValidationError

    from proctor.demo import DemoModelConfig, serve

    try:
        config = DemoModelConfig(
            host=args.host,
            port=args.port,
            latency_ms=args.latency_ms,
            error_rate=args.error_rate,
            seed=args.seed,
            rate_limit=args.rate_limit,
        )
    except ValidationError as e:
        problem = e.errors()[0]
        flag = "--" + str(problem["loc"][0]).replace("_", "-")
        raise ConfigError(f"{flag}: {problem['msg'].lower()}; fix the flag.") from None

    def ready(url: str) -> None:
        print(f"demo model serving on {url}", flush=True)

    stopped_by = serve(config, ready=ready)
    # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP, as for every long-running command.
    return 128 + stopped_by if stopped_by else 0
