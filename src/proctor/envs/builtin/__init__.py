"""The built-in environments. Each uses only the public `proctor.envs` API, so they double
as examples: `alphabet_sort` (multi-turn, infinite stream), `reverse_text` and `arithmetic`
(single-turn), `tool_calc` (tool use). Their data ships in `data/`.
"""

from __future__ import annotations

from importlib.resources import files


def read_data_lines(filename: str) -> list[str]:
    """The non-empty lines of a file shipped in `proctor/envs/builtin/data/`."""
    text = files(__name__).joinpath("data", filename).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]
