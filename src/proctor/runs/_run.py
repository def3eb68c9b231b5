"""`init()` and the `Run` handle: log episodes, finish.

`init` resolves the settings and the mode; how the run gets its evaluation (attach, reopen,
create, offline) is `proctor.runs._open`'s, how it is closed `proctor.runs._finish`'s.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx

from proctor.errors import APIError, AttachError, ConfigError, NothingToResume, PlatformError
from proctor.runs._client import PlatformClient
from proctor.runs._finish import leave_pending, settle
from proctor.runs._open import Wanted, open_state
from proctor.runs._settings import load_settings
from proctor.runs._spool import Spool
from proctor.runs._state import RunState, RunStatus, latest_own_state, retire_state, spool_dir
from proctor.runs._summary import SummaryAccumulator
from proctor.runs._uploader import RunCounters, Uploader, UploaderOptions

log = logging.getLogger(__name__)

OnError = Literal["warn", "raise"]

DEFAULT_FINISH_TIMEOUT_S = 120.0
EXIT_FINISH_TIMEOUT_S = 30.0
MIN_CLOSE_S = 15.0
"""Closing gets at least this long, even when the drain used up the finish timeout."""
CRASHED = "crashed: process exited without finishing the run"
_ZERO = RunCounters(0, 0, 0, 0, 0, 0, None)


class Run:
    """A run on the platform (or a disabled one): log episodes to it, then `finish()` it.

    Build one with `proctor.runs.init()`. `log_episodes` never waits for the network; a
    process that exits without calling `finish` closes its own created run as crashed.
    """

    def __init__(
        self,
        *,
        id: str,
        name: str,
        url: str | None,
        attached: bool,
        on_error: OnError = "warn",
        finish_timeout: float = DEFAULT_FINISH_TIMEOUT_S,
        client: PlatformClient | None = None,
        state: RunState | None = None,
        directory: Path | None = None,
        upload: UploaderOptions | None = None,
        offline: bool = False,
    ) -> None:
        self.id = id
        """The platform's evaluation id (`local-...` for a disabled run)."""
        self.name = name
        self.url = url
        """Where the evaluation can be viewed (None when disabled)."""
        self.attached = attached
        """True when attached to an evaluation created elsewhere."""
        self.directory = directory
        """The spool directory (None when disabled)."""
        self.on_error = on_error
        self.finish_timeout = finish_timeout
        self.errors: list[str] = []
        """Problems `finish()` met (each also logged)."""
        self.offline = offline
        """True when the platform could not be reached at init: records are kept in the
        run directory and `proctor runs sync` uploads them (the evaluation is created then)."""
        self.unsynced = False
        """True after `finish()` when the platform does not hold the whole run yet (closed
        or not): `sync_command()` finishes it."""
        self.refused: str | None = None
        """After `finish()`: why the platform refused to close the run (it was closed first,
        e.g. a cancel won the race against the finalize)."""
        self._client = client
        self._state = state
        self._acc = SummaryAccumulator()
        self._finish_lock = threading.Lock()
        self._finished = False
        self._upload_options = upload
        self._uploader: Uploader | None = None
        self._uploader_lock = threading.Lock()
        self._pid = os.getpid()
        self._fork_warned = False
        if not self.disabled:
            atexit.register(self._on_exit)

    @property
    def disabled(self) -> bool:
        """True when nothing is sent anywhere."""
        return self._client is None

    def _ensure_uploader(self) -> Uploader | None:
        # The spool directory is created on first use, not in init(): the engine may still
        # empty the run directory (--clean) between opening the run and its first episode.
        if self._uploader is None and self._client is not None:
            with self._uploader_lock:
                if self._uploader is None:
                    assert self._state is not None and self.directory is not None
                    self._save_state()
                    self._uploader = Uploader(
                        self._client,
                        None if self.offline else self.id,
                        Spool(self.directory),
                        on_record=self._acc.add,
                        options=self._upload_options,
                    )
        return self._uploader

    def _save_state(self) -> None:
        # The state is for a later sync; a disk that refuses it must not stop the run.
        assert self._state is not None and self.directory is not None
        try:
            self._state.save(self.directory)
        except OSError as e:
            self._problem(f"cannot write {self.directory}/run.json ({e})", sync=False)

    @property
    def finished(self) -> bool:
        """True once `finish()` started."""
        return self._finished

    @property
    def counters(self) -> RunCounters:
        """Records logged, spooled, sent, pending; errors."""
        return self._uploader.counters() if self._uploader else _ZERO

    def log_episodes(self, records: Iterable[dict[str, Any]]) -> None:
        """Hand finished episodes (`Episode.to_record()` dicts) to the uploader; never blocks.

        Raises:
            PlatformError: the run is already finished.
        """
        if self._finished:
            raise PlatformError(f"run {self.id} is finished; open a new run to log more episodes")
        if self._forked():
            return
        uploader = self._uploader or self._ensure_uploader()
        if uploader is not None:
            uploader.submit(records if isinstance(records, list) else list(records))

    def _forked(self) -> bool:
        # A forked child inherits the run but not its threads: it must neither upload through
        # the parent's spool nor close the parent's evaluation.
        if os.getpid() == self._pid:
            return False
        if not self._fork_warned:
            self._fork_warned = True
            log.warning(
                "run %s belongs to process %d; a forked child ignores it", self.id, self._pid
            )
        return True

    def finish(
        self,
        summary: Mapping[str, Any] | None = None,
        status: RunStatus = "completed",
        error: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Drain uploads, write the summary metrics, and close the evaluation.

        Only the first call acts. A drain that does not finish within `timeout` seconds
        leaves the rest in the spool and says how to send it (`proctor runs sync`).

        Args:
            summary: extra summary keys, merged over `avg_reward`, `avg_metrics`, `avg_error`.
            status: `completed` finalizes; `failed`/`cancelled` close a created run so.
            error: the reason, for a failed or cancelled run.
            timeout: seconds to wait for the uploads (default: the run's `finish_timeout`).

        Raises:
            PlatformError: something was not delivered, only with `on_error="raise"`.
        """
        if self._forked():
            return
        with self._finish_lock:
            if self._finished:
                return
            self._finished = True
        atexit.unregister(self._on_exit)
        uploader, state, client = self._ensure_uploader(), self._state, self._client
        if uploader is None or state is None or client is None or self.directory is None:
            return
        wait = self.finish_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        try:
            drained = uploader.drain(wait)
        except BaseException:
            # A second Ctrl-C while draining: leave the finish to `proctor runs sync`.
            uploader.close()
            self._leave_pending(
                state, status, error, {**self._acc.summary(), **dict(summary or {})}
            )
            self._release(uploader, client, state, discard=False)
            log.warning("uploads interrupted; finish them with: %s", self.sync_command())
            raise
        uploader.close()
        doc = {**self._acc.summary(), **dict(summary or {})}
        finished = self._close(uploader, client, state, status, error, doc, drained, wait, deadline)
        if not finished:
            self._leave_pending(state, status, error, doc)
        self._release(uploader, client, state, discard=drained and finished)
        if self.errors and self.on_error == "raise":
            raise PlatformError(f"{self.errors[0]}; run `{self.sync_command()}`")

    def _close(
        self,
        uploader: Uploader,
        client: PlatformClient,
        state: RunState,
        status: RunStatus,
        error: str | None,
        summary: dict[str, Any],
        drained: bool,
        wait: float,
        deadline: float,
    ) -> bool:
        """Close the evaluation after the drain; True when nothing is left for a sync."""
        if self.offline:
            pending = state.pending_create
            why = pending.reason if pending is not None and pending.reason else None
            self._problem(
                f"the platform did not take run {self.id} when it started"
                f"{f' ({why})' if why else ''}; its samples are kept in {self.directory}"
            )
            return False
        if drained:
            try:
                settle(
                    client,
                    state,
                    status=status,
                    error=error,
                    summary=summary,
                    deadline=max(deadline, time.monotonic() + MIN_CLOSE_S),
                )
                return True
            except APIError as e:
                if e.status_code != 409:
                    self._problem(f"could not close evaluation {self.id} ({e})")
                    return False
                self.refused = f"the platform refused to close evaluation {self.id}: {e}"
                self._problem(self.refused, sync=False)
                return True
            except PlatformError as e:
                self._problem(f"could not close evaluation {self.id} ({e})")
                return False
        if isinstance(uploader.fatal, APIError) and uploader.fatal.status_code == 409:
            # The evaluation was closed on the platform (e.g. its launcher cancelled it):
            # nothing can send these samples any more, so do not suggest a sync.
            self.refused = (
                f"evaluation {self.id} was closed on the platform; "
                f"{uploader.counters().pending} sample(s) stay unsent in {self.directory}"
            )
            self._problem(self.refused, sync=False)
            state.phase, state.final_status = "finished", "closed elsewhere"
            return True
        reason = uploader.fatal or uploader.last_error or f"not sent within {wait:g}s"
        self._problem(
            f"{uploader.counters().pending} sample(s) of evaluation {self.id} are not "
            f"on the platform yet ({reason})"
        )
        return False

    def _leave_pending(
        self, state: RunState, status: RunStatus, error: str | None, summary: dict[str, Any]
    ) -> None:
        leave_pending(state, status=status, error=error, summary=summary)
        self.unsynced = True

    def _release(
        self, uploader: Uploader, client: PlatformClient, state: RunState, *, discard: bool
    ) -> None:
        # The process lets go of the run: its state is left for a sync; `discard` deletes a
        # spool the platform acknowledged whole.
        state.pid = None
        self._save_state()
        uploader.spool.close(discard_if_drained=discard)
        client.close()

    def sync_command(self) -> str:
        """The command that sends what this run left in its spool."""
        target = self.directory
        if target is not None and target.parent.name == "platform":
            target = target.parent.parent
        return f"proctor runs sync {target}"

    def _problem(self, message: str, *, sync: bool = True) -> None:
        self.errors.append(message)
        if sync:
            log.warning("%s; finish the upload with: %s", message, self.sync_command())
        else:
            log.warning("%s", message)

    def _on_exit(self) -> None:
        # The interpreter is exiting with the run open: the engine crashed or forgot finish().
        if not self._finished and not self._forked():
            self.finish(
                status="failed",
                error=CRASHED,
                timeout=min(self.finish_timeout, EXIT_FINISH_TIMEOUT_S),
            )


def init(
    *,
    name: str,
    environments: Sequence[str],
    model: str,
    config: Mapping[str, Any] | None,
    mode: Literal["online", "disabled"] | None = None,
    id: str | None = None,
    api_url: str | None = None,
    api_key: str | None = None,
    team_id: str | None = None,
    on_error: OnError = "warn",
    run_dir: Path | None = None,
    expected_samples: int | None = None,
    finish_timeout: float = DEFAULT_FINISH_TIMEOUT_S,
    upload: UploaderOptions | None = None,
    resume: bool = False,
    shard: str | None = None,
    http: httpx.Client | None = None,
    framework: str = "proctor",
) -> Run:
    """Open a run on the platform, or attach to an existing evaluation with `id=`.

    Settings come from the arguments, then `PROCTOR_API_URL` / `PROCTOR_API_KEY` /
    `PROCTOR_TEAM_ID` / `PROCTOR_RUNS_MODE`, then `~/.proctor/config.toml`. Without a key (and
    no explicit mode) the run is disabled, with a warning.

    Args:
        name: display name of a created evaluation.
        environments: environment names (resolved on the platform's hub), each optionally
            `name@version` or `owner/name@version` to record which version ran.
        model: the model evaluated.
        config: the run config, stored as the created evaluation's metadata.
        mode: `online` or `disabled`; None reads `PROCTOR_RUNS_MODE`.
        id: attach to this evaluation instead of creating one.
        api_url: the platform's origin.
        api_key: the API key.
        team_id: the team that owns a created evaluation.
        on_error: `raise` makes `finish()` raise when something was not delivered.
        run_dir: the run directory; the spool lives in `<run_dir>/platform/<id>/`
            (default `~/.proctor/spool/<id>/`).
        expected_samples: how many episodes a complete run logs (lets `proctor runs sync`
            finalize a run whose process died after its last episode).
        finish_timeout: default seconds `finish()` waits for uploads.
        upload: batching knobs of the uploader.
        resume: continue the evaluation an earlier attempt with the same `run_dir` created
            (reopening it when that attempt closed it as failed or cancelled; one the
            platform holds as COMPLETED raises `NothingToResume`).
        shard: `I/N` when this run writes one slice of the evaluation `id` names beside other
            processes: its finish sends every sample and leaves the evaluation open.
        http: the HTTP client to reach the platform through (see `PlatformClient`).
        framework: what ran the environments: `proctor` (its own), or `verifiers` (a
            verifiers environment); a bare name resolves to a proctor built-in only for
            `proctor`, so another environment of the same name is never filed under it.

    Raises:
        ConfigError: malformed settings, or `mode="online"` without a key.
        AttachError: `id` given and the evaluation cannot be attached to.
        PlatformError: the evaluation could not be created.
    """
    if shard is not None and id is None:
        raise ConfigError("a shard writes into an existing evaluation: pass its id= as well")
    settings = load_settings(api_url=api_url, api_key=api_key, team_id=team_id, mode=mode)
    key = settings.key()
    if _resolve_mode(settings.runs_mode, key, id) == "disabled":
        return Run(id=f"local-{uuid.uuid4().hex[:12]}", name=name, url=None, attached=False)
    assert key is not None  # _resolve_mode: online needs a key
    previous = latest_own_state(run_dir) if resume and id is None and run_dir is not None else None
    client = PlatformClient(settings.api_url, key, http=http)
    wanted = Wanted(
        name=name,
        environments=environments,
        model=model,
        config=config,
        team_id=settings.team_id,
        api_url=settings.api_url,
        expected_samples=expected_samples,
        framework=framework,
    )
    try:
        state, offline = open_state(
            client,
            wanted,
            attach_id=id,
            previous=previous[1] if previous else None,
            can_go_offline=run_dir is not None,
            shard=shard,
        )
    except NothingToResume:
        if previous is not None:  # what the platform holds is the truth: the run is closed
            directory, done = previous
            done.phase, done.final_status, done.pending_finish, done.pid = (
                "finished",
                "finalized",
                None,
                None,
            )
            with contextlib.suppress(OSError):
                done.save(directory)
        raise
    state.pid = os.getpid()
    directory = _spool_directory(run_dir, state.evaluation_id)
    if previous is not None and previous[0] != directory and not offline:
        # An offline attempt's evaluation now exists: this state supersedes that one.
        retire_state(previous[0])
    if offline:
        log.info("run %s opened offline: `proctor runs sync` uploads it later", state.evaluation_id)
    else:
        where = state.viewer_url or settings.api_url
        log.info("run %s %s at %s", state.evaluation_id, "attached" if id else "opened", where)
    return Run(
        id=state.evaluation_id,
        name=name,
        url=state.viewer_url,
        attached=id is not None,
        on_error=on_error,
        finish_timeout=finish_timeout,
        client=client,
        state=state,
        directory=directory,
        upload=upload,
        offline=offline,
    )


def _resolve_mode(
    runs_mode: Literal["online", "disabled"] | None, key: str | None, attach_id: str | None
) -> Literal["online", "disabled"]:
    """`online` or `disabled`: the setting, else online when there is a key.

    Raises:
        AttachError: attaching while disabled, or without a key.
        ConfigError: online without a key.
    """
    run_mode = runs_mode or ("online" if key else None)
    if attach_id is not None and run_mode == "disabled":
        raise AttachError(
            f"cannot attach to evaluation {attach_id} while PROCTOR_RUNS_MODE=disabled; "
            "unset it to upload"
        )
    if run_mode is None:
        if attach_id is not None:
            raise AttachError(
                f"cannot attach to evaluation {attach_id} without an API key; set PROCTOR_API_KEY"
            )
        log.warning("no platform API key (PROCTOR_API_KEY): this run is not uploaded")
        return "disabled"
    if run_mode == "online" and key is None:
        raise ConfigError("PROCTOR_RUNS_MODE=online needs an API key; set PROCTOR_API_KEY.")
    return run_mode


def _spool_directory(run_dir: Path | None, evaluation_id: str) -> Path:
    """`<run_dir>/platform/<id>/`, or `~/.proctor/spool/<id>/` without a run directory."""
    if run_dir is not None:
        return spool_dir(run_dir, evaluation_id)
    return Path.home() / ".proctor" / "spool" / evaluation_id
