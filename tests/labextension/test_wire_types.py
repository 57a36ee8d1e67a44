"""labextension/src/wire.ts is generated from the server's wire schema and committed: this
regenerates it and fails when the committed file differs, so the panel's types and the
server cannot drift apart.

Regenerate: ``PYTHONPATH=. python -m tests.labextension.test_wire_types``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from .conftest import LABEXT, ROOT

WIRE_TS = LABEXT / "src" / "wire.ts"


def wire_schemas() -> dict[str, Any]:
    """The schemas by name, as docs/openapi.yaml's components hold them (their generated
    block comes from workbench.wireschema, which tests/test_wireschema.py holds to the code)."""
    doc = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())
    schemas: dict[str, Any] = doc["components"]["schemas"]
    return schemas


def generate(tmp: Path) -> str:
    """wire.ts as labextension/scripts/gen-types.mjs writes it from the current schemas."""
    schema = tmp / "wire-schema.json"
    schema.write_text(json.dumps({"components": {"schemas": wire_schemas()}}))
    out = tmp / "wire.ts"
    done = subprocess.run(
        ["node", "scripts/gen-types.mjs", str(schema), str(out)],
        cwd=LABEXT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out.read_text()


def test_wire_ts_is_generated_from_the_schema(node_modules: Path, tmp_path: Path) -> None:
    """The committed wire.ts equals a fresh generation from the server's schema."""
    fresh = generate(tmp_path)
    assert WIRE_TS.read_text() == fresh, (
        "labextension/src/wire.ts is stale: run `PYTHONPATH=. python -m "
        "tests.labextension.test_wire_types` and commit it"
    )
    # It holds the records the panel reads, field by field.
    for name in ("JobRecord", "RankRecord", "JobEvent", "JobPage", "Error"):
        assert f"export interface {name} " in fresh
    for field in wire_schemas()["JobRecord"]["properties"]:
        assert f"\n  {field}" in fresh.split("export interface JobRecord ")[1].split("\n}")[0]


def test_generator_follows_a_schema_change(node_modules: Path, tmp_path: Path) -> None:
    """A field added to the schema shows up in the generated types (the check can fail)."""
    schemas = wire_schemas()
    schemas["JobRecord"]["properties"]["drift_probe"] = {"type": "integer", "title": "Drift"}
    schemas["JobRecord"]["required"].append("drift_probe")
    schema = tmp_path / "changed.json"
    schema.write_text(json.dumps(schemas))  # the plain {name: schema} shape is accepted too
    done = subprocess.run(
        ["node", "scripts/gen-types.mjs", str(schema)],
        cwd=LABEXT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "  drift_probe: number;" in done.stdout
    assert done.stdout != WIRE_TS.read_text()
    assert "export type Drift" not in done.stdout  # field titles do not become aliases


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        WIRE_TS.write_text(generate(Path(tmp)))
    print(f"wrote {WIRE_TS}", file=sys.stderr)
