"""`prime login`'s sign-in challenges: generate, approve in the dashboard, collect once.

The CLI sends an RSA public key (unauthenticated) and gets a short code and a polling token.
The user opens the dashboard, signs in, and approves the code; the CLI's next poll (with the
token) creates a new key for the approving user, encrypts it to the CLI's public key
(RSA-OAEP, SHA-256) and answers it once. Nothing secret is stored: only the token's SHA-256,
and the key is created at collection, so a challenge never approved or never collected leaves
no key behind.

Rules: a challenge lives `CHALLENGE_TTL`; it is approved (or denied) once, by one signed-in
user, and collected once; after that, expired or denied, polling answers 404 (the CLI's
"Challenge expired"). Generating is rate-limited per client address and in total; polling
one challenge faster than `MIN_POLL_INTERVAL` answers 429.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from datetime import datetime, timedelta
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from proctor.server.auth import repository as auth_repository
from proctor.server.auth import service as auth_service
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import as_utc, utcnow
from proctor.server.db.models import AuthChallenge
from proctor.server.errors import InvalidInput, NotVisible, TooManyRequests

CHALLENGE_TTL = timedelta(minutes=10)
GENERATE_PER_ADDRESS = 10
"""Challenges one client address may generate per `GENERATE_WINDOW`."""
GENERATE_WINDOW = timedelta(minutes=10)
PENDING_MAX = 1000
"""Unexpired, uncollected challenges at most (all addresses together)."""
MIN_POLL_INTERVAL = timedelta(seconds=1)
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
CODE_LENGTH = 8
KEY_BITS = (2048, 8192)
LIMIT_FIELDS = (
    "maxConcurrentSandboxes",
    "maxSandboxCreationsPerHour",
    "maxSandboxCpuCores",
    "maxSandboxGpuCount",
    "maxConcurrentTunnels",
    "maxTunnelCreationsPerHour",
    "maxTunnelTtlHours",
)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _public_key(pem: str) -> rsa.RSAPublicKey:
    try:
        key = serialization.load_pem_public_key(pem.encode("utf-8"))
    except (ValueError, TypeError, UnsupportedAlgorithm):
        key = None
    if not isinstance(key, rsa.RSAPublicKey) or not KEY_BITS[0] <= key.key_size <= KEY_BITS[1]:
        raise InvalidInput(
            "encryptionPublicKey must be an RSA public key (2048 to 8192 bits) in PEM; "
            "run `prime login` again.",
            loc=("body", "encryptionPublicKey"),
        )
    return key


def _limits(raw: Any) -> dict[str, int] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or any(
        name not in LIMIT_FIELDS or not isinstance(value, int) or isinstance(value, bool)
        for name, value in raw.items()
    ):
        raise InvalidInput(
            f"limits may hold only integer {', '.join(LIMIT_FIELDS)}; drop the others.",
            loc=("body", "limits"),
        )
    return {str(k): int(v) for k, v in raw.items()}


def _retry_after(seconds: float) -> dict[str, str]:
    return {"Retry-After": str(max(1, int(seconds + 0.999)))}


def generate(
    session: Session,
    public_key_pem: str,
    limits: Any,
    client_ip: str,
    *,
    now: datetime | None = None,
) -> tuple[AuthChallenge, str]:
    """A new challenge and its polling token (returned this once).

    Raises:
        InvalidInput: The public key is not an RSA key in PEM, or `limits` is malformed.
        TooManyRequests: This address, or everyone together, generated too many.
    """
    _public_key(public_key_pem)
    asked = _limits(limits)
    now = now or utcnow()
    recent = session.scalar(
        select(func.count())
        .select_from(AuthChallenge)
        .where(
            AuthChallenge.client_ip == client_ip,
            AuthChallenge.created_at > now - GENERATE_WINDOW,
        )
    )
    if (recent or 0) >= GENERATE_PER_ADDRESS:
        raise TooManyRequests(
            f"This address started {GENERATE_PER_ADDRESS} sign-ins in the last "
            f"{int(GENERATE_WINDOW.total_seconds() // 60)} minutes; wait a few minutes, then "
            "run `prime login` again.",
            headers=_retry_after(GENERATE_WINDOW.total_seconds()),
        )
    pending = session.scalar(
        select(func.count())
        .select_from(AuthChallenge)
        .where(AuthChallenge.expires_at > now, AuthChallenge.consumed_at.is_(None))
    )
    if (pending or 0) >= PENDING_MAX:
        raise TooManyRequests(
            "Too many sign-ins are waiting for approval; wait a few minutes, then run "
            "`prime login` again.",
            headers=_retry_after(60),
        )
    token = secrets.token_urlsafe(32)
    challenge = AuthChallenge(
        code="".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH)),
        status_token_hash=_digest(token),
        public_key=public_key_pem,
        limits=asked,
        client_ip=client_ip[:64],
        created_at=now,
        expires_at=now + CHALLENGE_TTL,
    )
    session.add(challenge)
    session.flush()
    return challenge, token


def _by_code(session: Session, code: str, *, lock: bool = False) -> AuthChallenge | None:
    query = select(AuthChallenge).where(AuthChallenge.code == code.strip().upper())
    # Collecting locks the row: two concurrent polls must not both create a key.
    return session.scalar(query.with_for_update() if lock else query)


def _gone() -> NotVisible:
    return NotVisible(
        "This sign-in code is unknown, expired or already used; run `prime login` again.",
        code="challenge_expired",
    )


def _open(challenge: AuthChallenge | None, now: datetime) -> AuthChallenge:
    if (
        challenge is None
        or challenge.consumed_at is not None
        or challenge.denied_at is not None
        or (as_utc(challenge.expires_at) or now) <= now
    ):
        raise _gone()
    return challenge


def pending(session: Session, code: str, *, now: datetime | None = None) -> AuthChallenge:
    """The challenge with this code, while it may still be approved.

    Raises:
        NotVisible: Unknown, expired, denied, collected, or already approved.
    """
    challenge = _open(_by_code(session, code), now or utcnow())
    if challenge.approved_at is not None:
        raise NotVisible(
            "This sign-in code was approved already; return to your terminal.",
            code="challenge_used",
        )
    return challenge


def decide(
    session: Session,
    principal: Principal,
    code: str,
    *,
    approve: bool,
    now: datetime | None = None,
) -> AuthChallenge:
    """Approve (for `principal`'s user) or deny a pending challenge, once."""
    now = now or utcnow()
    challenge = pending(session, code, now=now)
    if approve:
        challenge.approved_by, challenge.approved_at = principal.user_id, now
    else:
        challenge.denied_at = now
    session.flush()
    return challenge


def collect(
    session: Session, code: str, token: str | None, *, now: datetime | None = None
) -> str | None:
    """The CLI's poll: None while waiting; once approved, the new key encrypted to the CLI's
    public key (base64), answered this one time.

    Raises:
        NotVisible: Unknown code, wrong token, expired, denied, or collected already.
        TooManyRequests: Polled again within `MIN_POLL_INTERVAL`.
    """
    now = now or utcnow()
    challenge = _by_code(session, code, lock=True)
    if challenge is None or not token:
        raise _gone()
    if not hmac.compare_digest(challenge.status_token_hash, _digest(token)):
        raise _gone()
    challenge = _open(challenge, now)
    last = as_utc(challenge.last_polled_at)
    if last is not None and now - last < MIN_POLL_INTERVAL:
        raise TooManyRequests(
            "Polled too often; wait a second between polls.",
            headers=_retry_after(MIN_POLL_INTERVAL.total_seconds()),
        )
    challenge.last_polled_at = now
    if challenge.approved_at is None or challenge.approved_by is None:
        return None
    user = auth_repository.user_by_id(session, challenge.approved_by)
    if user is None:
        raise _gone()
    created = auth_service.create_key(
        session, name=f"prime login {challenge.code}", user_name=user.name
    )
    challenge.consumed_at = now
    encrypted = _public_key(challenge.public_key).encrypt(
        created.secret.encode("utf-8"),
        padding.OAEP(
            mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=None
        ),
    )
    session.flush()
    return base64.b64encode(encrypted).decode("ascii")
