"""Hosted evaluations: the launcher that runs `proctor eval` in sandboxes, and its backends."""

from proctor.hosted.sandbox import SandboxBackend, SandboxHandle, SandboxSpec, SandboxState

__all__ = ["SandboxBackend", "SandboxHandle", "SandboxSpec", "SandboxState"]
