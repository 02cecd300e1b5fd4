"""A CLI failure evalkit did not foresee says what it was and where to report it (the
evalkit repository's issues), and the deployment skill names the same places."""

from __future__ import annotations

from importlib import resources

import httpx

from evalkit import DISCUSSIONS_URL, ISSUES_URL


def test_an_unforeseen_error_names_where_to_report_it(cli, monkeypatch):
    def broken_transport(self, request, **kwargs):
        raise RuntimeError("the transport broke")

    # An error from a library, not from evalkit: what "internal error" is for.
    monkeypatch.setattr(httpx.Client, "send", broken_transport)
    monkeypatch.setenv("EVALKIT_SERVER_URL", "http://127.0.0.1:9")
    result = cli("whoami", token="ekl_anything")
    assert result.code == 1
    assert "evalkit: internal error: RuntimeError: the transport broke" in result.err
    assert f"please report it at {ISSUES_URL}" in result.err


def test_the_deployment_skill_says_where_bugs_and_questions_go():
    skill = resources.files("evalkit.skills").joinpath("evalkit-deployment", "SKILL.md")
    text = skill.read_text()
    assert ISSUES_URL in text and DISCUSSIONS_URL in text
