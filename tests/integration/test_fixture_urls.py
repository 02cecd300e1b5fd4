"""GET /api/fixtures/{sha256}: with a login, with a signed URL, and what is refused; a
harness downloading its input file through a signed URL."""

from __future__ import annotations

import hashlib
import os
import time

import httpx
import pytest

from evalkit.auth.secrets import generate_key
from evalkit.blobs import signing
from evalkit.harness.reference import ReferenceHarness
from evalkit.model.harness import InputFile, RunMetadata, RunStart
from tests.integration.datasets_helpers import add_user, admin_api


def upload(server, token: str, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    admin_api(server, token, "PUT", f"/api/workspaces/admin/fixtures/{sha}", content=data)
    return sha


def test_signing_round_trip_and_refusals():
    key = generate_key()
    sha = "a" * 64
    url = signing.sign_fixture_url("https://ek.example/", sha, key, 60, now=1000)
    assert url.startswith(f"https://ek.example/api/fixtures/{sha}?expires=1060&signature=")
    query = dict(p.split("=", 1) for p in url.split("?", 1)[1].split("&"))
    signing.verify(sha, query["expires"], query["signature"], key, now=1059)
    refusals = [
        ((sha, query["expires"], query["signature"], key, 1061), "expired 1 s ago"),
        (("b" * 64, query["expires"], query["signature"], key, 1000), "does not match"),
        ((sha, "1061", query["signature"], key, 1000), "does not match"),
        ((sha, query["expires"], query["signature"], generate_key(), 1000), "does not match"),
        ((sha, query["expires"], None, key, 1000), "needs both"),
        ((sha, "soon", query["signature"], key, 1000), "Unix time"),
    ]
    for (s, expires, signature, k, now), reason in refusals:
        with pytest.raises(signing.SignatureRefused, match=reason):
            signing.verify(s, expires, signature, k, now=now)
    assert signing.derive_key(key) != key.encode()


def test_download_with_a_login_and_with_a_signed_url(server, admin_token):
    data = os.urandom(3 * 2**20 + 17)  # more than one streamed chunk
    sha = upload(server, admin_token, data)
    alice = add_user(server, admin_token, "alice")
    path = f"{server.url}/api/fixtures/{sha}"

    with_login = httpx.get(path, headers={"Authorization": f"Bearer {alice}"})
    assert with_login.status_code == 200 and with_login.content == data
    assert with_login.headers["content-type"] == "application/octet-stream"
    assert with_login.headers["etag"] == f'"{sha}"'

    anonymous = httpx.get(path)
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "login-required"

    signed = httpx.post(f"{path}/url", headers={"Authorization": f"Bearer {alice}"})
    assert signed.status_code == 200, signed.text
    url = signed.json()["url"]
    assert url.startswith(f"{server.url}/api/fixtures/{sha}?expires=")
    assert signed.json()["expires_at"]
    without_login = httpx.get(url)
    assert without_login.status_code == 200 and without_login.content == data
    assert httpx.post(f"{path}/url").status_code == 401


def test_refusals_name_the_reason(server, admin_token):
    sha = upload(server, admin_token, b"ledger\n")
    key = server.settings.encryption_key
    base = server.url

    def refused(url: str) -> str:
        r = httpx.get(url)
        assert r.status_code == 403, r.text
        error = r.json()["error"]
        assert error["code"] == "fixture-url-refused"
        assert sha in error["message"] or "b" * 64 in error["message"]
        return error["message"]

    expired = signing.sign_fixture_url(base, sha, key, 60, now=time.time() - 120)
    assert "expired" in refused(expired)
    good = signing.sign_fixture_url(base, sha, key)
    tampered = good[:-3] + ("AAA" if not good.endswith("AAA") else "BBB")
    assert "does not match" in refused(tampered)
    other_server = signing.sign_fixture_url(base, sha, generate_key())
    assert "does not match" in refused(other_server)
    # A signature for one fixture does not open another.
    query = good.split("?", 1)[1]
    assert "does not match" in refused(f"{base}/api/fixtures/{'b' * 64}?{query}")
    assert "needs both" in refused(f"{base}/api/fixtures/{sha}?expires=99999999999")


def test_missing_and_malformed(server, admin_token):
    absent = "c" * 64
    auth = {"Authorization": f"Bearer {admin_token}"}
    r = httpx.get(f"{server.url}/api/fixtures/{absent}", headers=auth)
    assert r.status_code == 404 and absent in r.json()["error"]["message"]
    r = httpx.get(signing.sign_fixture_url(server.url, absent, server.settings.encryption_key))
    assert r.status_code == 404 and absent in r.json()["error"]["message"]
    r = httpx.post(f"{server.url}/api/fixtures/{absent}/url", headers=auth)
    assert r.status_code == 404 and absent in r.json()["error"]["message"]
    r = httpx.get(f"{server.url}/api/fixtures/NOT-A-SHA", headers=auth)
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad-sha256"


async def test_a_harness_downloads_its_input_through_a_signed_url(server, admin_token):
    data = b"id,amount\n1,12.50\n2,7.25\n"
    sha = upload(server, admin_token, data)
    url = signing.sign_fixture_url(server.url, sha, server.settings.encryption_key)
    body = RunStart(
        evalkit_run_id="1",
        input={"question": "What is 12.5 + 7.25?"},
        files=[InputFile(name="ledger.csv", sha256=sha, size=len(data), url=url)],
        metadata=RunMetadata(case_id="c1"),
    )
    with ReferenceHarness() as ref:
        async with httpx.AsyncClient() as http:
            started = (await http.post(f"{ref.url}/runs", content=_encode(body))).json()
    assert started["status"] == "succeeded", started
    assert started["answer"] == "19.75\n\nFiles read: ledger.csv (25 bytes)"


def _encode(body: RunStart) -> bytes:
    import msgspec

    return msgspec.json.encode(body)
