"""The contracts evalkit holds others to, as machine-readable documents.

``evalkit contracts export`` writes them; each is generated from the msgspec Structs that
evalkit itself uses to encode and decode, so the files cannot drift from the code:

- ``harness-api-v1.json``: OpenAPI 3.1 of the Harness API (evalkit calls the harness);
- ``atif-accepted.json``: JSON Schema of the ATIF trajectories evalkit accepts;
- ``custom-evaluator-api-v1.json``: OpenAPI 3.1 of the Custom Evaluator API.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from evalkit import __version__
from evalkit.atif import Trajectory, trajectory_json_schema
from evalkit.model import evaluator_api, harness

_REF = "#/components/schemas/{name}"
_BYTES = "bytes"
"""A response of raw bytes rather than JSON."""


@dataclass
class Operation:
    method: str
    path: str
    operation_id: str
    summary: str
    description: str = ""
    body: Any = None
    responses: dict[str, tuple[str, Any]] = field(default_factory=dict)
    """status -> (description, Struct type, ``_BYTES`` or None for no body)."""
    query: dict[str, str] = field(default_factory=dict)
    """Optional string query parameters: name -> description."""


HARNESS_OPERATIONS = [
    Operation(
        "GET",
        "/capabilities",
        "getCapabilities",
        "What the harness accepts and provides",
        "Declare only what works: evaluators needing something the harness does not "
        "provide are skipped as neutral, while a false `true` makes them fail.",
        responses={"200": ("The capabilities", harness.Capabilities)},
    ),
    Operation(
        "POST",
        "/runs",
        "startRun",
        "Start a run",
        "`evalkit_run_id` is an idempotency key: the same value again must answer with "
        "the run already started (200), never start a second one.",
        body=harness.RunStart,
        responses={
            "201": ("Started", harness.RunStatus),
            "200": ("Already started for this evalkit_run_id", harness.RunStatus),
        },
    ),
    Operation(
        "GET",
        "/runs",
        "listRuns",
        "List runs, newest last (provides.run_listing)",
        query={"cursor": "The `next_cursor` of the previous page; absent for the first."},
        responses={"200": ("One page of runs", harness.RunListing)},
    ),
    Operation(
        "GET",
        "/runs/{id}",
        "getRun",
        "A run's status (evalkit polls it every poll_interval)",
        "`succeeded`, `failed` and `stopped` are final; `queued` and `running` are live.",
        responses={"200": ("The status", harness.RunStatus)},
    ),
    Operation(
        "POST",
        "/runs/{id}/stop",
        "stopRun",
        "Stop a run (accepts.stop)",
        "After a stop, report a final status once the trajectory is complete: evalkit "
        "polls for up to the agent's stop_grace, then fetches the trajectory once. An "
        "empty 2xx body is accepted.",
        responses={
            "200": ("Stopped", harness.RunStatus),
            "202": ("Stopping", harness.RunStatus),
        },
    ),
    Operation(
        "GET",
        "/runs/{id}/trajectory",
        "getTrajectory",
        "The run's ATIF trajectory (provides.trajectory)",
        "Validated by evalkit; a document that breaks ATIF rules is stored with the list "
        "of what it breaks.",
        responses={"200": ("An ATIF document", Trajectory)},
    ),
    Operation(
        "GET",
        "/runs/{id}/workspace",
        "listWorkspace",
        "The files a run left in its workspace (provides.workspace)",
        responses={"200": ("The files", harness.WorkspaceListing)},
    ),
    Operation(
        "GET",
        "/runs/{id}/workspace/{path}",
        "getWorkspaceFile",
        "One workspace file's bytes (provides.workspace)",
        "`path` is one of the listed paths, percent-encoded; `/` may stay as it is.",
        responses={"200": ("The file's bytes", _BYTES)},
    ),
]

EVALUATOR_OPERATIONS = [
    Operation(
        "POST",
        "/",
        "evaluate",
        "Score one run",
        "The path is the evaluator's endpoint URL as registered. Answer synchronously; "
        "errors and timeouts are recorded on the run's scores and never fail the run.",
        body=evaluator_api.EvaluateRequest,
        responses={"200": ("One or more named scores", evaluator_api.EvaluateResponse)},
    ),
]


def openapi_document(
    operations: list[Operation], *, title: str, version: str, description: str
) -> dict[str, Any]:
    """OpenAPI 3.1 for ``operations``; every schema comes from msgspec."""
    types: list[Any] = []
    for op in operations:
        candidates = [op.body, *(t for _, t in op.responses.values())]
        types.extend(t for t in candidates if t is not None and t != _BYTES and t not in types)
    schemas, components = msgspec.json.schema_components(types, ref_template=_REF)
    by_type = dict(zip(types, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        entry: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary}
        if op.description:
            entry["description"] = op.description
        params = [
            {"name": p.strip("{}"), "in": "path", "required": True, "schema": {"type": "string"}}
            for p in op.path.split("/")
            if p.startswith("{")
        ]
        params += [
            {"name": name, "in": "query", "required": False, "description": text,
             "schema": {"type": "string"}}
            for name, text in op.query.items()
        ]  # fmt: skip
        if params:
            entry["parameters"] = params
        if op.body is not None:
            entry["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": by_type[op.body]}},
            }
        responses: dict[str, Any] = {}
        for status, (text, kind) in op.responses.items():
            answer: dict[str, Any] = {"description": text}
            if kind == _BYTES:
                answer["content"] = {"application/octet-stream": {"schema": {}}}
            elif kind is not None:
                answer["content"] = {"application/json": {"schema": by_type[kind]}}
            responses[status] = answer
        responses["default"] = {
            "description": "An error. 5xx, 429 and bodies that are not JSON are retried "
            "with backoff; other 4xx answers are not."
        }
        entry["responses"] = responses
        entry["security"] = [{}, {"bearer": []}]
        paths.setdefault(op.path, {})[op.method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": title,
            "version": version,
            "description": description,
            "x-evalkit-version": __version__,
        },
        "paths": paths,
        "components": {
            "schemas": json.loads(msgspec.json.encode(components)),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Sent when the agent (or evaluator) has an API key.",
                }
            },
        },
    }


def harness_api_document() -> dict[str, Any]:
    return openapi_document(
        HARNESS_OPERATIONS,
        title="evalkit Harness API",
        version=harness.API_VERSION,
        description="Implemented by an agent's harness; evalkit is the client. Paths are "
        "relative to the agent's harness URL.",
    )


def evaluator_api_document() -> dict[str, Any]:
    return openapi_document(
        EVALUATOR_OPERATIONS,
        title="evalkit Custom Evaluator API",
        version=evaluator_api.API_VERSION,
        description="Implemented by a remote evaluator; evalkit POSTs one request per "
        "scored run to the evaluator's endpoint.",
    )


CONTRACTS: dict[str, Callable[[], dict[str, Any]]] = {
    "harness-api-v1.json": harness_api_document,
    "atif-accepted.json": trajectory_json_schema,
    "custom-evaluator-api-v1.json": evaluator_api_document,
}


def export(target: Path) -> list[Path]:
    """Write every contract into ``target`` (created if needed); returns the files."""
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in CONTRACTS.items():
        path = target / name
        path.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n")
        written.append(path)
    return written
