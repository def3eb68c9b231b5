"""The launcher: claims PENDING hosted evaluations, runs each in a sandbox, and watches it.

One loop, one tick at a time: take over work whose launcher died, watch the running
sandboxes (cancel, timeout, exit), start new ones up to the concurrency limit, heartbeat.
Several launchers can share one database: claims lock rows (`SKIP LOCKED` on PostgreSQL,
the single writer on SQLite), and a launcher that stops heartbeating has its work taken over.

How a sandbox ends decides the status, without ever overwriting a terminal status:

| sandbox                                 | evaluation                                   |
|-----------------------------------------|----------------------------------------------|
| exit != 0                               | FAILED, with the code and the log's tail     |
| exit 0, run never finalized             | FAILED "incomplete: X of Y samples"          |
| exit 0, finalized with fewer samples    | FAILED "incomplete: X of Y samples"          |
| exit 0, finalized, all samples          | left as the run set it (PROCESSING/COMPLETED)|
| past timeout_minutes                    | killed, TIMEOUT                              |
| cancelled (API) or closed by the run    | killed; status left as set                   |
| gone without an exit code               | FAILED, with the reason                      |
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import ValidationError
from sqlalchemy.orm import Session

from proctor.contract import CLOSED_STATUSES, EVENT_OF_STATUS, OPEN_STATUSES, Event, Status
from proctor.errors import ConfigError, ProctorError
from proctor.models.config import DEFAULT_BASE_URL
from proctor.sandboxes.command import (
    CONFIG_FILE,
    HostedEvalConfig,
    build_command,
    eval_toml,
    sandbox_config,
    secret_environment,
    wire_field,
)
from proctor.sandboxes.confine import MEMORY_LIMIT
from proctor.sandboxes.packages import install_prefix
from proctor.sandboxes.sandbox import SandboxBackend, SandboxHandle, SandboxSpec, SandboxState
from proctor.server.auth.service import SANDBOX_KEY_PREFIX, mint_scoped_key
from proctor.server.db.base import as_utc, utcnow
from proctor.server.db.models import Evaluation, HostedEvaluation, HostedShard
from proctor.server.db.session import Database
from proctor.server.environments.artifacts import locate
from proctor.server.errors import describe_invalid
from proctor.server.evaluations import service as evaluations
from proctor.server.hosted import claims, repository
from proctor.server.hosted.settings import LauncherSettings
from proctor.server.hosted.sharding import (
    ShardSet,
    close_finished,
    shard_box,
    shard_count,
    sharded_handle,
)

logger = logging.getLogger(__name__)

_ERROR_TAIL_BYTES = 2000
_MEMORY_REASON = re.compile(r"proctor: (the sandbox reached its memory limit of \d+ MiB)")


def _check_runnable(config: HostedEvalConfig, stored: dict[str, object]) -> None:
    """Refuse, before any install, an `eval_config` whose overlay the engine refuses.

    The request's schema checks each key's form; the engine's rules on a value (a sampling
    temperature below 0) apply here, in one sentence naming the `eval_config` field.
    """
    try:
        sandbox_config(config, environment=str(stored["environment"]), model=str(stored["model"]))
    except ValidationError as e:
        raise ConfigError(
            describe_invalid(
                e.errors(include_url=False),
                where=lambda loc: f"eval_config.{wire_field(loc)}",
                sentence="invalid value for {where}: {problem}; fix it and send again",
            )
        ) from None


@dataclass
class _Watched:
    """A sandbox this launcher looks after."""

    evaluation_id: str
    handle: SandboxHandle | None
    """Its sandbox; None for a sharded evaluation, whose sandboxes are in `shards`."""
    started_at: datetime
    timeout_minutes: float | None
    expected_samples: int | None
    started_mono: float = field(default_factory=time.monotonic)
    """When it started on the monotonic clock: the timeout is measured on it, so a step of
    the server's wall clock neither ends a run early nor keeps it past its time."""
    shards: ShardSet | None = None
    """The sandboxes of a sharded evaluation (`eval_config.shards` > 1)."""

    def timed_out(self) -> bool:
        """Whether its `timeout_minutes` have passed (monotonic clock)."""
        if self.timeout_minutes is None:
            return False
        return time.monotonic() - self.started_mono >= self.timeout_minutes * 60


@dataclass(frozen=True)
class _Prepared:
    """What each sandbox of one evaluation is started from; `spec` adds the shard."""

    evaluation_id: str
    template: str
    environment: str
    model: str
    config: HostedEvalConfig
    proctor: str | None
    env: dict[str, str]
    box: Path
    writable: tuple[Path, ...]
    endpoints: tuple[str, ...]
    package: dict[str, object] | None
    harness: dict[str, str] | None
    hidden: tuple[Path, ...]
    readonly: tuple[Path, ...]

    @property
    def shards(self) -> int:
        """How many sandboxes write the evaluation (1: unsharded)."""
        return self.config.shards or 1

    def spec(self, shard: int | None = None) -> SandboxSpec:
        """The sandbox of the whole run, or of shard `shard` (`--shard I/N`, its own box)."""
        box = self.box if shard is None else shard_box(self.box, shard)
        command = build_command(
            self.template,
            environment=self.environment,
            model=self.model,
            config=self.config,
            proctor=self.proctor,
            shard=None if shard is None else f"{shard}/{self.shards}",
        )
        config = eval_toml(self.config, environment=self.environment, model=self.model)
        return SandboxSpec(
            evaluation_id=self.evaluation_id,
            command=command,
            files={CONFIG_FILE: config},
            env=self.env,
            workdir=box / "work",
            log_path=box / "sandbox.log",
            writable=self.writable,
            endpoints=self.endpoints,
            package=self.package,
            harness=self.harness,
            hidden=self.hidden,
            readonly=self.readonly,
        )


class Launcher:
    """Runs hosted evaluations in sandboxes.

    Args:
        db: The platform's database.
        settings: Launcher settings (backend, limits, command template).
        api_url: The platform origin sandboxes report to (`PROCTOR_API_URL`).
        data_dir: Local sandboxes work and log under `<data_dir>/sandboxes/<evaluation id>/`.
        backend: A sandbox backend (default: the one `settings` names).
        launcher_id: A stable id lets a restarted launcher recover its own work at once;
            work of other launchers is taken over only after `stale_seconds` of silence.
    """

    def __init__(
        self,
        db: Database,
        settings: LauncherSettings,
        *,
        api_url: str,
        data_dir: Path,
        backend: SandboxBackend | None = None,
        launcher_id: str | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.api_url = settings.api_url or api_url
        self.data_dir = data_dir
        self.backend = backend or settings.backend()
        self.launcher_id = (
            launcher_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        )
        self._watched: dict[str, _Watched] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lease = claims.Lease(db, self.launcher_id, settings.stale_seconds)
        self._recovered = False
        self._last_heartbeat = 0.0
        self._last_takeover = 0.0

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        """Run the loop in a background thread (the in-server launcher)."""
        self._stop.clear()
        self._lease.start()  # claims stay renewed while a tick is busy (an install, a stop)
        self._thread = threading.Thread(target=self.run, name="proctor-launcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """End the loop; running sandboxes keep running for a later launcher to adopt."""
        self.stop_soon()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._lease.stop()

    def stop_soon(self) -> None:
        """Ask the loop to end after the current tick (safe from a signal handler)."""
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """Tick now rather than at the next poll (new work was just queued)."""
        self._wake.set()

    def run(self) -> None:
        """Tick until `stop()`; a failing tick is logged and retried, never fatal."""
        logger.info("launcher %s started (%s sandboxes)", self.launcher_id, self.backend.name)
        if self.settings.isolation == "none" and self.backend.name == "local":
            logger.warning(
                "PROCTOR_HOSTED_ISOLATION=none: HOSTED SANDBOXES RUN UNCONFINED, as the "
                "server's own user, with its files and network; refused once the server has "
                "more than one user"
            )
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                logger.exception("launcher tick failed; retrying")
            self._wake.wait(self.pause())
            self._wake.clear()

    def pause(self) -> float:
        """Seconds until the next tick: `poll_seconds` while it watches sandboxes, else
        `idle_poll_seconds` (an idle server's launcher does not query its database four
        times a second; `wake()` still starts new work at once)."""
        if self._watched:
            return self.settings.poll_seconds
        return max(self.settings.poll_seconds, self.settings.idle_poll_seconds)

    @property
    def running(self) -> int:
        """How many sandboxes this launcher watches now."""
        return len(self._watched)

    def tick(self) -> None:
        """One pass: recover, watch, launch, heartbeat."""
        now = time.monotonic()
        if not self._recovered:
            self._recover(own=True)
            self._recovered = True
        if now - self._last_takeover >= self.settings.stale_seconds / 2:
            self._last_takeover = now
            self._recover(own=False)
            claims.complete_stranded(self.db, self.settings.stale_seconds)
        if self._watched:
            with self.db.read() as session:
                states = repository.watch_states(session, list(self._watched))
                lost = claims.held_by_others(session, self.launcher_id, list(self._watched))
            self._let_go(lost)
            self._watch_all(states)
        self._launch_pending()
        if self._watched and now - self._last_heartbeat >= self.settings.stale_seconds / 4:
            self._last_heartbeat = now
            with self.db.write() as session:
                repository.heartbeat(session, self.launcher_id, utcnow())

    # -- recovery --------------------------------------------------------------------------

    def _let_go(self, evaluation_ids: list[str]) -> None:
        """Stop watching sandboxes another launcher adopted (our claim expired): it closes them."""
        for evaluation_id in evaluation_ids:
            logger.warning(
                "launcher %s lost its claim on %s to another launcher; letting it go",
                self.launcher_id,
                evaluation_id,
            )
            self._watched.pop(evaluation_id, None)

    def _recover(self, *, own: bool) -> None:
        """Adopt live sandboxes of a dead launcher (or our previous life); close the rest."""
        now = utcnow()
        with self.db.write() as session:
            if own:
                rows = [
                    r
                    for r in repository.active_of(session, self.launcher_id)
                    if r[0].evaluation_id not in self._watched
                ]
            else:
                stale = now - timedelta(seconds=self.settings.stale_seconds)
                rows = repository.abandoned(session, stale, self.launcher_id)
            for hosted, evaluation in rows:
                if not own and not claims.adoptable_here(hosted):
                    continue  # a local sandbox of another machine: its own server adopts it
                hosted.launcher_id = self.launcher_id
                hosted.heartbeat_at = now
                if shard_count(hosted.config) > 1:
                    self._adopt_sharded(session, hosted, evaluation, now)
                    continue
                if hosted.sandbox_handle is None:
                    # Started, but the launcher died before it recorded the handle?
                    self._restore_handle(hosted)
                if hosted.sandbox_handle is None:
                    self._release_unstarted(session, hosted, evaluation, now)
                    continue
                if hosted.backend != self.backend.name:
                    reason = f"its {hosted.backend} sandbox cannot be reached by this launcher"
                    self._close(session, hosted, now, status="FAILED", error=reason)
                    continue
                handle = SandboxHandle.from_token(
                    self.backend.name, hosted.sandbox_handle, log_path=hosted.log_path
                )
                self._watch_adopted(session, hosted, now, handle=handle)

    def _adopt_sharded(
        self, session: Session, hosted: HostedEvaluation, evaluation: Evaluation, now: datetime
    ) -> None:
        """Watch a sharded evaluation again: its running shards are polled, the rest started."""
        rows = repository.shards_of(session, hosted.evaluation_id)
        if not rows:  # claimed, never launched
            self._release_unstarted(session, hosted, evaluation, now)
            return
        if hosted.backend != self.backend.name:
            reason = f"its {hosted.backend} sandboxes cannot be reached by this launcher"
            self._close(session, hosted, now, status="FAILED", error=reason)
            return
        shards = self._shard_set(
            hosted.evaluation_id, evaluation.user_id, shard_count(hosted.config), rows=rows
        )
        self._watch_adopted(session, hosted, now, shards=shards)

    def _watch_adopted(
        self,
        session: Session,
        hosted: HostedEvaluation,
        now: datetime,
        *,
        handle: SandboxHandle | None = None,
        shards: ShardSet | None = None,
    ) -> None:
        """Mark an adopted evaluation RUNNING and watch its sandbox (or its shards)."""
        evaluations.transition(session, hosted.evaluation_id, Event.START, now=now)
        what = "sandbox" if shards is None else "shards"
        logger.info("launcher %s adopts the %s of %s", self.launcher_id, what, hosted.evaluation_id)
        self._watched[hosted.evaluation_id] = _Watched(
            hosted.evaluation_id,
            handle,
            as_utc(hosted.started_at) or now,
            hosted.timeout_minutes,
            hosted.expected_samples,
            # Adopted from a launcher that stopped: what it ran before is known only from the
            # wall clock, once; from now on the monotonic clock counts.
            started_mono=time.monotonic() - _ran_for(hosted.started_at, now),
            shards=shards,
        )

    def _harness(self) -> dict[str, str] | None:
        """Where confined sandboxes' verifiers harness environment is built from (the harness
        index) and kept, once per content (`proctor.sandboxes.harness`); None: each sandbox
        prepares its own (no index, or `venv_cache` off)."""
        index = self.settings.harness_index
        if index is None or not self.settings.venv_cache:
            return None
        return {"index": str(index.resolve()), "envs": str(self.data_dir / "hosted-harness")}

    def _box(self, evaluation_id: str) -> Path:
        return self.data_dir / "sandboxes" / evaluation_id

    def _restore_handle(self, hosted: HostedEvaluation) -> None:
        """Take the handle from the file written right after the start, if there is one."""
        try:
            token = (self._box(hosted.evaluation_id) / "handle").read_text().strip()
        except OSError:
            return
        if token:
            log_path = str(self._box(hosted.evaluation_id) / "sandbox.log")
            handle = SandboxHandle.from_token(self.backend.name, token, log_path=log_path)
            hosted.sandbox_handle = token
            hosted.backend = self.backend.name
            hosted.log_path = handle.log_path or hosted.log_path  # None: the backend keeps logs

    def _release_unstarted(
        self, session: Session, hosted: HostedEvaluation, evaluation: Evaluation, now: datetime
    ) -> None:
        # Claimed but never started: queue it again, unless it keeps failing to start.
        if evaluation.status == "PENDING" and hosted.attempt < self.settings.max_attempts:
            hosted.launcher_id = None
            hosted.claimed_at = None
            return
        self._close(
            session,
            hosted,
            now,
            status="FAILED",
            error="the launcher stopped before it could start the sandbox",
        )

    # -- launching -------------------------------------------------------------------------

    def _launch_pending(self) -> None:
        free = self.settings.max_sandboxes - len(self._watched)
        if free <= 0:
            return
        # A cheap read first: the claim takes the write lock, which SQLite has only one of.
        with self.db.read() as session:
            if not repository.has_unclaimed(session):
                return
        with self.db.write() as session:
            claimed = [
                (hosted.evaluation_id, evaluation.user_id)
                for hosted, evaluation in repository.claim_pending(
                    session, self.launcher_id, free, utcnow()
                )
            ]
        for evaluation_id, user_id in claimed:
            try:
                self._launch(evaluation_id, user_id)
            except Exception as e:
                logger.warning("could not start the sandbox of %s: %s", evaluation_id, e)
                reason = str(e) if isinstance(e, ProctorError) else f"{type(e).__name__}: {e}"
                with self.db.write() as session:
                    found = repository.get(session, evaluation_id)
                    if found is not None:
                        self._close(
                            session,
                            found[0],
                            utcnow(),
                            status="FAILED",
                            error=f"the sandbox could not start: {reason}",
                        )

    def _launch(self, evaluation_id: str, user_id: str) -> None:
        prepared = self._prepare(evaluation_id, user_id)
        if prepared is None:
            return
        if prepared.shards > 1:
            self._launch_sharded(prepared, user_id)
            return
        spec = prepared.spec()
        handle = self.backend.start(spec)
        # Recorded at once, so a launcher dying before the database write cannot orphan it.
        box = self._box(evaluation_id)
        box.mkdir(parents=True, exist_ok=True)
        (box / "handle").write_text(handle.token())
        now = utcnow()
        with self.db.write() as session:
            found = repository.get(session, evaluation_id)
            if found is None or not claims.holds(found[0], self.launcher_id):
                # Gone, or adopted by another launcher while this one started it: that one
                # runs it, so this sandbox would be a second copy.
                self.backend.stop(handle, grace_seconds=self.settings.stop_grace_seconds)
                return
            hosted = found[0]
            hosted.sandbox_handle = handle.token()
            hosted.backend = self.backend.name
            hosted.pid = int(handle.ref) if handle.backend == "local" else None
            hosted.log_path = handle.log_path
            hosted.started_at = now
            hosted.heartbeat_at = now
            evaluations.transition(session, evaluation_id, Event.START, now=now)
        self._watched[evaluation_id] = _Watched(
            evaluation_id, handle, now, hosted.timeout_minutes, hosted.expected_samples
        )

    def _prepare(self, evaluation_id: str, user_id: str) -> _Prepared | None:
        """Everything a sandbox of this evaluation starts from: a scoped key, the command,
        the environment; a pushed environment's package installed. None: it is gone."""
        with self.db.write() as session:
            found = repository.get(session, evaluation_id)
            if found is None or not claims.holds(found[0], self.launcher_id):
                return None
            hosted = found[0]
            stored = dict(hosted.config or {})
            stored_secrets = dict(hosted.secrets or {})
            key = mint_scoped_key(
                session, evaluation_id, user_id, name=f"{SANDBOX_KEY_PREFIX}{evaluation_id}"
            )
        secrets = dict(stored_secrets.get("custom_secrets") or {})
        eval_config = dict(stored.get("eval_config") or {})
        if "headers" in stored_secrets:  # credential-like headers are masked in the config
            eval_config["headers"] = stored_secrets["headers"]
        config = HostedEvalConfig.model_validate(eval_config)
        _check_runnable(config, stored)
        self._refuse_unconfined()
        box = self._box(evaluation_id)
        package = stored.get("package")
        writable: tuple[Path, ...] = ()
        prefix = None
        built: dict[str, object] | None = None
        if package:
            # A pushed environment: its exact wheel is installed for it first (outside a
            # confined sandbox, which sees the result read-only). Its path is stored
            # relative to the data dir (older rows: absolute).
            wheel = locate(self.data_dir, str(package["wheel"]))
            package = {**package, "wheel": str(wheel)}
            venvs = self.data_dir / "hosted-venvs" if self.settings.venv_cache else box / "venv"
            writable = (venvs,) if self.settings.venv_cache else ()
            prefix = install_prefix(
                package,
                venvs,
                cache=self.settings.venv_cache,
                index_url=self.settings.package_index,
            )
            built = {
                "wheel": package["wheel"],
                "sha256": package["sha256"],
                "venvs": str(venvs),
                "cache": self.settings.venv_cache,
                "index_url": self.settings.package_index,
                "ref": package.get("ref", package["sha256"][:12]),
            }
        env = {
            "PROCTOR_API_URL": self.api_url,
            "PROCTOR_API_KEY": key,
            "PROCTOR_RUNS_MODE": "online",
            **self.settings.sandbox_environment(),
            **secret_environment(config),
        }
        if config.api_key_var and config.api_key_var not in secrets:
            value = os.environ.get(config.api_key_var)
            if value and config.api_key_var in self.settings.forwarded_names():
                env[config.api_key_var] = value
        env.update(secrets)
        prepared = _Prepared(
            evaluation_id=evaluation_id,
            template=self.settings.command,
            environment=str(stored["environment"]),
            model=str(stored["model"]),
            config=config,
            proctor=prefix,
            env=env,
            box=box,
            writable=writable,
            endpoints=self._endpoints(config),
            package=built,
            harness=self._harness(),
            hidden=(self.data_dir,),
            readonly=self.settings.readonly_paths(),
        )
        # A template that cannot carry the command fails here, before any sandbox starts.
        prepared.spec(0 if prepared.shards > 1 else None)
        return prepared

    def _launch_sharded(self, prepared: _Prepared, user_id: str) -> None:
        """Record the evaluation's N shards, then start them (`sharding`)."""
        evaluation_id = prepared.evaluation_id
        now = utcnow()
        with self.db.write() as session:
            found = repository.get(session, evaluation_id)
            if found is None or not claims.holds(found[0], self.launcher_id):
                return
            hosted = found[0]
            ShardSet.create_rows(session, evaluation_id, prepared.shards, self.backend.name)
            # Its sandboxes' handles are the shards' rows; this marks it started (`claims`).
            hosted.sandbox_handle = sharded_handle(prepared.shards)
            hosted.backend = self.backend.name
            hosted.started_at = now
            hosted.heartbeat_at = now
            evaluations.transition(session, evaluation_id, Event.START, now=now)
            timeout, expected = hosted.timeout_minutes, hosted.expected_samples
        shards = self._shard_set(evaluation_id, user_id, prepared.shards, prepared=prepared)
        self._watched[evaluation_id] = _Watched(
            evaluation_id, None, now, timeout, expected, shards=shards
        )
        shards.poll()  # starts them all now rather than at the next tick

    def _shard_set(
        self,
        evaluation_id: str,
        user_id: str,
        count: int,
        *,
        prepared: _Prepared | None = None,
        rows: list[HostedShard] | None = None,
    ) -> ShardSet:
        """The shards of an evaluation; an adopted one prepares its spec at its first start."""
        cache = [prepared] if prepared is not None else []

        def spec_of(index: int) -> SandboxSpec:
            if not cache:
                again = self._prepare(evaluation_id, user_id)
                if again is None:
                    raise ProctorError(f"evaluation {evaluation_id} is gone")
                cache.append(again)
            return cache[0].spec(index)

        return ShardSet(
            db=self.db,
            backend=self.backend,
            evaluation_id=evaluation_id,
            count=count,
            attempts=self.settings.shard_attempts,
            box=self._box(evaluation_id),
            spec_of=spec_of,
            rows=rows,
        )

    def _endpoints(self, config: HostedEvalConfig) -> tuple[str, ...]:
        """The URLs a confined sandbox may reach: the platform, the model endpoint (the
        judge's unless it names its own), URLs in the loader's arguments, and the operator's
        `allow_urls`."""
        urls = [self.api_url, config.api_base_url or DEFAULT_BASE_URL]
        urls += [
            v
            for v in config.env_args.values()
            if isinstance(v, str) and v.startswith(("http://", "https://"))
        ]
        urls += [u.strip() for u in self.settings.allow_urls.split(",") if u.strip()]
        return tuple(dict.fromkeys(urls))

    def _refuse_unconfined(self) -> None:
        """`isolation = none` runs tenants' code as the server's user: a single-user
        server's choice only.

        Raises:
            ConfigError: the server has more than one user.
        """
        if self.settings.isolation != "none" or self.backend.name != "local":
            return
        with self.db.read() as session:
            users = repository.count_users(session)
        if users > 1:
            raise ConfigError(
                f"PROCTOR_HOSTED_ISOLATION=none is refused on a server with {users} users: "
                "their code would run as the server's user; unset it to confine sandboxes"
            )

    # -- watching --------------------------------------------------------------------------

    def _watch_all(self, records: dict[str, tuple[str, bool]]) -> None:
        """Poll every watched sandbox; stop the cancelled and timed-out ones side by side."""
        to_stop: list[
            tuple[_Watched, Literal["gone", "cancelled", "timed_out", "shards_ended"]]
        ] = []
        for watched in list(self._watched.values()):
            record = records.get(watched.evaluation_id)
            if record is None:
                to_stop.append((watched, "gone"))
                continue
            status, cancel = record
            if cancel or status in CLOSED_STATUSES:
                logger.info("stopping the sandbox of %s (%s)", watched.evaluation_id, status)
                to_stop.append((watched, "cancelled"))
                continue
            if watched.timed_out():
                logger.info("the sandbox of %s timed out", watched.evaluation_id)
                to_stop.append((watched, "timed_out"))
                continue
            if watched.shards is not None:
                if watched.shards.poll() is not None:  # all done, or one out of attempts
                    to_stop.append((watched, "shards_ended"))
                continue
            assert watched.handle is not None
            state = self.backend.poll(watched.handle)
            if not state.running:
                self._finish(watched, state)
        if not to_stop:
            return
        # Each stop may wait out its grace period: do them at once, not one after another.
        with ThreadPoolExecutor(max_workers=min(16, len(to_stop))) as pool:
            list(pool.map(lambda item: self._stop_sandbox(item[0]), to_stop))
        for watched, why in to_stop:
            if why == "gone":
                self._watched.pop(watched.evaluation_id, None)
                continue
            if watched.shards is not None:
                self._finish_sharded(
                    watched, cancelled=why == "cancelled", timed_out=why == "timed_out"
                )
                continue
            assert watched.handle is not None
            state = self.backend.poll(watched.handle)
            self._finish(watched, state, cancelled=why == "cancelled", timed_out=why == "timed_out")

    def _stop_sandbox(self, watched: _Watched) -> None:
        if watched.shards is not None:
            watched.shards.stop_all(self.settings.stop_grace_seconds)
            return
        assert watched.handle is not None
        try:
            self.backend.stop(watched.handle, grace_seconds=self.settings.stop_grace_seconds)
        except Exception:
            logger.exception("stopping the sandbox of %s failed", watched.evaluation_id)

    def _finish(
        self,
        watched: _Watched,
        state: SandboxState,
        *,
        cancelled: bool = False,
        timed_out: bool = False,
    ) -> None:
        """Apply the exit rules (module docstring) and close the sandbox's record."""
        evaluation_id = watched.evaluation_id
        assert watched.handle is not None
        tail = "" if state.exit_code == 0 else self.backend.logs(watched.handle, _ERROR_TAIL_BYTES)
        now = utcnow()
        with self.db.write() as session:
            found = repository.get(session, evaluation_id)
            if found is None or not claims.holds(found[0], self.launcher_id):
                self._watched.pop(evaluation_id, None)  # gone, or another launcher closes it
                return
            hosted, evaluation = found
            hosted.exit_code = state.exit_code
            verdict = _verdict(evaluation, watched, state, tail, cancelled, timed_out)
            self._close(
                session,
                hosted,
                now,
                status=verdict.status,
                error=verdict.error,
                overrule_finalized=verdict.overrule_finalized,
            )
        self._watched.pop(evaluation_id, None)
        logger.info("sandbox of %s ended (exit %s)", evaluation_id, state.exit_code)

    def _finish_sharded(self, watched: _Watched, *, cancelled: bool, timed_out: bool) -> None:
        """Close a sharded evaluation: finalize it once every shard is done and the count is
        exact, else FAILED, CANCELLED or TIMEOUT (`sharding`'s table)."""
        evaluation_id = watched.evaluation_id
        assert watched.shards is not None
        ended = watched.shards.ended
        finalized = False
        with self.db.write() as session:
            found = repository.get(session, evaluation_id)
            if found is None or not claims.holds(found[0], self.launcher_id):
                self._watched.pop(evaluation_id, None)  # gone, or another launcher closes it
                return
            hosted, evaluation = found
            status: str | None = None
            error: str | None = None
            if cancelled or timed_out:
                verdict = _verdict(
                    evaluation, watched, SandboxState(running=False), "", cancelled, timed_out
                )
                status, error = verdict.status, verdict.error
            elif ended is not None and ended.failed is not None:
                status, error = "FAILED", ended.error
            else:
                finalized, error = close_finished(session, evaluation, watched.expected_samples)
                status = "FAILED" if error else None
            if not finalized:
                self._close(session, hosted, utcnow(), status=status, error=error)
        if finalized:
            # Completed before the record closes, so whoever sees it closed sees it COMPLETED;
            # a launcher dying in between leaves it to the next, which finds it finalized.
            evaluations.complete_statistics(self.db, evaluation_id)
            with self.db.write() as session:
                found = repository.get(session, evaluation_id)
                if found is not None and claims.holds(found[0], self.launcher_id):
                    self._close(session, found[0], utcnow(), status=None, error=None)
        self._watched.pop(evaluation_id, None)
        logger.info("the shards of %s ended (%s)", evaluation_id, status or "finalized")

    def _close(
        self,
        session: Session,
        hosted: HostedEvaluation,
        now: datetime,
        *,
        status: str | None,
        error: str | None,
        overrule_finalized: bool = False,
    ) -> None:
        """Set the status (unless terminal), end the record, drop its secrets and key."""
        if overrule_finalized:
            # An incomplete run that finalized anyway: its PROCESSING/COMPLETED is not trusted.
            evaluations.transition(
                session, hosted.evaluation_id, Event.OVERRULE, now=now, error_message=error
            )
        elif status is not None:
            evaluations.transition(
                session,
                hosted.evaluation_id,
                EVENT_OF_STATUS[Status(status)],
                now=now,
                error_message=error,
            )
        hosted.ended_at = now
        repository.drop_secrets(session, hosted.evaluation_id)
        repository.revoke_scoped_keys(session, hosted.evaluation_id, now)


def _ran_for(started_at: datetime | None, now: datetime) -> float:
    """Seconds since `started_at` by the wall clock, never negative (a clock stepped back)."""
    started = as_utc(started_at)
    return max(0.0, (now - started).total_seconds()) if started is not None else 0.0


@dataclass(frozen=True)
class _Verdict:
    """What a sandbox's end means for its evaluation."""

    status: str | None
    error: str | None
    overrule_finalized: bool = False


def _verdict(
    evaluation: Evaluation,
    watched: _Watched,
    state: SandboxState,
    tail: str,
    cancelled: bool,
    timed_out: bool,
) -> _Verdict:
    if cancelled:
        return _Verdict("CANCELLED", "cancelled")
    if timed_out:
        return _Verdict(
            "TIMEOUT",
            f"timed out after {watched.timeout_minutes:g} minutes; the sandbox was killed",
        )
    code = state.exit_code
    if code is None:
        return _Verdict(
            "FAILED", f"the sandbox ended without an exit code ({state.detail or 'lost'})"
        )
    if code != 0:
        how = f" ({state.detail})" if state.detail else ""
        reason = f"the sandbox exited with code {code}{how}"
        if code == MEMORY_LIMIT and (found := _MEMORY_REASON.search(tail)):
            reason = found.group(1)  # the confinement's own words come first
        return _Verdict("FAILED", f"{reason}; last output:\n{tail.strip()}")
    expected = watched.expected_samples
    got = evaluation.total_samples
    of = f"{got} of {expected}" if expected is not None else f"{got} of an unbounded number of"
    if evaluation.status in OPEN_STATUSES:
        return _Verdict("FAILED", f"incomplete: {of} samples; the run exited 0 without finalizing")
    if expected is not None and got < expected:
        return _Verdict("FAILED", f"incomplete: {of} samples", overrule_finalized=True)
    return _Verdict(None, None)
