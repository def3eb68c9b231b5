"""The sandbox backend registry: each backend's config, creation and handle format by `type`."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from proctor.errors import ConfigError
from proctor.sandboxes import backends, ray_jobs
from proctor.sandboxes import local as local_backend
from proctor.sandboxes.confine import Limits
from proctor.sandboxes.guard import END_MARKER
from proctor.sandboxes.local import LocalSandbox
from proctor.sandboxes.sandbox import SandboxHandle
from proctor.server.hosted.settings import LauncherSettings, backend_variables
from tests.support import tools


def test_the_registered_backends() -> None:
    assert backends.backend_types() == ("local", "ray")
    for name in backends.backend_types():
        module = backends.backend_module(name)
        assert module.Config.model_fields["type"].default == name


def test_settings_pick_the_backend_by_type() -> None:
    backend = LauncherSettings(sandbox="local").backend()
    assert isinstance(backend, LocalSandbox) and backend.name == "local"


def test_the_backend_config_is_one_member_of_a_union_built_from_the_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROCTOR_HOSTED_SANDBOX", "ray")
    monkeypatch.setenv("PROCTOR_HOSTED_RAY_ADDRESS", "http://127.0.0.1:8265")
    monkeypatch.setenv("PROCTOR_HOSTED_RAY_ENTRYPOINT_CPUS", "0.5")
    monkeypatch.setenv("PROCTOR_HOSTED_MEMORY_MB", "4096")
    monkeypatch.setenv("PROCTOR_HOSTED_ISOLATION", "none")
    config = LauncherSettings.load().sandbox
    assert isinstance(config, ray_jobs.Config)
    assert (config.address, config.entrypoint_cpus) == ("http://127.0.0.1:8265", 0.5)
    assert (config.isolation, config.limits.memory_mb) == ("none", 4096)
    # a flag wins over its variable, as `proctor launcher --ray-address` passes it
    flagged = LauncherSettings.load(ray_address="http://10.0.0.1:8265").sandbox
    assert isinstance(flagged, ray_jobs.Config) and flagged.address == "http://10.0.0.1:8265"
    # the logs of a sandbox another backend ran: that backend, from the same settings
    local = LauncherSettings.load(sandbox="local")
    assert local.sandbox == local_backend.Config(isolation="none", limits=Limits(memory_mb=4096))
    assert LauncherSettings.load().backend("local").name == "local"


def test_an_unknown_backend_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="use one of local, ray"):
        backends.backend_module("docker")
    with pytest.raises(
        ConfigError, match=r"setting sandbox \(.*'local', 'ray'.*PROCTOR_HOSTED_SANDBOX"
    ):
        LauncherSettings.load(sandbox="docker")


@pytest.mark.parametrize(
    ("settings", "variable"),
    [
        ({}, "PROCTOR_HOSTED_RAY_ADDRESS"),
        ({"ray_address": "http://h:8265", "ray_entrypoint_cpus": -1}, "_RAY_ENTRYPOINT_CPUS"),
        ({"ray_address": "http://h:8265", "memory_mb": 1}, "setting memory_mb \\("),
        ({"ray_address": "http://h:8265", "uids": "0-9"}, "PROCTOR_HOSTED_UIDS"),
    ],
)
def test_each_backend_option_is_validated_at_start_up_naming_its_variable(
    settings: dict[str, object], variable: str
) -> None:
    with pytest.raises(ConfigError, match=variable) as refused:
        LauncherSettings.load(sandbox="ray", **settings)
    assert "\n" not in str(refused.value)


def test_every_backend_option_is_documented() -> None:
    documented = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    variables = [v for t in backends.backend_types() for v in backend_variables(t)]
    assert "PROCTOR_HOSTED_RAY_ADDRESS" in variables
    assert [v for v in variables if f"| `{v}` |" not in documented] == []


def test_each_backend_stores_its_handle_in_its_own_format() -> None:
    local = SandboxHandle("local", "4242", 1700000000.5, "/data/sandboxes/e1/sandbox.log")
    assert local.token() == "4242@1700000000.5"
    assert SandboxHandle.from_token("local", local.token(), log_path=local.log_path) == local
    ray = SandboxHandle("ray", "proctor-e1-0123abcd")
    assert ray.token() == "proctor-e1-0123abcd"
    assert SandboxHandle.from_token("ray", ray.token(), log_path=None) == ray


def test_a_ray_jobs_log_served_without_its_end_keeps_the_failure_ray_wrote_on_its_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray's job API may serve an ended job's log with only its first line (the submitting
    node's copy); the supervisor's failure message, written where the job ran, holds the
    log's last lines, so a failed shard's error keeps its output."""
    submission = tools.package("ray.job_submission")
    tail = f"TypeError: Object of type set is not JSON serializable\n{END_MARKER} 1"

    class ServedLate:
        def __init__(self, address: str) -> None:
            self.asked = 0

        def get_job_logs(self, ref: str) -> str:
            self.asked += 1
            return "INFO job_manager.py:581 -- Runtime env is setting up.\n"

        def get_job_info(self, ref: str) -> SimpleNamespace:
            message = f"Job entrypoint command failed with exit code 1, last logs:\n{tail}"
            return SimpleNamespace(status="FAILED", message=message, driver_exit_code=1)

    monkeypatch.setattr(submission, "JobSubmissionClient", ServedLate)
    monkeypatch.setattr(ray_jobs, "LOG_WAIT_SECONDS", 0.3)
    sandbox = ray_jobs.RaySandbox("http://127.0.0.1:1", isolation="none")
    handle = SandboxHandle("ray", "proctor-e1-0123abcd")
    text = sandbox.logs(handle)
    assert text.startswith("INFO job_manager.py:581") and text.endswith(tail), text
    asked = sandbox._client.asked
    assert asked > 1  # asked again until the wait ran out
    assert sandbox.logs(handle) == text and sandbox._client.asked == asked  # then kept
