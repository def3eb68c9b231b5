"""Wraps one shard's command for bench/shards.py (stdlib only, so it starts in milliseconds).

    python bench/shard_probe.py OUT_DIR -- COMMAND...

Runs COMMAND and writes `OUT_DIR/<evaluation>-<shard>-<pid>.json`: when it started and
ended (epoch seconds), its exit code, and the CPU seconds (user + system) and peak RSS of
COMMAND's whole process tree (`RUSAGE_CHILDREN`: every descendant that was waited for).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    started = time.time()
    out_dir, sep, *command = argv
    if sep != "--" or not command:
        sys.exit("usage: shard_probe.py OUT_DIR -- COMMAND...")
    shard = command[command.index("--shard") + 1] if "--shard" in command else "0/1"
    attached = command[command.index("--run.attach") + 1] if "--run.attach" in command else ""
    code = subprocess.call(command)
    ended = time.time()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {
        "evaluation_id": os.environ.get("EVALUATION_ID") or attached,
        "shard": int(shard.partition("/")[0]),
        "started": started,
        "ended": ended,
        "exit_code": code,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "max_rss_mb": usage.ru_maxrss / 1024,
    }
    name = f"{record['evaluation_id']}-{record['shard']}-{os.getpid()}.json"
    with open(os.path.join(out_dir, name), "w") as f:
        json.dump(record, f)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
