"""The vendored verifiers environments (tests/envs/verifiers_envs) and the local data files
the ones that read a dataset (reverse_text, alphabet_sort) are pointed at."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

ENVS_DIR = Path(__file__).parent / "verifiers_envs"
PACKAGES = (
    "alphabet_sort",
    "bash_interception",
    "code_golf",
    "color_codeword",
    "glossary",
    "grayscale_interception",
    "interception",
    "kuhn_poker",
    "proposer_solver",
    "reverse_text",
    "scratchpad",
)
SEATS = {
    "code-golf": ("golfer",),
    "kuhn-poker": ("player0", "player1"),
    "proposer-solver": ("proposer", "solver"),
}
"""The agents of a multi-agent environment (the others have one, `agent`)."""

SUBPROCESS_RUNTIME = {"agent": {"runtime": {"type": "subprocess"}}}
"""Each agent's harness runs as a local process (verifiers' default is a Prime sandbox)."""


def offline_env_args(name: str, model_url: str, data: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The `[env]` block that runs `name` here: each agent's harness as a local process, a
    judge on the demo model at `model_url`, and the local data `write_datasets` wrote."""
    runtime = {"runtime": {"type": "subprocess"}}
    block: dict[str, Any] = {seat: runtime for seat in SEATS.get(name, ("agent",))}
    block.update(data.get(name, {}))
    if name == "interception":
        judge = {"base_url": model_url, "api_key_var": "OPENAI_API_KEY", "model": "demo"}
        block["taskset"] = {"task": {"judge": judge}}
    return block


ALPHABET_SORT_DATASET = Path("kalomaze") / "alphabetic-arxiv-authors-it1"
"""Where alphabet_sort reads its names: a hub id, which `datasets` also reads as a local
folder under the working directory."""


def python_path() -> str:
    """PYTHONPATH that makes every vendored environment importable, as if installed."""
    paths = [str(ENVS_DIR / name) for name in PACKAGES]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(paths)


def use_vendored_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the vendored environments importable here and in every process started."""
    for name in PACKAGES:
        monkeypatch.syspath_prepend(str(ENVS_DIR / name))
    monkeypatch.setenv("PYTHONPATH", python_path())
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def write_datasets(root: Path, *, rows: int = 8) -> dict[str, dict[str, Any]]:
    """Write small local datasets under `root` (the runs' working directory); returns the
    `--env-args` of each environment that needs one to read them."""
    rng = random.Random(0)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    reverse = root / "reverse-text-data"
    reverse.mkdir(parents=True, exist_ok=True)
    prompts = [{"prompt": " ".join(rng.sample(words, 4))} for _ in range(rows)]
    (reverse / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in prompts))
    first = ["Ada", "Alan", "Barbara", "Claude", "Donald", "Edsger", "Frances", "Grace"]
    last = ["Lovelace", "Turing", "Liskov", "Shannon", "Knuth", "Dijkstra", "Allen", "Hopper"]
    names = root / ALPHABET_SORT_DATASET
    names.mkdir(parents=True, exist_ok=True)
    with (names / "train.jsonl").open("w") as f:
        for _ in range(rows):
            pairs = zip(rng.sample(first, 8), rng.sample(last, 8), strict=True)
            f.write(json.dumps({"names": [f"{a} {b}" for a, b in pairs]}) + "\n")
    return {"reverse-text": {"taskset": {"dataset_name": str(reverse)}}}
