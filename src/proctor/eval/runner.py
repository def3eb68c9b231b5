"""`run_eval`: one evaluation from resolved config to a finished run directory.

The order matters and is the contract with the platform (DESIGN.md): everything that can
be refused — config, environment, task selection, run directory, model endpoint, platform
run — is checked before anything is written; from the moment the platform run is open,
every way out (done, Ctrl-C, a failure) finishes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.errors import ConfigError, PlatformError, ProctorError, RunDirError
from proctor.eval import event_loop
from proctor.eval.config import EvalConfig
from proctor.eval.judge import open_judge
from proctor.eval.platform_run import LocalRun, PlatformRun, open_platform_run
from proctor.eval.progress import LogProgress, ProgressView
from proctor.eval.run_dir import RunDirectory, unwritable
from proctor.eval.scheduler import Job, JobFeed, plan_jobs, run_jobs
from proctor.eval.shards import pairs_of_other_shards
from proctor.eval.stats import RunStats
from proctor.eval.workers import WorkerPool, effective_workers

if TYPE_CHECKING:
    from proctor.contract import RunStatus
    from proctor.envs import Environment, Episode, Task
    from proctor.models.types import ChatClient

logger = logging.getLogger(__name__)

EXIT_CODES: dict[str, int] = {"completed": 0, "failed": 1, "cancelled": 130}
EXIT_UNSYNCED = 75
"""A completed run the platform does not hold whole yet (EX_TEMPFAIL: sync it later)."""


@dataclass
class EvalResult:
    """How a run ended, where it lives and its figures."""

    status: RunStatus
    run_dir: Path
    run_id: str
    run_name: str
    url: str | None
    stats: RunStats
    error: str | None = None
    signal_name: str | None = None
    """`SIGINT` or `SIGTERM` when the run was stopped by one."""
    sync_command: str | None = None
    """Set when the platform does not hold the whole run: the command that finishes it."""

    @property
    def exit_code(self) -> int:
        """0 finished (even with errored rollouts), 1 failed, 130/143 interrupted, 75 finished
        but not all on the platform yet."""
        if self.signal_name == "SIGTERM":
            return 143
        if self.status == "completed" and self.sync_command is not None:
            return EXIT_UNSYNCED
        return EXIT_CODES[self.status]


def run_eval(
    config: EvalConfig,
    *,
    view: ProgressView | None = None,
    client: ChatClient | None = None,
    platform: PlatformRun | None = None,
) -> EvalResult:
    """Run an evaluation to the end (or until Ctrl-C) and return how it went.

    Args:
        config: the evaluation's settings.
        view: what shows progress; default: log lines.
        client: the model to evaluate, e.g. `proctor.testing.ScriptedClient`; default: the
            OpenAI-compatible endpoint `config.client` names (checked first when
            `client.preflight` is set). One passed in is the caller's to close.
        platform: the run to log episodes to and finish, e.g. one `proctor.runs.init` opened;
            default: the one `config.push` and `config.run.attach` ask for.

    Raises:
        ConfigError: bad config, unknown environment, infinite taskset without -n.
        RunDirError: the run directory holds results (no --resume/--clean), does not match,
            or another process is running it.
        NothingToResume: `--resume` of a run whose evaluation is COMPLETED already.
        ModelError: the model endpoint does not answer at all.
        PlatformError: the platform run cannot be opened or attached to.
    """
    from proctor.envs import load_environment

    config = _with_saved_run_name(config)
    # `run.dir`, when given, decides the directory; the name only does when it is not.
    naming = "--run.name" if config.run.dir is None else "--run.dir"
    config = config.resolved()
    if config.serve:
        raise ConfigError(
            "--serve (environments in a separate process) is not available yet; "
            "drop it or pass --no-serve"
        )
    env = load_environment(config.env, **config.env_args)
    tasks = env.taskset.select(config.num_examples)
    if not tasks:
        raise ConfigError(f"environment {config.env} offered no tasks; check its --env-args")
    if config.num_examples is not None and len(tasks) < config.num_examples:
        logger.warning(
            "%s has only %d tasks; running all of them (-n %d asked for more)",
            config.env,
            len(tasks),
            config.num_examples,
        )
    run_dir = RunDirectory(config.run_dir)
    lock = run_dir.lock()  # one writer per run directory, until this run has ended
    try:
        run_dir.check(resume=config.resume, clean=config.clean, naming=naming)
        kept = _records_to_keep(run_dir, config, tasks) if config.resume else None
        done = {(r["example_id"], r["rollout_number"]) for r in kept or []}
        others = pairs_of_other_shards(tasks, config)
        jobs = plan_jobs(tasks, config.rollouts_per_example, done=done | others)
        total = len(tasks) * config.rollouts_per_example - len(others)
        run = _Run(
            config,
            env,
            run_dir,
            jobs,
            kept,
            total,
            view or LogProgress(),
            client=client,
            platform_run=platform,
        )
        return event_loop.run(run.execute(), stdlib=event_loop.spawns_processes(env))
    finally:
        lock.release()


def _with_saved_run_name(config: EvalConfig) -> EvalConfig:
    """On `--resume --run.dir D` without a name, keep the name the run was started with."""
    if not config.resume or config.run.name is not None or config.run.dir is None:
        return config
    saved = RunDirectory(Path(config.output_dir) / config.run.dir)
    if not saved.config_path.is_file():
        return config  # `check()` explains that there is nothing to resume
    name = saved.saved_config().get("run", {}).get("name")
    if not isinstance(name, str) or not name:
        return config
    return config.model_copy(update={"run": config.run.model_copy(update={"name": name})})


def _records_to_keep(
    run_dir: RunDirectory, config: EvalConfig, tasks: list[Task]
) -> list[dict[str, Any]]:
    """The successful episodes of the earlier run that belong to this plan, one per pair."""
    try:
        saved_key = EvalConfig.model_validate(run_dir.saved_config()).resume_key()
    except ValueError:
        raise RunDirError(
            f"{run_dir.config_path} is not a proctor eval config; pass --clean to start over"
        ) from None
    key = config.resume_key()
    if saved_key != key:
        differing = sorted(k for k in set(saved_key) | set(key) if saved_key.get(k) != key.get(k))
        raise RunDirError(
            f"{run_dir.path} was run with different settings ({', '.join(differing)}); "
            "pass the same settings to resume, or --clean to start over"
        )
    wanted = {(t.index, k) for t in tasks for k in range(1, config.rollouts_per_example + 1)}
    kept: dict[tuple[Any, Any], dict[str, Any]] = {}
    for record in run_dir.load_records():
        pair = (record.get("example_id"), record.get("rollout_number"))
        if record.get("error") is None and pair in wanted and pair not in kept:
            kept[pair] = record
    return list(kept.values())


def _base_url_flag(config: EvalConfig) -> str:
    """The setting that changes the model's URL, for whoever started this run."""
    if config.run.attach:
        # A launcher ran us; for the hosted one, the user's flag is `hosted run`'s.
        return "--client.base-url (`proctor hosted run --api-base-url`)"
    return "--client.base-url"


class _Run:
    """The asynchronous part of one evaluation."""

    def __init__(
        self,
        config: EvalConfig,
        env: Environment,
        run_dir: RunDirectory,
        jobs: list[Job],
        kept: list[dict[str, Any]] | None,
        total: int,
        view: ProgressView,
        *,
        client: ChatClient | None = None,
        platform_run: PlatformRun | None = None,
    ) -> None:
        self.config = config
        self.env = env
        self.run_dir = run_dir
        self.jobs = jobs
        self.kept = kept
        self.view = view
        self.stats = RunStats(total=total)
        self.signal_name: str | None = None
        self.first_error: str | None = None
        self.client = client  # given: the caller's, neither preflighted nor closed here
        self.platform_run = platform_run

    async def execute(self) -> EvalResult:
        from proctor.trust import use_ca_bundle

        # One trust policy in the run: the platform's client trusts what the model's does.
        use_ca_bundle(self.config.client.ca_bundle)
        if self.client is not None:  # the caller's model: rollouts run in this process
            judge = open_judge(self.env, self.config)
            try:
                return await self._run_opened(self._open_platform_run(), self.client, None)
            finally:
                await self.env.aclose()
                if judge is not None:
                    await judge.aclose()
        from proctor.models.openai_client import OpenAIChatClient

        config = self.config
        client = OpenAIChatClient(
            model=config.model,
            client=config.client,
            sampling=config.sampling,
            max_connections=config.max_concurrent,
        )
        workers = effective_workers(
            config.workers, concurrency=config.max_concurrent, jobs=len(self.jobs)
        )
        pool: WorkerPool | None = None
        judge = open_judge(self.env, config) if workers <= 1 else None  # else each worker's
        try:
            if workers > 1:
                # Started first: the workers load while this process checks and opens the run.
                pool = WorkerPool(
                    config, self.env, workers=workers, concurrency=config.max_concurrent
                )
                await pool.start()
            if config.client.preflight and self.jobs:
                await client.preflight(fix=_base_url_flag(config))
            platform_run = self._open_platform_run()
            return await self._run_opened(platform_run, client, pool)
        finally:
            if pool is not None:
                await pool.aclose()
            await self.env.aclose()
            await client.aclose()
            if judge is not None:
                await judge.aclose()

    def _open_platform_run(self) -> PlatformRun:
        if self.platform_run is not None:
            return self.platform_run
        config = self.config
        try:
            return open_platform_run(
                push=config.push,
                attach=config.run.attach,
                name=config.run.name or "",
                environment=_ran(config.env, self.env),
                model=config.model,
                config=config.saved_form(),
                run_dir=self.run_dir.path,
                local_id=self._resumed_id(),
                resume=config.resume,
                finish_timeout=config.run.finish_timeout,
                # A verifiers environment is never filed under a built-in of its name.
                framework=str(getattr(self.env, "framework", "proctor")),
            )
        except ProctorError:
            raise
        except Exception as e:
            raise PlatformError(f"cannot open the platform run: {type(e).__name__}: {e}") from e

    def _resumed_id(self) -> str | None:
        if not self.config.resume:
            return None
        saved = self.run_dir.saved_config().get("run", {}).get("id")
        return saved if isinstance(saved, str) else None

    async def _run_opened(
        self, platform_run: PlatformRun, client: ChatClient, pool: WorkerPool | None
    ) -> EvalResult:
        config = self.config
        run_info = {"id": platform_run.id, "name": config.run.name}
        # Until the rollouts say otherwise: a KeyboardInterrupt or cancellation escaping from
        # anywhere below must finish the platform run as cancelled, never as completed.
        status: RunStatus = "cancelled"
        error: str | None = "interrupted"
        log_handler: logging.Handler | None = None
        try:
            if self.kept is not None:
                for record in self.kept:
                    record["run"] = run_info
            try:
                self.run_dir.prepare(clean=config.clean, kept=self.kept)
                saved = config.saved_form()
                saved["run"]["id"] = platform_run.id
                self.run_dir.write_config(saved)
                log_handler = self.run_dir.attach_log(verbose=config.verbose)
            except OSError as e:
                raise unwritable(self.run_dir.path, e) from e
            logger.info(
                "run %s (id %s): %d episodes to run, %d kept, in %s",
                config.run.name,
                platform_run.id,
                len(self.jobs),
                len(self.kept or []),
                self.run_dir.path,
            )
            if self.kept:
                for record in self.kept:
                    self.stats.add(record, new=False)
                platform_run.log_episodes(self.kept)
            status, error = await self._rollouts(platform_run, client, run_info, pool)
            if status == "completed" and self.stats.done and self.stats.ok == 0:
                # Errored rollouts are data, but a run with nothing else measured nothing:
                # most often a setup mistake (wrong model name, endpoint, key).
                status = "failed"
                error = f"every episode failed; the first: {self.first_error}"
        except Exception as e:
            # Our own errors are sentences already; anything else is named by its type.
            status = "failed"
            error = str(e) if isinstance(e, ProctorError) else f"{type(e).__name__}: {e}"
            logger.debug("run failed", exc_info=True)
        finally:
            if status == "failed":
                logger.error("run %s failed: %s", config.run.name, error)
            try:
                platform_run.finish(status=status, error=error)
                if status == "completed" and platform_run.refused:
                    # Closed on the platform first (a cancel won): this run did not finalize.
                    status, error = "failed", platform_run.refused
                    logger.error("run %s failed: %s", config.run.name, error)
            finally:
                logger.info("run %s %s", config.run.name, status)
                if log_handler is not None:
                    logging.getLogger("proctor").removeHandler(log_handler)
                    log_handler.close()
        return EvalResult(
            status=status,
            run_dir=self.run_dir.path,
            run_id=platform_run.id,
            run_name=config.run.name or "",
            url=platform_run.url,
            stats=self.stats,
            error=error,
            signal_name=self.signal_name,
            sync_command=platform_run.sync_command() if platform_run.unsynced else None,
        )

    async def _rollouts(
        self,
        platform_run: PlatformRun,
        client: ChatClient,
        run_info: dict[str, Any],
        pool: WorkerPool | None,
    ) -> tuple[RunStatus, str | None]:
        writer = self.run_dir.open_traces()
        stats, view, log_episodes = self.stats, self.view, platform_run.log_episodes

        # Only a platform run needs the records themselves; a local one, just the bytes.
        pushing = not isinstance(platform_run, LocalRun)

        def on_batch(
            summaries: list[dict[str, Any]],
            lines: bytes,
            records: list[dict[str, Any]] | None = None,
        ) -> None:
            # Disk first: the local trace is the record of truth, the upload a copy of it.
            writer.write_line(lines)
            if pushing:
                log_episodes(records or [json.loads(line) for line in lines.splitlines()])
            for summary in summaries:
                stats.add(summary)
                failure = summary.get("error")
                if failure is not None and self.first_error is None:
                    self.first_error = str(failure.get("message") or failure)
            view.update(stats)

        def on_episode(episode: Episode) -> None:
            episode.run = run_info
            record = episode.to_record()
            on_batch([record], json.dumps(record).encode() + b"\n", [record])

        if pool is not None:
            rollouts = pool.run(self.jobs, run_info=run_info, on_batch=on_batch)
        else:
            # The one-worker case of the pool's loop: the same `run_jobs`, fed the whole plan.
            rollouts = run_jobs(
                self.env,
                client,
                JobFeed(self.jobs, closed=True),
                concurrency=min(self.config.max_concurrent, len(self.jobs)),
                on_episode=on_episode,
                pair_named=self.config.shard is not None,
            )
        scheduler = asyncio.create_task(rollouts)
        loop = asyncio.get_running_loop()

        def interrupt(sig: signal.Signals) -> None:
            if self.signal_name is None:
                self.signal_name = sig.name
                logger.warning("%s received: stopping, keeping the finished episodes", sig.name)
                scheduler.cancel()

        signals = (signal.SIGINT, signal.SIGTERM)
        for sig in signals:
            loop.add_signal_handler(sig, interrupt, sig)
        stats.started = time.perf_counter()  # rate and wall time count the rollouts only
        view.start(stats, title=f"{self.config.env} / {self.config.model}")

        async def tick() -> None:
            # With a slow model no episode may finish for a while; the view still moves.
            while True:
                await asyncio.sleep(1.0)
                view.update(stats)

        ticker = asyncio.create_task(tick())
        try:
            await scheduler
            return "completed", None
        except asyncio.CancelledError:
            if self.signal_name is None:
                raise
            return "cancelled", "interrupted"
        finally:
            ticker.cancel()
            # A second Ctrl-C while finishing should stop a stuck drain: default handlers back.
            for sig in signals:
                loop.remove_signal_handler(sig)
            view.stop(stats)
            writer.close()


def _ran(name: str, env: Environment) -> str:
    """`name@version` of what runs, when the environment knows its package's version and
    the name does not pin one: the platform records it as the evaluation's `ref`."""
    version = getattr(env, "version", None)
    return f"{name}@{version}" if isinstance(version, str) and "@" not in name else name
