"""Secrets are compared in constant time.

Bearer tokens (logins and agent tokens) are never compared at all: the presented token is
hashed (SHA-256) and the digest looked up through a unique index, so how long a lookup
takes says nothing about how close a guess was. Values that must be compared (CSRF
values, the OAuth state and nonce, fixture URL signatures, a harness's key) go through
``hmac.compare_digest``. An AST scan of evalkit/ keeps ``==`` and ``!=`` away from names
that hold tokens, keys, passwords and signatures.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import re
import time
from pathlib import Path

import httpx
import psycopg
import pytest

import evalkit
from evalkit.auth import passwords
from evalkit.auth.tokens import digests_match, token_digest, values_match
from evalkit.sql import queries
from tests.conftest import ADMIN_PASSWORD
from tests.security.conftest import Api, login

ROOT = Path(evalkit.__file__).parent

SECRET_NAME = re.compile(
    r"token|secret|passw|api_?key|signature|digest|csrf|nonce|verifier|credential|hmac"
    r"|\bmac\b|\bkey\b|\bstate\b|code_challenge",
    re.IGNORECASE,
)

# (file, comparison as ast.unparse writes it) -> why == is right there.
NOT_SECRETS = {
    ("cases/_yaml.py", "key.tag == MERGE_TAG"): "a YAML node's tag, not a secret",
    ("cases/_yaml.py", "key.tag == STR_TAG"): "a YAML node's tag, not a secret",
    ("cases/project.py", "(env is None) == (key is None)"): "whether both are given",
    ("edge/routes/datasets.py", "digest.hexdigest() != sha256"): (
        "an upload's content hash against the one it claims; no secret"
    ),
    ("harness/reference.py", "digest != f.sha256"): "a downloaded file's content hash",
    ("sdk/_fixtures.py", "hashlib.sha256(data).hexdigest() != pin.sha256"): (
        "a fixture's content hash against its pin; no secret"
    ),
    ("scoring/stats.py", "run.state == state"): "a run's state (queued, failed...), not OAuth's",
    ("scoring/arrays.py", "run.state == stats.FAILED"): "a run's state, not OAuth's",
    ("scoring/arrays.py", "run.state != stats.FAILED"): "a run's state, not OAuth's",
    ("cases/_index.py", "hashlib.sha256(payload).digest() != blob[len(MAGIC):head]"): (
        "the sync index file's checksum of its own contents; no secret"
    ),
    ("cases/_index.py", "old.sha256 != digest"): "a case file's content hash; no secret",
    ("cli/sync.py", "synced.get(case_id) == digest"): "a case's version hash; no secret",
    ("scoring/stats.py", "run.state == FAILED"): "a run's state, not OAuth's",
}


def _names(node: ast.AST) -> list[str]:
    """Identifiers an expression reads: names, attributes, and string keys of subscripts
    and of ``.get(...)`` calls (``row["token"]``, ``claims.get("nonce")``)."""
    found: list[str] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.append(sub.attr)
        elif isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant):
            found.append(str(sub.slice.value))
        elif (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "get"
            and sub.args
            and isinstance(sub.args[0], ast.Constant)
        ):
            found.append(str(sub.args[0].value))
    return found


def secret_comparisons(source: str) -> list[tuple[int, str]]:
    """``==``/``!=`` between two computed values, one of them named like a secret.
    Comparisons with a literal (``scheme == "bearer"``, ``token is None``) are not."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
            continue
        operands = [node.left, *node.comparators]
        if any(isinstance(o, ast.Constant) for o in operands):
            continue
        if any(SECRET_NAME.search(name) for o in operands for name in _names(o)):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_scan_finds_secrets_compared_with_equals():
    source = (
        "if presented == stored_token: pass\n"
        "if row['api_key'] != key: pass\n"
        "ok = claims.get('nonce') == nonce\n"
        "if user.password == typed: pass\n"
        "if scheme == 'bearer' or token is None: pass\n"
        "if state == 'done' and count == total: pass\n"
    )
    found = [line for line, _ in secret_comparisons(source)]
    assert found == [1, 2, 3, 4]


def test_no_secret_is_compared_with_equals_in_evalkit():
    found: dict[tuple[str, str], str] = {}
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for line, source in secret_comparisons(path.read_text()):
            found[(relative, source)] = f"{relative}:{line}: {source}"
    unexplained = [where for key, where in found.items() if key not in NOT_SECRETS]
    assert not unexplained, (
        "compare secrets with hmac.compare_digest (evalkit.auth.tokens.values_match), or "
        "explain in NOT_SECRETS why this is no secret:\n" + "\n".join(unexplained)
    )
    gone = set(NOT_SECRETS) - set(found)
    assert not gone, f"drop these from NOT_SECRETS, the code changed: {gone}"


# Each check of a presented value against the expected one, and the constant-time
# function it must call.
CHECKS = [
    ("evalkit.web.page", "WebCall.form", "values_match"),  # the CSRF value
    ("evalkit.web.pages.sso", "sso_callback", "values_match"),  # the OAuth state
    ("evalkit.auth.oidc", "Provider._check_claims", "values_match"),  # the ID token's nonce
    ("evalkit.cli.login_sso", "browser_login", "values_match"),  # the CLI's OAuth state
    ("evalkit.blobs.signing", "verify", "compare_digest"),  # fixture URL signatures
    ("evalkit.harness.reference", "HarnessState.enter", "compare_digest"),  # its API key
]


@pytest.mark.parametrize(("module", "function", "compare"), CHECKS)
def test_presented_values_are_compared_in_constant_time(module, function, compare):
    import importlib

    target: object = importlib.import_module(module)
    for part in function.split("."):
        target = getattr(target, part)
    tree = ast.parse(_dedent(target))
    called = {
        (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", ""))
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
    }
    assert compare in called, f"{module}.{function} must compare with {compare}"
    assert secret_comparisons(_dedent(target)) == []


def _dedent(obj: object) -> str:
    import textwrap

    return textwrap.dedent(inspect.getsource(obj))  # type: ignore[arg-type]


def test_values_match_takes_any_text():
    """hmac.compare_digest raises on str holding non-ASCII characters, which a form or a
    query string may hold: the helper compares UTF-8 bytes instead."""
    assert values_match("abc", "abc")
    assert not values_match("abd", "abc")
    assert not values_match("é" * 3, "abc")
    assert values_match("é", "é")
    assert not values_match("", "abc")
    assert digests_match(token_digest("x"), hashlib.sha256(b"x").digest())


# --------------------------------------------------------------------------- lookups


def test_token_lookups_go_by_digest_only():
    """The two statements that resolve a bearer token take its digest and nothing else,
    and the tables keep only digests, under a unique index."""
    for name in ("login_token_resolve", "agent_token_resolve"):
        sql = queries[name]
        assert "token_hash = %(token_hash)s" in sql, name
        assert set(re.findall(r"%\((\w+)\)s", sql)) == {"token_hash"}, name


def test_tokens_are_stored_and_resolved_as_digests(server):
    admin_token = login(server, "admin", ADMIN_PASSWORD)
    admin = Api(server, admin_token)
    admin.ok("POST", "/api/workspaces", json={"name": "dev"})
    admin.ok(
        "POST",
        "/api/workspaces/dev/agents",
        json={"name": "bot", "harness_url": "http://203.0.113.10:8700"},
    )
    agent_token = admin.ok("POST", "/api/workspaces/dev/agents/bot/tokens", json={})["token"]
    with psycopg.connect(server.db_url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_name IN ('login_tokens', 'agent_tokens')"
        ).fetchall()
        login_digests = {bytes(r[0]) for r in conn.execute("SELECT token_hash FROM login_tokens")}
        agent_digests = {bytes(r[0]) for r in conn.execute("SELECT token_hash FROM agent_tokens")}
        hints = [r[0] for r in conn.execute("SELECT hint FROM agent_tokens")]
    assert {(t, c) for t, c, kind in columns if kind == "bytea"} == {
        ("login_tokens", "token_hash"),
        ("agent_tokens", "token_hash"),
    }
    assert not [c for _, c, _ in columns if c == "token"], "no column holds a token itself"
    assert token_digest(admin_token) in login_digests
    assert agent_digests == {token_digest(agent_token)}
    assert hints == [agent_token[:10]]  # what lists show: the prefix and 6 random characters

    headers = {"X-Evalkit-Agent": "bot@dev", "content-type": "application/json"}
    spans = b'{"resourceSpans": []}'
    near = [
        admin_token[:-1] + ("A" if admin_token[-1] != "A" else "B"),  # one character off
        admin_token + "x",
        admin_token[:-1],
        token_digest(admin_token).hex(),  # the stored digest is no credential
        "ekl_" + token_digest(admin_token).hex(),
    ]
    for guess in near:
        r = httpx.get(f"{server.url}/api/auth/whoami", headers={"authorization": f"Bearer {guess}"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "bad-token", guess
    one_off = agent_token[:-1] + ("0" if agent_token[-1] != "0" else "1")
    for guess in (one_off, token_digest(agent_token).hex(), "eka_" + "0" * 43):
        r = httpx.post(
            f"{server.url}/api/otel/v1/traces",
            content=spans,
            headers={**headers, "authorization": f"Bearer {guess}"},
        )
        assert r.status_code == 401, (guess, r.text)
    r = httpx.post(
        f"{server.url}/api/otel/v1/traces",
        content=spans,
        headers={**headers, "authorization": f"Bearer {agent_token}"},
    )
    assert r.status_code == 200, r.text


def test_an_unknown_user_costs_a_password_hash_too():
    """Login verifies against a stand-in hash when the user does not exist, so a wrong
    username takes as long as a wrong password (argon2's verify is itself constant-time)."""
    real = passwords.hash_password("the-real-password")
    took: dict[str | None, list[float]] = {None: [], real: []}
    # Each check takes some 50 us here; a thread of the suite's taking the GIL can make one
    # take 40 times that. The fastest of nine, taken in turn, is the check's own cost.
    for _ in range(9):
        for hashed, runs in took.items():
            start = time.perf_counter()
            assert passwords.verify_password(hashed, "a-wrong-guess") is False
            runs.append(time.perf_counter() - start)

    assert min(took[None]) > 0.3 * min(took[real])
    assert passwords.verify_password(real, "the-real-password") is True
