"""The catalogue: image resolution, specs, user overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.catalog import load_catalog
from workbench.errors import SpecError


def test_images_and_specs():
    c = load_catalog()
    for name in ("pytorch", "tensorflow", "mxnet", "mindspore", "cpu"):
        assert name in c.images
    ref, image = c.resolve_image("pytorch")
    assert image is not None and image.framework == "pytorch"
    assert ref == image.tags[image.default_tag]
    assert (
        c.resolve_image("registry.example.com/team/img:1")[0] == "registry.example.com/team/img:1"
    )
    gpus = sorted({s.gpus for s in c.specs.values()})
    assert {0.5, 1, 2, 4, 8} <= set(gpus)
    assert all(s.price_per_hour > 0 for s in c.specs.values())
    assert c.smallest_spec_for(0.5).shared


def test_user_catalogue_adds_and_overrides(tmp_path: Path):
    f = tmp_path / "cat.yaml"
    f.write_text(
        "images:\n  myimg:\n    framework: pytorch\n    tags: {'1': reg/my:1}\n"
        "specs:\n  gpu.1x:\n    gpus: 1\n    cpu: 4\n    memory: 16Gi\n    price_per_hour: 0.99\n"
    )
    c = load_catalog(f)
    assert c.resolve_image("myimg")[0] == "reg/my:1"
    assert c.spec("gpu.1x").price_per_hour == 0.99
    assert "pytorch" in c.images


def test_bad_user_catalogue(tmp_path: Path):
    f = tmp_path / "cat.yaml"
    f.write_text("specs:\n  broken:\n    gpus: 1\n")
    with pytest.raises(SpecError, match="malformed catalogue entry"):
        load_catalog(f)
    with pytest.raises(SpecError, match="does not exist"):
        load_catalog(tmp_path / "missing.yaml")
