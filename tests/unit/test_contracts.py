"""The exported contracts: written by the CLI, generated from the Structs, and they accept
real traffic (captured from the running reference harness) and refuse broken documents."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import msgspec
import pytest

from evalkit.contracts import CONTRACTS, evaluator_api_document, harness_api_document
from evalkit.harness.reference import Behaviour, ReferenceHarness
from evalkit.model import evaluator_api as ev
from evalkit.model.harness import InputFile, RunMetadata, RunStart
from tests.unit.test_atif import EXAMPLE as ATIF_EXAMPLE

HARNESS = harness_api_document()
EVALUATOR = evaluator_api_document()


def schema_of(doc: dict[str, Any], node: dict[str, Any]) -> jsonschema.Validator:
    """A validator for ``node`` (a schema inside ``doc``), resolving refs against ``doc``."""
    root = {**node, "components": doc["components"]}
    cls = jsonschema.validators.validator_for({"$schema": doc["jsonSchemaDialect"]})
    cls.check_schema(root)
    return cls(root)


def response(doc: dict[str, Any], method: str, path: str, status: str) -> jsonschema.Validator:
    op = doc["paths"][path][method]
    return schema_of(doc, op["responses"][status]["content"]["application/json"]["schema"])


def request(doc: dict[str, Any], method: str, path: str) -> jsonschema.Validator:
    op = doc["paths"][path][method]
    return schema_of(doc, op["requestBody"]["content"]["application/json"]["schema"])


def valid(v: jsonschema.Validator, instance: Any) -> bool:
    return not list(v.iter_errors(instance))


def test_export_writes_the_three_files(cli, tmp_path: Path):
    target = tmp_path / "new" / "contracts"
    result = cli("contracts", "export", "--target", str(target), "--json")
    assert result.code == 0, result.err
    names = sorted(p.name for p in target.iterdir())
    assert (
        names
        == sorted(CONTRACTS)
        == [
            "atif-accepted.json",
            "custom-evaluator-api-v1.json",
            "harness-api-v1.json",
        ]
    )
    assert sorted(Path(f).name for f in result.json["files"]) == names
    for name, build in CONTRACTS.items():
        assert json.loads((target / name).read_text()) == build()
    plain = cli("contracts", "export", "--target", str(target))
    assert plain.code == 0 and plain.out.count("wrote ") == 3
    (tmp_path / "afile").write_text("x")
    refused = cli("contracts", "export", "--target", str(tmp_path / "afile"))
    assert refused.code == 1 and "not a directory" in refused.err


def test_the_harness_document_covers_every_endpoint():
    expected = {
        ("get", "/capabilities"),
        ("post", "/runs"),
        ("get", "/runs"),
        ("get", "/runs/{id}"),
        ("post", "/runs/{id}/stop"),
        ("get", "/runs/{id}/trajectory"),
        ("get", "/runs/{id}/workspace"),
        ("get", "/runs/{id}/workspace/{path}"),
    }
    found = {(m, p) for p, ops in HARNESS["paths"].items() for m in ops}
    assert found == expected
    assert HARNESS["openapi"].startswith("3.1")
    schemas = HARNESS["components"]["schemas"]
    assert {"Capabilities", "RunStart", "RunStatus", "RunListing", "Trajectory"} <= set(schemas)
    assert schemas["RunStatus"]["properties"]["status"]["enum"] == sorted(
        ["queued", "running", "succeeded", "failed", "stopped"]
    )


@pytest.fixture(scope="module")
def captured() -> dict[str, Any]:
    """Real request and answer bodies from a reference harness on loopback."""
    data = b"hello contracts\n"
    body = RunStart(
        evalkit_run_id="c-1",
        input={"question": "What is 19 * 3?"},
        files=[
            InputFile(
                name="note.txt",
                sha256=hashlib.sha256(data).hexdigest(),
                size=len(data),
                content_base64=base64.b64encode(data).decode(),
            )
        ],
        model="m-1",
        metadata=RunMetadata(case_id="c1", experiment_id=3, tags=["smoke"]),
    )
    sent = msgspec.to_builtins(body)
    out: dict[str, Any] = {"start_request": sent}
    with ReferenceHarness(Behaviour(run_seconds=30)) as ref, httpx.Client(base_url=ref.url) as h:
        out["capabilities"] = h.get("/capabilities").json()
        started = h.post("/runs", json=sent)
        assert started.status_code == 201
        out["started"] = started.json()
        run_id = out["started"]["id"]
        out["running"] = h.get(f"/runs/{run_id}").json()
        out["running_trajectory"] = h.get(f"/runs/{run_id}/trajectory").json()
        out["stopped"] = h.post(f"/runs/{run_id}/stop").json()
        out["stopped_trajectory"] = h.get(f"/runs/{run_id}/trajectory").json()
        out["listing"] = h.get("/runs").json()
        out["workspace"] = h.get(f"/runs/{run_id}/workspace").json()
    with ReferenceHarness() as ref, httpx.Client(base_url=ref.url) as h:
        done = h.post("/runs", json=sent).json()
        out["succeeded"] = done
        out["trajectory"] = h.get(f"/runs/{done['id']}/trajectory").json()
    return out


def test_real_harness_traffic_validates(captured):
    assert valid(request(HARNESS, "post", "/runs"), captured["start_request"])
    assert valid(response(HARNESS, "get", "/capabilities", "200"), captured["capabilities"])
    for key in ("started", "running", "succeeded"):
        assert valid(response(HARNESS, "get", "/runs/{id}", "200"), captured[key]), key
    assert captured["stopped"]["status"] == "stopped"
    assert valid(response(HARNESS, "post", "/runs/{id}/stop", "200"), captured["stopped"])
    assert valid(response(HARNESS, "get", "/runs", "200"), captured["listing"])
    assert valid(response(HARNESS, "get", "/runs/{id}/workspace", "200"), captured["workspace"])
    traj = response(HARNESS, "get", "/runs/{id}/trajectory", "200")
    for key in ("trajectory", "running_trajectory", "stopped_trajectory"):
        assert valid(traj, captured[key]), key


def test_broken_harness_documents_are_refused(captured):
    status = response(HARNESS, "get", "/runs/{id}", "200")
    bad_status = {**captured["succeeded"], "status": "done"}
    assert not valid(status, bad_status)
    assert not valid(status, {"status": "running"})  # no id
    start = request(HARNESS, "post", "/runs")
    no_key = {k: v for k, v in captured["start_request"].items() if k != "evalkit_run_id"}
    assert not valid(start, no_key)
    bad_rep = copy.deepcopy(captured["start_request"])
    bad_rep["metadata"]["repetition"] = 0
    assert not valid(start, bad_rep)
    caps = response(HARNESS, "get", "/capabilities", "200")
    assert not valid(caps, {"accepts": {"stop": "yes"}})
    listing = response(HARNESS, "get", "/runs", "200")
    assert not valid(listing, {"next_cursor": None})


def atif_validator() -> jsonschema.Validator:
    schema = CONTRACTS["atif-accepted.json"]()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_atif_schema_accepts_real_trajectories_and_refuses_broken_ones(captured):
    v = atif_validator()
    assert valid(v, ATIF_EXAMPLE)
    for key in ("trajectory", "running_trajectory", "stopped_trajectory"):
        assert valid(v, captured[key]), key
    broken = copy.deepcopy(ATIF_EXAMPLE)
    broken["steps"][0]["colour"] = "red"  # unknown field
    assert not valid(v, broken)
    broken = copy.deepcopy(ATIF_EXAMPLE)
    del broken["agent"]
    assert not valid(v, broken)
    broken = copy.deepcopy(ATIF_EXAMPLE)
    broken["steps"][2]["tool_calls"][0]["arguments"] = "not an object"
    assert not valid(v, broken)
    broken = copy.deepcopy(ATIF_EXAMPLE)
    broken["schema_version"] = "ATIF-v9"
    assert not valid(v, broken)


EVALUATE_REQUEST: dict[str, Any] = {
    "api_version": "1",
    "evaluator": "required_tool_calls",
    "config": {"tools": ["read_file"], "strict": True},
    "case": {
        "id": "count-lines",
        "input": {"question": "How many lines does notes.txt have?", "files": ["notes"]},
        "expected": "3",
        "tags": ["files"],
        "metadata": {"owner": "qa"},
    },
    "run": {
        "id": "812",
        "answer": "notes.txt has 3 lines.",
        "output": None,
        "trajectory": ATIF_EXAMPLE,
        "model": "example-model-1",
        "experiment_id": 17,
        "repetition": 2,
    },
}
EVALUATE_RESPONSE: dict[str, Any] = {
    "scores": [
        {"name": "read_file called", "score": 1.0, "explanation": "called once"},
        {"name": "calls", "score": None, "kind": "gauge"},
    ]
}


def test_evaluator_examples_validate_and_decode():
    req = request(EVALUATOR, "post", "/")
    resp = response(EVALUATOR, "post", "/", "200")
    assert valid(req, EVALUATE_REQUEST)
    assert valid(resp, EVALUATE_RESPONSE)
    # The same examples through the Structs evalkit uses.
    decoded = msgspec.convert(EVALUATE_REQUEST, ev.EvaluateRequest)
    assert decoded.run.trajectory is not None and decoded.run.repetition == 2
    assert msgspec.convert(EVALUATE_RESPONSE, ev.EvaluateResponse).scores[1].score is None
    # A run with only structured output and no trajectory.
    only_output = copy.deepcopy(EVALUATE_REQUEST)
    only_output["run"].update(answer='{"lines":3}', output={"lines": 3}, trajectory=None)
    assert valid(req, only_output)


def test_broken_evaluator_documents_are_refused():
    req = request(EVALUATOR, "post", "/")
    resp = response(EVALUATOR, "post", "/", "200")
    no_run = {k: v for k, v in EVALUATE_REQUEST.items() if k != "run"}
    assert not valid(req, no_run)
    bad_traj = copy.deepcopy(EVALUATE_REQUEST)
    del bad_traj["run"]["trajectory"]["steps"]
    assert not valid(req, bad_traj)
    for scores in (
        [],
        [{"name": "x", "score": 1.5}],
        [{"name": "x", "score": -0.1}],
        [{"name": "x"}],
        [{"name": "x", "score": 0.5, "kind": "vibe"}],
        [{"score": 0.5}],
    ):
        assert not valid(resp, {"scores": scores}), scores
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"scores": scores}, ev.EvaluateResponse)
