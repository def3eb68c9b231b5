"""The runs SDK: land an eval's episodes on a proctor platform, durably.

    run = proctor.runs.init(name=..., environments=["alphabet-sort"], model=..., config={...})
    run.log_episodes([episode.to_record()])   # a queue put; never waits for the network
    run.finish()                              # drain, write summary metrics, finalize

`init(id=EVALUATION_ID)` attaches to an evaluation a launcher created, after checking that
it exists, is still open and that this key may write to it. Every record passes through a
local spool (`<run_dir>/platform/<id>/`) before it is sent, and leaves it only when the
server acknowledged it; `sync_run_dir` (`proctor runs sync RUN_DIR`) sends whatever a dead
process left behind.
"""

from proctor.runs._client import PlatformClient, PlatformUnreachable, RetryableAPIError
from proctor.runs._projection import project_sample
from proctor.runs._run import Run, RunStatus, init
from proctor.runs._settings import ClientSettings, load_settings
from proctor.runs._state import RunState
from proctor.runs._summary import SummaryAccumulator, summarize
from proctor.runs._sync import SyncReport, sync_run_dir
from proctor.runs._uploader import RunCounters, UploaderOptions

__all__ = [
    "ClientSettings",
    "PlatformClient",
    "PlatformUnreachable",
    "RetryableAPIError",
    "Run",
    "RunCounters",
    "RunState",
    "RunStatus",
    "SummaryAccumulator",
    "SyncReport",
    "UploaderOptions",
    "init",
    "load_settings",
    "project_sample",
    "summarize",
    "sync_run_dir",
]
