"""The client config quickstart writes holds an admin key: it is created private."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

import pytest

from proctor.server.quickstart import write_client_config


def test_client_config_is_created_private_and_keeps_other_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    path.write_text('team_id = "t1"\n')
    # No chmod after the fact: the file must be born 0600, never briefly world-readable.
    monkeypatch.setattr(Path, "chmod", lambda *_a, **_k: None)
    old_umask = os.umask(0o022)
    try:
        write_client_config(path, api_url="http://127.0.0.1:1", api_key="pk_secret")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tomllib.loads(path.read_text()) == {
        "team_id": "t1",
        "api_url": "http://127.0.0.1:1",
        "api_key": "pk_secret",
    }
