"""The runs SDK: land an eval's episodes on a proctor platform, durably.

    run = proctor.runs.init(name=..., environments=["alphabet-sort"], model=..., config={...})
    run.log_episodes([episode.to_record()])   # a queue put; never waits for the network
    run.finish()                              # drain, write summary metrics, finalize

`init(id=EVALUATION_ID)` attaches to an evaluation a launcher created, after checking that
it exists, is still open and that this key may write to it. `create_sharded` and
`finalize_sharded` create and close an evaluation that several processes fill at once
(`init(id=..., shard="I/N")`: a shard sends its samples and never closes the evaluation).
Every record passes through a local spool (`<run_dir>/platform/<id>/`) before it is sent,
and leaves it only when the server acknowledged it; `sync_run_dir` (`proctor runs sync
RUN_DIR`) sends whatever a dead process left behind.

What survives a SIGKILL, by where a record is when the process dies (the engine appends each
record to `traces.jsonl` and flushes it before `log_episodes`):

1. in the hand-off queue (memory): lost to the SDK, but in `traces.jsonl`; `proctor runs
   sync` finds every record of the run missing from the spool there and sends it;
2. appended to `platform/<id>/spool.jsonl` (flushed to the OS): kept; a torn last line is cut
   on reopen (its record is still in `traces.jsonl`). A process that attaches again with the
   same run directory, or `proctor runs sync`, sends every line past the acked offset;
3. sent, but the ack not yet recorded: sent again later; the server stores it once
   (`sample_id` is its idempotency key);
4. acknowledged: `spool.acked` is past it; nothing left to do.

The spool is fsynced before each upload, so whatever reached the server is also on disk; a
power loss can only lose lines never sent, which `traces.jsonl` still holds if the engine's
own writes reached the disk.

`traces.jsonl` is the source of truth and the spool a cache: a disk that refuses the spool
(full, read-only) only keeps the lines in memory, sent from there; `proctor runs sync` asks
the platform which sample ids it holds and sends the rest of traces + spool. `finish()`
finalizes only what the platform acknowledged whole (else `Run.unsynced`, and the
evaluation stays open for the sync). A platform unreachable at `init`, or one that refuses to
create the evaluation (a wrong key, 401/403), makes an offline run
(created later by sync, with the run directory's Idempotency-Key), and `init(resume=True)`
reopens the evaluation the same run directory created: one run directory, one evaluation.
"""

from proctor.projection import project_record as project_sample
from proctor.runs._client import PlatformClient
from proctor.runs._export import ExportFormat, export_evaluation
from proctor.runs._run import Run, RunStatus, init
from proctor.runs._settings import ClientSettings, config_file_path, load_settings
from proctor.runs._sharded import create_sharded, finalize_sharded, summarize_samples
from proctor.runs._state import upload_of
from proctor.runs._summary import summarize
from proctor.runs._sync import SyncReport, sync_run_dir
from proctor.runs._uploader import RunCounters, UploaderOptions

__all__ = [
    "ClientSettings",
    "ExportFormat",
    "PlatformClient",
    "Run",
    "RunCounters",
    "RunStatus",
    "SyncReport",
    "UploaderOptions",
    "config_file_path",
    "create_sharded",
    "export_evaluation",
    "finalize_sharded",
    "init",
    "load_settings",
    "project_sample",
    "summarize",
    "summarize_samples",
    "sync_run_dir",
    "upload_of",
]
