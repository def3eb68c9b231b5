"""`VerifiersEnvironment`: a verifiers `Env` behind proctor's `Environment` interface.

The engine hands it one (task, rollout number) at a time, as it does every environment; the
rollout runs one verifiers slot (`Env.run_slot`, with verifiers' own episode retries, agents,
harness and runtime) and returns a proctor `Episode` carrying the verifiers episode whole in
`native`. Its rewards, metrics, usage and outcome are read through `proctor.projection`,
the one projection the platform applies to verifiers episodes, so the local figures and the
stored sample agree.

The model calls are the environment's own (its harness program talks to verifiers'
interception server, which relays them): they go to the endpoint, model and sampling of the
proctor client the engine passes in, so `-m`, `--client.*` and `--sampling.*` keep their
meaning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.envs import Environment, Episode, Task, Taskset
from proctor.envs.verifiers._prepared_harness import adopt_prepared_harness
from proctor.envs.verifiers._resolve import env_config, one_line, package_of
from proctor.errors import ConfigError
from proctor.projection import project_episode, summary_trace_index

if TYPE_CHECKING:
    from proctor.models.types import ChatClient

logger = logging.getLogger(__name__)


def _put_uv_on_path() -> None:
    """verifiers runs `uv` from PATH to prepare harness programs; the `uv` that
    `proctor[verifiers]` installs beside this interpreter counts, activated or not."""
    here = Path(sys.executable).parent
    if shutil.which("uv") is None and (here / "uv").is_file():
        os.environ["PATH"] = f"{here}{os.pathsep}{os.environ.get('PATH', '')}"


def _compile_harness_bytecode() -> None:
    """Have `uv` compile the harness programs' environment to bytecode when verifiers
    prepares it (once per run), unless the caller set `UV_COMPILE_BYTECODE` themselves.

    verifiers runs one harness program per rollout, a fresh Python that imports `openai` and
    the rest of its script's dependencies from that environment. `uv` installs them without
    bytecode, so each program compiled them from source again wherever Python may not write
    its cache (`PYTHONDONTWRITEBYTECODE`, common in containers and CI), and every program of
    the first `-c` wave did so at once everywhere else: about 0.6 s of CPU per program
    (bench/results/verifiers_eval.md). The programs, their inputs and their results are
    unchanged; only the compiled form of the same sources is kept."""
    os.environ.setdefault("UV_COMPILE_BYTECODE", "1")


def load_verifiers_environment(name: str, env_args: dict[str, Any]) -> VerifiersEnvironment:
    """Compose the verifiers environment `name` from its `[env]` settings, as `vf-eval` does.

    Raises:
        ConfigError: verifiers rejects the settings, or the environment fails to build.
    """
    config = env_config(name, env_args)
    _put_uv_on_path()
    _compile_harness_bytecode()
    adopt_prepared_harness()
    from verifiers.v1.utils.loaders import load_environment

    try:
        return VerifiersEnvironment(name, load_environment(config))
    except ConfigError:
        raise
    except Exception as e:
        raise _load_error(name, e) from e


def _load_error(name: str, e: BaseException) -> ConfigError:
    return ConfigError(
        f"verifiers environment {name} failed to load ({type(e).__name__}: {one_line(e)}); "
        "check its --env-args and that its dependencies are installed."
    )


class VerifiersEnvironment(Environment):
    """A verifiers v1 `Env` run by proctor's engine (one proctor task per verifiers task).

    Args:
        name: The name it was asked for (the taskset id).
        vf_env: The composed verifiers environment (`verifiers.v1.utils.loaders`).
    """

    spawns_processes = True
    """Each rollout starts processes (`uv`, the harness program): the engine runs it on
    asyncio's loop, whose subprocess spawn is cheap for a large runner (uvloop's is not)."""

    framework = "verifiers"
    """What runs it, as a pushed run tells the platform (`proctor.runs.init(framework=)`): its
    results are never filed under a proctor built-in of the same name."""

    def __init__(self, name: str, vf_env: Any) -> None:
        self.vf_env = vf_env
        package = package_of(name)
        self.package: str | None = package[0] if package else None
        """The distribution that provides it (`verifiers` for a bundled taskset)."""
        self.version: str | None = package[1] if package else None
        """That distribution's version: a pushed run records `owner/name@version`."""
        self._vf_tasks: dict[int, Any] = {}
        vf_taskset = vf_env.taskset
        if vf_taskset.INFINITE:
            taskset = Taskset.stream(self._tasks, name=name)
        else:
            taskset = Taskset(list(self._tasks()), name=name)
        doc = (type(vf_taskset).__doc__ or "").strip()
        super().__init__(
            name=name,
            taskset=taskset,
            description=doc.splitlines()[0] if doc else f"verifiers taskset {name}",
        )
        self._context: Any = None
        self._serving: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._stop: asyncio.Event | None = None

    def _tasks(self) -> Iterator[Task]:
        try:
            yield from self._load_tasks()
        except ConfigError:
            raise
        except Exception as e:
            raise _load_error(self.vf_env.config.taskset.id, e) from e

    def _load_tasks(self) -> Iterator[Task]:
        for index, vf_task in enumerate(self.vf_env.taskset):
            self._vf_tasks[index] = vf_task
            data = vf_task.data.model_dump(mode="json")
            prompt = data.get("prompt")
            yield Task(
                index=index,
                prompt=prompt if isinstance(prompt, str) else None,
                answer=data.get("answer"),
                info={"verifiers_task": vf_task.key} if getattr(vf_task, "key", None) else {},
            )

    def _vf_task(self, index: int) -> Any:
        """The verifiers task at `index`; a worker process, handed tasks it did not select
        itself, walks the (deterministic) taskset to it."""
        if index not in self._vf_tasks:
            for task in self._tasks():
                if task.index >= index:
                    break
        return self._vf_tasks[index]

    def _model_context(self, client: ChatClient) -> Any:
        """verifiers' `ModelContext` for the endpoint, model and sampling of `client`."""
        if self._context is None:
            # The engine's OpenAI-compatible client: its endpoint, model and sampling.
            config = getattr(client, "config", None)
            sampling = getattr(client, "sampling", None)
            model = getattr(client, "model", None)
            if config is None or sampling is None or not isinstance(model, str):
                raise ConfigError(
                    "a verifiers environment calls the model itself and needs an endpoint; "
                    "run it with --client.base-url instead of a scripted client."
                )
            from verifiers.v1.clients import EvalClientConfig, ModelContext
            from verifiers.v1.types import SamplingConfig

            self._context = ModelContext(
                client=EvalClientConfig(
                    base_url=config.base_url,
                    api_key_var=config.api_key_var,
                    headers=config.all_headers(),
                ),
                model=model,
                sampling=SamplingConfig.model_validate(sampling.request_args()),
            )
        return self._context

    async def _ensure_serving(self) -> None:
        """Bring up the environment's serving resources (shared tool servers, interception)
        once, in a task of their own so they are torn down where they were started."""
        if self._ready is None:
            loop = asyncio.get_running_loop()
            self._ready = loop.create_future()
            self._stop = asyncio.Event()
            self._serving = asyncio.create_task(self._serve(self._ready, self._stop))
        await asyncio.shield(self._ready)

    async def _serve(self, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        try:
            async with self.vf_env.serving():
                ready.set_result(None)
                await stop.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(
                    ConfigError(
                        f"verifiers environment {self.name} could not start serving "
                        f"({type(e).__name__}: {one_line(e)})."
                    )
                )
            if not isinstance(e, Exception | asyncio.CancelledError):
                raise

    async def aclose(self) -> None:
        """Tear down the serving resources, if a rollout started them."""
        if self._serving is None or self._stop is None:
            return
        self._stop.set()
        with contextlib.suppress(Exception):
            await self._serving
        self._serving = self._ready = self._stop = None

    async def rollout(
        self, task: Task, client: ChatClient, *, episode_id: str, rollout_number: int
    ) -> Episode:
        """Run one verifiers episode of `task`; never raises except on cancellation."""
        start, t0 = time.time(), time.perf_counter()
        try:
            context = self._model_context(client)
            await self._ensure_serving()
            vf_env = self.vf_env
            slot = vf_env.slots(self._vf_task(task.index), 1)[0]
            vf_episode = await vf_env.run_slot(slot, context)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.debug("verifiers environment %s failed a rollout", self.name, exc_info=True)
            return Episode(
                id=episode_id,
                env=self.name,
                example_id=task.index,
                rollout_number=rollout_number,
                task=task.to_record(),
                error={"type": type(e).__name__, "message": one_line(e), "stage": "rollout"},
                stop_condition="env_error",
                timing=_timing(start, t0),
            )
        return episode_from_verifiers(
            vf_episode.to_record(),
            env=self.name,
            example_id=task.index,
            rollout_number=rollout_number,
            timing=_timing(start, t0),
        )


def _timing(start: float, t0: float) -> dict[str, float]:
    duration = time.perf_counter() - t0
    return {"start": start, "end": start + duration, "duration_s": duration}


def episode_from_verifiers(
    record: dict[str, Any],
    *,
    env: str,
    example_id: int,
    rollout_number: int,
    timing: dict[str, float],
) -> Episode:
    """The proctor episode of one verifiers episode record (`Episode.to_record()`).

    Its figures are the platform sample's (`proctor.projection.project_episode`); a
    verifiers episode that is not `ok` is an errored proctor episode, not scored, as
    `vf-eval --resume` counts it.
    """
    samples = project_episode(record, rollout_number)
    sample: dict[str, Any] = samples[0] if samples else {}
    usage = sample.get("token_usage") or {}
    prompt_tokens = int(usage.get("prompt_tokens") or 0)
    completion_tokens = int(usage.get("completion_tokens") or 0)
    traces = [t for t in record.get("traces") or [] if isinstance(t, dict)]
    summary = traces[summary_trace_index(traces)] if traces else {}
    rewards: dict[str, float | None] = {
        name: entry.get("score") if isinstance(entry, dict) else None
        for name, entry in (summary.get("rewards") or {}).items()
    }
    error: dict[str, Any] | None = None
    if not record.get("ok"):
        errors = record.get("errors") or []
        last = sample.get("error") or (errors[-1] if errors else None)
        if isinstance(last, dict):
            error = {
                "type": str(last.get("type") or "VerifiersError"),
                "message": one_line(str(last.get("message") or "")),
                "stage": "rollout",
            }
        else:
            error = {"type": "VerifiersError", "message": "episode not ok", "stage": "rollout"}
    episode = Episode(
        id=str(record.get("id") or ""),
        env=env,
        example_id=example_id,
        rollout_number=rollout_number,
        task={"index": example_id, **(sample.get("task") or {})},
        messages=list(sample.get("completion") or []),
        rewards=rewards if error is None else dict.fromkeys(rewards),
        metrics=dict(sample.get("metrics") or {}) if error is None else {},
        reward=float(sample.get("reward") or 0.0) if error is None else 0.0,
        timing=timing,
        token_usage={
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        error=error,
        stop_condition=str(sample.get("stop_condition") or ("error" if error else "completed")),
        is_completed=bool(sample.get("is_completed")),
        is_truncated=bool(sample.get("is_truncated")),
        num_turns=sum(len(t.get("calls") or []) for t in traces),
        native=record,
    )
    return episode
