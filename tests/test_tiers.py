"""tests/support/tiers.py: the ids `--dist loadgroup` schedules by."""

from __future__ import annotations

import pytest

from tests.support.tiers import name_groups


def test_a_grouped_test_gets_its_group_in_its_id(request: pytest.FixtureRequest) -> None:
    """On an xdist worker, a test of an `xdist_group` is `NODEID@GROUP` (several groups:
    their names sorted, joined by `_`, as pytest-xdist names them), once. Under pytest < 9
    pytest-xdist's own renaming works, and `name_groups` leaves the id alone."""
    item = request.node
    nodeid, saved = item.nodeid, getattr(item, "_id", None)
    try:
        item.add_marker(pytest.mark.xdist_group("b-group"))
        item.add_marker(pytest.mark.xdist_group(name="a-group"))
        name_groups([item])
        renamed = f"{nodeid}@a-group_b-group" if saved is not None else nodeid
        assert item.nodeid == renamed
        name_groups([item])
        assert item.nodeid == renamed
    finally:
        if saved is not None:
            item._id = saved
    assert item.nodeid == nodeid
