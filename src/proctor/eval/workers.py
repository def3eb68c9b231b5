"""Rollouts on every core: worker processes, each with its own event loop, fed by the parent.

One event loop is one core: past a few hundred rollouts in flight, the loop's CPU (HTTP,
JSON, scoring) is the ceiling, not the model. So `-w N` worker processes run the rollouts,
each its own interpreter with its own loop, client and limiter, holding its share of `-c`.
The parent stays the single owner of everything a run promises: it plans the jobs, feeds
them to the workers a few at a time, and alone writes `traces.jsonl`, drives the progress
view and hands episodes to the platform; so one trace file, one evaluation, and resume work
exactly as with one process (docs/engine.md says why this design and not another).

The wire is one pipe each way, one line per message:

- parent -> worker: a JSON header `{"config", "concurrency"}`, then `{"run"}` once the
  platform run is open, then jobs as `J<rollout number> <size>` and `size` bytes of their
  task, pickled (the parent selected the tasks; a worker never selects them again).
- worker -> parent: the episodes finished in one turn of the worker's event loop as one
  batch, `B<size> <summaries>` and then `size` bytes of their finished `traces.jsonl` lines;
  log records as `L[level, logger, message]`; a fatal error as `E<message>`, after which the
  worker exits: the parent ends the run with that message.

Both sides run the one rollout loop, `proctor.eval.scheduler.run_jobs`: a worker is the
in-process run fed through a pipe.

The parent's cost per episode is kept tiny, because it is one core's work for all workers:
it appends a batch's lines to the trace file in one write, as bytes (never decoding them,
unless it pushes to the platform, whose uploader needs the records), and counts the small
JSON summaries (ids, rewards, tokens, error) for the progress view and the summary.

A worker of an environment that spawns processes (which runs on asyncio's loop, see
`event_loop`) is forked from the parent, which has loaded the environment already: it skips
a new interpreter's start, the environment's imports and its load (a verifiers environment's
imports alone are ~4.6 CPU-s per process; bench/results/test_suite.md). The fork keeps only
the two pipes and stderr open, forgets the parent's loop and signal handlers, and runs the
same worker loop as a started one; a parent with a thread that is not a daemon, or
without `pidfd_open`, starts workers as new interpreters instead.

A worker that dies (OOM, SIGKILL) loses only its episodes in flight: the parent runs them
again on a fresh worker, so every episode is recorded exactly once. A parent that dies
takes its workers with it (end of stdin, and a parent-death signal on Linux); the trace
file holds what finished, and `--resume` continues. Workers ignore SIGINT: Ctrl-C is the
parent's to handle, which stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import pickle
import signal
import sys
import threading
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proctor.errors import ProctorError, WorkerError
from proctor.eval import event_loop
from proctor.eval.scheduler import Job, JobFeed, run_jobs

if TYPE_CHECKING:
    from proctor.envs import Environment, Episode
    from proctor.eval.config import EvalConfig

logger = logging.getLogger(__name__)

MAX_LINE = 1 << 28
"""Longest message on the wire (a long multi-turn episode is one line)."""

WORKER_COMMAND = (sys.executable, "-c", "from proctor.eval.workers import main; main()")
STDLIB_LOOP = "--stdlib-loop"
"""Passed to a worker whose environment spawns processes: it runs on asyncio's loop."""
"""How a worker starts (not `-m`: the module would load twice, once as `__main__`)."""

PREFETCH = 2
"""Jobs a worker holds per rollout slot: one running, one queued, so it never waits on us."""

SUMMARY_KEYS = (
    "example_id",
    "rollout_number",
    "reward",
    "rewards",
    "metrics",
    "token_usage",
    "error",
)
"""What the parent needs of an episode record to count it (`RunStats.add`, first error)."""

OnBatch = Callable[[list[dict[str, Any]], bytes], None]
"""`on_batch(summaries, lines)`: finished episodes, as summaries and as their trace lines."""


def cores_available() -> int:
    """CPU cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def effective_workers(
    requested: int | None, *, concurrency: int, jobs: int, cores: int | None = None
) -> int:
    """How many worker processes a run gets; 1 means the rollouts run in this process.

    Unset: one per core beyond the first (the parent keeps one core for the trace file, the
    progress view and the platform), but no more than one per 32 episodes in flight. So a
    machine of two cores or fewer, and a small run, stay in one process: there a second
    process only competes for the same cores and costs its interpreter's start (measured in
    bench/results/engine_overhead.md, the `-w 1` row against `-w 2`).
    """
    if requested is None:
        spare = (cores_available() if cores is None else cores) - 1
        requested = min(spare, concurrency // 32)
        if requested < 2:
            requested = 1
    return max(1, min(requested, concurrency, jobs))


@dataclass(eq=False)
class _Worker:
    number: int
    concurrency: int
    proc: asyncio.subprocess.Process | _ForkedProcess
    in_flight: dict[tuple[int, int], Job] = field(default_factory=dict)
    closing: bool = False


class WorkerPool:
    """The parent's side: start workers, feed them jobs, stream their episodes back.

    Args:
        config: The run's resolved config (each worker loads the environment from it).
        env: The environment this process loaded from `config`. One that spawns processes
            runs on asyncio's loop in the workers too, which are forked from this process
            with it instead of loading it again.
        workers: Number of worker processes (at least 2; 1 runs in-process instead).
        concurrency: Episodes in flight across all workers (`-c`), split between them.
    """

    def __init__(
        self, config: EvalConfig, env: Environment, *, workers: int, concurrency: int
    ) -> None:
        self.config = config
        self._stdlib_loop = event_loop.spawns_processes(env)
        self._env = env if self._stdlib_loop and _can_fork() else None
        base, extra = divmod(concurrency, workers)
        self._shares = [base + (1 if i < extra else 0) for i in range(workers)]
        self._slots: list[_Worker | None] = [None] * workers
        self._run_line: bytes | None = None
        self._pending: deque[Job] = deque()
        self._task_bytes: dict[int, bytes] = {}
        self._remaining = 0
        self._restarts_left = 2 * workers
        self._on_batch: OnBatch | None = None
        self._finished = asyncio.Event()

    async def start(self) -> None:
        """Spawn the workers; they load the environment while the parent opens the run."""
        for i in range(len(self._slots)):
            self._slots[i] = await self._spawn(i)

    async def _spawn(self, number: int) -> _Worker:
        proc: asyncio.subprocess.Process | _ForkedProcess
        if self._env is not None and _only_daemon_threads():
            proc = await _ForkedProcess.fork(self._env)
        else:
            proc = await asyncio.create_subprocess_exec(
                *WORKER_COMMAND,
                *([STDLIB_LOOP] if self._stdlib_loop else []),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=MAX_LINE,
            )
        worker = _Worker(number, self._shares[number], proc)
        header = {
            "config": self.config.model_dump(mode="json"),
            "concurrency": worker.concurrency,
            "number": number,
        }
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(header).encode() + b"\n")
        if self._run_line is not None:
            proc.stdin.write(self._run_line)
        logger.debug(
            "worker %d %s (pid %d, %d in flight)",
            number,
            "forked" if isinstance(proc, _ForkedProcess) else "started",
            proc.pid,
            worker.concurrency,
        )
        return worker

    async def run(
        self,
        jobs: list[Job],
        *,
        run_info: dict[str, Any],
        on_batch: OnBatch,
    ) -> None:
        """Run every job on the workers; `on_batch(summaries, lines)` as episodes finish.

        Raises:
            WorkerError: a worker could not load the environment, or workers kept dying.
        """
        self._on_batch = on_batch
        self._run_line = json.dumps({"run": run_info}).encode() + b"\n"
        self._pending.extend(jobs)
        self._remaining = len(jobs)
        for worker in self._slots:
            assert worker is not None and worker.proc.stdin is not None
            worker.proc.stdin.write(self._run_line)
            self._feed(worker)
        if not self._remaining:
            return
        readers = [asyncio.create_task(self._serve_slot(i)) for i in range(len(self._slots))]
        try:
            await asyncio.gather(*readers)
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)

    def _feed(self, worker: _Worker) -> None:
        room = worker.concurrency * PREFETCH - len(worker.in_flight)
        if room <= 0 or not self._pending or worker.closing:
            return
        parts: list[bytes] = []
        pending, in_flight = self._pending, worker.in_flight
        for _ in range(min(room, len(pending))):
            job = pending.popleft()
            in_flight[(job.task.index, job.rollout_number)] = job
            task = self._task_message(job)
            parts.append(b"J%d %d\n" % (job.rollout_number, len(task)))
            parts.append(task)
        assert worker.proc.stdin is not None
        worker.proc.stdin.write(b"".join(parts))

    def _task_message(self, job: Job) -> bytes:
        """The job's task as the worker receives it (pickled once per task, not per job)."""
        task = job.task
        data = self._task_bytes.get(task.index)
        if data is None:
            try:
                data = pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as e:
                raise WorkerError(
                    f"task {task.index} cannot be sent to a worker process "
                    f"({type(e).__name__}: {e}); run in one process with -w 1"
                ) from e
            self._task_bytes[task.index] = data
        return data

    async def _serve_slot(self, number: int) -> None:
        """Read one slot's worker until the run is done, replacing it if it dies."""
        while True:
            worker = self._slots[number]
            assert worker is not None and worker.proc.stdout is not None
            fatal = await self._read(worker)
            code = await worker.proc.wait()
            if worker.closing:
                return
            if fatal is not None:
                raise WorkerError(fatal)
            lost = len(worker.in_flight)
            self._pending.extendleft(worker.in_flight.values())
            worker.in_flight.clear()
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            if self._restarts_left <= 0:
                raise WorkerError(
                    f"worker processes keep dying (the last with {how}); "
                    "see logs/eval.log, or run in one process with -w 1"
                )
            self._restarts_left -= 1
            logger.warning(
                "worker %d died (%s); its %d episodes in flight run again on a new worker",
                number,
                how,
                lost,
            )
            replacement = self._slots[number] = await self._spawn(number)
            assert replacement.proc.stdin is not None
            for other in self._slots:
                if other is not None:
                    self._feed(other)

    async def _read(self, worker: _Worker) -> str | None:
        """Consume the worker's messages until its output ends; a fatal error's text, if any."""
        stdout = worker.proc.stdout
        assert stdout is not None and self._on_batch is not None
        on_batch, in_flight = self._on_batch, worker.in_flight
        while True:
            line = await stdout.readline()
            if not line.endswith(b"\n"):
                return None  # end of output (a torn last line was never a whole episode)
            kind = line[:1]
            if kind == b"B":
                size, _, summaries_json = line[1:].partition(b" ")
                try:
                    lines = await stdout.readexactly(int(size))
                except asyncio.IncompleteReadError:
                    return None  # died mid-batch: none of it counts, all of it runs again
                summaries = json.loads(summaries_json)
                for summary in summaries:
                    in_flight.pop((summary["example_id"], summary["rollout_number"]), None)
                self._remaining -= len(summaries)
                on_batch(summaries, lines)
                if self._remaining == 0:
                    self._close_all()
                else:
                    self._feed(worker)
            elif kind == b"L":
                level, name, message = json.loads(line[1:])
                logging.getLogger(name).log(level, "%s", message)
            elif kind == b"E":
                return line[1:].decode(errors="replace").strip()

    def _close_all(self) -> None:
        for worker in self._slots:
            if worker is not None and not worker.closing:
                worker.closing = True
                assert worker.proc.stdin is not None
                worker.proc.stdin.close()

    async def aclose(self) -> None:
        """Stop every worker (the episodes they still have in flight are dropped)."""
        workers = [w for w in self._slots if w is not None]
        for worker in workers:
            worker.closing = True
            if worker.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.terminate()
        for worker in workers:
            try:
                await asyncio.wait_for(worker.proc.wait(), timeout=5)
            except TimeoutError:
                worker.proc.kill()
                await worker.proc.wait()


def _can_fork() -> bool:
    """Whether workers may be forked here: `os.fork`, and `pidfd_open` to await their exit
    on the loop without a thread (a thread would make the next fork unsafe)."""
    if not hasattr(os, "fork") or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # pragma: no cover - a kernel older than Linux 5.3
        return False
    return True


def _only_daemon_threads() -> bool:
    """Whether every other thread of this process is a daemon (e.g. tqdm's monitor, which a
    dataset's progress bar starts and which only sleeps): a forked child runs none of them,
    and a worker of ours never waits on what they hold."""
    main = threading.main_thread()
    return all(t is main or t.daemon for t in threading.enumerate())


class _ForkedProcess:
    """A worker forked from this process, with the part of `asyncio.subprocess.Process`
    the pool uses (`stdin`, `stdout`, `wait`, `returncode`, `terminate`, `kill`)."""

    def __init__(self, pid: int, stdin: asyncio.WriteTransport, stdout: asyncio.StreamReader):
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None
        self._loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = self._loop.create_future()
        self._pidfd = os.pidfd_open(pid)
        self._loop.add_reader(self._pidfd, self._reap)

    @classmethod
    async def fork(cls, env: Environment) -> _ForkedProcess:
        """Fork a worker that runs `env` (already loaded here), fed through two pipes."""
        jobs_in, jobs_out = os.pipe()
        results_in, results_out = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12+ warns of any other thread (`_only_daemon_threads` checked them).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; it never returns into our stack
            code = 1
            try:
                os.dup2(jobs_in, 0)
                os.dup2(results_out, 1)
                code = _forked_main(env)
            finally:
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                os._exit(code)
        os.close(jobs_in)
        os.close(results_out)
        loop = asyncio.get_running_loop()
        stdout = asyncio.StreamReader(limit=MAX_LINE)
        try:
            stdin, _ = await loop.connect_write_pipe(
                asyncio.Protocol, os.fdopen(jobs_out, "wb", buffering=0)
            )
            await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(stdout),
                os.fdopen(results_in, "rb", buffering=0),
            )
            return cls(pid, stdin, stdout)
        except BaseException:  # pragma: no cover - the loop refused a pipe
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise

    def _reap(self) -> None:
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self.returncode = os.waitstatus_to_exitcode(status)
        self._exited.set_result(self.returncode)

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


def _forked_main(env: Environment) -> int:  # pragma: no cover - runs in the forked child
    """The forked worker, on fds 0 and 1 as a started one: it becomes what `main` makes of a
    new interpreter, with `env` loaded. The parent's objects stay as they are (frozen, never
    collected: their finalizers would close file descriptors this process reuses)."""
    gc.freeze()
    asyncio.events._set_running_loop(None)
    for sig in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    try:
        top = max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        top = os.sysconf("SC_OPEN_MAX")
    os.closerange(3, top)
    logging.getLogger().handlers.clear()
    return _main(env)


# --- the worker's side ---------------------------------------------------------------------


class _PipeLogHandler(logging.Handler):
    """Sends log records to the parent, which logs them as its own (file, terminal)."""

    def __init__(self, write: Callable[[bytes], None], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._write = write
        self._loop = loop
        self._thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = b"L" + json.dumps([record.levelno, record.name, self.format(record)]).encode()
            if threading.get_ident() == self._thread:
                self._write(line + b"\n")
            else:
                self._loop.call_soon_threadsafe(self._write, line + b"\n")
        except Exception:  # pragma: no cover - logging must never break a rollout
            self.handleError(record)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when its parent dies (stdin's end is the fallback)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # pragma: no cover - not Linux: end of stdin still stops the worker
        pass


def _fatal_text(error: BaseException) -> str:
    """One line naming the error, as the in-process run reports it."""
    text = str(error) if isinstance(error, ProctorError) else f"{type(error).__name__}: {error}"
    return " ".join(text.split())


async def _worker(proto_in: int, proto_out: int, loaded: Environment | None = None) -> int:
    from proctor.envs import load_environment
    from proctor.eval.config import EvalConfig
    from proctor.eval.judge import open_judge
    from proctor.models.openai_client import OpenAIChatClient

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(proto_in, "rb", buffering=0)
    )
    transport, _ = await loop.connect_write_pipe(
        asyncio.Protocol, os.fdopen(proto_out, "wb", buffering=0)
    )
    write = transport.write
    root = logging.getLogger("proctor")
    root.handlers[:] = [_PipeLogHandler(write, loop)]
    root.propagate = False

    dumps = json.dumps
    lines: list[bytes] = []
    summaries: list[dict[str, Any]] = []
    flush_scheduled = False

    def flush() -> None:
        # Once per turn of the loop: every episode that finished in it, in one message.
        nonlocal flush_scheduled
        flush_scheduled = False
        data = b"".join(lines)
        head = b"B%d %s\n" % (len(data), dumps(summaries).encode())
        lines.clear()
        summaries.clear()
        write(head + data)

    def fail(error: BaseException) -> int:
        if lines:  # the episodes that did finish are kept (a --resume skips them)
            flush()
        logger.debug("worker failed", exc_info=error)
        write(b"E" + _fatal_text(error).encode(errors="replace") + b"\n")
        return 1

    header = json.loads(await reader.readline())
    config = EvalConfig.model_validate(header["config"])
    root.setLevel(logging.DEBUG if config.verbose else logging.INFO)
    try:
        env = loaded or load_environment(config.env, **config.env_args)
    except Exception as e:
        return fail(e)
    run_line = await reader.readline()
    if not run_line:
        return 0
    run_info = json.loads(run_line)["run"]
    concurrency = int(header["concurrency"])
    logger.debug(
        "worker %d (pid %d%s) running up to %d episodes at once",
        header["number"],
        os.getpid(),
        ", forked" if loaded is not None else "",
        concurrency,
    )
    try:
        client = OpenAIChatClient(
            model=config.model,
            client=config.client,
            sampling=config.sampling,
            max_connections=concurrency,
        )
        judge = open_judge(env, config)
    except Exception as e:
        return fail(e)

    def on_episode(episode: Episode) -> None:
        nonlocal flush_scheduled
        episode.run = run_info
        record = episode.to_record()
        lines.append(dumps(record).encode() + b"\n")
        summaries.append({key: record[key] for key in SUMMARY_KEYS})
        if not flush_scheduled:
            flush_scheduled = True
            loop.call_soon(flush)

    async def read_jobs() -> None:
        # Jobs until the parent closes our stdin: then every job we got is done, or the
        # parent is gone and what is still in flight has nowhere to go.
        while line := await reader.readline():
            number, size = line[1:].split()
            task = pickle.loads(await reader.readexactly(int(size)))
            feed.put(Job(task, int(number)))

    feed = JobFeed()
    rollouts = asyncio.create_task(
        run_jobs(
            env,
            client,
            feed,
            concurrency=concurrency,
            on_episode=on_episode,
            pair_named=config.shard is not None,
        )
    )
    jobs = asyncio.create_task(read_jobs())
    try:
        await asyncio.wait((rollouts, jobs), return_when=asyncio.FIRST_COMPLETED)
        if rollouts.done():  # the loop only ends early by raising: the run must end with it
            return fail(rollouts.exception() or RuntimeError("the rollout loop stopped"))
        if (error := jobs.exception()) is not None and not isinstance(
            error, asyncio.IncompleteReadError
        ):
            return fail(error)
        return 0
    finally:
        for task in (rollouts, jobs):
            task.cancel()
        await asyncio.gather(rollouts, jobs, return_exceptions=True)
        await env.aclose()
        await client.aclose()
        if judge is not None:
            await judge.aclose()
        # What we wrote must reach the parent before this process exits (a bounded wait:
        # a parent that stopped reading is gone or stopping us).
        for _ in range(500):
            if transport.is_closing() or not transport.get_write_buffer_size():
                break
            await asyncio.sleep(0.01)


def main() -> None:
    """Entry point of a worker process (`WORKER_COMMAND`); exits with the worker's status."""
    raise SystemExit(_main(None))


def _main(loaded: Environment | None) -> int:
    """A worker on fds 0 and 1: `loaded` when forked with it, else loaded from the config."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    # The protocol keeps private copies of stdin/stdout; fd 1 becomes stderr, so an
    # environment that prints cannot corrupt the stream of episodes.
    proto_in, proto_out = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    # STDLIB_LOOP: the environment spawns processes (see `event_loop`); a forked worker's does.
    stdlib = loaded is not None or STDLIB_LOOP in sys.argv[1:]
    return event_loop.run(_worker(proto_in, proto_out, loaded), stdlib=stdlib)
