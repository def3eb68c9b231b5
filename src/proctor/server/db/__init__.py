"""Database layer: the declarative base, the tables, and engine/session creation."""
