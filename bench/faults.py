"""Fault benchmark: randomized fault schedules against pushed runs; counts what survived.

Each schedule is one pushed run of a few hundred samples, made by an engine-shaped process
(each episode appended to `traces.jsonl`, then handed to the runs SDK, the same calls the
eval makes) against a real `proctor server` (SQLite, loopback) behind a loopback proxy.
Between 1 and 3 faults strike at random points of the run:

- `server-kill`: the server is SIGKILLed and restarted on the same port 0.3-2 s later;
- `spool-full`: the spool's filesystem (a tmpfs over `<run_dir>/platform`) is filled to
  ENOSPC for 0.2-1.5 s;
- `storm`: the proxy answers 503/429 (with Retry-After 0-1 s) for 1-4 s;
- `resets`: for 1-3 s the proxy resets connections, half of them after forwarding the
  request (the server stored the batch, the client never heard);
- `eval-kill`: the run's process is SIGKILLed, then finished by `proctor runs sync` or by
  resuming the run (`init(resume=True)` re-logs traces.jsonl and runs the rest).

A run that ends with exit 75 (the platform lacks samples) is finished with `proctor runs
sync RUN_DIR`, as its last line says. Then, against the server directly: expected = the ids
in traces.jsonl, stored = the ids the server holds; duplicated = rows stored twice; lost =
expected but not stored; a false status is a COMPLETED evaluation that lacks a sample or an
episode of the run, or a run reported done that is not closed. Goal: 0 / 0 / 0.

Usage (root, for the tmpfs mounts): .venv/bin/python bench/faults.py [--schedules 50]
[--seed 1] [--out bench/results/faults.md]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.procs import PROCTOR, ManagedProcess, free_port, wait_http  # noqa: E402

from proctor.contract import TERMINAL_STATUSES  # noqa: E402

KEY = "pk-bench-faults-0123456789abcdef01"
FAULTS = ("server-kill", "spool-full", "storm", "resets", "eval-kill")

# The engine's shape: trace first, then the run. `resume` re-logs what traces.jsonl holds.
CHILD = r"""
import json, sys, time, uuid
from pathlib import Path
from proctor import runs

run_dir, n, pause = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
resume = sys.argv[4] == "1"
run_dir.mkdir(parents=True, exist_ok=True)
traces_path = run_dir / "traces.jsonl"
kept = []
if resume and traces_path.exists():
    for line in traces_path.read_text().splitlines(keepends=True):
        if line.endswith("\n"):
            kept.append(json.loads(line))
run = runs.init(name="faults", environments=["alphabet-sort"], model="demo",
                config={"num_examples": n}, run_dir=run_dir, expected_samples=n,
                finish_timeout=30, resume=resume)
if kept:
    for r in kept:
        r["run"] = {"id": run.id}
    tmp = traces_path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    tmp.replace(traces_path)
    run.log_episodes(kept)
done = {r["example_id"] for r in kept}
with open(traces_path, "a") as traces:
    for i in range(n):
        if i in done:
            continue
        rec = {"id": uuid.uuid4().hex, "env": "alphabet-sort", "example_id": i,
               "rollout_number": 1, "task": {"index": i, "prompt": f"sort {i}"},
               "messages": [{"role": "user", "content": f"sort {i}"},
                            {"role": "assistant", "content": "a, b, c" * 20}],
               "reward": (i % 7) / 6, "rewards": {"sort": (i % 7) / 6}, "metrics": {},
               "error": None, "is_completed": True, "ok": True, "run": {"id": run.id}}
        traces.write(json.dumps(rec) + "\n")
        traces.flush()
        run.log_episodes([rec])
        time.sleep(pause)
run.finish()
print(json.dumps({"id": run.id, "unsynced": run.unsynced}), flush=True)
sys.exit(75 if run.unsynced else 0)
"""


# -- the platform and its proxy ---------------------------------------------------------


class Platform:
    """`proctor server` on a fixed loopback port, killable and restartable."""

    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [*PROCTOR, "server", "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = ManagedProcess(
            [*args, "--data-dir", str(data_dir)],
            data_dir / "server.log",
            env={"PROCTOR_BOOTSTRAP_KEY": KEY},
        )
        self.start()

    def start(self) -> None:
        self.proc.start()
        wait_http(f"{self.url}/healthz", proc=self.proc.proc, timeout=60)

    def kill(self) -> None:
        self.proc.kill()

    def stop(self) -> None:
        self.proc.stop()


class FaultProxy:
    """Forwards to the platform, except while a storm or a reset window is open."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.storm_until = 0.0
        self.reset_until = 0.0
        self.injected = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reset(self) -> None:
                # SO_LINGER 0: close with a RST, as a crashing middlebox would.
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.close()

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                now = time.monotonic()
                if now < proxy.storm_until:
                    proxy.injected += 1
                    status = random.choice((503, 429))
                    payload = b'{"error":{"code":"rate_limited","message":"busy"}}'
                    self.send_response(status)
                    self.send_header("Retry-After", str(random.choice((0, 1))))
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                resetting = now < proxy.reset_until
                if resetting and random.random() < 0.5:
                    proxy.injected += 1
                    self._reset()  # before forwarding: the server never saw it
                    return
                keep = ("authorization", "content-type", "idempotency-key")
                headers = {k: v for k, v in self.headers.items() if k.lower() in keep}
                try:
                    r = httpx.request(
                        self.command,
                        proxy.target + self.path,
                        headers=headers,
                        content=body,
                        timeout=60,
                    )
                except httpx.TransportError:
                    self._reset()  # the server is down: the client sees a dead connection
                    return
                if resetting:
                    proxy.injected += 1
                    self._reset()  # after forwarding: stored, but the answer is lost
                    return
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = do_PUT = do_PATCH = _any

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


# -- one schedule -----------------------------------------------------------------------


@dataclass
class Outcome:
    index: int
    faults: list[str]
    samples: int
    expected: int = 0
    stored: int = 0
    duplicated: int = 0
    lost: int = 0
    false_status: int = 0
    status: str = ""
    notes: list[str] = field(default_factory=list)


def _mount(directory: Path, size: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True
    )


def _fill(directory: Path) -> Path:
    filler = directory / ".filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def _trace_ids(run_dir: Path) -> list[str]:
    ids = []
    for line in (run_dir / "traces.jsonl").read_text().splitlines(keepends=True):
        if line.endswith("\n"):
            ids.append(json.loads(line)["id"])
    return ids


def _client_env(api_url: str, home: Path) -> dict[str, str]:
    drop = ("PROCTOR_API_URL", "PROCTOR_API_KEY", "PROCTOR_TEAM_ID", "PROCTOR_RUNS_MODE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PROCTOR_API_URL=api_url, PROCTOR_API_KEY=KEY, HOME=str(home), PYTHONPATH=str(ROOT))
    return env


def _child(
    run_dir: Path, n: int, pause: float, resume: bool, env: dict[str, str]
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(run_dir), str(n), str(pause), "1" if resume else "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _sync(run_dir: Path, env: dict[str, str], api_url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROCTOR, "runs", "sync", str(run_dir), "--api-url", api_url, "--timeout", "120"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _server_view(plat: Platform, eid: str) -> tuple[list[str], dict[str, Any]]:
    with httpx.Client(
        base_url=f"{plat.url}/api/v1", headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    ) as c:
        for _ in range(100):
            record = c.get(f"/evaluations/{eid}").json()
            if record.get("status") != "PROCESSING":
                break
            time.sleep(0.1)
        ids: list[str] = []
        page = 1
        while True:
            body = c.get(f"/evaluations/{eid}/samples", params={"page": page, "limit": 1000}).json()
            ids += [s["sample_id"] for s in body["samples"]]
            if not body["has_more"]:
                return ids, record
            page += 1


def run_schedule(
    index: int, rng: random.Random, plat: Platform, proxy: FaultProxy, work: Path
) -> Outcome:
    n = rng.randint(200, 400)
    pause = rng.uniform(0.002, 0.008)
    faults = rng.sample(FAULTS, rng.randint(1, 3))
    out = Outcome(index, faults, n)
    run_dir = work / f"s{index:03d}"
    home = work / "home"
    home.mkdir(exist_ok=True)
    env = _client_env(proxy.url, home)
    spool_root = run_dir / "platform"
    mounted = "spool-full" in faults
    if mounted:
        _mount(spool_root, "2m")
    try:
        # When each fault strikes: a fraction of the run's episodes written.
        at = {f: rng.uniform(0.1, 0.8) for f in faults}
        child = _child(run_dir, n, pause, False, env)
        traces = run_dir / "traces.jsonl"
        pending = sorted(faults, key=lambda f: at[f])
        killed = False
        while child.poll() is None and pending:
            fault = pending[0]
            if _lines(traces) < at[fault] * n:
                time.sleep(0.01)
                continue
            pending.pop(0)
            if fault == "server-kill":
                plat.kill()
                time.sleep(rng.uniform(0.3, 2.0))
                plat.start()
            elif fault == "spool-full":
                filler = _fill(spool_root)
                time.sleep(rng.uniform(0.2, 1.5))
                filler.unlink()
            elif fault == "storm":
                proxy.storm_until = time.monotonic() + rng.uniform(1.0, 4.0)
            elif fault == "resets":
                proxy.reset_until = time.monotonic() + rng.uniform(1.0, 3.0)
            elif fault == "eval-kill":
                child.send_signal(signal.SIGKILL)
                killed = True
        _, stderr = child.communicate(timeout=600)
        code = child.returncode
        if killed:
            if rng.random() < 0.5:
                out.notes.append("then sync")
                done = _sync(run_dir, env, proxy.url)
                code = done.returncode
            else:
                out.notes.append("then resume")
                again = _child(run_dir, n, pause, True, env)
                _, stderr = again.communicate(timeout=600)
                code = again.returncode
        if code == 75:
            out.notes.append("exit 75, then sync")
            code = _sync(run_dir, env, proxy.url).returncode
        if code != 0:
            out.notes.append(f"exit {code}: {(stderr or '').strip().splitlines()[-1:]}")
        proxy.storm_until = proxy.reset_until = 0.0
        state_dirs = [d for d in spool_root.iterdir() if (d / "run.json").is_file()]
        eid = json.loads((state_dirs[-1] / "run.json").read_text())["evaluation_id"]
        expected = _trace_ids(run_dir)
        stored, record = _server_view(plat, eid)
        out.expected, out.stored = len(expected), len(set(stored))
        out.duplicated = len(stored) - len(set(stored))
        out.lost = len(set(expected) - set(stored))
        extra = len(set(stored) - set(expected))
        if extra:
            out.notes.append(f"{extra} stored sample(s) not in traces")
        out.status = str(record.get("status"))
        whole = out.lost == 0 and len(set(expected)) >= n
        if out.status == "COMPLETED" and not whole:
            out.false_status += 1
        if code == 0 and out.status not in TERMINAL_STATUSES:
            out.false_status += 1  # reported done, left open
        if code == 0 and whole and out.status != "COMPLETED":
            out.false_status += 1  # everything there, reported done, not completed
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(spool_root)], check=False)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "faults.md")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    random.seed(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="proctor-faults-") as tmp:
        work = Path(tmp)
        (work / "platform").mkdir()
        plat = Platform(work / "platform")
        proxy = FaultProxy(plat.url)
        outcomes: list[Outcome] = []
        try:
            for i in range(args.schedules):
                o = run_schedule(i, rng, plat, proxy, work)
                outcomes.append(o)
                print(
                    f"{i:3d} {'+'.join(o.faults):<40} n={o.samples:3d} expected={o.expected:3d} "
                    f"stored={o.stored:3d} dup={o.duplicated} lost={o.lost} "
                    f"false={o.false_status} {o.status} {'; '.join(o.notes)}",
                    flush=True,
                )
        finally:
            proxy.close()
            plat.stop()
    wall = time.monotonic() - started
    total = {
        k: sum(getattr(o, k) for o in outcomes)
        for k in ("expected", "stored", "duplicated", "lost", "false_status")
    }
    print(
        f"TOTAL schedules={len(outcomes)} expected={total['expected']} stored={total['stored']} "
        f"duplicated={total['duplicated']} lost={total['lost']} "
        f"false_statuses={total['false_status']} wall={wall:.0f}s"
    )
    write_report(args, outcomes, total, wall)


def write_report(
    args: argparse.Namespace, outcomes: list[Outcome], total: dict[str, int], wall: float
) -> None:
    lines = [
        "# Fault benchmark",
        "",
        f"Command: `.venv/bin/python bench/faults.py --schedules {args.schedules} "
        f"--seed {args.seed}` (as root, for the tmpfs mounts).",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared), Python "
        f"{platform.python_version()}, SQLite; {wall:.0f} s wall.",
        "",
        "| schedules | samples expected | stored | duplicated | lost | false statuses |",
        "|---|---|---|---|---|---|",
        f"| {len(outcomes)} | {total['expected']} | {total['stored']} | {total['duplicated']} "
        f"| {total['lost']} | {total['false_status']} |",
        "",
        "Faults per schedule: "
        + ", ".join(f"`{f}` {sum(f in o.faults for o in outcomes)}" for f in FAULTS)
        + ".",
        "",
        "| # | faults | samples | expected | stored | dup | lost | false | status | notes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.index} | {' + '.join(o.faults)} | {o.samples} | {o.expected} | {o.stored} "
            f"| {o.duplicated} | {o.lost} | {o.false_status} | {o.status} | {'; '.join(o.notes)} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
