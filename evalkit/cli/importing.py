"""``evalkit import phoenix`` and ``evalkit import langfuse``: a peer's dataset as a suite.

The readers and the writer live in ``evalkit.importers``; they are imported when a command
runs, so other commands do not pay for them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from cyclopts import App, Parameter

from evalkit.cli.app import JsonFlag
from evalkit.cli.output import CliError, emit_json, note, say

if TYPE_CHECKING:
    from evalkit.importers import PeerDataset
    from evalkit.importers.writer import ImportPlan

import_app = App(
    name="import",
    help="Bring a dataset over from Arize Phoenix or Langfuse: one case file per example, "
    "in a suite you lint, sync and keep in git. A second import updates the same files.",
)

Url = Annotated[str, Parameter(help="The peer's base URL, e.g. http://localhost:6006.")]
DatasetName = Annotated[str, Parameter(help="The peer's name of the dataset.")]
Into = Annotated[
    Path,
    Parameter(
        help="The suite directory to write, e.g. cases/qa (created if missing); its name "
        "becomes the evalkit dataset's name."
    ),
]
IdPrefix = Annotated[
    str | None,
    Parameter(
        help="What new case ids (and file names) start with (default: the suite's name and "
        "'-'; case ids are unique in a whole workspace). Give '' for none."
    ),
]
Prune = Annotated[
    bool,
    Parameter(help="Delete the suite's files of examples the peer's dataset no longer has."),
]
DryRun = Annotated[
    bool, Parameter(help="Read the peer and print what would be written; write nothing.")
]

PROGRESS_FROM = 1000
"""Datasets of at least this many examples get progress lines on stderr."""


@import_app.command(name="phoenix")
def import_phoenix(
    *,
    url: Url,
    dataset: DatasetName,
    into: Into,
    api_key_env: Annotated[
        str | None,
        Parameter(
            help="The environment variable holding a Phoenix API key (a Phoenix with auth "
            "on); without it no key is sent."
        ),
    ] = None,
    version: Annotated[
        str | None,
        Parameter(help="A Phoenix version id of the dataset (default: the latest)."),
    ] = None,
    id_prefix: IdPrefix = None,
    prune: Prune = False,
    dry_run: DryRun = False,
    json: JsonFlag = False,
) -> int:
    """Import a Phoenix dataset (at its latest version, or --version) into a suite: one
    case file per example, with its splits, through Phoenix's REST API."""
    from evalkit.importers import phoenix, writer

    writer.check_suite_dir(into)
    api_key = _env(api_key_env, "--api-key-env", "a Phoenix API key") if api_key_env else None
    read = phoenix.read_dataset(
        url, dataset=dataset, version=version, api_key=api_key, progress=_Progress(), notice=note
    )
    return _write(read, into, phoenix.short_id, id_prefix, prune, dry_run, json)


@import_app.command(name="langfuse")
def import_langfuse(
    *,
    url: Url,
    dataset: DatasetName,
    into: Into,
    public_key_env: Annotated[
        str,
        Parameter(help="The environment variable holding the project's public key (pk-lf-...)."),
    ] = "LANGFUSE_PUBLIC_KEY",
    secret_key_env: Annotated[
        str,
        Parameter(help="The environment variable holding the project's secret key (sk-lf-...)."),
    ] = "LANGFUSE_SECRET_KEY",
    version: Annotated[
        str | None,
        Parameter(
            help="The dataset as it was at this UTC time, e.g. 2026-01-21T14:35:42Z (default: now)."
        ),
    ] = None,
    id_prefix: IdPrefix = None,
    prune: Prune = False,
    dry_run: DryRun = False,
    json: JsonFlag = False,
) -> int:
    """Import a Langfuse dataset's active items into a suite: one case file per item,
    through Langfuse's public API."""
    from evalkit.importers import langfuse, writer

    writer.check_suite_dir(into)
    public_key = _env(public_key_env, "--public-key-env", "the Langfuse public key")
    secret_key = _env(secret_key_env, "--secret-key-env", "the Langfuse secret key")
    read = langfuse.read_dataset(
        url,
        dataset=dataset,
        public_key=public_key,
        secret_key=secret_key,
        version=version,
        progress=_Progress(),
        notice=note,
    )
    return _write(read, into, None, id_prefix, prune, dry_run, json)


def _env(name: str, flag: str, what: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise CliError(
            f"{flag} {name}: the environment variable {name} is not set or empty; export it "
            f"with {what} (the value never goes on the command line)"
        )
    return value


class _Progress:
    """Progress lines on stderr for large datasets, one per tenth of each stage."""

    WORDS: ClassVar[dict[str, str]] = {
        "read": "read {} of {} examples",
        "write": "wrote {} of {} files",
    }

    def __init__(self) -> None:
        self.shown: dict[str, int] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if total < PROGRESS_FROM:
            return
        last = self.shown.get(stage, 0)
        if done == last or (done < total and done - last < -(-total // 10)):
            return
        self.shown[stage] = done
        note("  " + self.WORDS.get(stage, stage + " {} of {}").format(f"{done:,}", f"{total:,}"))


def _write(
    read: PeerDataset,
    into: Path,
    short_id: Any,
    id_prefix: str | None,
    prune: bool,
    dry_run: bool,
    json: bool,
) -> int:
    from evalkit.importers import writer

    progress = _Progress()
    plan = writer.plan_import(read, into, id_prefix=id_prefix, short_id=short_id)
    if not dry_run:
        writer.apply(plan, prune=prune, progress=progress)
    if json:
        emit_json(_summary(plan, prune=prune, dry_run=dry_run))
    else:
        _print(plan, prune=prune, dry_run=dry_run)
    return 0


def _summary(plan: ImportPlan, *, prune: bool, dry_run: bool) -> dict[str, Any]:
    read = plan.dataset
    return {
        "peer": read.peer,
        "url": read.url,
        "dataset": read.name,
        "dataset_id": read.id,
        "version": read.version,
        "suite": str(plan.suite),
        "dry_run": dry_run,
        "examples": len(read.examples),
        "added": plan.ids("add"),
        "updated": plan.ids("update"),
        "unchanged": plan.ids("unchanged"),
        "missing": [str(p) for p in plan.missing],
        "pruned": prune and not dry_run,
        "unmapped": dict(sorted(plan.unmapped.items())),
        "notes": [*read.notes, *(f"{n} example(s): {text}" for text, n in plan.notes.items())],
        "files": [
            {
                "path": str(w.path),
                "case_id": w.case_id,
                "source_id": w.source_id,
                "action": w.action,
                **({"yaml": w.text} if dry_run else {}),
            }
            for w in plan.writes
        ],
    }


def _print(plan: ImportPlan, *, prune: bool, dry_run: bool) -> None:
    from evalkit.importers.writer import ORIGIN_KEY, RECORD_FILE, UNMAPPED_KEY

    read = plan.dataset
    would = "would be " if dry_run else ""
    if dry_run:
        for w in plan.writes:
            say(f"{w.action:9} {w.path}  ({read.peer} id {w.source_id})")
    version = f" version {read.version}" if read.version else ""
    say(
        f"{read.peer} dataset {read.name!r}{version} at {read.url}: "
        f"{len(read.examples):,} examples -> {plan.suite}"
    )
    say(
        f"  {plan.count('add')} {would}added, {plan.count('update')} {would}updated, "
        f"{plan.count('unchanged')} unchanged"
    )
    if plan.unmapped:
        fields = ", ".join(f"{k} ({n})" for k, n in sorted(plan.unmapped.items()))
        say(f"  not mapped, kept under metadata.{ORIGIN_KEY}.{UNMAPPED_KEY}: {fields}")
    for line in read.notes:
        say(f"  note: {line}")
    for text, n in plan.notes.items():
        say(f"  note: {n} example(s): {text}")
    if plan.missing:
        fate = "deleted" if prune and not dry_run else "kept; --prune deletes them"
        if dry_run and prune:
            fate = "would be deleted"
        say(f"  {len(plan.missing)} file(s) of examples {read.peer} no longer has ({fate}):")
        for path in plan.missing:
            say(f"    {path}")
    if dry_run:
        say("dry run: nothing written")
        return
    say(f"  the peer's record of the dataset: {plan.suite / RECORD_FILE}")
    say(f"next: evalkit lint {plan.suite} --offline && evalkit sync {plan.suite}")
