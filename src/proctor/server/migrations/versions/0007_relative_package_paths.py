"""package paths relative to the data dir

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06 01:30:00

The hub stored each package's path as the server saw it (`data/hub/wheels/...` when the data
dir was given relatively), so a restart from another directory, or a moved data dir, broke
every pushed version. Paths are now `hub/<kind>s/<sha256>/<filename>`, relative to the data
dir; this rewrites the stored ones (and the package of queued hosted runs) to that form.
"""

from __future__ import annotations

import json
from pathlib import PurePath
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _relative(path: str | None) -> str | None:
    if not path:
        return path
    parts = PurePath(path).parts
    if len(parts) >= 4 and parts[-4] == "hub":
        return "/".join(parts[-4:])
    return path


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.text("SELECT id, wheel_path, source_path FROM environment_versions")
    ).fetchall()
    for version_id, wheel, source in rows:
        if (_relative(wheel), _relative(source)) != (wheel, source):
            bind.execute(
                sa.text(
                    "UPDATE environment_versions SET wheel_path = :w, source_path = :s "
                    "WHERE id = :id"
                ),
                {"w": _relative(wheel), "s": _relative(source), "id": version_id},
            )
    table = sa.table(
        "hosted_evaluations", sa.column("evaluation_id", sa.String), sa.column("config", sa.JSON)
    )
    found = bind.execute(sa.select(table.c.evaluation_id, table.c.config)).fetchall()
    for evaluation_id, raw in found:
        config: Any = json.loads(raw) if isinstance(raw, str) else raw
        package = (config or {}).get("package") if isinstance(config, dict) else None
        if not isinstance(package, dict) or not isinstance(package.get("wheel"), str):
            continue
        relative = _relative(package["wheel"])
        if relative == package["wheel"]:
            continue
        config["package"] = {**package, "wheel": relative}
        bind.execute(
            table.update().where(table.c.evaluation_id == evaluation_id).values(config=config)
        )


def downgrade() -> None:
    # Relative paths stay readable by the older code only from the data dir's parent; there
    # is nothing to restore.
    pass
