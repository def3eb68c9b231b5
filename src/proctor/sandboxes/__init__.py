"""Sandboxes for hosted evaluations: what a sandbox is, its backends and the command template.

The backends are a registry (`proctor.sandboxes.backends`); the launcher that claims queued
evaluations and runs them in sandboxes is part of the server (`proctor.server.hosted`).
`proctor.sandboxes.remote` is the client side of hosted runs (submit, follow, cancel).
"""

from proctor.sandboxes.sandbox import SandboxBackend, SandboxHandle, SandboxSpec, SandboxState

__all__ = ["SandboxBackend", "SandboxHandle", "SandboxSpec", "SandboxState"]
