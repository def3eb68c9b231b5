"""The unmodified public clients (prime-evals 0.2.4, prime-runs 0.1.4) against a real server.

Each client runs in its own subprocess, configured only the way a user would configure it:
`PRIME_API_BASE_URL` / `PRIME_TRACES_URL` point at a `proctor server` on loopback,
`PRIME_API_KEY` holds a key, and `HOME` is a temp dir so no `~/.prime/config.json` leaks in.
The script prints one JSON line; the test then checks what the server stored, through its
HTTP API and directly in its database. Runs on SQLite and, with
`PROCTOR_TEST_POSTGRES_URL`, on PostgreSQL: one server per backend for the module (`server`).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from proctor.server.auth import service as auth
from proctor.server.db.session import Database
from proctor.server.settings import Settings
from tests.support.databases import BACKENDS, platform_on
from tests.support.platform import Platform

pytestmark = pytest.mark.e2e

# Key order, unicode, floats that re-serialise differently (1.0, 1e-07, 0.1+0.2) and a big
# integer: any decode/re-encode on the server would change these bytes.
METADATA = {
    "zeta": 1,
    "alpha": {"b": [1.0, 2.50, 1e-07, 0.30000000000000004], "a": None},
    "model": "demo/scripted",
    "unicode": "na\u00efve \u2013 \u6a21\u578b \u2713",
    "num_examples": 3,
    "rollouts_per_example": 2,
    "big": 12345678901234567890,
    "empty": {},
}


def _compact(value: Any) -> str:
    """JSON exactly as both clients encode bodies (httpx and prime-runs agree)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    """A `proctor server` process on each database backend, shared by this module's tests:
    each works in evaluations of its own and counts what it adds (`_total`)."""
    with platform_on(request.param, tmp_path_factory.mktemp(f"compat-{request.param}")) as p:
        yield p


def _total(platform: Platform, **params: str) -> int:
    """How many evaluations the server lists (with `params` as the listing's filters)."""
    with platform.client() as client:
        listed = client.get("/evaluations/", params=params)
        assert listed.status_code == 200, listed.text
        return int(listed.json()["total"])


def _settings(platform: Platform) -> Settings:
    return Settings(
        PROCTOR_DATABASE_URL=platform.database_url,  # type: ignore[call-arg]
        data_dir=platform.data_dir,
    )


def _stored_rows(platform: Platform, evaluation_id: str) -> tuple[int, int]:
    """(rows, distinct sample ids) of an evaluation, read from the database itself."""
    engine = create_engine(_settings(platform).resolved_database_url())
    try:
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT count(*), count(DISTINCT sample_id) FROM samples "
                    "WHERE evaluation_id = :id"
                ),
                {"id": evaluation_id},
            ).one()
    finally:
        engine.dispose()
    return int(row[0]), int(row[1])


def _scoped_key(platform: Platform, evaluation_id: str, owner_id: str) -> str:
    """A key that may read and write one evaluation only, minted as the hosted launcher does."""
    db = Database(_settings(platform).resolved_database_url())
    try:
        with db.write() as session:
            return auth.mint_scoped_key(session, evaluation_id, owner_id)
    finally:
        db.dispose()


def _run_client(
    platform: Platform,
    tmp_path: Path,
    script: str,
    args: dict[str, Any],
    key: str | None = None,
    extra_env: dict[str, str] | None = None,
    *,
    refused: bool = False,
) -> dict[str, Any]:
    """Run `script` in a fresh interpreter configured for `platform`; return its JSON line
    (with `refused`, the script must fail: its exit code and output instead)."""
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    script_path = tmp_path / "client.py"
    script_path.write_text(textwrap.dedent(script))
    args_path = tmp_path / "args.json"
    args_path.write_text(json.dumps(args))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PRIME_", "PROCTOR_")) and "PROXY" not in k.upper()
    }
    env.update(
        HOME=str(home),
        PRIME_API_BASE_URL=platform.url,
        PRIME_TRACES_URL=platform.url,
        PRIME_API_KEY=key or platform.api_key,
        PRIME_DISABLE_VERSION_CHECK="1",
        NO_PROXY="127.0.0.1,localhost",
    )
    env.update(extra_env or {})
    done = subprocess.run(
        [sys.executable, str(script_path), str(args_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if refused:
        assert done.returncode != 0, f"client succeeded:\n{done.stdout}\n{done.stderr}"
        return {"returncode": done.returncode, "output": done.stdout + done.stderr}
    assert done.returncode == 0, f"client failed:\n{done.stdout}\n{done.stderr}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _wait_completed(client: httpx.Client, evaluation_id: str) -> httpx.Response:
    deadline = time.monotonic() + 20
    while True:
        response = client.get(f"/evaluations/{evaluation_id}")
        assert response.status_code == 200, response.text
        if response.json()["status"] == "COMPLETED" or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def _assert_metadata_verbatim(response: httpx.Response, metadata: dict[str, Any]) -> None:
    assert f'"metadata":{_compact(metadata)}' in response.text


# --- prime-evals -------------------------------------------------------------------------

PRIME_EVALS_SCRIPT = """
    import json, sys, time
    from prime_evals import APIClient, EvalsClient

    args = json.load(open(sys.argv[1]))
    evals = EvalsClient(APIClient())
    created = evals.create_evaluation(
        name="compat-evals",
        environments=["alphabet-sort"],
        model_name="demo/scripted",
        dataset="alphabet-sort",
        framework="verifiers",
        tags=["compat", "pe"],
        metadata=args["metadata"],
    )
    eid = created["evaluation_id"]
    # A small payload cap forces many batches, uploaded by 4 threads at once.
    pushed = evals.push_samples(eid, args["samples"], max_payload_bytes=4000)
    # A replay of everything (a client retry after lost responses) must store nothing new.
    replayed = evals.push_samples(eid, args["samples"][:40], max_payload_bytes=4000)
    finalized = evals.finalize_evaluation(eid, metrics=args["metrics"])
    deadline = time.monotonic() + 20
    record = evals.get_evaluation(eid)
    while record["status"] != "COMPLETED" and time.monotonic() < deadline:
        time.sleep(0.05)
        record = evals.get_evaluation(eid)
    pages = [evals.get_samples(eid, page=p, limit=50) for p in (1, 2, 3, 4)]
    listed = evals.list_evaluations(env_name="alphabet-sort", limit=10)
    print(json.dumps({
        "created": created, "pushed": pushed, "replayed": replayed, "finalized": finalized,
        "record": record, "pages": pages, "listed": listed,
    }))
"""


def _pe_samples(count: int) -> list[dict[str, Any]]:
    return [
        {
            "sample_id": f"s-{i:04d}",
            "example_id": i // 2,
            "rollout_number": i % 2 + 1,
            "task": {"idx": i // 2, "text": "sort: pear apple fig"},
            "prompt": [{"role": "user", "content": "sort: pear apple fig"}],
            "completion": [{"role": "assistant", "content": f"apple fig pear \u2013 {i}"}],
            "answer": "apple fig pear",
            "reward": (i % 5) / 4,
            "alphabet_sort": (i % 5) / 4,
            "metrics": {"num_turns": 1.0},
            "timing": {"start": 1.5, "total_ms": 12.25},
            "token_usage": {"prompt_tokens": 10, "completion_tokens": 4},
            "is_completed": True,
            "is_truncated": False,
            "error": None,
            "info": {"k": [1, 2.0, "ü"]},
            "unknown_extra_key": {"kept": True},
        }
        for i in range(count)
    ]


def test_prime_evals_create_push_finalize_read(server: Platform, tmp_path: Path) -> None:
    samples = _pe_samples(150)
    metrics = {"avg_reward": 0.5, "avg_metrics": {"alphabet_sort": 0.5}, "avg_error": 0.0}
    before = _total(server, environment_name="alphabet-sort")
    out = _run_client(
        server,
        tmp_path,
        PRIME_EVALS_SCRIPT,
        {"metadata": METADATA, "samples": samples, "metrics": metrics},
    )
    eid = out["created"]["evaluation_id"]
    assert out["created"]["viewer_url"].endswith(eid)
    assert out["pushed"] == {"samples_pushed": 150, "samples_skipped": 0}
    assert out["replayed"] == {"samples_pushed": 40, "samples_skipped": 0}
    assert out["finalized"]["status"] in {"PROCESSING", "COMPLETED"}

    record = out["record"]
    rewards = [s["reward"] for s in samples]
    assert record["status"] == "COMPLETED"
    assert record["total_samples"] == 150
    assert record["avg_score"] == pytest.approx(sum(rewards) / len(rewards))
    assert (record["min_score"], record["max_score"]) == (0.0, 1.0)
    assert record["metrics"] == metrics
    assert record["metadata"] == METADATA
    assert record["environment_names"] == ["alphabet-sort"]
    assert record["tags"] == ["compat", "pe"]

    # Concurrent batches land in any order, so pages are compared as a set; each stored
    # sample must be exactly the JSON text the client sent.
    pages = out["pages"]
    assert [len(p["samples"]) for p in pages] == [50, 50, 50, 0]
    assert [p["has_more"] for p in pages] == [True, True, False, False]
    assert all(p["total"] == 150 for p in pages)
    got = {s["sample_id"]: s for p in pages for s in p["samples"]}
    assert got == {s["sample_id"]: s for s in samples}

    listed = out["listed"]
    assert listed["total"] == before + 1
    assert listed["evaluations"][0]["evaluation_id"] == eid
    assert listed["evaluations"][0]["metadata"]["rollouts_per_example"] == 2

    with server.client() as client:
        response = _wait_completed(client, eid)
        _assert_metadata_verbatim(response, METADATA)
        raw_page = client.get(f"/evaluations/{eid}/samples", params={"page": 1, "limit": 150})
    sent_text = {_compact(s) for s in samples}
    stored = json.loads(raw_page.text)["samples"]
    assert {_compact(s) for s in stored} == sent_text
    assert all(_compact(s) in raw_page.text for s in samples)
    assert _stored_rows(server, eid) == (150, 150)


# --- prime-runs --------------------------------------------------------------------------

# Duck-typed verifiers episodes: objects with the attributes prime-runs projects samples from
# (§6.2) and a `to_record()` of verifiers' wire form (a message graph, calls, weighted
# rewards). prime-runs uploads them as episode lines to /traces (§7); the server stores them
# and builds the samples itself. Opted out of Prime Traces, prime-runs posts its own
# projection to /evaluations/{id}/samples instead: both must give the same samples.
PRIME_RUNS_SCRIPT = """
    import json, logging, math, os, sys
    from dataclasses import dataclass, field
    from typing import Any, Optional

    from pydantic import BaseModel
    import prime_runs

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    args = json.load(open(sys.argv[1]))

    class TaskData(BaseModel):
        idx: int
        letters: list[str]

    class Message(BaseModel):
        role: str
        content: str

    class Timing(BaseModel):
        start: float
        total: Optional[float] = None

    class Usage(BaseModel):
        prompt_tokens: int
        completion_tokens: int

    class Error(BaseModel):
        type: str
        message: str

    @dataclass
    class Agent:
        name: str = "agent"
        trainable: bool = True

    @dataclass
    class Task:
        data: TaskData

    @dataclass
    class Node:
        message: Message
        parent: Optional[int] = None

    @dataclass
    class Call:
        node: int
        usage: Usage

    @dataclass
    class Branch:
        messages: list
        num_input_tokens: int
        num_output_tokens: int

    @dataclass
    class Reward:
        score: float
        weight: float = 1.0

    def finite(value):
        return None if isinstance(value, float) and not math.isfinite(value) else value

    @dataclass
    class Trace:
        id: str
        task: Task
        nodes: list
        calls: list
        rewards: dict
        metrics: dict
        errors: list = field(default_factory=list)
        agent: Agent = field(default_factory=Agent)
        tools: Optional[list] = None
        timing: Timing = field(default_factory=lambda: Timing(start=1.0, total=0.25))
        is_completed: bool = True
        is_truncated: bool = False
        stop_condition: Optional[str] = "agent_completed"
        info: dict = field(default_factory=dict)

        @property
        def branches(self):
            leaf = len(self.nodes) - 1
            path = []
            while leaf is not None:
                path.insert(0, leaf)
                leaf = self.nodes[leaf].parent
            calls = [c for c in self.calls if c.node in path]
            fed = sum(c.usage.prompt_tokens for c in calls[:1])
            out = sum(c.usage.completion_tokens for c in calls)
            return [Branch([self.nodes[i].message for i in path], fed, out)]

        @property
        def reward(self):
            return sum(r.score * r.weight for r in self.rewards.values())

        @property
        def last_error(self):
            return self.errors[-1] if self.errors else None

        @property
        def usage(self):
            return Usage(
                prompt_tokens=sum(c.usage.prompt_tokens for c in self.calls),
                completion_tokens=sum(c.usage.completion_tokens for c in self.calls),
            )

        def to_record(self) -> dict:
            return {
                "id": self.id,
                "task": {"type": "Task", "data": self.task.data.model_dump()},
                "agent": {"config": {}, "name": self.agent.name, "trainable": True},
                "tools": [],
                "nodes": [
                    {"message": n.message.model_dump(), "sampled": n.parent is not None}
                    | ({} if n.parent is None else {"parent": n.parent})
                    for n in self.nodes
                ],
                "calls": [{"node": c.node, "usage": c.usage.model_dump()} for c in self.calls],
                "rewards": {
                    n: {"score": r.score, "weight": r.weight} for n, r in self.rewards.items()
                },
                "metrics": {k: finite(v) for k, v in self.metrics.items()},
                "info": self.info,
                "is_completed": self.is_completed,
                "ok": not self.errors,
                "stop_condition": self.stop_condition,
                "errors": [e.model_dump() for e in self.errors],
                "timing": self.timing.model_dump(),
            }

    @dataclass
    class Episode:
        id: str
        traces: list
        ok: bool = True

        def to_record(self) -> dict:
            return {"id": self.id, "ok": self.ok, "run": {"id": "local-run", "name": "local"},
                    "traces": [t.to_record() for t in self.traces]}

    def episode(spec: dict) -> Episode:
        idx, score = spec["idx"], spec["score"]
        nodes = [Node(Message(role="user", content="sort b a")),
                 Node(Message(role="assistant", content=spec["answer"]), parent=0)]
        errors = [Error(type="ModelError", message="boom")] if spec.get("error") else []
        trace = Trace(
            id=spec["id"] + "-t0",
            task=Task(TaskData(idx=idx, letters=["b", "a"])),
            nodes=nodes,
            calls=[Call(node=1, usage=Usage(prompt_tokens=10, completion_tokens=4))],
            rewards={"alphabet_sort": Reward(score)},
            metrics={"num_turns": 1.0, "odd": float("nan")},
            errors=errors,
        )
        return Episode(id=spec["id"], traces=[trace], ok=not errors)

    class BareTrace:
        def __init__(self, record):
            self.record = record

        def to_record(self):
            return self.record

    episodes = [episode(s) for s in args["episodes"]]
    kwargs = dict(args["init"])
    run = prime_runs.init(on_error="raise", finish_timeout=60, **kwargs)
    half = len(episodes) // 2
    run.log_episodes(episodes[:half])
    run.log_episodes(episodes[half:])
    if args.get("bare_traces"):
        run.log_traces([BareTrace(r) for r in args["bare_traces"]])
    summary = prime_runs.metrics.from_episodes(episodes)
    run.finish(summary=summary)
    print(json.dumps({
        "id": run.id, "attached": run.attached, "status": run.status.value,
        "failed": run.failed_records, "dropped": run.dropped_records, "errors": run.errors,
        "summary": summary,
    }))
"""


# The public traces client's read surface (prime-traces 0.0.10) over what was stored.
PRIME_TRACES_READ_SCRIPT = """
    import json, sys
    from prime_traces import TracesClient

    args = json.load(open(sys.argv[1]))
    with TracesClient() as client:
        listed = [t.trace_id for t in client.iter(run_id=args["run_id"], limit=4)]
        one = client.get("mixed-ep-0-t0")
        raw = json.loads(client.get_raw("mixed-ep-0-t0"))
        episodes = client.list_episodes(run_id=args["run_id"]).items
    print(json.dumps({
        "listed": listed, "one": one.model_dump(mode="json"), "raw": raw,
        "episodes": len(episodes),
    }))
"""


def _episodes(prefix: str) -> list[dict[str, Any]]:
    specs = []
    for i in range(6):
        specs.append(
            {
                "id": f"{prefix}-ep-{i}",
                "idx": i // 2,
                "score": [1.0, 0.5, 0.0, 1.0, 0.25, 0.75][i],
                "answer": "a b",
                "error": i == 5,
            }
        )
    return specs


def _check_runs_samples(client: httpx.Client, eid: str, specs: list[dict[str, Any]]) -> None:
    page = client.get(f"/evaluations/{eid}/samples", params={"limit": 100}).json()
    assert page["total"] == len(specs)
    by_id = {s["sample_id"]: s for s in page["samples"]}
    assert set(by_id) == {s["id"] for s in specs}
    for spec in specs:
        sample = by_id[spec["id"]]
        assert sample["episode_id"] == spec["id"]
        assert sample["example_id"] == spec["idx"]
        assert sample["rollout_number"] == int(spec["id"].rsplit("-", 1)[1]) % 2 + 1
        assert sample["reward"] == spec["score"]
        assert sample["alphabet_sort"] == spec["score"]
        assert sample["metrics"] == {"num_turns": 1.0, "odd": None}  # NaN arrives as null
        assert sample["task"] == {"idx": spec["idx"], "letters": ["b", "a"]}
        assert sample["completion"][-1] == {"role": "assistant", "content": "a b"}
        assert sample["info"]["native_wrapper"]["id"] == spec["id"]
        assert (sample["error"] is not None) == spec["error"]


def _without_run_stamps(sample: dict[str, Any]) -> dict[str, Any]:
    """The sample less the run the traces sink stamps on the episode it uploads."""
    wrapper = dict(sample["info"]["native_wrapper"])
    wrapper.pop("run", None)
    wrapper["traces"] = [{k: v for k, v in t.items() if k != "run"} for t in wrapper["traces"]]
    return {**sample, "info": {**sample["info"], "native_wrapper": wrapper}}


OPT_OUT = {"PRIME_TRACES_OPT_OUT": "true"}


@pytest.mark.parametrize("traces", [True, False], ids=["traces-service", "opted-out"])
def test_prime_runs_init_log_finish_lands_samples(
    server: Platform, tmp_path: Path, traces: bool
) -> None:
    specs = _episodes("created")
    config = {**METADATA, "sampling": {"temperature": 0.7}}
    before = _total(server)
    out = _run_client(
        server,
        tmp_path,
        PRIME_RUNS_SCRIPT,
        {
            "episodes": specs,
            "init": {
                "name": "compat-runs",
                "environments": ["alphabet-sort"],
                "model": "demo/scripted",
                "framework": "verifiers",
                "tags": ["compat"],
                "config": config,
            },
        },
        extra_env=None if traces else OPT_OUT,
    )
    # Nothing lost. HOME is empty and PRIME_* is scrubbed: with the traces service answering,
    # prime-runs sends the episodes there only (no /samples fallback) and the server builds
    # the samples; opted out, prime-runs posts its own samples.
    assert out["failed"] == {} and out["dropped"] == 0 and out["errors"] == []
    assert out["attached"] is False and out["status"] == "completed"
    eid = out["id"]
    with server.client() as client:
        response = _wait_completed(client, eid)
        record = response.json()
        assert record["status"] == "COMPLETED"
        assert record["name"] == "compat-runs"
        assert record["model_name"] == "demo/scripted"
        assert record["environment_names"] == ["alphabet-sort"]
        assert record["total_samples"] == 6
        # avg_score is the headline mean: scored samples only (errored ones are counted apart).
        scored = [s["score"] for s in specs if not s["error"]]
        assert record["avg_score"] == pytest.approx(sum(scored) / len(scored))
        assert (record["min_score"], record["max_score"]) == (0.0, 1.0)
        # prime-runs drops non-finite numbers (the NaN metric) from the summary it sends.
        summary = out["summary"]
        avg_metrics = {k: v for k, v in summary["avg_metrics"].items() if math.isfinite(v)}
        assert record["metrics"] == {
            **summary,
            "avg_metrics": avg_metrics,
            "prime_runs": {"traces_episodes_written": 6 if traces else 0},
        }
        assert record["metrics"]["avg_error"] == pytest.approx(1 / 6)
        _assert_metadata_verbatim(response, config)
        _check_runs_samples(client, eid, specs)
        assert client.get("/evaluations/").json()["total"] == before + 1
        stored = client.get("/traces", params={"run_id": eid}).json()["items"]
        assert len(stored) == (6 if traces else 0)
    assert _stored_rows(server, eid) == (6, 6)


def test_the_server_builds_the_samples_prime_runs_would_have_posted(
    server: Platform, tmp_path: Path
) -> None:
    """The same episodes through the traces service and through prime-runs' own projection."""
    samples = {}
    for mode, env in (("traces", None), ("posted", OPT_OUT)):
        out = _run_client(
            server,
            tmp_path / mode,
            PRIME_RUNS_SCRIPT,
            {"episodes": _episodes("same"), "init": {"name": mode, "environments": ["e"]}},
            extra_env=env,
        )
        assert out["failed"] == {} and out["errors"] == []
        with server.client() as client:
            page = client.get(f"/evaluations/{out['id']}/samples", params={"limit": 100}).json()
        samples[mode] = [_without_run_stamps(s) for s in page["samples"]]
    assert samples["traces"] == samples["posted"]


def test_prime_runs_log_traces_records_land_and_are_readable(
    server: Platform, tmp_path: Path
) -> None:
    bare = [
        {"id": f"bare-{i}", "task": {"data": {"idx": i}}, "rewards": {}, "info": {"i": i}}
        for i in range(3)
    ]
    args = {
        "episodes": _episodes("mixed"),
        "bare_traces": bare,
        "init": {"name": "mixed", "environments": ["e"]},
    }
    out = _run_client(server, tmp_path / "first", PRIME_RUNS_SCRIPT, args)
    assert out["failed"] == {} and out["dropped"] == 0 and out["errors"] == []
    eid = out["id"]
    with server.client() as client:
        record = _wait_completed(client, eid).json()
        assert record["status"] == "COMPLETED" and record["total_samples"] == 6
        listed = client.get("/traces", params={"run_id": eid, "limit": 100}).json()["items"]
        assert {t["trace_id"] for t in listed} == {f"mixed-ep-{i}-t0" for i in range(6)} | {
            "bare-0",
            "bare-1",
            "bare-2",
        }
        raw = client.get("/traces/bare-1", params={"raw": "true"}).json()
        # Stored as sent: with the run prime-runs stamps on every record.
        assert raw == {**bare[1], "run": {"id": eid, "type": "eval"}}
    # The public traces client reads them back through its own models.
    read = _run_client(server, tmp_path / "read", PRIME_TRACES_READ_SCRIPT, {"run_id": eid})
    assert sorted(read["listed"]) == sorted(t["trace_id"] for t in listed)
    assert read["one"]["episode_id"] == "mixed-ep-0" and read["one"]["run_id"] == eid
    assert read["raw"]["id"] == "mixed-ep-0-t0"
    assert read["episodes"] == 6
    # A resumed run attaching to it re-logs the same records: stored once, nothing doubled.
    again = _run_client(
        server, tmp_path / "again", PRIME_RUNS_SCRIPT, {**args, "init": {"id": eid}}
    )
    assert again["failed"] == {} and again["errors"] == []
    with server.client() as client:
        assert client.get(f"/evaluations/{eid}").json()["total_samples"] == 6
        listed = client.get("/traces", params={"run_id": eid, "limit": 100}).json()["items"]
        assert len(listed) == 9
    assert _stored_rows(server, eid) == (6, 6)


@pytest.mark.parametrize("scoped", [False, True], ids=["admin-key", "scoped-key"])
def test_prime_runs_attach_to_api_created_evaluation(
    server: Platform, tmp_path: Path, scoped: bool
) -> None:
    launcher_metadata = {"launcher": "test", "num_examples": 3, "rollouts_per_example": 2}
    with server.client() as client:
        created = client.post(
            "/evaluations/",
            json={
                "name": "launched",
                "environments": [],
                "tags": [],
                "model_name": "demo/scripted",
                "metadata": launcher_metadata,
            },
        )
        assert created.status_code in (200, 201), created.text
        eid = created.json()["evaluation_id"]
        owner_id = client.get(f"/evaluations/{eid}").json()["user_id"]
    before = _total(server)
    key = _scoped_key(server, eid, owner_id) if scoped else None
    specs = _episodes("attached")
    out = _run_client(
        server,
        tmp_path,
        PRIME_RUNS_SCRIPT,
        {"episodes": specs, "init": {"id": eid, "config": {"ignored": True}}},
        key=key,
    )
    assert out["id"] == eid and out["attached"] is True
    assert out["failed"] == {} and out["dropped"] == 0 and out["errors"] == []
    with server.client() as client:
        response = _wait_completed(client, eid)
        record = response.json()
        assert record["status"] == "COMPLETED"
        assert record["total_samples"] == 6
        assert record["metrics"]["avg_reward"] == pytest.approx(out["summary"]["avg_reward"])
        # Attached runs leave the launcher's metadata alone, and open no second evaluation.
        _assert_metadata_verbatim(response, launcher_metadata)
        _check_runs_samples(client, eid, specs)
        assert client.get("/evaluations/").json()["total"] == before
    assert _stored_rows(server, eid) == (6, 6)


def test_a_second_prime_runs_attach_to_a_completed_evaluation_leaves_it_byte_identical(
    server: Platform, tmp_path: Path
) -> None:
    """vf-eval's `--run.attach` is `prime_runs.init(id=...)`, log, `finish(summary)`: a second
    such run on a COMPLETED evaluation is refused, exits non-zero, and changes nothing."""
    with server.client() as client:
        created = client.post("/evaluations/", json={"name": "done", "model_name": "m"})
        eid = created.json()["evaluation_id"]
    first = _run_client(
        server,
        tmp_path / "first",
        PRIME_RUNS_SCRIPT,
        {"episodes": _episodes("one"), "init": {"id": eid}},
    )
    assert first["errors"] == []
    with server.client() as client:
        _wait_completed(client, eid)
        before = (
            client.get(f"/evaluations/{eid}").content,
            client.get(f"/evaluations/{eid}/samples").content,
        )
    second = _run_client(
        server,
        tmp_path / "second",
        PRIME_RUNS_SCRIPT,
        {"episodes": _episodes("two"), "init": {"id": eid}},
        refused=True,
    )
    assert second["returncode"] != 0
    with server.client() as client:
        after = (
            client.get(f"/evaluations/{eid}").content,
            client.get(f"/evaluations/{eid}/samples").content,
        )
    assert after == before
    assert _stored_rows(server, eid) == (6, 6)
