"""Moved to `tests/support/databases.py`; this name stays for imports not yet updated."""

from tests.support.databases import BACKENDS, drop_templates, fresh_database, platform_on

__all__ = ["BACKENDS", "drop_templates", "fresh_database", "platform_on"]
