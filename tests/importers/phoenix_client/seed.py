"""Seed a Phoenix server through Phoenix's own client (arize-phoenix-client), as a team would
have made its datasets. Run with this part's venv python by tests/importers/phoenix.py.

SEED_FILE: a JSON file, a list of uploads, each ``{"name", "examples", "description"?, "append"?}``.
``examples`` are the client's example dicts (``input``, ``output``, ``metadata``,
``splits``, and ``id`` for a stable example id). An upload of a name that exists makes a new
version: ``create_dataset`` replaces the examples (patching those whose id it knows, deleting
those left out), ``append`` adds them (``add_examples_to_dataset``).

stdout: a JSON list, one ``{"name", "dataset_id", "version_id", "examples"}`` per upload.
Environment: PHOENIX_URL, and PHOENIX_API_KEY on a Phoenix with auth on.
"""

from __future__ import annotations

import json
import os
import sys

from phoenix.client import Client


def main() -> None:
    with open(os.environ["SEED_FILE"]) as f:
        uploads = json.load(f)
    client = Client(base_url=os.environ["PHOENIX_URL"], api_key=os.environ.get("PHOENIX_API_KEY"))
    done = []
    for upload in uploads:
        if upload.get("append"):
            dataset = client.datasets.add_examples_to_dataset(
                dataset=upload["name"], examples=upload["examples"], timeout=60
            )
        else:
            dataset = client.datasets.create_dataset(
                name=upload["name"],
                examples=upload["examples"],
                dataset_description=upload.get("description"),
                timeout=60,
            )
        done.append(
            {
                "name": dataset.name,
                "dataset_id": dataset.id,
                "version_id": dataset.version_id,
                "examples": len(dataset),
            }
        )
    json.dump(done, sys.stdout)


if __name__ == "__main__":
    main()
