"""Bearer tokens: HS256, RS256 and ES256 keys; who may read and publish; tokens never logged."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
from collections.abc import Iterator

import jwt
import pytest
from pydantic import ValidationError
from starlette.testclient import TestClient

from tests.api.conftest import SECRET, Graph, api_client, bearer, ec_keys, hs256, rsa_keys
from timeline_fanout.api.auth import AuthConfigError
from timeline_fanout.api.settings import ApiSettings
from timeline_fanout.cli.settings import Settings


@pytest.fixture
def secured(settings: Settings, graph: Graph) -> Iterator[TestClient]:
    graph.follow("alice", "bob")
    graph.post("bob", "p1")
    with api_client(settings, jwt_secret=SECRET) as client:
        yield client


def test_a_timeline_is_served_to_its_owner_or_read_all(secured: TestClient) -> None:
    url = "/v1/timelines/alice"
    assert secured.get(url, headers=bearer(hs256("alice"))).status_code == 200
    assert secured.get(url, headers=bearer(hs256("ops", "fanout:read-all"))).status_code == 200
    other = secured.get(url, headers=bearer(hs256("mallory", "fanout:publish")))
    assert other.status_code == 403
    assert other.json()["type"] == "urn:fanout:problem:forbidden"
    # 403 before 404: a stranger's timeline does not tell whether the user exists.
    assert secured.get("/v1/timelines/ghost", headers=bearer(hs256("alice"))).status_code == 403


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Basic YWxpY2U6cHc="},
        {"Authorization": "Bearer "},
        bearer("not.a.jwt"),
        bearer(hs256("alice", secret="another-secret-that-is-long-enough-too")),
        bearer(hs256("alice", exp=1)),  # expired in 1970
        bearer(jwt.encode({"scope": ""}, SECRET, algorithm="HS256")),  # no sub
        bearer(jwt.encode({"sub": "alice"}, None, algorithm="none")),  # type: ignore[arg-type]
    ],
)
def test_missing_or_bad_tokens_are_401_with_a_challenge(
    secured: TestClient, headers: dict[str, str]
) -> None:
    response = secured.get("/v1/timelines/alice", headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith('Bearer realm="fanout"')
    assert response.headers["content-type"] == "application/problem+json"


def test_an_audience_and_an_issuer_when_configured_are_required(
    settings: Settings, graph: Graph
) -> None:
    """A token minted by a shared issuer for another service is refused here."""
    graph.follow("alice", "bob")
    aud, iss = "timeline-fanout", "https://auth.example"
    with api_client(settings, jwt_secret=SECRET, jwt_audience=aud, jwt_issuer=iss) as client:

        def status(**claims: object) -> int:
            token = hs256("alice", **claims)
            return client.get("/v1/timelines/alice", headers=bearer(token)).status_code

        assert status(aud=aud, iss=iss) == 200
        assert status(aud=[aud, "other"], iss=iss) == 200
        assert status(aud="other-service", iss=iss) == 401
        assert status(iss=iss) == 401  # no aud
        assert status(aud=aud) == 401  # no iss
        assert status(aud=aud, iss="https://evil.example") == 401
        assert status(aud=aud, iss=iss, exp=1) == 401


def test_lists_are_public_unless_configured_private(settings: Settings, graph: Graph) -> None:
    graph.follow("alice", "bob")
    with api_client(settings, jwt_secret=SECRET) as client:
        assert client.get("/v1/users/bob/followers").status_code == 200
        assert client.get("/v1/users/alice/following/bob").json() == {"following": True}
    with api_client(settings, jwt_secret=SECRET, private_lists=True) as client:
        assert client.get("/v1/users/bob/followers").status_code == 401
        assert client.get("/v1/users/alice/following/bob").status_code == 401
        token = bearer(hs256("anyone"))
        assert client.get("/v1/users/bob/followers", headers=token).status_code == 200


@pytest.mark.parametrize("keys", [rsa_keys, ec_keys], ids=["RS256", "ES256"])
def test_public_keys_verify_their_own_algorithm_only(
    settings: Settings, graph: Graph, keys: object
) -> None:
    graph.follow("alice", "bob")
    private, pem = keys()  # type: ignore[operator]
    algorithm = "RS256" if "RSA" in type(private).__name__ else "ES256"
    with api_client(settings, jwt_public_key=pem) as client:
        exp = int(time.time()) + 600
        good = jwt.encode({"sub": "alice", "exp": exp}, private, algorithm=algorithm)
        assert client.get("/v1/timelines/alice", headers=bearer(good)).status_code == 200
        # HS256 signed with the public key itself: the classic algorithm confusion.
        forged = hs256_signed_with(pem)
        assert client.get("/v1/timelines/alice", headers=bearer(forged)).status_code == 401
        other_private, _ = keys()  # type: ignore[operator]
        stranger = jwt.encode({"sub": "alice", "exp": exp}, other_private, algorithm=algorithm)
        assert client.get("/v1/timelines/alice", headers=bearer(stranger)).status_code == 401


def hs256_signed_with(key: str) -> str:
    """An HS256 token whose secret is ``key`` (PyJWT refuses to make one from a PEM key)."""

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    signing = b64(b'{"alg":"HS256","typ":"JWT"}') + b"." + b64(b'{"sub":"alice"}')
    signature = hmac.new(key.encode(), signing, hashlib.sha256).digest()
    return (signing + b"." + b64(signature)).decode()


def test_unusable_key_settings_are_refused() -> None:
    from timeline_fanout.api.auth import TokenVerifier

    with pytest.raises(AuthConfigError, match="PEM"):
        TokenVerifier.from_settings(ApiSettings(jwt_public_key="not a key"))
    with pytest.raises(ValueError, match="not both"):
        ApiSettings(jwt_secret=SECRET, jwt_public_key="k")
    assert "hunter2" not in repr(ApiSettings(jwt_secret="hunter2" * 5))


@pytest.mark.parametrize("secret", ["x", " ", "k" * 31, "é" * 15])
def test_an_hs256_secret_shorter_than_32_bytes_is_refused_naming_the_rule(secret: str) -> None:
    with pytest.raises(ValidationError, match="at least 32 bytes"):
        ApiSettings(jwt_secret=secret)
    assert ApiSettings(jwt_secret="é" * 16).auth_configured  # 32 bytes of UTF-8


def test_tokens_without_exp_or_living_longer_than_the_setting_are_refused(
    settings: Settings, graph: Graph
) -> None:
    graph.follow("alice", "bob")
    with api_client(settings, jwt_secret=SECRET, jwt_max_lifetime_s=3600) as client:

        def answer(**claims: object) -> tuple[int, str]:
            response = client.get("/v1/timelines/alice", headers=bearer(hs256("alice", **claims)))
            return response.status_code, response.json().get("detail", "")

        now = int(time.time())
        assert answer(exp=now + 3500)[0] == 200
        status, detail = answer(exp=None)
        assert status == 401 and "exp" in detail
        status, detail = answer(exp=now + 3700)
        assert status == 401 and "FANOUT_API_JWT_MAX_LIFETIME_S" in detail
        assert answer(exp=now + 10 * 365 * 86400)[0] == 401
        assert answer(exp="tomorrow")[0] == 401
        assert answer(exp=str(now + 600)) == (401, "invalid token: exp must be a number")


def test_publishing_needs_the_scope_and_acts_only_for_the_sub(secured: TestClient) -> None:
    follow = {"type": "follow", "follower": "alice", "followee": "carol"}
    foreign = {"type": "post", "author": "bob", "post_id": "p9"}
    response = secured.post("/v1/events", json=follow, headers=bearer(hs256("alice")))
    assert response.status_code == 403 and "fanout:publish" in response.json()["detail"]
    publisher = bearer(hs256("alice", "fanout:publish"))
    response = secured.post("/v1/events", json=[follow, foreign], headers=publisher)
    assert response.status_code == 403 and response.json()["indexes"] == [1]
    assert secured.post("/v1/events", json=[follow], headers=publisher).status_code == 202
    backend = bearer(hs256("app", "fanout:publish fanout:publish-all"))
    assert secured.post("/v1/events", json=[follow, foreign], headers=backend).status_code == 202
    assert secured.post("/v1/events", json=follow).status_code == 401


def test_a_user_token_cannot_date_its_events_or_widen_its_scopes(secured: TestClient) -> None:
    """The time orders everyone's events (a far-future follow would outlive the followee's
    removal): only the server, or a publish-all backend, sets it. Scopes split on spaces only
    (RFC 6749), so a no-break space does not smuggle a second scope in."""
    dated = {"type": "follow", "follower": "alice", "followee": "carol", "ts": 2**43 - 1}
    publisher = bearer(hs256("alice", "fanout:publish"))
    response = secured.post("/v1/events", json=[dated], headers=publisher)
    assert response.status_code == 403 and response.json()["indexes"] == [0]
    backend = bearer(hs256("app", "fanout:publish fanout:publish-all"))
    assert secured.post("/v1/events", json=[dated], headers=backend).status_code == 202
    smuggled = bearer(hs256("alice", "fanout:publish\u00a0fanout:publish-all"))
    foreign = {"type": "post", "author": "bob", "post_id": "p9"}
    assert secured.post("/v1/events", json=[foreign], headers=smuggled).status_code == 403


def test_tokens_never_reach_the_logs(secured: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = [
        hs256("alice"),
        hs256("mallory"),
        hs256("alice", secret="another-secret-that-is-long-enough-too"),
        hs256("alice", "fanout:publish"),
    ]
    for token in tokens:
        secured.get("/v1/timelines/alice", headers=bearer(token))
        secured.get("/v1/timelines/bad%20id", headers=bearer(token))
        secured.post(
            "/v1/events", content=b"{", headers=bearer(token) | {"content-type": "application/json"}
        )
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert caplog.records  # the requests were logged (httpx, starlette), just not the tokens
    for token in tokens:
        assert token not in logged
        assert token.split(".")[2] not in logged  # nor the signature alone
