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


def schema_document() -> dict[str, Any]:
    """The wire model's JSON Schema: `python -m workbench.wireschema --json` where this
    version has it, else docs/openapi.yaml's components (whose generated block comes from
    workbench.wireschema, held to the code by tests/test_wireschema.py)."""
    from workbench import wireschema

    document = getattr(wireschema, "json_schema_document", None)
    if document is not None:
        doc: dict[str, Any] = document()
        return doc
    openapi = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())
    return {"components": {"schemas": openapi["components"]["schemas"]}}


def wire_schemas() -> dict[str, Any]:
    """The schemas by name."""
    doc = schema_document()
    schemas: dict[str, Any] = doc.get("$defs") or doc["components"]["schemas"]
    return schemas


def generate(tmp: Path) -> str:
    """wire.ts as labextension/scripts/gen-types.mjs writes it from the current schemas."""
    schema = tmp / "wire-schema.json"
    schema.write_text(json.dumps(schema_document()))
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


def _gen(tmp: Path, doc: dict[str, Any]) -> str:
    schema = tmp / "schema.json"
    schema.write_text(json.dumps(doc))
    done = subprocess.run(
        ["node", "scripts/gen-types.mjs", str(schema)],
        cwd=LABEXT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_generator_follows_a_schema_change(node_modules: Path, tmp_path: Path) -> None:
    """A field added to the schema shows up in the generated types (the check can fail)."""
    doc = schema_document()
    job = (doc.get("$defs") or doc["components"]["schemas"])["JobRecord"]
    job["properties"]["drift_probe"] = {"type": "integer", "title": "Drift"}
    job["required"].append("drift_probe")
    out = _gen(tmp_path, doc)
    assert "  drift_probe: number;" in out
    assert out != WIRE_TS.read_text()
    assert "export type Drift" not in out  # field titles do not become aliases


def test_generator_reads_each_schema_shape(node_modules: Path, tmp_path: Path) -> None:
    """`wireschema --json`'s $defs document and OpenAPI components give the same types,
    cross-references included."""
    defs = {
        "Page": {
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
            "required": ["items"],
        },
        "Item": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    }
    from_defs = _gen(tmp_path, {"title": "X", "anyOf": [], "$defs": defs})
    openapi = json.loads(json.dumps(defs).replace("#/$defs/", "#/components/schemas/"))
    from_openapi = _gen(tmp_path, {"components": {"schemas": openapi}})
    assert from_defs == from_openapi
    assert "export interface Page {\n  items: Item[];\n}" in from_defs, from_defs
    assert "export interface Item {\n  n: number;\n}" in from_defs, from_defs


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        WIRE_TS.write_text(generate(Path(tmp)))
    print(f"wrote {WIRE_TS}", file=sys.stderr)
