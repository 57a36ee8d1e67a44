"""The Datasets tab's routes (stores, usage, preview) over a real Jupyter server: the same
answers as ``workbench data ls/du/head``, and 400s naming the field for bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.server.conftest import body
from workbench import data


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A local store: a CSV, a text file in a folder and a binary blob."""
    root = tmp_path / "store"
    (root / "raw").mkdir(parents=True)
    (root / "train.csv").write_text("x,y\n" + "".join(f"{i},{i * i}\n" for i in range(50)))
    (root / "raw" / "notes.txt").write_text("".join(f"line {i}\n" for i in range(30)))
    (root / "blob.bin").write_bytes(bytes(range(256)) * 4)
    return root


@pytest.fixture
def configured(request: pytest.FixtureRequest) -> bool:
    """Whether the server gets dataset_stores (parametrize indirectly with False: none)."""
    return bool(getattr(request, "param", True))


@pytest.fixture
def jp_server_config(
    jp_server_config: dict[str, Any], store: Path, configured: bool
) -> dict[str, Any]:
    """The suite's server config with two configured stores (or none)."""
    config = json.loads(json.dumps(jp_server_config))
    if not configured:
        return config
    config["WorkbenchApp"]["dataset_stores"] = [str(store), "s3://AKIAFAKE:supersecret@corpus/text"]
    return config


async def error(fetch: Any, *parts: str, **params: Any) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of a request that must fail."""
    with pytest.raises(HTTPClientError) as info:
        await fetch("workbench", "api", *parts, params=params)
    assert info.value.response is not None
    return info.value.code, json.loads(info.value.response.body)


async def test_stores_usage_and_preview_match_the_data_cli(jp_fetch, store):
    answer = await jp_fetch("workbench", "api", "datasets", "stores")
    assert b"supersecret" not in answer.body  # a URL's credentials never leave the server
    stores = body(answer)["stores"]
    assert stores[0] == {"url": str(store), "scheme": "file"}
    assert stores[1]["scheme"] == "s3" and stores[1]["url"].endswith("@corpus/text")
    usage = body(
        await jp_fetch("workbench", "api", "datasets", "usage", params={"url": str(store)})
    )
    files = [p for p in store.rglob("*") if p.is_file()]
    assert usage == {"url": str(store), "bytes": sum(p.stat().st_size for p in files), "files": 3}
    assert {k: usage[k] for k in ("bytes", "files")} == data.du(str(store))

    notes = str(store / "raw" / "notes.txt")
    preview = body(
        await jp_fetch("workbench", "api", "datasets", "preview", params={"url": notes, "lines": 3})
    )
    assert preview == {"url": notes, "lines": 3, "preview": "line 0\nline 1\nline 2"}
    csv = str(store / "train.csv")
    table = body(await jp_fetch("workbench", "api", "datasets", "preview", params={"url": csv}))
    assert table["preview"] == data.head(csv, n=10) and table["lines"] == 10
    blob = body(
        await jp_fetch(
            "workbench", "api", "datasets", "preview", params={"url": str(store / "blob.bin")}
        )
    )
    assert blob["preview"].startswith("(binary, 1024 bytes; first bytes: 00 01 02")

    code, err = await error(jp_fetch, "datasets", "usage")
    assert code == 400 and err["field"] == "url"
    code, err = await error(jp_fetch, "datasets", "preview", url=csv, lines=500)
    assert code == 400 and err["field"] == "lines" and "200" in err["fix"]
    code, err = await error(jp_fetch, "datasets", "preview", url=str(store / "nope.txt"))
    assert code == 400 and err["field"] == "url" and "nope.txt" in err["error"]
    code, err = await error(jp_fetch, "datasets", "usage", url="zz://what/ever")
    assert code == 400 and err["field"] == "url"


@pytest.mark.parametrize("configured", [False], indirect=True)
async def test_stores_default_to_the_root_folder(jp_fetch, jp_root_dir):
    stores = body(await jp_fetch("workbench", "api", "datasets", "stores"))["stores"]
    assert stores == [{"url": str(Path(jp_root_dir).resolve()), "scheme": "file"}]


async def test_local_paths_outside_the_root_and_stores_are_refused(
    jp_fetch, store, jp_root_dir, tmp_path
):
    # Outside both the Jupyter root and the configured store: a secret beside them.
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "id_rsa").write_text("-----BEGIN KEY-----\n")
    root = Path(jp_root_dir)
    (root / "ok").mkdir()
    (root / "ok" / "a.txt").write_text("inside\n")
    (root / "escape").symlink_to(outside, target_is_directory=True)
    (store / "link.txt").symlink_to(outside / "id_rsa")
    refused = [
        ("datasets", str(outside)),  # a bare path outside
        ("datasets/usage", f"file://{outside}"),  # file:// outside
        ("datasets/preview", f"{root}/ok/../../private/id_rsa"),  # a `..` escape
        ("datasets", str(root / "escape")),  # a symlinked folder that leaves the root
        ("datasets/preview", str(store / "link.txt")),  # a symlinked file out of a store
        ("datasets/usage", "/"),
    ]
    for route, url in refused:
        code, err = await error(jp_fetch, *route.split("/"), url=url)
        assert code == 403, (route, url, code, err)
        assert err["field"] == "url" and "dataset_stores" in err["fix"], err
        assert "BEGIN KEY" not in json.dumps(err)

    # Allowed: the root folder (and a `..` that stays inside it), a store, file:// inside.
    listing = body(await jp_fetch("workbench", "api", "datasets", params={"url": str(root / "ok")}))
    assert [e["name"].rsplit("/", 1)[-1] for e in listing["entries"]] == ["a.txt"]
    inside = f"{root}/ok/../ok/a.txt"
    preview = body(
        await jp_fetch("workbench", "api", "datasets", "preview", params={"url": inside})
    )
    assert preview["preview"] == "inside"
    usage = body(
        await jp_fetch("workbench", "api", "datasets", "usage", params={"url": f"file://{store}"})
    )
    assert usage["files"] >= 3
    # Object-store URLs are not local paths: no 403 (a bad one still answers 400).
    code, err = await error(jp_fetch, "datasets", "usage", url="s3://no_such_Bucket/x")
    assert code == 400 and err["field"] == "url"
