"""OIDC token checks and caching (evalkit/auth/oidc.py), with the identity provider's
discovery document and JWKS served by an httpx transport; and the login backoff curve."""

from __future__ import annotations

import base64
import hashlib
import time

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, OctKey, RSAKey

from evalkit.auth import oidc
from evalkit.auth.pkce import pkce_pair
from evalkit.config import OidcSettings
from evalkit.errors import BadGateway, BadRequest, Unauthorized
from evalkit.store.login_limits import MAX_WAIT_SECONDS, wait_after

ISSUER = "https://idp.example"


class FakeIdP:
    """The provider's two documents, counting fetches."""

    def __init__(self, *keys: RSAKey | ECKey, issuer: str = ISSUER) -> None:
        self.keys = list(keys)
        self.issuer = issuer
        self.fetches = {"discovery": 0, "jwks": 0}

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/.well-known/openid-configuration":
            self.fetches["discovery"] += 1
            return httpx.Response(
                200,
                json={
                    "issuer": self.issuer,
                    "jwks_uri": f"{ISSUER}/jwks",
                    "authorization_endpoint": f"{ISSUER}/authorize",
                    "token_endpoint": f"{ISSUER}/token",
                },
            )
        if request.url.path == "/jwks":
            self.fetches["jwks"] += 1
            return httpx.Response(200, json={"keys": [k.as_dict(private=False) for k in self.keys]})
        return httpx.Response(404)


def provider(idp: FakeIdP, **settings: object) -> oidc.Provider:
    values: dict = {"issuer": ISSUER, "client_id": "evalkit"}
    values.update(settings)
    return oidc.Provider(OidcSettings(**values), transport=httpx.MockTransport(idp.handle))


def claims(**overrides: object) -> dict:
    now = int(time.time())
    base = {"iss": ISSUER, "sub": "s1", "aud": "evalkit", "iat": now, "exp": now + 300}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def sign(key: RSAKey | ECKey, body: dict, alg: str = "RS256", kid: bool = True) -> str:
    header = {"alg": alg, **({"kid": key.thumbprint()} if kid else {})}
    return jwt.encode(header, body, key)


@pytest.fixture(scope="module")
def rsa() -> RSAKey:
    return RSAKey.generate_key(2048)


async def test_a_good_token_passes_and_keys_are_cached(rsa):
    idp = FakeIdP(rsa)
    p = provider(idp)
    for _ in range(3):
        got = await p.verify(sign(rsa, claims()), audience="evalkit")
        assert got["sub"] == "s1"
    assert idp.fetches == {"discovery": 1, "jwks": 1}


async def test_key_without_kid_and_ec_keys_verify(rsa):
    ec = ECKey.generate_key("P-256")
    p = provider(FakeIdP(rsa, ec))
    assert (await p.verify(sign(rsa, claims(), kid=False), audience="evalkit"))["sub"] == "s1"
    assert (await p.verify(sign(ec, claims(), alg="ES256"), audience="evalkit"))["sub"] == "s1"


async def test_rotated_key_is_fetched_once_then_refetches_are_rate_limited(rsa):
    idp = FakeIdP(rsa)
    p = provider(idp)
    await p.verify(sign(rsa, claims()), audience="evalkit")
    new = RSAKey.generate_key(2048)
    idp.keys.append(new)
    p._keys_at -= oidc.JWKS_REFETCH_SECONDS + 1  # the keys are old enough to refetch
    assert (await p.verify(sign(new, claims()), audience="evalkit"))["sub"] == "s1"
    assert idp.fetches["jwks"] == 2
    stranger = RSAKey.generate_key(2048)
    for _ in range(3):  # unknown keys right after a fetch: no new fetch
        with pytest.raises(Unauthorized) as refused:
            await p.verify(sign(stranger, claims()), audience="evalkit")
        assert refused.value.code == "bad-token-signature"
    assert idp.fetches["jwks"] == 2


@pytest.mark.parametrize(
    ("overrides", "code", "words"),
    [
        ({"exp": -120}, "token-expired", "expired"),
        ({"iss": "https://other.example"}, "bad-token-issuer", "other.example"),
        ({"aud": "someone"}, "bad-token-audience", "'someone'"),
        ({"aud": ["a", "b"]}, "bad-token-audience", "['a', 'b']"),
        ({"sub": None}, "bad-token", "no subject"),
        ({"exp": None}, "bad-token", "no expiry"),
        ({"nbf": 600}, "bad-token", "not valid before"),
        ({"iat": 600}, "bad-token", "in the future"),
    ],
)
async def test_claims_are_checked(rsa, overrides, code, words):
    # Times are seconds from now, made when the test runs (a long session must not age them).
    now = int(time.time())
    timed = {"exp", "nbf", "iat"}
    body = claims(
        **{k: now + v if k in timed and v is not None else v for k, v in overrides.items()}
    )
    with pytest.raises(Unauthorized) as refused:
        await provider(FakeIdP(rsa)).verify(sign(rsa, body), audience="evalkit")
    assert refused.value.code == code and words in refused.value.message


async def test_leeway_and_audience_lists(rsa):
    p = provider(FakeIdP(rsa))
    late = claims(exp=int(time.time()) - 30, aud=["other", "evalkit"])
    assert (await p.verify(sign(rsa, late), audience="evalkit"))["sub"] == "s1"


async def test_nonce_must_match(rsa):
    p = provider(FakeIdP(rsa))
    token = sign(rsa, claims(nonce="n1"))
    assert (await p.verify(token, audience="evalkit", nonce="n1"))["nonce"] == "n1"
    with pytest.raises(Unauthorized) as refused:
        await p.verify(token, audience="evalkit", nonce="n2")
    assert refused.value.code == "bad-token-nonce"


async def test_symmetric_and_unsigned_tokens_are_refused(rsa):
    p = provider(FakeIdP(rsa))
    hs = jwt.encode({"alg": "HS256"}, claims(), OctKey.import_key("k" * 32))
    with pytest.raises(Unauthorized, match="'HS256'"):
        await p.verify(hs, audience="evalkit")
    header = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(b'{"sub":"s1"}').rstrip(b"=").decode()
    with pytest.raises(Unauthorized, match="'none'"):
        await p.verify(f"{header}.{body}.", audience="evalkit")
    with pytest.raises(Unauthorized, match="not a well-formed JWT"):
        await p.verify("eyJnot.a.jwt", audience="evalkit")


async def test_discovery_must_name_the_configured_issuer(rsa):
    p = provider(FakeIdP(rsa, issuer="https://elsewhere.example"))
    with pytest.raises(BadGateway, match=r"names the issuer 'https://elsewhere\.example'"):
        await p.metadata()


async def test_unreachable_provider_is_a_bad_gateway():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    p = oidc.Provider(
        OidcSettings(issuer=ISSUER, client_id="evalkit"), transport=httpx.MockTransport(refuse)
    )
    with pytest.raises(BadGateway, match="did not answer"):
        await p.metadata()


async def test_audience_defaults_to_the_client_id(rsa):
    assert provider(FakeIdP(rsa)).audience == "evalkit"
    assert provider(FakeIdP(rsa), audience="api://evalkit").audience == "api://evalkit"


def test_provider_for_refuses_when_sso_is_off():
    class State:
        pass

    with pytest.raises(BadRequest) as refused:
        oidc.provider_for(None, State())
    assert refused.value.code == "sso-off" and "auth.oidc" in refused.value.message
    settings = OidcSettings(issuer=ISSUER, client_id="evalkit")
    state = State()
    assert oidc.provider_for(settings, state) is oidc.provider_for(settings, state)


def test_pkce_pair_is_s256():
    verifier, challenge = pkce_pair()
    assert 43 <= len(verifier) <= 128
    digest = hashlib.sha256(verifier.encode()).digest()
    assert challenge == base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_looks_like_jwt():
    assert oidc.looks_like_jwt("eyJhbGciOi.eyJzdWIi.sig")
    assert not oidc.looks_like_jwt("ekl_abc")
    assert not oidc.looks_like_jwt("eka_abc.def.ghi")


def test_login_backoff_doubles_after_the_allowance_and_is_capped():
    assert [wait_after(n, 5) for n in range(1, 10)] == [0, 0, 0, 0, 1, 2, 4, 8, 16]
    assert wait_after(100, 5) == MAX_WAIT_SECONDS
