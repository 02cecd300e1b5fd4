"""evalkit.yaml: the developer repo's config (server, cases directory, fixtures, keys)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yaml.nodes import Node

from evalkit.cases._check import Sink, is_number, kind, unknown_key
from evalkit.cases._yaml import YamlSyntaxError, entries, parse
from evalkit.cases.model import (
    FIXTURE_KEY_RE,
    LintFinding,
    ProjectError,
    ProjectNotFound,
    format_findings,
)

PROJECT_FILE = "evalkit.yaml"
DEFAULT_CASES_DIR = "cases"
TOP_KEYS = ("server_url", "cases_dir", "fixtures", "credentials", "max_fixture_bytes")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class FixtureEntry:
    """One entry of the ``fixtures:`` registry."""

    key: str
    path: str
    """The path as written in evalkit.yaml (relative to its directory, or absolute)."""
    resolved: Path
    """The absolute path, symlinks not followed; lint checks it stays in the project."""
    context: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class ProviderCredential:
    """How to find the API key of one LLM provider (``credentials.llm_providers``)."""

    base_url: str
    api_key_env: str | None = None
    api_key: str | None = None

    def resolve(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The key: the named environment variable's value, or the inline key."""
        if self.api_key_env is not None:
            return (os.environ if environ is None else environ).get(self.api_key_env) or None
        return self.api_key


@dataclass(frozen=True)
class ProjectConfig:
    """A parsed evalkit.yaml. Paths are absolute."""

    path: Path
    server_url: str | None = None
    cases_dir: Path | None = None
    fixtures: dict[str, FixtureEntry] = field(default_factory=dict)
    llm_providers: dict[str, ProviderCredential] = field(default_factory=dict)
    max_fixture_bytes: int | None = None
    warnings: list[LintFinding] = field(default_factory=list)

    @property
    def root(self) -> Path:
        """The directory of evalkit.yaml: relative paths start here; fixtures stay inside."""
        return self.path.parent

    def suite_dir(self, name: str) -> Path:
        """The directory of the suite (dataset) ``name`` under the cases directory."""
        return (self.cases_dir or self.root / DEFAULT_CASES_DIR) / name

    def api_key_for(self, base_url: str, environ: Mapping[str, str] | None = None) -> str | None:
        """The API key for an LLM provider, looked up by base URL (trailing '/' ignored)."""
        credential = self.llm_providers.get(_normalize_url(base_url))
        return credential.resolve(environ) if credential else None


def find_project_file(start: str | Path | None = None) -> Path | None:
    """evalkit.yaml in ``start`` (default: the working directory) or the nearest parent."""
    here = Path(start or Path.cwd()).absolute()
    for directory in (here, *here.parents):
        candidate = directory / PROJECT_FILE
        if candidate.is_file():
            return candidate
    return None


def load_project(path_or_start_dir: str | Path | None = None) -> ProjectConfig:
    """Load evalkit.yaml: a file path, or a directory to search from upwards.

    Raises ProjectNotFound when there is none and ProjectError when it has errors.
    """
    start = Path(path_or_start_dir or Path.cwd())
    file = start.absolute() if start.is_file() else find_project_file(start)
    if file is None:
        message = (
            f"no {PROJECT_FILE} in {start} or any directory above it: create one at the root "
            "of your repository (see docs/case-files.md); an empty file is enough to start"
        )
        finding = LintFinding(
            code="E-PROJECT-NOT-FOUND",
            severity="error",
            file=str(start),
            line=None,
            message=message,
        )
        raise ProjectNotFound(message, [finding])
    sink = Sink(str(file))
    try:
        doc = parse(file.read_text(encoding="utf-8"))
    except (YamlSyntaxError, UnicodeDecodeError) as exc:
        line = exc.line if isinstance(exc, YamlSyntaxError) else None
        detail = exc.message if isinstance(exc, YamlSyntaxError) else "the file is not UTF-8"
        sink.error("E-YAML", line, f"{PROJECT_FILE} is not valid YAML: {detail}")
        raise ProjectError(format_findings(sink.findings), sink.findings) from exc
    for problem in doc.key_problems:
        sink.error(problem.code, problem.line, problem.message)
    config = _build(sink, file, doc.node, doc.data)
    if sink.has_errors or config is None:
        errors = [f for f in sink.findings if f.severity == "error"]
        raise ProjectError(format_findings(errors), errors)
    return config


def _normalize_url(url: str) -> str:
    return url.rstrip("/")


def _is_url(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(("http://", "https://")) and len(value) > 8


def _build(sink: Sink, file: Path, node: Node | None, data: Any) -> ProjectConfig | None:
    if data is None:
        return ProjectConfig(path=file, cases_dir=file.parent / DEFAULT_CASES_DIR)
    if not isinstance(data, dict) or node is None:
        sink.error("E-SCHEMA-TYPE", node, f"{PROJECT_FILE} must be a mapping, got {kind(data)}")
        return None
    found = entries(node)
    for key, (key_node, _) in found.items():
        if key not in TOP_KEYS:
            unknown_key(sink, key_node, key, PROJECT_FILE, TOP_KEYS)

    server_url = data.get("server_url")
    if server_url is not None and not _is_url(server_url):
        sink.error(
            "E-SCHEMA-VALUE",
            found["server_url"][1],
            f"`server_url` must be an http:// or https:// URL, got {kind(server_url)}",
        )
    cases_dir = data.get("cases_dir", DEFAULT_CASES_DIR)
    if not isinstance(cases_dir, str) or not cases_dir:
        sink.error(
            "E-SCHEMA-TYPE",
            found["cases_dir"][1],
            f"`cases_dir` must be a directory path, got {kind(cases_dir)}",
        )
        cases_dir = DEFAULT_CASES_DIR
    limit = data.get("max_fixture_bytes")
    if limit is not None and (not is_number(limit) or int(limit) != limit or limit < 1):
        sink.error(
            "E-SCHEMA-VALUE",
            found["max_fixture_bytes"][1],
            f"`max_fixture_bytes` must be a whole number of bytes >= 1, got {kind(limit)}",
        )
        limit = None
    fixtures = _fixtures(sink, file.parent, data.get("fixtures"), found.get("fixtures"))
    providers = _credentials(sink, data.get("credentials"), found.get("credentials"))
    return ProjectConfig(
        path=file,
        server_url=_normalize_url(server_url) if _is_url(server_url) else None,
        cases_dir=file.parent / cases_dir,
        fixtures=fixtures,
        llm_providers=providers,
        max_fixture_bytes=int(limit) if limit is not None else None,
        warnings=[f for f in sink.findings if f.severity == "warning"],
    )


def _fixtures(
    sink: Sink, root: Path, value: Any, pair: tuple[Node, Node] | None
) -> dict[str, FixtureEntry]:
    if value is None or pair is None:
        return {}
    if not isinstance(value, dict):
        sink.error(
            "E-SCHEMA-TYPE", pair[1], f"`fixtures` must map keys to files, got {kind(value)}"
        )
        return {}
    result: dict[str, FixtureEntry] = {}
    for key, (key_node, value_node) in entries(pair[1]).items():
        spec = value[key]
        line = key_node.start_mark.line + 1
        if not FIXTURE_KEY_RE.match(key):
            sink.error(
                "E-SCHEMA-VALUE",
                key_node,
                f"fixture key {key!r} is not valid: use letters, digits, '_', '.', '-'",
            )
            continue
        path: Any = spec
        context: Any = None
        if isinstance(spec, dict):
            for option, (option_node, _) in entries(value_node).items():
                if option not in ("path", "context"):
                    unknown_key(sink, option_node, option, f"fixture `{key}`", ("path", "context"))
            path, context = spec.get("path"), spec.get("context")
            if path is None:
                sink.error(
                    "E-SCHEMA-REQUIRED", value_node, f"fixture `{key}` needs `path:` (a file)"
                )
                continue
            if context is not None and not isinstance(context, str):
                sink.error(
                    "E-SCHEMA-TYPE",
                    entries(value_node)["context"][1],
                    f"`context` of fixture `{key}` must be text, got {kind(context)}",
                )
        if not isinstance(path, str) or not path:
            sink.error(
                "E-SCHEMA-TYPE",
                value_node,
                f"fixture `{key}` must be a file path or {{path, context}}, got {kind(path)}",
            )
            continue
        result[key] = FixtureEntry(
            key=key,
            path=path,
            resolved=Path(os.path.normpath(root / path)),
            context=context if isinstance(context, str) else None,
            line=line,
        )
    return result


def _credentials(
    sink: Sink, value: Any, pair: tuple[Node, Node] | None
) -> dict[str, ProviderCredential]:
    if value is None or pair is None:
        return {}
    if not isinstance(value, dict):
        sink.error("E-SCHEMA-TYPE", pair[1], f"`credentials` must be a mapping, got {kind(value)}")
        return {}
    found = entries(pair[1])
    for key, (key_node, _) in found.items():
        if key != "llm_providers":
            unknown_key(sink, key_node, key, "`credentials`", ("llm_providers",))
    providers = value.get("llm_providers")
    if providers is None:
        return {}
    providers_node = found["llm_providers"][1]
    if not isinstance(providers, dict):
        sink.error(
            "E-SCHEMA-TYPE",
            providers_node,
            f"`credentials.llm_providers` must map base URLs to keys, got {kind(providers)}",
        )
        return {}
    result: dict[str, ProviderCredential] = {}
    for url, (url_node, spec_node) in entries(providers_node).items():
        credential = _provider_credential(sink, url, url_node, providers[url], spec_node)
        if credential is not None:
            result[credential.base_url] = credential
    return result


def _provider_credential(
    sink: Sink, url: str, url_node: Node, spec: Any, spec_node: Node
) -> ProviderCredential | None:
    """One entry of ``credentials.llm_providers``: a base URL and where its key is. None,
    with the errors in ``sink``, when the entry cannot be used."""
    if not _is_url(url):
        sink.error(
            "E-SCHEMA-VALUE",
            url_node,
            f"{url!r} is not a base URL: key each provider by its http(s) base URL",
        )
        return None
    if not isinstance(spec, dict):
        sink.error(
            "E-SCHEMA-TYPE",
            spec_node,
            f"provider {url} takes {{api_key_env: NAME}} or {{api_key: KEY}}, got {kind(spec)}",
        )
        return None
    spec_found = entries(spec_node)
    for option, (option_node, _) in spec_found.items():
        if option not in ("api_key_env", "api_key"):
            unknown_key(sink, option_node, option, f"provider {url}", ("api_key", "api_key_env"))
    env, key = spec.get("api_key_env"), spec.get("api_key")
    if (env is None) == (key is None):
        sink.error(
            "E-SCHEMA-VALUE",
            spec_node,
            f"provider {url} needs exactly one of `api_key_env` (recommended) or `api_key`",
        )
        return None
    if env is not None and not (isinstance(env, str) and _ENV_NAME_RE.match(env)):
        sink.error(
            "E-SCHEMA-VALUE",
            spec_found["api_key_env"][1],
            f"`api_key_env` must name an environment variable, got {kind(env)}",
        )
        return None
    if key is not None:
        if not isinstance(key, str) or not key:
            sink.error(
                "E-SCHEMA-TYPE",
                spec_found["api_key"][1],
                f"`api_key` must be a string, got {kind(key)}",
            )
            return None
        sink.warning(
            "W-INLINE-API-KEY",
            spec_found["api_key"][1],
            f"the key for {url} is written in {PROJECT_FILE}, which usually goes into git: "
            "use `api_key_env: <VARIABLE>` instead",
        )
    normalized = _normalize_url(url)
    return ProviderCredential(base_url=normalized, api_key_env=env, api_key=key)
