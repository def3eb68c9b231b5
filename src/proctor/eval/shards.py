"""One evaluation run as N shards by any batch system: create it, then finalize it.

`proctor evals create ENV [eval flags]` makes the evaluation the shards attach to, recording
how many samples the whole run makes; each shard runs `proctor eval ENV [the same flags]
--shard I/N --run.attach ID`; `proctor evals finalize ID` closes it once every sample is in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from proctor.errors import ConfigError
from proctor.eval.config import EvalConfig, in_shard

if TYPE_CHECKING:
    from proctor.envs import Task


@dataclass(frozen=True)
class ShardedEvaluation:
    """The evaluation created for the shards, and what the whole run makes."""

    evaluation_id: str
    expected_samples: int
    url: str | None


def pairs_of_other_shards(tasks: list[Task], config: EvalConfig) -> set[tuple[int, int]]:
    """The (example, rollout) pairs other shards run: none without `--shard`.

    The plan's order (task by task, rollout by rollout) is the same in every shard, so the
    slices taken round robin from it are disjoint and together the whole run.
    """
    if config.shard is None:
        return set()
    if not config.run.attach:
        raise ConfigError(
            "--shard runs one slice of an evaluation, so it needs --run.attach ID; "
            "create the evaluation with `proctor evals create` and pass its id"
        )
    pairs = ((t.index, k) for t in tasks for k in range(1, config.rollouts_per_example + 1))
    return {pair for position, pair in enumerate(pairs) if not in_shard(position, config.shard)}


def planned_samples(config: EvalConfig) -> int:
    """How many (example, rollout) pairs the unsharded run makes: what the shards add up to.

    Raises:
        ConfigError: unknown environment, or it offers no tasks.
    """
    from proctor.envs import load_environment

    env = load_environment(config.env, **config.env_args)
    tasks = env.taskset.select(config.num_examples)
    if not tasks:
        raise ConfigError(f"environment {config.env} offered no tasks; check its --env-args")
    return len(tasks) * config.rollouts_per_example


def create_for_shards(config: EvalConfig) -> ShardedEvaluation:
    """Create the evaluation on the configured platform (`PROCTOR_API_URL`/`_KEY`).

    Raises:
        ConfigError: bad config, or no API key.
        PlatformError: the platform refused or is unreachable.
    """
    from proctor import runs

    if config.shard is not None or config.run.attach is not None:
        raise ConfigError(
            "`evals create` makes the evaluation the shards attach to; drop --shard/--run.attach"
        )
    expected = planned_samples(config)
    config = config.resolved()
    settings = runs.load_settings()
    key = settings.key()
    if key is None:
        raise ConfigError("no API key: set PROCTOR_API_KEY (or api_key in ~/.proctor/config.toml)")
    client = runs.PlatformClient(settings.api_url, key)
    try:
        created = runs.create_sharded(
            client,
            name=config.run.name or config.env,
            environment=config.env,
            model=config.model,
            config=config.saved_form(),
            expected_samples=expected,
            team_id=settings.team_id,
        )
    finally:
        client.close()
    return ShardedEvaluation(str(created["evaluation_id"]), expected, created.get("viewer_url"))
