"""Demo models with a twist (slow, flaky) for the runner's tests, one per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.eval.helpers import start_demo_model


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A demo model answering after 250 ms, so a run can be stopped mid-way."""
    url, proc = start_demo_model(tmp_path_factory.mktemp("slow"), "--latency-ms", "250")
    yield url
    proc.stop()


@pytest.fixture(scope="module")
def flaky_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A demo model answering 30% of requests with 429 or 500."""
    url, proc = start_demo_model(
        tmp_path_factory.mktemp("flaky"), "--error-rate", "0.3", "--seed", "7"
    )
    yield url
    proc.stop()


@pytest.fixture(scope="module")
def broken_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A demo model answering every request with 429 or 500."""
    url, proc = start_demo_model(tmp_path_factory.mktemp("broken"), "--error-rate", "1.0")
    yield url
    proc.stop()
