"""What every backend shares (`proctor.sandboxes.sandbox`): how an ended command's return
code reads."""

from __future__ import annotations

from proctor.sandboxes.sandbox import SandboxState, shell_exit_code


def test_a_return_code_reads_as_a_shell_would_and_a_killing_signal_is_named() -> None:
    assert [shell_exit_code(code) for code in (0, 3, -9, -15)] == [0, 3, 137, 143]
    assert SandboxState.ended(-9) == SandboxState(
        running=False, exit_code=137, detail="killed by SIGKILL"
    )
    assert SandboxState.ended(2) == SandboxState(running=False, exit_code=2)
