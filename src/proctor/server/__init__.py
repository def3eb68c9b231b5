"""The proctor platform server: the wire contract of platform-api.md over SQLAlchemy 2.

Domains live in one package each (`auth`, `environments`, `evaluations`, `traces`), with
thin `endpoints`, pydantic `schemas`, rule-holding `service` and query-building `repository`
modules. `create_app(settings)` in `proctor.server.app` assembles them.
"""
