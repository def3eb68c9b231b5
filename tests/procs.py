"""Moved to `tests/support/procs.py`; this name stays for imports not yet updated."""

from tests.support.procs import PROCTOR, ManagedProcess, free_port, gone, read_pid, wait_http

__all__ = ["PROCTOR", "ManagedProcess", "free_port", "gone", "read_pid", "wait_http"]
