"""`prime login`'s challenge flow on the API and the approval page: a new key for the user
who approved, once; expiry, denial, single use, rate limits, sign-in and CSRF on the page."""

from __future__ import annotations

import base64
import re
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from sqlalchemy import update

from proctor.server.auth import challenges
from proctor.server.db.base import utcnow
from proctor.server.db.models import AuthChallenge
from tests.server.conftest import Api

pytestmark = pytest.mark.usefixtures("db_url")


def keypair() -> tuple[rsa.RSAPrivateKey, str]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, pem.decode()


def generate(api: Api, pem: str) -> dict[str, str]:
    answer = api.client.post("/api/v1/auth_challenge/generate", json={"encryptionPublicKey": pem})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def poll(api: Api, started: dict[str, str]) -> object:
    headers = {"Authorization": f"Bearer {started['status_auth_token']}"}
    return api.client.get(
        "/api/v1/auth_challenge/status", params={"challenge": started["challenge"]}, headers=headers
    )


def allow_next_poll(api: Api) -> None:
    with api.db.write() as session:
        session.execute(update(AuthChallenge).values(last_polled_at=None))


def sign_in(api: Api, key: str) -> None:
    answer = api.client.post("/login", data={"api_key": key, "next": "/"}, follow_redirects=False)
    assert answer.status_code == 303, answer.text


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, html
    return found.group(1)


def test_approved_challenge_answers_a_new_key_for_the_approver_once(api: Api) -> None:
    kim = api.key("kim-laptop", user="kim", team="kims-lab")
    private, pem = keypair()
    started = generate(api, pem)
    assert re.fullmatch(r"[A-Z2-9]{8}", started["challenge"])
    assert poll(api, started).json() == {"status": "pending", "result": None}

    page_url = f"/dashboard/tokens/challenge?code={started['challenge']}"
    first = api.client.get(page_url, follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"].startswith("/login?next=")
    sign_in(api, kim)
    page = api.client.get(page_url)
    assert page.status_code == 200 and started["challenge"] in page.text
    assert "kim" in page.text and "kims-lab" in page.text

    form = {"code": started["challenge"], "decision": "approve"}
    forged = api.client.post("/dashboard/tokens/challenge", data={**form, "csrf": "0" * 64})
    assert forged.status_code == 403 and "approval page" in forged.text
    done = api.client.post("/dashboard/tokens/challenge", data={**form, "csrf": csrf_of(page.text)})
    assert done.status_code == 200 and "Approved" in done.text

    allow_next_poll(api)
    answer = poll(api, started).json()
    assert answer["status"] == "approved"
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=None)
    new_key = private.decrypt(base64.b64decode(answer["result"]), oaep).decode()
    assert new_key.startswith("pk_") and new_key != kim
    me = api.get("/user/whoami", new_key).json()["data"]
    assert me["name"] == "kim" and me["is_admin"] is False
    assert [t["teamId"] for t in me["teams"]] == ["kims-lab"]

    allow_next_poll(api)
    assert poll(api, started).status_code == 404  # collected: single use
    assert api.client.get(page_url).status_code == 404
    again = api.client.post(
        "/dashboard/tokens/challenge", data={**form, "csrf": csrf_of(page.text)}
    )
    assert again.status_code == 404


def test_expired_denied_and_wrongly_polled_challenges_answer_404(api: Api) -> None:
    lee = api.key("lee-laptop", user="lee")
    _, pem = keypair()
    expired, denied = generate(api, pem), generate(api, pem)
    with api.db.write() as session:
        session.execute(
            update(AuthChallenge)
            .where(AuthChallenge.code == expired["challenge"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert poll(api, expired).status_code == 404
    sign_in(api, lee)
    assert (
        api.client.get(f"/dashboard/tokens/challenge?code={expired['challenge']}").status_code
        == 404
    )

    page = api.client.get(f"/dashboard/tokens/challenge?code={denied['challenge']}")
    form = {"code": denied["challenge"], "decision": "deny", "csrf": csrf_of(page.text)}
    assert "Denied" in api.client.post("/dashboard/tokens/challenge", data=form).text
    assert poll(api, denied).status_code == 404
    assert poll(api, {**expired, "status_auth_token": "forged"}).status_code == 404


def test_generate_and_poll_are_rate_limited(api: Api) -> None:
    _, pem = keypair()
    started = [generate(api, pem) for _ in range(challenges.GENERATE_PER_ADDRESS)]
    refused = api.client.post("/api/v1/auth_challenge/generate", json={"encryptionPublicKey": pem})
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
    assert "run `prime login` again" in refused.json()["detail"]

    assert poll(api, started[0]).status_code == 200
    assert poll(api, started[0]).status_code == 429  # again within a second

    bad = api.client.post(
        "/api/v1/auth_challenge/generate", json={"encryptionPublicKey": "not a key"}
    )
    assert bad.status_code == 422 and "RSA public key" in bad.text
