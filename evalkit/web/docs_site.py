"""The user docs (``docs/*.md``) served as HTML at ``/docs``: rendering, navigation, search.

Markdown is rendered with markdown-it-py (CommonMark plus tables and strikethrough); HTML
written in the markdown is escaped, never passed through. Links between docs pages
(``datasets.md#sync``) become site links (``/docs/datasets#sync``), headings get
GitHub-style ids so those anchors land, and links that leave ``docs/`` (to the source tree)
become plain text, since the server does not serve those files.

Every page is rendered once, on first use, and kept in memory. ``{{origin}}`` in the docs
stands for the server's address as the reader's browser reached it: it is substituted, HTML
escaped, into the cached HTML on each request.

Where the docs come from: the checkout's ``docs/`` when the server runs from a source
checkout (so an edited page shows after a restart), else the copy packaged into the wheel
as ``evalkit/_docs``.
"""

from __future__ import annotations

import html
import posixpath
import re
import threading
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup

ORIGIN = "{{origin}}"
_ORIGIN_IN_URL = "%7B%7Borigin%7D%7D"
PAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,80}$")
"""A page's name is its file's stem; names outside this pattern are never looked up."""
MAX_QUERY = 200
MAX_LINES_PER_PAGE = 4
LINE_WINDOW = 200
"""A long matching line is shown as this many characters around its first match."""


def docs_dir() -> Path:
    """The checkout's ``docs/`` when running from a source checkout, else the packaged copy."""
    package = Path(__file__).resolve().parents[1]
    checkout = package.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "docs").is_dir():
        return checkout / "docs"
    return package / "_docs"


@dataclass
class Line:
    """One line of a page's text, for search: where it sits (the heading above it)."""

    text: str
    anchor: str
    section: str


@dataclass
class DocPage:
    name: str
    title: str
    summary: str
    """The first paragraph's text, for the index."""
    html: str
    """Rendered once; may hold ``{{origin}}`` (see :func:`with_origin`)."""
    lines: list[Line] = field(default_factory=list)


@dataclass
class Hit:
    page: DocPage
    score: int
    lines: list[tuple[Line, Markup]]
    """Matching lines, each with its HTML (escaped, the terms marked)."""


def with_origin(text: str, origin: str) -> Markup:
    """Cached HTML with ``{{origin}}`` (also as a link's percent-encoded form) replaced."""
    safe = html.escape(origin, quote=True)
    return Markup(text.replace(ORIGIN, safe).replace(_ORIGIN_IN_URL, safe))


def slugify(text: str) -> str:
    """GitHub's heading ids: lower case, punctuation dropped, spaces as hyphens."""
    text = unicodedata.normalize("NFKC", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _inline_text(token: Token, breaks: str = " ") -> str:
    """An inline token's text without markup; line breaks of the source as ``breaks``."""
    parts = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(breaks)
    return "".join(parts)


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    return md


class DocsSite:
    """The pages of one docs directory, rendered on first use and then kept."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._pages: dict[str, DocPage] | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ loading

    @property
    def pages(self) -> dict[str, DocPage]:
        if self._pages is None:
            with self._lock:
                if self._pages is None:
                    self._pages = self._load()
        return self._pages

    def _load(self) -> dict[str, DocPage]:
        files = sorted(self.directory.glob("*.md")) if self.directory.is_dir() else []
        names = {path.stem for path in files if PAGE_NAME.match(path.stem)}
        md = _markdown()
        pages = [
            self._render(md, path.stem, path.read_text(encoding="utf-8"), names)
            for path in files
            if path.stem in names
        ]
        pages.sort(key=lambda p: p.title.lower())
        return {page.name: page for page in pages}

    def _render(self, md: MarkdownIt, name: str, text: str, names: set[str]) -> DocPage:
        tokens = md.parse(text)
        title = summary = ""
        anchor = section = ""
        used: dict[str, int] = {}
        lines: list[Line] = []
        for index, token in enumerate(tokens):
            if token.type == "heading_open":
                heading = _inline_text(tokens[index + 1])
                slug = slugify(heading) or "section"
                count = used.get(slug, 0)
                used[slug] = count + 1
                anchor = slug if count == 0 else f"{slug}-{count}"
                section = heading
                token.attrSet("id", anchor)
                title = title or heading
            elif token.type == "inline":
                self._rewrite_links(token, names)
                plain = _inline_text(token, "\n")
                if not summary and tokens[index - 1].type == "paragraph_open" and title:
                    summary = " ".join(plain.split())
                lines.extend(Line(t, anchor, section) for t in plain.splitlines() if t.strip())
            elif token.type in ("fence", "code_block"):
                lines.extend(
                    Line(t, anchor, section) for t in token.content.splitlines() if t.strip()
                )
            elif token.type == "table_open":
                token.attrSet("class", "grid")
        body = md.renderer.render(tokens, md.options, {})
        return DocPage(name=name, title=title or name, summary=summary, html=body, lines=lines)

    @staticmethod
    def _rewrite_links(token: Token, names: set[str]) -> None:
        """Docs links to ``/docs/NAME``; links out of ``docs/`` to plain text."""
        open_links: list[Token] = []
        for child in token.children or []:
            if child.type == "link_open":
                href = str(child.attrGet("href") or "")
                target = _site_link(href, names)
                if target is None:
                    child.tag = "span"
                    child.attrs = {
                        "class": "outside",
                        "title": f"{href} is in evalkit's source tree, not in these docs",
                    }
                else:
                    child.attrSet("href", target)
                open_links.append(child)
            elif child.type == "link_close" and open_links:
                child.tag = open_links.pop().tag

    # ------------------------------------------------------------------ reading

    def get(self, name: str) -> DocPage | None:
        if not PAGE_NAME.match(name):
            return None
        return self.pages.get(name)

    def search(self, query: str) -> list[Hit]:
        """Pages holding every word of ``query`` (case-insensitive), best first, each with
        the lines that match."""
        terms = [t.lower() for t in query[:MAX_QUERY].split() if t.strip()]
        if not terms:
            return []
        longest_first = sorted(terms, key=len, reverse=True)
        pattern = re.compile("|".join(re.escape(t) for t in longest_first), re.IGNORECASE)
        hits = []
        for page in self.pages.values():
            haystack = (page.title + "\n" + "\n".join(line.text for line in page.lines)).lower()
            if not all(term in haystack for term in terms):
                continue
            matching = [line for line in page.lines if pattern.search(line.text)]
            every = [line for line in matching if all(t in line.text.lower() for t in terms)]
            shown = (every or matching)[:MAX_LINES_PER_PAGE]
            score = sum(haystack.count(term) for term in terms)
            if all(term in page.title.lower() for term in terms):
                score += 1000
            hits.append(Hit(page, score, [(line, _mark(line.text, pattern)) for line in shown]))
        hits.sort(key=lambda hit: (-hit.score, hit.page.title.lower()))
        return hits


def _site_link(href: str, names: set[str]) -> str | None:
    """Where a link in the docs points on this site: unchanged for absolute URLs and
    anchors, ``/docs/NAME#frag`` for another docs page, None for a file outside docs/."""
    if not href or href.startswith(("#", "/", ORIGIN, _ORIGIN_IN_URL)):
        return href
    parts = urlsplit(href)
    if parts.scheme or parts.netloc:
        return href
    path = posixpath.normpath(parts.path)
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    stem, ext = posixpath.splitext(path)
    if "/" not in path and ext == ".md" and stem in names:
        return f"/docs/{stem}{fragment}"
    return None


def _mark(text: str, pattern: re.Pattern[str]) -> Markup:
    """A line as HTML with each term wrapped in ``<mark>``; everything else escaped."""
    first = pattern.search(text)
    if len(text) > LINE_WINDOW and first is not None:
        start = max(0, min(first.start() - LINE_WINDOW // 3, len(text) - LINE_WINDOW))
        text = (
            ("…" if start else "")
            + text[start : start + LINE_WINDOW].strip()
            + ("…" if start + LINE_WINDOW < len(text) else "")
        )
    out: list[str] = []
    last = 0
    for found in pattern.finditer(text):
        out.append(html.escape(text[last : found.start()]))
        out.append(f"<mark>{html.escape(found.group())}</mark>")
        last = found.end()
    out.append(html.escape(text[last:]))
    return Markup("".join(out))


_site: DocsSite | None = None


def site() -> DocsSite:
    """The server's docs, loaded from :func:`docs_dir` on first use."""
    global _site
    if _site is None:
        _site = DocsSite(docs_dir())
    return _site
