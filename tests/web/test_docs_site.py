"""The docs at /docs: public, every page rendered, links between pages landing, markdown's
HTML escaped, {{origin}} replaced, search, refusals; and one browser walk through them."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from markupsafe import escape

from evalkit.web import docs_site
from evalkit.web.docs_site import DocsSite, with_origin

DOCS = Path(__file__).parents[2] / "docs"

HOSTILE = """# Hostile page

Plain text with <script>alert('inline')</script> and <img src=x onerror="alert(1)">.

<script>alert('block')</script>

<div onclick="alert(2)">a div</div>

The server is at {{origin}}; the collector is `{{origin}}/api/otel/v1/traces`.

[the API]({{origin}}/api/openapi.json) · [a sibling](other.md#second-part) ·
[outside](../README.md) · [away](https://example.com/x) · [bad](javascript:alert(3))

```sh
curl {{origin}}/healthz
```

| column | value |
|---|---|
| a | <b>b</b> |
"""

OTHER = """# Other page

## Second part

Zebra crossings are rare in these docs.
"""


@pytest.fixture
def small_site(tmp_path, monkeypatch) -> DocsSite:
    (tmp_path / "hostile.md").write_text(HOSTILE)
    (tmp_path / "other.md").write_text(OTHER)
    (tmp_path / "not a page.md").write_text("# skipped: its name has a space\n")
    site = DocsSite(tmp_path)
    monkeypatch.setattr(docs_site, "_site", site)  # the edge runs in this process
    return site


def get(server, path: str, **kw) -> httpx.Response:
    return httpx.get(server.url + path, follow_redirects=False, **kw)


def test_docs_are_public_and_list_every_page_by_its_title(server):
    r = get(server, "/docs")
    assert r.status_code == 200, r.text
    assert "default-src 'self'" in r.headers["content-security-policy"]
    for path in sorted(DOCS.glob("*.md")):
        heading = next(line for line in path.read_text().splitlines() if line.startswith("#"))
        title = heading.lstrip("# ").replace("`", "").strip()
        assert f'href="/docs/{path.stem}">{escape(title)}</a>' in r.text, path.name


def test_every_page_renders_and_links_between_pages_land_on_a_heading(server):
    pages: dict[str, str] = {}
    for path in sorted(DOCS.glob("*.md")):
        r = get(server, f"/docs/{path.stem}")
        assert r.status_code == 200, (path.name, r.text[:300])
        pages[path.stem] = r.text
    for name, text in pages.items():
        assert "<script>" not in text.split("</head>", 1)[1], name
        for href in re.findall(r'href="([^"]+)"', text):
            parts = urlsplit(href)
            if parts.scheme or not parts.path.startswith("/docs/"):
                continue
            target = parts.path.removeprefix("/docs/")
            assert target in pages, f"{name} links to a missing page: {href}"
            if parts.fragment:
                assert f'id="{parts.fragment}"' in pages[target], f"{name}: {href} lands nowhere"
        for href in re.findall(r'href="#([^"]+)"', text):
            assert f'id="{href}"' in text, f"{name}: #{href} lands nowhere"
        assert not re.search(r'href="[^"/#:]+\.md', text), f"{name} keeps a raw .md link"


def test_markdown_html_is_escaped_not_passed_through(server, small_site):
    r = get(server, "/docs/hostile")
    assert r.status_code == 200
    body = r.text.split('<article class="doc">', 1)[1].split("</article>", 1)[0]
    assert "<script" not in body and "<img" not in body and "<div" not in body
    assert "&lt;script&gt;alert('inline')&lt;/script&gt;" in body
    assert "&lt;script&gt;alert('block')&lt;/script&gt;" in body
    assert "&lt;b&gt;b&lt;/b&gt;" in body
    assert 'href="javascript:' not in body  # markdown-it refuses the scheme: it stays text
    assert "[bad](javascript:alert(3))" in body
    assert '<a href="https://example.com/x">away</a>' in body
    assert '<a href="/docs/other#second-part">a sibling</a>' in body
    assert "<span" in body and "../README.md is in evalkit's source tree" in body


def test_origin_is_the_address_the_browser_used(server, small_site):
    r = get(server, "/docs/hostile")
    assert "{{origin}}" not in r.text and "%7B%7Borigin%7D%7D" not in r.text
    assert f"The server is at {server.url};" in r.text
    assert f"<code>{server.url}/api/otel/v1/traces</code>" in r.text
    assert f'<a href="{server.url}/api/openapi.json">the API</a>' in r.text
    assert f"curl {server.url}/healthz" in r.text
    port = urlsplit(server.url).port
    other = get(server, "/docs/hostile", headers={"Host": f"evalkit.example:{port}"})
    assert f"The server is at http://evalkit.example:{port};" in other.text


def test_origin_is_escaped_where_it_is_put():
    html = with_origin('<a href="{{origin}}/x">{{origin}}</a>', 'http://h"><script>')
    assert "<script>" not in html
    assert (
        html == '<a href="http://h&quot;&gt;&lt;script&gt;/x">http://h&quot;&gt;&lt;script&gt;</a>'
    )


def test_pages_are_rendered_once_and_kept(server, small_site, tmp_path):
    assert small_site._pages is None
    first = get(server, "/docs/other")
    assert "Zebra crossings" in first.text
    kept = small_site.pages
    (tmp_path / "other.md").write_text("# Other page\n\nChanged after the first render.\n")
    again = get(server, "/docs/other")
    assert small_site.pages is kept
    assert "Zebra crossings" in again.text and "Changed" not in again.text


def test_unknown_page_is_404_with_the_navigation(server):
    r = get(server, "/docs/no-such-page")
    assert r.status_code == 404
    assert "No docs page “no-such-page”" in r.text
    assert 'href="/docs/otel"' in r.text


@pytest.mark.parametrize(
    "path",
    [
        "/docs/..%2f..%2fetc%2fpasswd",
        "/docs/..%2F..%2F..%2Fetc%2Fpasswd",
        "/docs/%2e%2e%2f%2e%2e%2fpyproject",
        "/docs/../pyproject",
        "/docs/..%5c..%5cpyproject",
        "/docs/otel.md",
        "/docs/%2fetc%2fpasswd",
    ],
)
def test_paths_outside_the_docs_are_refused(server, path):
    r = get(server, path)
    assert r.status_code == 404, (path, r.status_code)
    assert "root:" not in r.text and "[project]" not in r.text


def test_only_docs_files_are_pages(small_site):
    assert sorted(small_site.pages) == ["hostile", "other"]
    assert small_site.get("../other") is None and small_site.get("OTHER") is None


def test_search_finds_the_line_and_links_to_the_page(server):
    r = get(server, "/docs", params={"q": "max_session_bytes"})
    assert r.status_code == 200
    results = r.text.split('<ol class="hits">', 1)[1].split("</ol>", 1)[0]
    assert 'href="/docs/otel"' in results and 'href="/docs/config"' in results
    assert "<mark>max_session_bytes</mark>" in results
    # Each result line links to the heading above it.
    for href in re.findall(r'href="/docs/(\w[\w-]*)#([^"]+)"', results):
        page = get(server, f"/docs/{href[0]}")
        assert f'id="{href[1]}"' in page.text, href


def test_search_needs_every_word_and_says_when_nothing_matches(server, small_site):
    r = get(server, "/docs", params={"q": "zebra crossings"})
    assert 'href="/docs/other#second-part"' in r.text
    assert "<mark>Zebra</mark> <mark>crossings</mark>" in r.text
    r = get(server, "/docs", params={"q": "zebra giraffe"})
    assert "No page holds every word of “zebra giraffe”" in r.text


def test_search_text_is_escaped(server, small_site):
    r = get(server, "/docs", params={"q": "<script>alert(1)</script>"})
    assert r.status_code == 200
    assert "<script>alert(1)" not in r.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text


def test_logged_in_readers_see_the_same_docs(server):
    from tests.web.test_pages_http import logged_in

    with logged_in(server) as client:
        r = client.get("/docs/access")
    assert r.status_code == 200
    assert "Log out" in r.text and '<h1 id="access-rules">Access rules</h1>' in r.text


# --------------------------------------------------------------------------- in a browser


def test_browser_open_docs_navigate_and_search(server, page):
    page.goto(f"{server.url}/docs")  # no login: the docs teach how to log in
    assert page.get_by_role("heading", name="evalkit docs").is_visible()
    page.shot("index")
    nav = page.get_by_role("navigation", name="Docs pages")
    nav.get_by_role("link", name="The OTLP collector").click()
    page.wait_for_url(f"{server.url}/docs/otel")
    assert page.get_by_role("heading", name="The OTLP collector", level=1).is_visible()
    page.shot("page")
    page.get_by_label("Search the docs").fill("span mapping")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url(re.compile(r".*/docs\?q=span\+mapping$"))
    assert page.get_by_role("heading", name="Search: span mapping").is_visible()
    page.shot("search")
    results = page.locator("ol.hits > li > a")
    assert results.first.inner_text() == "Traces and span mappings"
    results.first.click()
    page.wait_for_url(f"{server.url}/docs/tracing")
    assert page.get_by_role("heading", name="Traces and span mappings", level=1).is_visible()
    # A link between docs pages goes to the other page's heading.
    page.locator('article a[href="/docs/atif"]').first.click()
    page.wait_for_url(f"{server.url}/docs/atif")


def test_browser_docs_fit_a_phone_width(server, page):
    page.set_viewport_size({"width": 390, "height": 800})
    for name in ("harness-api", "sdk", "config", "server"):
        page.goto(f"{server.url}/docs/{name}")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"/docs/{name} is {overflow}px wider than a phone screen"
    page.shot("phone")
