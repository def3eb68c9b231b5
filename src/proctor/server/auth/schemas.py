"""The principal a request acts as, and the shapes of the user endpoints."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, Field

from proctor.server.errors import ScopeDenied


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: the key, its user, the user's teams and the key's scope."""

    key_id: str
    user_id: str
    user_name: str
    is_admin: bool
    team_ids: frozenset[str]
    scope_evaluation_id: str | None = None

    def require_unscoped(self) -> None:
        """Refuse a key scoped to one evaluation (for calls outside that evaluation)."""
        if self.scope_evaluation_id is not None:
            raise ScopeDenied(
                "This key is limited to one evaluation and may not make this call; "
                "use an unscoped key."
            )

    def require_evaluation(self, evaluation_id: str) -> None:
        """Refuse a scoped key for any evaluation but its own."""
        if self.scope_evaluation_id is not None and self.scope_evaluation_id != evaluation_id:
            raise ScopeDenied("This key is limited to another evaluation; use a key for this one.")


class TeamOut(BaseModel):
    """A team as the user endpoints show it."""

    id: str
    teamId: str
    slug: str
    name: str
    role: str
    """The key's user's role in the team (`member`, `admin`, ...)."""
    createdAt: datetime


class WhoAmI(BaseModel):
    """The key's user."""

    id: str
    slug: str
    name: str
    is_admin: bool
    teams: list[TeamOut]


class WhoAmIResponse(BaseModel):
    """Answer of `GET /user/whoami`."""

    data: WhoAmI


class ChallengeRequest(BaseModel):
    """Body of `POST /auth_challenge/generate` (what `prime login` sends)."""

    encryptionPublicKey: str = Field(min_length=1, max_length=20_000)
    """An RSA public key in PEM (SubjectPublicKeyInfo); the new key is encrypted to it."""
    limits: dict[str, int] | None = None
    """Per-key sandbox caps the CLI may ask for; proctor shows them and applies none."""


class ChallengeOut(BaseModel):
    """A new sign-in challenge."""

    challenge: str
    """The code the user approves in the dashboard."""
    status_auth_token: str
    """Bearer token for polling `GET /auth_challenge/status` (shown this once)."""
    expires_at: datetime
    approve_url: str
    """The dashboard page where the signed-in user approves the code."""


class ChallengeStatus(BaseModel):
    """A poll's answer: `result` is null until the challenge is approved."""

    status: str
    """`pending` or `approved`."""
    result: str | None = None
    """Base64 of the new API key encrypted to the CLI's public key (RSA-OAEP, SHA-256)."""


class TeamsResponse(BaseModel):
    """Answer of `GET /user/teams` (one page)."""

    data: list[TeamOut]
    total_count: int
    offset: int
    limit: int
